"""The text-in TFLite model's tokenizer and packer, in ops that have TFLite kernels.

The text model is NOT the reference tokenizer. tfbert's in-graph tokenizer (tfbert.text) uses
core ops that have no TFLite kernels, and TF Text's FastBertTokenizer with
lower_case_nfd_strip_accents=True also applies NFKC-style folding (full-width "（１" become
"(1"), which changes most Chinese sentences. So the text model runs FastBertTokenizer without
normalization and handles an uncased vocab on the vocab side: pieces the reference can never
produce (they contain upper case or accents) are remapped to their normalized piece or made
unreachable, and UPPER / Title variants of every piece are added and mapped back to the
piece's id. What remains different from the reference: accents are kept (an uncased vocab
sees "café", not "cafe"), mixed-case words ("iPhone"), control characters split words instead
of vanishing, and the per-word limit counts 100 bytes instead of 100 characters. Invalid UTF-8
is read as the reference reads it (each invalid byte sequence decoded as U+FFFD, which cleaning
drops; U+FFFD in the text is dropped too): `drop_invalid_utf8` removes those bytes before
tokenizing (TF Text's ByteSplitWithOffsets, ByteSplitByOffsets and NgramsStringJoin kernels).
`tflite_eval.measure_agreement` reports how often its ids equal the reference's. Measured on the
built-in corpus (1,000 People's Daily lines + 1,000 reviews, max_seq_length 128): 100% of texts
get the reference ids, with a character-level Chinese vocab and with MiniLM's uncased English
vocab; plain FastBertTokenizer(lower_case_nfd_strip_accents=True) matches 20.8% / 20.4% of them.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfbert.export.saved_model import ExportSpec

# The custom ops the text model may contain: TF Text kernels in SELECT_TFTEXT_OPS.
TEXT_MODEL_CUSTOM_OPS = frozenset({"FastBertNormalize", "FastWordpieceTokenizeWithOffsets",
                                   "RaggedTensorToTensor", "TFText>ByteSplitWithOffsets",
                                   "TFText>ByteSplitByOffsets", "TFText>NgramsStringJoin"})
MAX_BYTES_PER_WORD = 100  # the reference's 100 characters per word, counted in bytes here
# Stretches of valid UTF-8 per text that drop_invalid_utf8 joins exactly; a text broken into
# more keeps the invalid bytes after the 255th stretch (its words there read as [UNK]).
UTF8_STRETCHES = 256


# --- cleaning in TFLite ops --------------------------------------------------------------------


def _shifted(x: tf.Tensor, k: int, fill: Any) -> tf.Tensor:
    """[B, N] -> [B, N]: x[:, i + k], `fill` where i + k is off the row."""
    n = tf.shape(x)[1]
    pad = tf.fill([tf.shape(x)[0], tf.minimum(abs(k), n)], fill)
    if k > 0:
        return tf.concat([x[:, k:], pad], 1)[:, :n]
    return tf.concat([pad, x[:, :n + k]], 1)[:, :n]


def drop_invalid_utf8(text: tf.Tensor) -> tf.Tensor:
    """tf.string [B] -> [B]: the texts without invalid UTF-8 byte sequences and U+FFFD.

    The reference tokenizer decodes invalid sequences as U+FFFD and its cleaning drops every
    U+FFFD, so this is the text it tokenizes. Well-formed sequences are Unicode's Table 3-7
    (no overlong forms, surrogates or code points past U+10FFFF). In TFLite-convertible ops: the
    bytes are checked with builtin ops, and the stretches of kept bytes cut out
    (ByteSplitByOffsets) and joined again (NgramsStringJoin over UTF8_STRETCHES slots).
    """
    # TF Text loads (and registers its ops) only when a text model is built.
    import tensorflow_text as tf_text

    splitter = tf_text.ByteSplitter()
    x0 = tf.cast(splitter.split(text), tf.int32).to_tensor(default_value=-1)  # [B, N] bytes
    x1, x2, x3 = (_shifted(x0, k, -1) for k in (1, 2, 3))
    within = lambda x, low, high: (x >= low) & (x <= high)
    tail = lambda x: within(x, 0x80, 0xBF)
    two = within(x0, 0xC2, 0xDF) & tail(x1)
    fffd = tf.equal(x0, 0xEF) & tf.equal(x1, 0xBF) & tf.equal(x2, 0xBD)  # U+FFFD itself
    three = ((tf.equal(x0, 0xE0) & within(x1, 0xA0, 0xBF)) | (within(x0, 0xE1, 0xEC) & tail(x1))
             | (tf.equal(x0, 0xED) & within(x1, 0x80, 0x9F)) | (within(x0, 0xEE, 0xEF) & tail(x1))
             ) & tail(x2) & ~fffd
    four = ((tf.equal(x0, 0xF0) & within(x1, 0x90, 0xBF)) | (within(x0, 0xF1, 0xF3) & tail(x1))
            | (tf.equal(x0, 0xF4) & within(x1, 0x80, 0x8F))) & tail(x2) & tail(x3)
    # Length of the kept sequence starting at each byte (0: none). A byte inside a sequence is
    # never the lead byte of another, so checking every position alone is exact.
    length = tf.where(within(x0, 0, 0x7F), 1, tf.where(two, 2, tf.where(three, 3,
                                                                          tf.where(four, 4, 0))))
    keep = length > 0
    for k in (1, 2, 3):
        keep |= _shifted(length, -k, 0) > k  # [B, N]
    first = keep & ~_shifted(keep, -1, False)  # first / last byte of a stretch
    last = keep & ~_shifted(keep, 1, False)
    batch, n, slots = tf.shape(x0)[0], tf.shape(x0)[1], UTF8_STRETCHES
    slot = tf.minimum(tf.cumsum(tf.cast(first, tf.int32), axis=1) - 1, slots - 1)
    segment = tf.range(batch)[:, None] * slots + slot  # [B, N]
    pos = tf.range(n)[tf.newaxis, :] + tf.zeros_like(slot)
    unused = batch * slots
    starts = tf.math.unsorted_segment_min(tf.reshape(pos, [-1]), tf.reshape(
        tf.where(first, segment, unused), [-1]), unused + 1)[:-1]
    ends = tf.math.unsorted_segment_max(tf.reshape(pos + 1, [-1]), tf.reshape(
        tf.where(last, segment, unused), [-1]), unused + 1)[:-1]
    found = starts < ends  # an empty slot has start int32 max, end int32 min
    starts = tf.reshape(tf.where(found, starts, 0), [batch, slots])
    ends = tf.reshape(tf.where(found, ends, 0), [batch, slots])
    stretches = splitter.split_by_offsets(text, starts, ends)  # [B, slots] strings
    return _join_rows(stretches, slots)  # [B]: one window of all the slots per text


def _join_rows(strings: tf.RaggedTensor, width: int) -> tf.Tensor:
    """tf.string [B, width] ragged, every row `width` long -> [B]: each row's strings joined.

    TF Text's NgramsStringJoin op (a TFLite kernel in SELECT_TFTEXT_OPS). Its public form,
    `tf_text.ngrams(..., reduction_type=STRING_JOIN)`, also builds a sliding window of `width`
    slices that this graph never uses (seconds of tracing), and TF Text exports the op itself only
    from the private module `tensorflow_text.python.ops.ngrams_op`. Checked on tensorflow-text
    2.21.1.
    """
    from tensorflow_text.python.ops.ngrams_op import gen_ngrams_op

    joined, _ = gen_ngrams_op.tf_text_ngrams_string_join(
        input_values=strings.values, input_row_splits=[strings.row_splits], width=width,
        axis=-1, string_separator="")
    return joined


# --- the vocab FastBertTokenizer runs on -------------------------------------------------------


def case_extended_vocab(tokens: Sequence[str], lower_case: bool
                        ) -> tuple[list[str], np.ndarray]:
    """The vocab FastBertTokenizer runs on (no normalization) and the map back to model ids.

    Args:
        tokens: sequence of str. The model's vocab in id order.
        lower_case: bool. The model is uncased (the reference lower-cases, NFD, strips accents).

    Returns:
        (extended tokens, remap int32 [len(extended)]): extended[i] is matched in raw text and
        stands for model id remap[i].
    """
    tokens = list(tokens)
    remap = list(range(len(tokens)))
    if not lower_case:
        return tokens, np.asarray(remap, np.int32)
    index = {t: i for i, t in enumerate(tokens)}
    unk = index["[UNK]"]
    extended = list(tokens)

    def split(token: str) -> tuple[str, str]:
        return ("##", token[2:]) if token.startswith("##") and len(token) > 2 else ("", token)

    special = lambda t: t.startswith("[") and t.endswith("]") and len(t) > 2
    reachable = []
    for i, token in enumerate(tokens):
        if special(token):
            continue
        prefix, body = split(token)
        normalized = prefix + _reference_lower(body)
        if normalized == token:
            reachable.append(i)
        elif normalized in index:
            remap[i] = index[normalized]  # raw text spelled like this means that piece
        else:
            extended[i] = f"[tfbert_unreachable_{i}]"  # never matched (split at "[")
            remap[i] = unk
    present = set(extended)
    for i in reachable:
        prefix, body = split(tokens[i])
        for variant in (body.upper(), body.capitalize(), body.title()):
            candidate = prefix + variant
            if candidate not in present and _reference_lower(variant) == body:
                extended.append(candidate)
                remap.append(i)
                present.add(candidate)
    return extended, np.asarray(remap, np.int32)


def _reference_lower(text: str) -> str:
    """The reference's lower_case=True normalization of a piece: NFD, drop Mn, lower-case."""
    decomposed = unicodedata.normalize("NFD", text)
    return "".join(c.lower() for c in decomposed if unicodedata.category(c) != "Mn")



