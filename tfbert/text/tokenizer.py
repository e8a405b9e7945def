"""BERT's WordPiece tokenizer as an in-graph Keras layer, id-exact with the reference.

The reference is BERT's original tokenizer as the `tokenizers` package runs it
(`BertWordPieceTokenizer`, the engine of `transformers.BertTokenizerFast`):

1. clean: drop NUL, U+FFFD and control/format/private-use characters (Cc, Cf, Co, Cs, but not
   tab, newline, carriage return); whitespace characters become spaces;
2. CJK ideographs become words of their own;
3. lower_case=True only: NFD, drop non-spacing marks (Mn), lower-case each character. There is
   no NFKC and no case folding: full-width "，。！？（）" stay full-width;
4. split at whitespace, and every punctuation character (Unicode P* plus the ASCII symbols
   !"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~) becomes a word of its own;
5. greedy longest-match-first WordPiece with "##" continuations; a word longer than 100
   characters, or one that cannot be covered by vocab pieces, becomes a single [UNK].

"[CLS]" and the like in input text are text, as in Google's tokenizer (transformers matches
them as special tokens unless `split_special_tokens=True`).

Steps 1-4 run in core TensorFlow ops over Unicode code points, driven by lookup tables (below);
step 5 is TF Text's `FastWordpieceTokenizer` (linear-time MaxMatch). `tokenize` first sends
texts that steps 1-4 would leave as they are (one RE2 match: no character to clean, map or
re-split, no word over 100 characters; most Chinese text) to WordPiece untouched. Other texts
take one table lookup per character and go to WordPiece whole (its own splitting then equals the
reference's);
texts with characters NFD expands or reorders, characters TF Text splits differently, or words
over 100 characters are normalized step by step and go word by word (see the pipeline notes).

Where the reference's own character tables differ from a modern `unicodedata`, the reference wins:
`tokenizers` classifies control characters, punctuation and non-spacing marks with the Unicode 8.0
categories compiled into it, knows the combining classes of Unicode 9, keeps unassigned code
points, lower-cases one character at a time (no final-sigma rule), and its CJK ranges start
Extension E at U+2B920 (Google's Python code says U+2B820). The tables below are those classes,
generated from `tokenizers` 0.23.3 and checked for every code point in tests/test_tokenizer.py;
offsets follow its alignment rules too. Google's Python tokenizer (and transformers' legacy
Python BertTokenizer) agrees with this except on those rare characters, on "Σ" at the end of a
word, and (transformers only) NFC before lower_case=False tokenizing.

Invalid UTF-8 is decoded with replacement (each invalid byte sequence becomes U+FFFD, as
`bytes.decode("utf-8", errors="replace")` does), and cleaning then drops the U+FFFD. Offsets
count Unicode characters of the string decoded that way.

TF Serving: besides core TensorFlow ops the layer uses one TF Text op,
`FastWordpieceTokenizeWithOffsets` (TF Text >= 2.7, so present in TF Text 2.12.1 of
TF Serving 2.12-2.19 and in 2.20.0). Core ops in the graph (tokenize, tokenize_with_offsets,
detokenize, split_words): AddV2, BitwiseAnd, BroadcastTo, Cast, ConcatV2, Cumsum, Equal,
ExpandDims, Fill, GatherV2, Greater(Equal), Less(Equal), Logical{And,Not,Or}, LowerBound,
UpperBound, Max, Maximum, Minimum, Mul, Neg, NotEqual, OnesLike, Pack, Prod, RaggedRange,
RaggedTensorToTensor, Range, Reshape, RightShift, ScatterNd, SelectV2, Shape, Size, Squeeze,
StaticRegexFullMatch, StaticRegexReplace, StridedSlice, StringStrip, Sub, Sum,
TensorScatterUpdate, Tile, TopKV2, UnicodeDecode, UnicodeEncode, Unique, UnsortedSegmentJoin,
UnsortedSegmentSum, Where, ZerosLike; no control flow (If/While).
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.core.pybinds import pywrap_fast_wordpiece_tokenizer_model_builder

from tfbert.text import vocab as vocab_lib

MAX_CHARS_PER_WORD = 100  # the reference's max_input_chars_per_word (characters, not bytes)
SUFFIX_INDICATOR = "##"

# Bits of the per-code-point info table.
_DROP, _SPACE, _PUNCT, _CJK, _MARK, _UNSAFE = 1, 2, 4, 8, 16, 64
_CCC_SHIFT = 7  # canonical combining class, 8 bits
_LOWER_SHIFT = 15  # lower-case delta (signed), 17 bits
# Bits of the per-code-point map for lower_case=True (tier one): _DROP (cleaned away, or only
# marks after NFD), the classes _SPACE, _PUNCT, _UNSAFE of the mapped character, _CJK of the
# code point, _COMPLEX (NFD gives several characters, or a combining one that canonical ordering
# may move), and the mapped character's offset from the code point.
_COMPLEX = 128
_MAP_SHIFT = 8
_BLOCK_BITS = 7  # two-level tables: code point >> 7 picks a block of 128 entries


class BertTokenizer(keras.layers.Layer):
    """BERT WordPiece tokenizer: strings in, word-piece ids out, in-graph and reference-exact.

    Runs eagerly, in `tf.function`, in `tf.data` and inside an exported SavedModel (needing only
    `tensorflow` and `tensorflow_text` to load).

    Args:
        vocab_file: str or sequence of str. Path to vocab.txt, or the tokens themselves in id
            order. Must contain [PAD], [UNK], [CLS], [SEP] and [MASK].
        lower_case: bool. Lower-case, NFD and strip accents (an "uncased" vocab); False keeps
            case and accents (a "cased" vocab).

    Example:
    >>> tokenizer = BertTokenizer("vocab.txt")
    >>> ids = tokenizer.tokenize(tf.constant(["今天天气很好"]))  # ragged int32 [B, (tokens)]
    >>> ids.shape.as_list()
    [1, None]
    >>> ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(["今天"]))
    >>> starts.to_list(), ends.to_list()  # character spans of the pieces
    ([[0, 1]], [[1, 2]])
    >>> tokenizer.detokenize(ids).numpy()[0].decode()
    '今 天'
    """

    def __init__(self, vocab_file: str | Sequence[str], lower_case: bool = True, **kwargs: Any):
        kwargs.setdefault("dtype", "int32")
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        self._convert_input_args = False  # keep tf.string tensors as they are
        self._allow_non_tensor_positional_args = True
        self.built = True

        # === Config ===
        if isinstance(vocab_file, str):
            tokens = vocab_lib.load_vocab(vocab_file)
        else:
            tokens = vocab_lib.check_vocab(vocab_file, source="vocab list")
        self._tokens = tokens
        self.lower_case = bool(lower_case)
        self._special_ids = vocab_lib.special_ids(tokens)

        # === Tables (captured by traced functions as constants) ===
        tables = _tables()
        self._info_index = tf.constant(tables["info_index"])
        self._info_blocks = tf.constant(tables["info_blocks"])
        if self.lower_case:
            self._map_index = tf.constant(tables["map_index"])
            self._map_blocks = tf.constant(tables["map_blocks"])
            self._decomp_index = tf.constant(tables["decomp_index"])
            self._decomp_blocks = tf.constant(tables["decomp_blocks"])
            self._decomp_values = tf.constant(tables["decomp_values"])
        self._vocab_strings = tf.constant(tokens)
        # A private-use character stands in for words over 100 characters: cleaning removes
        # private-use characters from text, so it only appears there; it is not in the vocab.
        self._placeholder = next(c for c in range(0xE000, 0xF900) if chr(c) not in set(tokens))
        self._wordpiece_texts = _fast_wordpiece(tokens, split_words=True)
        self._wordpiece_words = _fast_wordpiece(tokens, split_words=False)
        self._raw_pattern = _raw_text_pattern(self.lower_case)
        self._force_word_path = False  # tests set this to check the word-by-word path

    # --- Vocab ---------------------------------------------------------------------------------

    @property
    def vocab(self) -> list[str]:
        """The tokens in id order."""
        return list(self._tokens)

    @property
    def vocab_size(self) -> int:
        return len(self._tokens)

    @property
    def pad_id(self) -> int:
        return self._special_ids["pad_id"]

    @property
    def unk_id(self) -> int:
        return self._special_ids["unk_id"]

    @property
    def cls_id(self) -> int:
        return self._special_ids["cls_id"]

    @property
    def sep_id(self) -> int:
        return self._special_ids["sep_id"]

    @property
    def mask_id(self) -> int:
        return self._special_ids["mask_id"]

    # --- Tokenizing ----------------------------------------------------------------------------

    def call(self, inputs: Any) -> tf.RaggedTensor:
        return self.tokenize(inputs)

    def tokenize(self, texts: Any) -> tf.RaggedTensor:
        """Word-piece ids of each string, no special tokens.

        Args:
            texts: tf.string [B] (or any rank, or ragged; a Python str or list works too).

        Returns:
            tf.RaggedTensor int32 [B, (tokens)] (one more ragged dimension than `texts`).
        """
        return _map_strings(texts, self._tokenize_ids)

    def tokenize_with_offsets(
            self, texts: Any) -> tuple[tf.RaggedTensor, tf.RaggedTensor, tf.RaggedTensor]:
        """Word-piece ids with the characters each one came from.

        `text[start:end]` (in Unicode characters of the original string) is the span of the
        token: the word piece itself up to lower-casing and accent stripping; an [UNK] spans its
        whole word. Pieces of a character that normalization expands (e.g. a Hangul syllable,
        NFD with lower_case=True) all span that character.

        Args:
            texts: tf.string [B] (or any rank, or ragged).

        Returns:
            (ids int32, start_offsets int64, end_offsets int64), each [B, (tokens)].
        """
        parts = [None, None, None]

        def run(flat: tf.Tensor, i: int) -> tf.RaggedTensor:
            if parts[0] is None:
                parts[:] = self._tokenize(flat, with_offsets=True)
            return parts[i]

        ids = _map_strings(texts, lambda flat: run(flat, 0))
        starts = _map_strings(texts, lambda flat: run(flat, 1))
        ends = _map_strings(texts, lambda flat: run(flat, 2))
        return ids, starts, ends

    def detokenize(self, ids: Any) -> tf.Tensor:
        """Joins word pieces back into text, as the reference's `convert_tokens_to_string`:
        tokens joined by spaces, " ##" removed. Special tokens (also [PAD]) are kept, so pass
        ragged ids or strip padding first.

        Args:
            ids: int [B, (tokens)] ragged or [B, T] dense (or a single [T] row).

        Returns:
            tf.string [B] (a scalar for a single row).
        """
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.convert_to_tensor(ids)
        tokens = tf.gather(self._vocab_strings, tf.cast(ids, tf.int32))
        text = tf.strings.reduce_join(tokens, axis=-1, separator=" ")
        return tf.strings.strip(tf.strings.regex_replace(text, " ##", ""))

    def split_words(self, texts: Any) -> tf.RaggedTensor:
        """The normalized words WordPiece sees (steps 1-4, as the reference's normalizer and
        pre-tokenizer give them; words over 100 characters included).

        Args:
            texts: tf.string [B] (or any rank, or ragged).

        Returns:
            tf.RaggedTensor tf.string [B, (words)].
        """
        def split(flat: tf.Tensor) -> tf.RaggedTensor:
            decoded = tf.strings.unicode_decode(flat, "UTF-8", errors="replace",
                                                replacement_char=0xFFFD)
            chars = self._normalize_rows(decoded.flat_values, _row_ids(decoded.row_splits),
                                         tf.range(tf.size(flat, out_type=tf.int64)),
                                         collapse=False)
            index = tf.where(~chars["space"])[:, 0]
            words, _, words_per_text = _words(chars, index, tf.size(flat, out_type=tf.int64))
            return tf.RaggedTensor.from_row_lengths(words, words_per_text, validate=False)

        return _map_strings(texts, split)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({"vocab_file": self.vocab, "lower_case": self.lower_case})
        return config

    # --- The pipeline --------------------------------------------------------------------------
    # Two tiers, and no tf.cond (removing the conds halved the tokenizer's cost inside tf.data,
    # where a function holding control flow runs slower). Every text is first normalized one
    # character at a time from a table and sent to TF Text's WordPiece whole. Texts where that
    # is not exact (characters NFD expands or reorders, characters TF Text's WordPiece splits
    # differently, words over 100 characters) are normalized again step by step and sent word
    # by word. That second tier works on data-dependent subsets, empty in most batches.

    def _tokenize_ids(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """texts tf.string [B] -> ids [B, (P)], with tier zero in front of the two tiers.

        Tier zero: a text whose every character normalization leaves alone, that TF Text's
        WordPiece splits as the reference does, and whose words are at most 100 characters (one
        regular expression, `_raw_text_pattern`) goes to WordPiece as it is: no decoding into
        code points and encoding back. Tier one would send it to the same WordPiece unchanged,
        so the ids are the same; most Chinese and lower-case English text is such text.
        """
        if self._force_word_path:
            return self._tokenize(texts, with_offsets=False)[0]
        raw = tf.strings.regex_full_match(texts, self._raw_pattern)  # [B]
        by_raw = self._wordpiece_texts.tokenize(tf.where(raw, texts, ""))
        by_tiers = self._tokenize(tf.where(raw, "", texts), with_offsets=False)[0]
        return _merge_rows(by_raw, by_tiers)[0]

    def _tokenize(self, texts: tf.Tensor, with_offsets: bool) -> tuple:
        """texts tf.string [B] -> ids [B, (P)] (and start/end char offsets [B, (P)])."""
        decoded = tf.strings.unicode_decode(texts, "UTF-8", errors="replace",
                                            replacement_char=0xFFFD)  # [B, (N)]
        batch_size = tf.size(texts, out_type=tf.int64)
        cps = decoded.flat_values  # [N] int32
        char_row = _row_ids(decoded.row_splits)  # [N]

        fast = self._map_chars(cps, char_row)
        exact_rows = tf.unique(tf.boolean_mask(fast["row"], fast["exact"])).y  # sorted
        if self._force_word_path:
            exact_rows = tf.range(batch_size)
        exact = self._normalize_rows(cps, char_row, exact_rows)

        by_texts = self._by_texts(fast, batch_size, exact_rows, with_offsets)
        by_words = self._by_words(exact, batch_size, with_offsets)
        ids, merge = _merge_rows(by_texts[0], by_words[0])  # [B, (P)]
        if not with_offsets:
            return ids, None, None
        splits_a = by_texts[0].row_splits
        text_start = tf.gather(decoded.row_starts(), merge["rows"])
        starts, ends = (merge["values"](by_texts[i] - text_start[:splits_a[-1]],
                                        by_words[i] - text_start[splits_a[-1]:]) for i in (1, 2))
        return ids, starts, ends

    def _map_chars(self, cps: tf.Tensor, char_row: tf.Tensor) -> dict:
        """Tier one: one table lookup per character (clean, NFD, strip marks, lower-case).

        Returns:
            A dict of [K] tensors: `cp`, `row`, `src` (index into N), `space`, `word_start` and
            `exact` (the character's text needs tier two).
        """
        if self.lower_case:
            classes = _lookup(self._map_index, self._map_blocks, cps)  # [N]
        else:
            classes = _lookup(self._info_index, self._info_blocks, cps)  # [N]
        keep = tf.where(tf.equal(_bits(classes, _DROP), 0))[:, 0]  # [K]
        classes, cp, row = _select(keep, classes, cps, char_row)
        if self.lower_case:  # the mapped character (its classes are in `classes`)
            cp = cp + tf.bitwise.right_shift(classes, _MAP_SHIFT)
            exact = tf.not_equal(_bits(classes, _UNSAFE | _COMPLEX), 0)
        else:
            exact = tf.not_equal(_bits(classes, _UNSAFE), 0)
        chars = _split(cp, row, keep, classes, _bits(classes, _CJK))
        chars["exact"] = exact | _in_long_words(chars)
        return chars

    def _normalize_rows(self, cps: tf.Tensor, char_row: tf.Tensor, rows: tf.Tensor,
                        collapse: bool = True) -> dict:
        """Tier two: the texts `rows` (sorted), normalized step by step as the reference does.

        Returns:
            A dict of [K'] tensors: `cp`, `row`, `src`, `src_end` (source span, indices into N),
            `space`, `word_start`.
        """
        src = tf.ragged.range(
            tf.searchsorted(char_row, rows, side="left", out_type=tf.int64),
            tf.searchsorted(char_row, rows, side="right", out_type=tf.int64)).flat_values
        info = _lookup(self._info_index, self._info_blocks, tf.gather(cps, src))
        kept = tf.where(tf.equal(_bits(info, _DROP), 0))[:, 0]  # cleaning keeps these
        src, cp_info = _select(kept, src, info)
        cp, row = _select(src, cps, char_row)
        cjk = _bits(cp_info, _CJK)  # of the source character
        if self.lower_case:
            src, cp, cp_info, row = self._nfd_strip_marks(src, cp, cp_info, row)
            cp = cp + tf.bitwise.right_shift(cp_info, _LOWER_SHIFT)  # lower-case, char by char
            cjk = _bits(_lookup(self._info_index, self._info_blocks, tf.gather(cps, src)), _CJK)
        chars = _split(cp, row, src, cp_info, cjk)
        return _collapse_long_words(chars, self._placeholder) if collapse else chars

    def _by_texts(self, chars: dict, batch_size: tf.Tensor, skip_rows: tf.Tensor,
                  with_offsets: bool) -> tuple:
        """WordPiece over whole normalized texts (separators as spaces); skip_rows left empty.

        Returns (ids [B, (P)],) or (ids, first source, source end) with [P] int64 spans.
        """
        cps = tf.where(chars["space"], 32, chars["cp"])  # [K]
        lines = tf.strings.unicode_encode(
            tf.RaggedTensor.from_row_splits(cps, _splits(chars["row"], batch_size),
                                            validate=False), "UTF-8")  # [B]
        skip = tf.scatter_nd(skip_rows[:, tf.newaxis], tf.ones_like(skip_rows), [batch_size])
        lines = tf.where(skip > 0, "", lines)
        ids, byte_starts, byte_ends = self._wordpiece_texts.tokenize_with_offsets(lines)
        if not with_offsets:
            return (ids,)
        char_bytes = _exclusive_byte_cumsum(cps)  # [K + 1]
        row_first_char = tf.searchsorted(chars["row"], tf.range(batch_size), out_type=tf.int64)
        base = tf.gather(tf.gather(char_bytes, row_first_char), _row_ids(ids.row_splits))
        first, last = _piece_chars(char_bytes, base, byte_starts, byte_ends)
        return ids, tf.gather(chars["src"], first), tf.gather(chars["src"], last) + 1

    def _by_words(self, chars: dict, batch_size: tf.Tensor, with_offsets: bool) -> tuple:
        """WordPiece word by word (words split here)."""
        index = tf.where(~chars["space"])[:, 0]  # [K'] word characters
        words, word_chars, words_per_text = _words(chars, index, batch_size)
        pieces, byte_starts, byte_ends = self._wordpiece_words.tokenize_with_offsets(words)
        word_splits = tf.concat([[0], tf.cumsum(words_per_text)], 0)  # [B + 1]
        ids = tf.RaggedTensor.from_row_splits(pieces.flat_values,
                                              tf.gather(pieces.row_splits, word_splits),
                                              validate=False)  # [B, (P)]
        if not with_offsets:
            return (ids,)
        char_bytes = _exclusive_byte_cumsum(word_chars.flat_values)  # [K' + 1]
        base = tf.gather(tf.gather(char_bytes, word_chars.row_starts()),
                         _row_ids(pieces.row_splits))  # [P]
        first, last = _piece_chars(char_bytes, base, byte_starts, byte_ends)
        return (ids, tf.gather(chars["src"], tf.gather(index, first)),
                tf.gather(chars["src_end"], tf.gather(index, last)))

    def _nfd_strip_marks(self, src: tf.Tensor, cp: tf.Tensor, info: tf.Tensor,
                         row: tf.Tensor) -> tuple[tf.Tensor, ...]:
        """NFD (decomposition and canonical ordering), then non-spacing marks removed.

        Args:
            src, cp, info, row: [K0] the characters cleaning kept.

        Returns:
            (src, cp, info, row), each [K]. Sources are positional, as `tokenizers` aligns them:
            the i-th character that begins a decomposition maps to the i-th source character, a
            later character of a decomposition to the source before it.
        """
        decomp = _lookup(self._decomp_index, self._decomp_blocks, cp)  # [K0] start<<3 | length
        length = tf.cast(tf.where(decomp > 0, _bits(decomp, 7), 1), tf.int64)  # [K0]
        first_out = tf.cumsum(length, exclusive=True)  # [K0]
        positions = tf.range(tf.reduce_sum(length))  # [M]
        owner = tf.searchsorted(first_out, positions, side="right", out_type=tf.int64) - 1
        k = positions - tf.gather(first_out, owner)  # [M] place within the decomposition
        owner_decomp = tf.gather(decomp, owner)
        decomposed = owner_decomp > 0
        at = tf.where(decomposed, tf.cast(tf.bitwise.right_shift(owner_decomp, 3), tf.int64) + k,
                      tf.constant(0, tf.int64))
        cp = tf.where(decomposed, tf.gather(self._decomp_values, at), tf.gather(cp, owner))
        info = _lookup(self._info_index, self._info_blocks, cp)  # [M]
        row = tf.gather(row, owner)
        cp, info, first = _canonical_order(cp, info, tf.equal(k, 0), row)
        src = tf.gather(src, tf.cumsum(tf.cast(first, tf.int64)) - 1)
        unmarked = tf.where(tf.equal(_bits(info, _MARK), 0))[:, 0]
        return _select(unmarked, src, cp, info, row)


def _fast_wordpiece(tokens: list[str], split_words: bool) -> tf_text.FastWordpieceTokenizer:
    """TF Text's WordPiece; with split_words it also splits text at whitespace and punctuation
    (and CJK), else each input string is one word. No word exceeds 100 characters here, so the
    byte limit is set above 100 characters' worth."""
    try:
        buffer = pywrap_fast_wordpiece_tokenizer_model_builder.build_fast_wordpiece_model(
            tokens, MAX_CHARS_PER_WORD * 4, SUFFIX_INDICATOR, vocab_lib.UNK, not split_words,
            False)
    except RuntimeError as e:
        raise ValueError(f"TF Text cannot build WordPiece from this vocab ({len(tokens)} "
                         f"tokens, first ones {tokens[:8]}): {e}") from e
    return tf_text.FastWordpieceTokenizer(
        model_buffer=tf.constant(np.frombuffer(buffer, np.uint8)), token_out_type=tf.int32)


def _merge_rows(a: tf.RaggedTensor, b: tf.RaggedTensor) -> tuple[tf.RaggedTensor, dict]:
    """Row i of a and row i of b joined, where each row is empty in at least one of them.

    Returns:
        (merged [B, (P)], {"rows": the row of each value of a then b [Pa + Pb], "values": a
        function merging two more [Pa] and [Pb] value tensors the same way}).
    """
    splits_a, splits_b = a.row_splits, b.row_splits
    splits = splits_a + splits_b  # [B + 1]
    rows_a, rows_b = _row_ids(splits_a), _row_ids(splits_b)
    at = tf.concat([tf.range(splits_a[-1]) + tf.gather(splits_b, rows_a),
                    tf.range(splits_b[-1]) + tf.gather(splits_a, rows_b)], 0)

    def values(x: tf.Tensor, y: tf.Tensor) -> tf.RaggedTensor:
        merged = tf.reshape(tf.scatter_nd(at[:, tf.newaxis], tf.concat([x, y], 0),
                                          splits[-1:]), [-1])
        return tf.RaggedTensor.from_row_splits(merged, splits, validate=False)

    return (values(a.flat_values, b.flat_values),
            {"rows": tf.concat([rows_a, rows_b], 0), "values": values})


def _map_strings(texts: Any, fn: Any) -> Any:
    """Applies fn (tf.string [B] -> ragged [B, (...)]) to strings of any rank or raggedness."""
    if isinstance(texts, tf.RaggedTensor):
        return texts.with_flat_values(_map_strings(texts.flat_values, fn))
    texts = tf.convert_to_tensor(texts, dtype=tf.string)
    rank = texts.shape.rank
    if rank is None:
        raise ValueError("tokenizer input must have a known rank; got a tf.string of unknown "
                         "rank (set the shape, e.g. with tf.ensure_shape(texts, [None]))")
    if rank == 0:
        return fn(tf.reshape(texts, [1]))[0]
    if rank == 1:
        return fn(texts)
    return tf.RaggedTensor.from_tensor(texts, ragged_rank=rank - 1).with_flat_values(
        fn(tf.reshape(texts, [-1])))


def _lookup(index: tf.Tensor, blocks: tf.Tensor, cp: tf.Tensor) -> tf.Tensor:
    """Two-level table lookup: blocks[index[cp >> 7] * 128 + cp % 128]."""
    block = tf.gather(index, tf.bitwise.right_shift(cp, _BLOCK_BITS))
    return tf.gather(blocks, block * (1 << _BLOCK_BITS) + _bits(cp, (1 << _BLOCK_BITS) - 1))


def _bits(x: tf.Tensor, mask: int) -> tf.Tensor:
    return tf.bitwise.bitwise_and(x, tf.constant(mask, x.dtype))


def _row_ids(splits: tf.Tensor) -> tf.Tensor:
    """Row of each value from row splits: a running count of the row ends passed.
    (RaggedTensor.value_rowids builds a [rows, longest row] mask and is several times slower.)"""
    size = splits[-1]
    ends = splits[1:-1]  # [B - 1] where rows 1.. begin (repeated for empty rows)
    marks = tf.scatter_nd(ends[:, tf.newaxis], tf.ones_like(ends), [size + 1])
    return tf.cumsum(marks[:size])


def _splits(row_ids: tf.Tensor, nrows: tf.Tensor) -> tf.Tensor:
    """Row splits from sorted row ids (from_value_rowids counts with a slow bincount)."""
    return tf.searchsorted(row_ids, tf.range(nrows + 1), side="left", out_type=tf.int64)


def _select(index: tf.Tensor, *tensors: tf.Tensor) -> tuple[tf.Tensor, ...]:
    return tuple(tf.gather(t, index) for t in tensors)


def _exclusive_byte_cumsum(cps: tf.Tensor) -> tf.Tensor:
    """UTF-8 byte offset of each code point in their concatenation, plus the total: [K + 1]."""
    byte_len = (1 + tf.cast(cps >= 0x80, tf.int64) + tf.cast(cps >= 0x800, tf.int64)
                + tf.cast(cps >= 0x10000, tf.int64))
    return tf.concat([[0], tf.cumsum(byte_len)], 0)


def _piece_chars(char_bytes: tf.Tensor, base: tf.Tensor, byte_starts: tf.RaggedTensor,
                 byte_ends: tf.RaggedTensor) -> tuple[tf.Tensor, tf.Tensor]:
    """First and last character ([P] indices) of each piece, from its byte span.

    Args:
        char_bytes: int64 [K + 1]. Byte offset of each character in the concatenated strings.
        base: int64 [P]. Byte offset of the string each piece is in.
        byte_starts, byte_ends: ragged [., (P)]. The piece's bytes within its string.
    """
    first = base + tf.cast(byte_starts.flat_values, tf.int64)
    last = base + tf.cast(byte_ends.flat_values, tf.int64) - 1
    return (tf.searchsorted(char_bytes, first, side="right", out_type=tf.int64) - 1,
            tf.searchsorted(char_bytes, last, side="right", out_type=tf.int64) - 1)


def _split(cp: tf.Tensor, row: tf.Tensor, src: tf.Tensor, classes: tf.Tensor,
           cjk: tf.Tensor) -> dict:
    """Word boundaries of normalized characters: separators (whitespace) and characters that are
    words of their own (punctuation by `classes`, CJK by `cjk` of the source character)."""
    space = tf.not_equal(_bits(classes, _SPACE), 0)
    alone = tf.not_equal(_bits(classes, _PUNCT) + cjk, 0)
    boundary = tf.concat([[True], (alone | space)[:-1] | tf.not_equal(row[1:], row[:-1])], 0)
    return {"cp": cp, "row": row, "src": src, "space": space,
            "word_start": ~space & (alone | boundary)}


def _long_word_breaks(chars: dict) -> tuple[tf.Tensor, tf.Tensor]:
    """(breaks [K], inside [J]): a running count of word starts and separators, and the
    characters followed by 100 more of the same word (so in a word of over 100 characters)."""
    breaks = tf.cumsum(tf.cast(chars["word_start"] | chars["space"], tf.int32))
    inside = tf.where(tf.equal(breaks[MAX_CHARS_PER_WORD:], breaks[:-MAX_CHARS_PER_WORD])
                      & ~chars["space"][:-MAX_CHARS_PER_WORD])[:, 0]  # usually empty
    return breaks, inside


def _in_long_words(chars: dict) -> tf.Tensor:
    """bool [K]: the character's text holds a word of over 100 characters (at its first)."""
    _, inside = _long_word_breaks(chars)
    return tf.scatter_nd(inside[:, tf.newaxis], tf.ones_like(inside),
                         tf.shape(chars["row"], out_type=tf.int64)) > 0


def _words(chars: dict, index: tf.Tensor, batch_size: tf.Tensor) -> tuple:
    """The words made of the word characters `index` ([K'] positions among the K).

    Returns:
        (words tf.string [W], their code points ragged [W, (chars)], words per text [B]).
    """
    starts = tf.gather(chars["word_start"], index)
    word_of_char = tf.cumsum(tf.cast(starts, tf.int64)) - 1  # [K']
    num_words = tf.reduce_sum(tf.cast(starts, tf.int64))
    word_chars = tf.RaggedTensor.from_row_splits(tf.gather(chars["cp"], index),
                                                 _splits(word_of_char, num_words), validate=False)
    word_row = tf.boolean_mask(tf.gather(chars["row"], index), starts)  # [W]
    words_per_text = tf.math.unsorted_segment_sum(tf.ones_like(word_row), word_row, batch_size)
    return tf.strings.unicode_encode(word_chars, "UTF-8"), word_chars, words_per_text


def _collapse_long_words(chars: dict, placeholder: int) -> dict:
    """Adds `src_end`; a word of more than 100 characters becomes one placeholder character
    (not in the vocab, so WordPiece gives [UNK]) whose source span covers the word; its other
    characters become separators."""
    word_start, space = chars["word_start"], chars["space"]
    breaks, inside = _long_word_breaks(chars)
    word = tf.cumsum(tf.cast(word_start, tf.int64)) - 1  # [K] word of each character
    long_words = tf.concat([tf.unique(tf.gather(word, inside)).y,  # sorted
                            tf.constant([tf.int64.max], tf.int64)], 0)  # [L + 1]
    in_long = ~space & tf.equal(
        tf.gather(long_words, tf.searchsorted(long_words, word, out_type=tf.int64)), word)
    heads = tf.where(in_long & word_start)[:, 0]  # [L]
    last = tf.searchsorted(breaks, tf.gather(breaks, heads), side="right",
                           out_type=tf.int64) - 1  # [L] last character of each long word
    out = dict(chars)
    out["cp"] = tf.tensor_scatter_nd_update(chars["cp"], heads[:, tf.newaxis],
                                            tf.fill(tf.shape(heads), placeholder))
    out["src_end"] = tf.tensor_scatter_nd_update(chars["src"] + 1, heads[:, tf.newaxis],
                                                 tf.gather(chars["src"], last) + 1)
    out["space"] = space | (in_long & ~word_start)
    return out


def _canonical_order(cp: tf.Tensor, info: tf.Tensor, first: tf.Tensor,
                     row: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """NFD's canonical ordering: a run of combining characters (ccc > 0) is stably sorted by
    combining class. Per-character decompositions are already ordered, so only runs where marks
    of different characters meet out of order move (rare: sorted as a small subset).

    Returns (cp, info, first) reordered; `first` marks characters that begin a decomposition.
    """
    ccc = tf.cast(_bits(tf.bitwise.right_shift(info, _CCC_SHIFT), 255), tf.int64)  # [M]
    starter = tf.equal(ccc, 0) | tf.concat([[True], tf.not_equal(row[1:], row[:-1])], 0)
    segment = tf.cumsum(tf.cast(starter, tf.int64)) - 1  # [M] run of each character
    out_of_order = tf.where(~starter[1:] & (ccc[:-1] > ccc[1:]))[:, 0] + 1  # usually empty
    runs = tf.unique(tf.gather(segment, out_of_order)).y  # sorted
    moving = tf.ragged.range(
        tf.searchsorted(segment, runs, side="left", out_type=tf.int64),
        tf.searchsorted(segment, runs, side="right", out_type=tf.int64)).flat_values  # [p]
    order = tf.gather(moving, tf.argsort(tf.gather(segment * 256 + ccc, moving), stable=True))
    at = moving[:, tf.newaxis]
    return tuple(tf.tensor_scatter_nd_update(t, at, tf.gather(t, order))
                 for t in (cp, info, first))


# --- Tables ----------------------------------------------------------------------------------

@functools.cache
def _raw_text_pattern(lower_case: bool) -> str:
    """A regular expression (RE2) that fully matches the texts tier zero may send to WordPiece
    as they are: made only of characters normalization leaves alone and that TF Text splits as
    the reference does (no characters to clean away or to map, no other whitespace than " "),
    with words of at most 100 characters of ASCII and full-width letters and digits. Texts with
    other word characters (accented or non-Latin letters) take the tiers; punctuation and CJK
    characters are words of one character anyway."""
    tables = _tables()
    codes = np.arange(0x110000, dtype=np.int64)
    if lower_case:
        index, blocks = tables["map_index"], tables["map_blocks"]
    else:
        index, blocks = tables["info_index"], tables["info_blocks"]
    values = blocks[index[codes >> _BLOCK_BITS].astype(np.int64) * (1 << _BLOCK_BITS)
                    + (codes & ((1 << _BLOCK_BITS) - 1))].astype(np.int64)
    unsafe = _DROP | _UNSAFE | (_COMPLEX if lower_case else 0)
    ok = (values & unsafe) == 0
    if lower_case:
        ok &= (values >> _MAP_SHIFT) == 0  # lower-casing and NFD leave the character alone
    ok[0xD800:0xE000] = False  # surrogates are not characters of valid UTF-8
    space = (values & _SPACE) != 0
    alone = ok & ~space & ((values & (_PUNCT | _CJK)) != 0)
    alone[0x20] = True  # the one separator WordPiece's own splitting surely treats alike
    # Word characters counted in the pattern: ASCII and the full-width forms. A class of every
    # word character makes the counted repetition too big for RE2's DFA (it falls back to a
    # far slower matcher); texts with other letters take the tiers.
    word = ok & ~space & ~alone & ((codes < 0x80) | ((codes >= 0xFF00) & (codes < 0xFFF0)))

    def char_class(mask: np.ndarray) -> str:
        points = np.nonzero(mask)[0]
        breaks = np.nonzero(np.diff(points) != 1)[0]
        ranges = zip(points[np.r_[0, breaks + 1]], points[np.r_[breaks, len(points) - 1]],
                     strict=True)
        return "[" + "".join(f"\\x{{{lo:x}}}" + (f"-\\x{{{hi:x}}}" if hi > lo else "")
                             for lo, hi in ranges) + "]"

    alone_class, word_class = char_class(alone), char_class(word)
    longest = f"{{1,{MAX_CHARS_PER_WORD}}}"
    return (f"{alone_class}*(?:{word_class}{longest}{alone_class}+)*"
            f"(?:{word_class}{longest})?")


def _parse_ranges(text: str) -> list[tuple[int, int]]:
    """"a-b c" (hex, inclusive) -> [(a, b), (c, c)]."""
    out = []
    for item in text.split():
        lo, _, hi = item.partition("-")
        out.append((int(lo, 16), int(hi or lo, 16)))
    return out


def _two_level(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Splits a per-code-point int32 array into (block index, unique blocks)."""
    blocks = values.reshape(-1, 1 << _BLOCK_BITS)
    position: dict[bytes, int] = {}
    unique: list[np.ndarray] = []
    index = np.empty(len(blocks), np.int32)
    for i, block in enumerate(blocks):
        key = block.tobytes()
        if key not in position:
            position[key] = len(unique)
            unique.append(block)
        index[i] = position[key]
    return index, np.concatenate(unique).astype(np.int32)


@functools.cache
def _tables() -> dict[str, np.ndarray]:
    """The lookup tables, built once per process (about a second).

    `info` (two-level, per code point): class bits, canonical combining class, lower-case
    delta. `decomp` (two-level): NFD of the code point as (start << 3 | length) into
    `decomp_values`, 0 where NFD leaves it alone. `map` (two-level): tier one's whole
    lower_case=True normalization of the code point (see _COMPLEX).
    """
    info = np.zeros(0x110000, np.int64)
    for text, bit in ((_DROPPED, _DROP), (_PUNCTUATION, _PUNCT), (_NONSPACING_MARKS, _MARK),
                      (_WORDPIECE_SPLITS_DIFFER, _UNSAFE)):
        for lo, hi in _parse_ranges(text):
            info[lo:hi + 1] |= bit
    for lo, hi in _CJK_RANGES:
        info[lo:hi + 1] |= _CJK
    info[list(_WHITESPACE)] |= _SPACE

    decomp = np.zeros(0x110000, np.int64)
    values: list[int] = []

    def decompose(c: int, seq: list[int]) -> None:
        assert 0 < len(seq) < 8, (hex(c), seq)
        decomp[c] = (len(values) << 3) | len(seq)
        values.extend(seq)

    for item in _COMBINING_CLASSES.split():
        span, _, ccc = item.partition(":")
        lo, hi = _parse_ranges(span)[0]
        info[lo:hi + 1] |= int(ccc) << _CCC_SHIFT
    overridden = set()
    for lo, hi, target in _overrides():
        for c in range(lo, hi + 1):
            decompose(c, [target + c - lo])
            overridden.add(c)
    # Planes 0-3 and 14 hold every character with case or decomposition.
    for c in [*range(0x40000), *range(0xE0000, 0xE1000)]:
        ch = chr(c)
        if c in overridden:
            continue
        lower = ch.lower()
        if lower != ch and len(lower) == 1:
            info[c] |= (ord(lower) - c) << _LOWER_SHIFT
        if not unicodedata.is_normalized("NFD", ch):
            decompose(c, [ord(x) for x in unicodedata.normalize("NFD", ch)])
    assert info.max() < 2**31 and info.min() >= -(2**31)
    info_index, info_blocks = _two_level(info.astype(np.int32))
    decomp_index, decomp_blocks = _two_level(decomp.astype(np.int32))
    map_index, map_blocks = _two_level(_lower_case_map(info, decomp, values))
    return {"info_index": info_index, "info_blocks": info_blocks,
            "decomp_index": decomp_index, "decomp_blocks": decomp_blocks,
            "decomp_values": np.asarray(values, np.int32),
            "map_index": map_index, "map_blocks": map_blocks}


def _lower_case_map(info: np.ndarray, decomp: np.ndarray, values: list[int]) -> np.ndarray:
    """Tier one's map for lower_case=True: each code point's clean + NFD + strip + lower-case
    result when that is one character (see _COMPLEX), from the same tables as tier two."""
    classes = _SPACE | _PUNCT | _UNSAFE
    codes = np.arange(0x110000, dtype=np.int64)
    lower = codes + (info >> _LOWER_SHIFT)  # characters NFD leaves alone
    out = ((lower - codes) << _MAP_SHIFT) | (info[lower] & classes)
    out[(info & _DROP) != 0] |= _DROP
    out |= info & _CJK  # of the code point itself
    ccc = (info >> _CCC_SHIFT) & 255
    for c in np.nonzero((decomp != 0) | ((info & _MARK) != 0) | (ccc != 0))[0]:
        seq = [c] if decomp[c] == 0 else values[decomp[c] >> 3:(decomp[c] >> 3) + (decomp[c] & 7)]
        kept = [d + (info[d] >> _LOWER_SHIFT) for d in seq if not info[d] & _MARK]
        movable = any(ccc[d] and not info[d] & _MARK for d in seq)
        flags = out[c] & _DROP
        if not kept:
            out[c] = flags | _DROP
        elif len(kept) > 1 or movable:
            out[c] = flags | _COMPLEX
        else:
            out[c] = flags | ((kept[0] - c) << _MAP_SHIFT) | (info[kept[0]] & classes)
        out[c] |= info[c] & _CJK
    assert out.max() < 2**31 and out.min() >= -(2**31)
    return out.astype(np.int32)


def _overrides() -> list[tuple[int, int, int]]:
    """(first, last, target of first): lower_case=True results newer than this Python's data."""
    out = []
    for item in _LOWER_CASE_OVERRIDES.split():
        span, _, target = item.partition(">")
        lo, hi = _parse_ranges(span)[0]
        out.append((lo, hi, int(target, 16)))
    return out


# Whitespace: tab, newline, carriage return and Unicode White_Space (11, 12, 0x85 are control
# characters and dropped before they count).
_WHITESPACE = (9, 10, 11, 12, 13, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028,
               0x2029, 0x202F, 0x205F, 0x3000)
# CJK ideographs as `tokenizers` has them (Extension E from U+2B920, not U+2B820).
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))

# The tables below (hex ranges, inclusive) are made by tests/data/make_tokenizer_tables.py,
# which runs `tokenizers` 0.23.3 (and TF Text 2.21) on every code point;
# tests/test_tokenizer.py::test_every_code_point checks the tokenizer against it.
# Cleaned away: NUL, U+FFFD, Cc except \t \n \r, Cf, Co (Unicode 8.0 categories).
_DROPPED = """
0-8 b-c e-1f 7f-9f ad 600-605 61c 6dd 70f 180e 200b-200f 202a-202e 2060-2064 2066-206f
e000-f8ff feff fff9-fffb fffd 110bd 1bca0-1bca3 1d173-1d17a e0001 e0020-e007f f0000-ffffd
100000-10fffd
"""
# Punctuation: the ASCII symbol ranges plus P* (Unicode 8.0).
_PUNCTUATION = """
21-2f 3a-40 5b-60 7b-7e a1 a7 ab b6-b7 bb bf 37e 387 55a-55f 589-58a 5be 5c0 5c3 5c6 5f3-5f4
609-60a 60c-60d 61b 61e-61f 66a-66d 6d4 700-70d 7f7-7f9 830-83e 85e 964-965 970 af0 df4 e4f
e5a-e5b f04-f12 f14 f3a-f3d f85 fd0-fd4 fd9-fda 104a-104f 10fb 1360-1368 1400 166d-166e
169b-169c 16eb-16ed 1735-1736 17d4-17d6 17d8-17da 1800-180a 1944-1945 1a1e-1a1f 1aa0-1aa6
1aa8-1aad 1b5a-1b60 1bfc-1bff 1c3b-1c3f 1c7e-1c7f 1cc0-1cc7 1cd3 2010-2027 2030-2043 2045-2051
2053-205e 207d-207e 208d-208e 2308-230b 2329-232a 2768-2775 27c5-27c6 27e6-27ef 2983-2998
29d8-29db 29fc-29fd 2cf9-2cfc 2cfe-2cff 2d70 2e00-2e2e 2e30-2e42 3001-3003 3008-3011 3014-301f
3030 303d 30a0 30fb a4fe-a4ff a60d-a60f a673 a67e a6f2-a6f7 a874-a877 a8ce-a8cf a8f8-a8fa a8fc
a92e-a92f a95f a9c1-a9cd a9de-a9df aa5c-aa5f aade-aadf aaf0-aaf1 abeb fd3e-fd3f fe10-fe19
fe30-fe52 fe54-fe61 fe63 fe68 fe6a-fe6b ff01-ff03 ff05-ff0a ff0c-ff0f ff1a-ff1b ff1f-ff20
ff3b-ff3d ff3f ff5b ff5d ff5f-ff65 10100-10102 1039f 103d0 1056f 10857 1091f 1093f 10a50-10a58
10a7f 10af0-10af6 10b39-10b3f 10b99-10b9c 11047-1104d 110bb-110bc 110be-110c1 11140-11143
11174-11175 111c5-111c9 111cd 111db 111dd-111df 11238-1123d 112a9 114c6 115c1-115d7
11641-11643 1173c-1173e 12470-12474 16a6e-16a6f 16af5 16b37-16b3b 16b44 1bc9f 1da87-1da8b
"""
# Non-spacing marks (Mn, Unicode 8.0): removed after NFD when lower-casing.
_NONSPACING_MARKS = """
300-33f 342 345-36f 483-487 591-5bd 5bf 5c1-5c2 5c4-5c5 5c7 610-61a 64b-65f 670 6d6-6dc
6df-6e4 6e7-6e8 6ea-6ed 711 730-74a 7a6-7b0 7eb-7f3 816-819 81b-823 825-827 829-82d 859-85b
8e3-902 93a 93c 941-948 94d 951-957 962-963 981 9bc 9c1-9c4 9cd 9e2-9e3 a01-a02 a3c a41-a42
a47-a48 a4b-a4d a51 a70-a71 a75 a81-a82 abc ac1-ac5 ac7-ac8 acd ae2-ae3 b01 b3c b3f b41-b44
b4d b56 b62-b63 b82 bc0 bcd c00 c3e-c40 c46-c47 c4a-c4d c55-c56 c62-c63 c81 cbc cbf cc6 ccc-
ccd ce2-ce3 d01 d41-d44 d4d d62-d63 dca dd2-dd4 dd6 e31 e34-e3a e47-e4e eb1 eb4-eb9 ebb-ebc
ec8-ecd f18-f19 f35 f37 f39 f71-f72 f74 f77 f79-f7e f80 f82-f84 f86-f87 f8d-f92 f94-f97
f99-f9c f9e-fa1 fa3-fa6 fa8-fab fad-fb8 fba-fbc fc6 102d-1030 1032-1037 1039-103a 103d-103e
1058-1059 105e-1060 1071-1074 1082 1085-1086 108d 109d 135d-135f 1712-1714 1732-1734 1752-1753
1772-1773 17b4-17b5 17b7-17bd 17c6 17c9-17d3 17dd 180b-180d 18a9 1920-1922 1927-1928 1932
1939-193b 1a17-1a18 1a1b 1a56 1a58-1a5e 1a60 1a62 1a65-1a6c 1a73-1a7c 1a7f 1ab0-1abd 1b00-1b03
1b34 1b36-1b3a 1b3c 1b42 1b6b-1b73 1b80-1b81 1ba2-1ba5 1ba8-1ba9 1bab-1bad 1be6 1be8-1be9 1bed
1bef-1bf1 1c2c-1c33 1c36-1c37 1cd0-1cd2 1cd4-1ce0 1ce2-1ce8 1ced 1cf4 1cf8-1cf9 1dc0-1df5
1dfc-1dff 20d0-20dc 20e1 20e5-20f0 2cef-2cf1 2d7f 2de0-2dff 302a-302d 3099-309a a66f a674-a67d
a69e-a69f a6f0-a6f1 a802 a806 a80b a825-a826 a8c4 a8e0-a8f1 a926-a92d a947-a951 a980-a982 a9b3
a9b6-a9b9 a9bc a9e5 aa29-aa2e aa31-aa32 aa35-aa36 aa43 aa4c aa7c aab0 aab2-aab4 aab7-aab8
aabe-aabf aac1 aaec-aaed aaf6 abe5 abe8 abed fb1e fe00-fe0f fe20-fe2f 101fd 102e0 10376-1037a
10a01-10a03 10a05-10a06 10a0c-10a0f 10a38-10a3a 10a3f 10ae5-10ae6 11001 11038-11046
1107f-11081 110b3-110b6 110b9-110ba 11100-11102 11127-1112b 1112d 11130-11134 11173
11180-11181 111b6-111be 111ca-111cc 1122f-11231 11234 11236-11237 112df 112e3-112ea
11300-11301 1133c 11340 11366-1136c 11370-11374 114b3-114b8 114ba 114bf-114c0 114c2-114c3
115b2-115b5 115bc-115bd 115bf-115c0 115dc-115dd 11633-1163a 1163d 1163f-11640 116ab 116ad
116b0-116b5 116b7 1171d-1171f 11722-11725 11727-1172b 16af0-16af4 16b30-16b36 16f8f-16f92
1bc9d-1bc9e 1d167-1d169 1d17b-1d182 1d185-1d18b 1d1aa-1d1ad 1d242-1d244 1da00-1da36
1da3b-1da6c 1da75 1da84 1da9b-1da9f 1daa1-1daaf 1e8d0-1e8d6 e0100-e01ef
"""
# lower_case=True results where the reference's Unicode data differs from Python 3.11's: letters
# of Unicode 15-16 that it lower-cases, and U+11938 that it does not decompose. Written
# first[-last]>target, one character to one.
_LOWER_CASE_OVERRIDES = """
1c89>1c8a a7cb>264 a7cc>a7cd a7ce>a7cf a7d2>a7d3 a7d4>a7d5 a7da>a7db a7dc>19b
10d50-10d65>10d70 11938>11938 16ea0-16eb8>16ebb
"""
# Where TF Text's WordPiece splitting (ICU punctuation, Google's CJK ranges) differs from the
# reference's: a batch holding one of these goes word by word. From TF Text 2.21.1; older ICU
# versions only split fewer of them.
_WORDPIECE_SPLITS_DIFFER = """
61d 9fd a76 c77 c84 166d 1b4e-1b4f 1b7d-1b7f 2e43-2e4f 2e52-2e5d 10d6e 10ead 10f55-10f59
10f86-10f89 111c9 113d4-113d5 113d7-113d8 1144b-1144f 1145a-1145b 1145d 11660-1166c 116b9
1183b 11944-11946 119e2 11a3f-11a46 11a9a-11a9c 11a9e-11aa2 11b00-11b09 11be1 11c41-11c45
11c70-11c71 11ef7-11ef8 11f43-11f4f 11fff 12ff1-12ff2 16d6d-16d6f 16e97-16e9a 16fe2 1e5ff
1e95e-1e95f 2b820-2b91f
"""
# Canonical combining classes the reference knows (its normalization tables predate Unicode 10).
_COMBINING_CLASSES = """
300-314:230 315:232 316-319:220 31a:232 31b:216 31c-320:220 321-322:202 323-326:220
327-328:202 329-333:220 334-338:1 339-33c:220 33d-33f:230 342:230 345:240 346:230 347-349:220
34a-34c:230 34d-34e:220 350-352:230 353-356:220 357:230 358:232 359-35a:220 35b:230 35c:233
35d-35e:234 35f:233 360-361:234 362:233 363-36f:230 483-487:230 591:220 592-595:230 596:220
597-599:230 59a:222 59b:220 59c-5a1:230 5a2-5a7:220 5a8-5a9:230 5aa:220 5ab-5ac:230 5ad:222
5ae:228 5af:230 5b0:10 5b1:11 5b2:12 5b3:13 5b4:14 5b5:15 5b6:16 5b7:17 5b8:18 5b9-5ba:19
5bb:20 5bc:21 5bd:22 5bf:23 5c1:24 5c2:25 5c4:230 5c5:220 5c7:18 610-617:230 618:30 619:31
61a:32 64b:27 64c:28 64d:29 64e:30 64f:31 650:32 651:33 652:34 653-654:230 655-656:220
657-65b:230 65c:220 65d-65e:230 65f:220 670:35 6d6-6dc:230 6df-6e2:230 6e3:220 6e4:230
6e7-6e8:230 6ea:220 6eb-6ec:230 6ed:220 711:36 730:230 731:220 732-733:230 734:220 735-736:230
737-739:220 73a:230 73b-73c:220 73d:230 73e:220 73f-741:230 742:220 743:230 744:220 745:230
746:220 747:230 748:220 749-74a:230 7eb-7f1:230 7f2:220 7f3:230 816-819:230 81b-823:230
825-827:230 829-82d:230 859-85b:220 8d4-8e1:230 8e3:220 8e4-8e5:230 8e6:220 8e7-8e8:230
8e9:220 8ea-8ec:230 8ed-8ef:220 8f0:27 8f1:28 8f2:29 8f3-8f5:230 8f6:220 8f7-8f8:230
8f9-8fa:220 8fb-8ff:230 93c:7 94d:9 951:230 952:220 953-954:230 9bc:7 9cd:9 a3c:7 a4d:9 abc:7
acd:9 b3c:7 b4d:9 bcd:9 c4d:9 c55:84 c56:91 cbc:7 ccd:9 d4d:9 dca:9 e38-e39:103 e3a:9
e48-e4b:107 eb8-eb9:118 ec8-ecb:122 f18-f19:220 f35:220 f37:220 f39:216 f71:129 f72:130
f74:132 f7a-f7d:130 f80:130 f82-f83:230 f84:9 f86-f87:230 fc6:220 1037:7 1039-103a:9 108d:220
135d-135f:230 1714:9 1734:9 17d2:9 17dd:230 18a9:228 1939:222 193a:230 193b:220 1a17:230
1a18:220 1a60:9 1a75-1a7c:230 1a7f:220 1ab0-1ab4:230 1ab5-1aba:220 1abb-1abc:230 1abd:220
1b34:7 1b44:9 1b6b:230 1b6c:220 1b6d-1b73:230 1baa-1bab:9 1be6:7 1bf2-1bf3:9 1c37:7
1cd0-1cd2:230 1cd4:1 1cd5-1cd9:220 1cda-1cdb:230 1cdc-1cdf:220 1ce0:230 1ce2-1ce8:1 1ced:220
1cf4:230 1cf8-1cf9:230 1dc0-1dc1:230 1dc2:220 1dc3-1dc9:230 1dca:220 1dcb-1dcc:230 1dcd:234
1dce:214 1dcf:220 1dd0:202 1dd1-1df5:230 1dfb:230 1dfc:233 1dfd:220 1dfe:230 1dff:220
20d0-20d1:230 20d2-20d3:1 20d4-20d7:230 20d8-20da:1 20db-20dc:230 20e1:230 20e5-20e6:1
20e7:230 20e8:220 20e9:230 20ea-20eb:1 20ec-20ef:220 20f0:230 2cef-2cf1:230 2d7f:9
2de0-2dff:230 302a:218 302b:228 302c:232 302d:222 302e-302f:224 3099-309a:8 a66f:230
a674-a67d:230 a69e-a69f:230 a6f0-a6f1:230 a806:9 a8c4:9 a8e0-a8f1:230 a92b-a92d:220 a953:9
a9b3:7 a9c0:9 aab0:230 aab2-aab3:230 aab4:220 aab7-aab8:230 aabe-aabf:230 aac1:230 aaf6:9
abed:9 fb1e:26 fe20-fe26:230 fe27-fe2d:220 fe2e-fe2f:230 101fd:220 102e0:220 10376-1037a:230
10a0d:220 10a0f:230 10a38:230 10a39:1 10a3a:220 10a3f:9 10ae5:230 10ae6:220 11046:9 1107f:9
110b9:9 110ba:7 11100-11102:230 11133-11134:9 11173:7 111c0:9 111ca:7 11235:9 11236:7 112e9:7
112ea:9 1133c:7 1134d:9 11366-1136c:230 11370-11374:230 11442:9 11446:7 114c2:9 114c3:7
115bf:9 115c0:7 1163f:9 116b6:9 116b7:7 1172b:9 11c3f:9 16af0-16af4:1 16b30-16b36:230 1bc9e:1
1d165-1d166:216 1d167-1d169:1 1d16d:226 1d16e-1d172:216 1d17b-1d182:220 1d185-1d189:230
1d18a-1d18b:220 1d1aa-1d1ad:230 1d242-1d244:230 1e000-1e006:230 1e008-1e018:230
1e01b-1e021:230 1e023-1e024:230 1e026-1e02a:230 1e8d0-1e8d6:220 1e944-1e949:230 1e94a:7
"""