# --- tokenizing and packing --------------------------------------------------------------------


class TextPacker(tf.Module):
    """FastBertTokenizer + packing `[CLS] a [SEP] (b [SEP])` with TFLite-convertible ops.

    Args:
        vocab: sequence of str. The model's vocab in id order.
        spec: ExportSpec. seq_length, lower_case, task (QA cuts the question first) and
            max_query_length.

    Called with text tf.string [B] (and text_b [B]), it returns int32 `input_ids`,
    `input_mask`, `segment_ids`, each [B, seq_length].
    """

    def __init__(self, vocab: Sequence[str], spec: ExportSpec) -> None:
        super().__init__()
        import tensorflow_text as tf_text  # (as in drop_invalid_utf8)

        tokens = list(vocab)
        extended, remap = case_extended_vocab(tokens, spec.lower_case)
        self.fast = tf_text.FastBertTokenizer(
            vocab=extended, suffix_indicator="##", max_bytes_per_word=MAX_BYTES_PER_WORD,
            token_out_type=tf.int32, unknown_token="[UNK]", lower_case_nfd_strip_accents=False)
        self.remap = tf.constant(remap)
        self.spec = spec
        self.cls_id, self.sep_id, self.pad_id = (tokens.index(t) for t in
                                                 ("[CLS]", "[SEP]", "[PAD]"))

    def _pieces(self, text: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """tf.string [B] -> ids [B, T] (first T pieces, padded) and piece counts [B]."""
        ragged = self.fast.tokenize(drop_invalid_utf8(text))  # [B, (P)] extended-vocab ids
        ids = ragged.with_flat_values(tf.gather(self.remap, ragged.flat_values))
        splits = ids.row_splits
        lengths = tf.cast(splits[1:] - splits[:-1], tf.int32)  # [B]
        dense = ids.to_tensor(default_value=self.pad_id, shape=[None, self.spec.seq_length])
        return dense, lengths

    def __call__(self, text: tf.Tensor, text_b: tf.Tensor | None = None
                 ) -> dict[str, tf.Tensor]:
        t = self.spec.seq_length
        a, la = self._pieces(text)
        pos = tf.range(t)[tf.newaxis, :]  # [1, T]
        if text_b is None:
            la = tf.minimum(la, t - 2)
        else:
            b, lb = self._pieces(text_b)  # (a count unlike text's fails in GATHER below)
            budget = t - 3
            if self.spec.head.question_first:  # the question cut; the context fills the rest
                la = tf.minimum(la, self.spec.max_query_length)
                lb = tf.minimum(lb, tf.maximum(budget - la, 0))
            else:  # longest first, ties cut segment b (the reference's _truncate_seq_pair)
                la_new = tf.minimum(la, tf.maximum(budget - lb, (budget + 1) // 2))
                lb = tf.minimum(lb, tf.maximum(budget - la, budget // 2))
                la = la_new
        la_ = la[:, None]  # [B, 1]
        in_a = (pos >= 1) & (pos <= la_)
        from_a = tf.gather(a, tf.clip_by_value(pos - 1, 0, t - 1) + tf.zeros_like(la_),
                           batch_dims=1)  # [B, T]
        ids = tf.where(in_a, from_a, self.pad_id)
        sep = tf.equal(pos, la_ + 1)
        length = la_ + 2
        segment = tf.zeros_like(ids)
        if text_b is not None:
            lb_ = lb[:, None]
            in_b = (pos >= la_ + 2) & (pos <= la_ + lb_ + 1)
            from_b = tf.gather(b, tf.clip_by_value(pos - la_ - 2, 0, t - 1), batch_dims=1)
            ids = tf.where(in_b, from_b, ids)
            sep |= tf.equal(pos, la_ + lb_ + 2)
            length += lb_ + 1
            # (tf.where, not a cast of the bool: the converter turns that cast into an invalid
            # zeros_like of bools inside the embedding lookup)
            segment = tf.where((pos >= la_ + 2) & (pos < length), 1, 0)
        ids = tf.where(tf.equal(pos, 0), self.cls_id, tf.where(sep, self.sep_id, ids))
        mask = tf.cast(pos < length, tf.int32)
        return {"input_ids": ids, "input_mask": mask, "segment_ids": segment}
