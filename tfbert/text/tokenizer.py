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
5. greedy longest-match-first WordPiece with "##" continuations; a word longer than
   `max_chars_per_word` characters (default 100, as `tokenizers` and transformers; Google's
   tokenization.py uses 200), or one that cannot be covered by vocab pieces, becomes a single
   [UNK].

"[CLS]" and the like in input text are text, as in Google's tokenizer (transformers matches
them as special tokens unless `split_special_tokens=True`).

Steps 1-4 run in core TensorFlow ops over Unicode code points (`char_ops`), driven by lookup
tables (`char_tables`);
step 5 is TF Text's `FastWordpieceTokenizer` (linear-time MaxMatch). `tokenize` first sends
texts that steps 1-4 would leave as they are (one RE2 match: no character to clean, map or
re-split, no word over the limit; most Chinese text) to WordPiece untouched. Other texts
take one table lookup per character and go to WordPiece whole (its own splitting then equals the
reference's);
texts with characters NFD expands or reorders, characters TF Text splits differently, or words
over the limit are normalized step by step and go word by word (see the pipeline notes).

Where the reference's own character tables differ from a modern `unicodedata`, the reference wins:
`tokenizers` classifies control characters, punctuation and non-spacing marks with the Unicode 8.0
categories compiled into it, knows the combining classes of Unicode 9, keeps unassigned code
points, lower-cases one character at a time (no final-sigma rule), and its CJK ranges start
Extension E at U+2B920 (Google's Python code says U+2B820). The tables are those classes,
generated from `tokenizers` 0.23.3 and checked for every code point in tests/test_tokenizer.py;
offsets follow its alignment rules too. Google's Python tokenizer (and transformers' legacy
Python BertTokenizer) agrees with this except on those rare characters, on "Σ" at the end of a
word, on words of 101-200 characters (Google's limit is 200: `max_chars_per_word=200` gives its
ids there), and (transformers only) NFC before lower_case=False tokenizing.

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

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf
import tensorflow_text as tf_text

from tfbert.text import char_ops, char_tables
from tfbert.text import vocab as vocab_lib
from tfbert.text.char_tables import CJK, COMPLEX, DROP, LOWER_SHIFT, MAP_SHIFT, MARK, UNSAFE
from tfbert.text.keras_inputs import take_inputs_as_given

MAX_CHARS_PER_WORD = char_tables.MAX_CHARS_PER_WORD
SUFFIX_INDICATOR = "##"


class BertTokenizer(keras.layers.Layer):
    """BERT WordPiece tokenizer: strings in, word-piece ids out, in-graph and reference-exact.

    Runs eagerly, in `tf.function`, in `tf.data` and inside an exported SavedModel (needing only
    `tensorflow` and `tensorflow_text` to load).

    Args:
        vocab_file: str or sequence of str. Path to vocab.txt, or the tokens themselves in id
            order. Must contain [PAD], [UNK], [CLS], [SEP] and [MASK].
        lower_case: bool. Lower-case, NFD and strip accents (an "uncased" vocab); False keeps
            case and accents (a "cased" vocab).
        max_chars_per_word: int. A longer word (in characters, after normalization) becomes one
            [UNK]. The default 100 is the `tokenizers` / transformers limit, so the ids equal
            theirs everywhere; Google's tokenization.py uses 200, so words of 101-200 characters
            become word pieces there: pass 200 for its ids on such text.

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

    def __init__(self, vocab_file: str | Sequence[str], lower_case: bool = True,
                 max_chars_per_word: int = MAX_CHARS_PER_WORD, **kwargs: Any):
        kwargs.setdefault("dtype", "int32")
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        take_inputs_as_given(self)  # tf.string tensors, ragged tensors, Python strings
        self.built = True

        # === Config ===
        if isinstance(vocab_file, str):
            tokens = vocab_lib.load_vocab(vocab_file)
        else:
            tokens = vocab_lib.check_vocab(vocab_file, source="vocab list")
        self._tokens = tokens
        self.lower_case = bool(lower_case)
        if isinstance(max_chars_per_word, bool) or int(max_chars_per_word) < 1:
            raise ValueError(f"max_chars_per_word must be a positive integer, got "
                             f"{max_chars_per_word!r}")
        self.max_chars_per_word = int(max_chars_per_word)
        self._special_ids = vocab_lib.special_ids(tokens)

        # === Tables (captured by traced functions as constants) ===
        tables = char_tables.tables()
        self._info_index = tf.constant(tables["info_index"])
        self._info_blocks = tf.constant(tables["info_blocks"])
        if self.lower_case:
            self._map_index = tf.constant(tables["map_index"])
            self._map_blocks = tf.constant(tables["map_blocks"])
            self._decomp_index = tf.constant(tables["decomp_index"])
            self._decomp_blocks = tf.constant(tables["decomp_blocks"])
            self._decomp_values = tf.constant(tables["decomp_values"])
        self._vocab_strings = tf.constant(tokens)
        # A private-use character stands in for words over the limit: cleaning removes
        # private-use characters from text, so it only appears there; it is not in the vocab.
        self._placeholder = next(c for c in range(0xE000, 0xF900) if chr(c) not in set(tokens))
        self._wordpiece_texts = _fast_wordpiece(tokens, True, self.max_chars_per_word)
        self._wordpiece_words = _fast_wordpiece(tokens, False, self.max_chars_per_word)
        self._raw_pattern = char_tables.raw_text_pattern(self.lower_case,
                                                         self.max_chars_per_word)
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
        return char_ops.map_strings(texts, self._tokenize_ids)

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

        ids = char_ops.map_strings(texts, lambda flat: run(flat, 0))
        starts = char_ops.map_strings(texts, lambda flat: run(flat, 1))
        ends = char_ops.map_strings(texts, lambda flat: run(flat, 2))
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
        pre-tokenizer give them; words over the limit included).

        Args:
            texts: tf.string [B] (or any rank, or ragged).

        Returns:
            tf.RaggedTensor tf.string [B, (words)].
        """
        def split(flat: tf.Tensor) -> tf.RaggedTensor:
            decoded = tf.strings.unicode_decode(flat, "UTF-8", errors="replace",
                                                replacement_char=0xFFFD)
            chars = self._normalize_rows(decoded.flat_values, char_ops.row_ids(decoded.row_splits),
                                         tf.range(tf.size(flat, out_type=tf.int64)),
                                         collapse=False)
            index = tf.where(~chars["space"])[:, 0]
            words, _, words_per_text = char_ops.words_of(chars, index,
                                                         tf.size(flat, out_type=tf.int64))
            return tf.RaggedTensor.from_row_lengths(words, words_per_text, validate=False)

        return char_ops.map_strings(texts, split)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({"vocab_file": self.vocab, "lower_case": self.lower_case,
                       "max_chars_per_word": self.max_chars_per_word})
        return config

    # --- The pipeline --------------------------------------------------------------------------
    # Two tiers, and no tf.cond (removing the conds halved the tokenizer's cost inside tf.data,
    # where a function holding control flow runs slower). Every text is first normalized one
    # character at a time from a table and sent to TF Text's WordPiece whole. Texts where that
    # is not exact (characters NFD expands or reorders, characters TF Text's WordPiece splits
    # differently, words over the limit) are normalized again step by step and sent word
    # by word. That second tier works on data-dependent subsets, empty in most batches.

    def _tokenize_ids(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """texts tf.string [B] -> ids [B, (P)], with tier zero in front of the two tiers.

        Tier zero: a text whose every character normalization leaves alone, that TF Text's
        WordPiece splits as the reference does, and whose words are within the limit (one
        regular expression, `_raw_text_pattern`) goes to WordPiece as it is: no decoding into
        code points and encoding back. Tier one would send it to the same WordPiece unchanged,
        so the ids are the same; most Chinese and lower-case English text is such text.
        """
        if self._force_word_path:
            return self._tokenize(texts, with_offsets=False)[0]
        raw = tf.strings.regex_full_match(texts, self._raw_pattern)  # [B]
        by_raw = self._wordpiece_texts.tokenize(tf.where(raw, texts, ""))
        by_tiers = self._tokenize(tf.where(raw, "", texts), with_offsets=False)[0]
        return char_ops.merge_rows(by_raw, by_tiers)[0]

    def _tokenize(self, texts: tf.Tensor, with_offsets: bool) -> tuple:
        """texts tf.string [B] -> ids [B, (P)] (and start/end char offsets [B, (P)])."""
        decoded = tf.strings.unicode_decode(texts, "UTF-8", errors="replace",
                                            replacement_char=0xFFFD)  # [B, (N)]
        batch_size = tf.size(texts, out_type=tf.int64)
        cps = decoded.flat_values  # [N] int32
        char_row = char_ops.row_ids(decoded.row_splits)  # [N]

        fast = self._map_chars(cps, char_row)
        exact_rows = tf.unique(tf.boolean_mask(fast["row"], fast["exact"])).y  # sorted
        if self._force_word_path:
            exact_rows = tf.range(batch_size)
        exact = self._normalize_rows(cps, char_row, exact_rows)

        by_texts = self._by_texts(fast, batch_size, exact_rows, with_offsets)
        by_words = self._by_words(exact, batch_size, with_offsets)
        ids, merge = char_ops.merge_rows(by_texts[0], by_words[0])  # [B, (P)]
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
            classes = char_ops.lookup(self._map_index, self._map_blocks, cps)  # [N]
        else:
            classes = char_ops.lookup(self._info_index, self._info_blocks, cps)  # [N]
        keep = tf.where(tf.equal(char_ops.bits(classes, DROP), 0))[:, 0]  # [K]
        classes, cp, row = char_ops.select(keep, classes, cps, char_row)
        if self.lower_case:  # the mapped character (its classes are in `classes`)
            cp = cp + tf.bitwise.right_shift(classes, MAP_SHIFT)
            exact = tf.not_equal(char_ops.bits(classes, UNSAFE | COMPLEX), 0)
        else:
            exact = tf.not_equal(char_ops.bits(classes, UNSAFE), 0)
        chars = char_ops.mark_words(cp, row, keep, classes, char_ops.bits(classes, CJK))
        chars["exact"] = exact | char_ops.in_long_words(chars, self.max_chars_per_word)
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
        info = char_ops.lookup(self._info_index, self._info_blocks, tf.gather(cps, src))
        kept = tf.where(tf.equal(char_ops.bits(info, DROP), 0))[:, 0]  # cleaning keeps these
        src, cp_info = char_ops.select(kept, src, info)
        cp, row = char_ops.select(src, cps, char_row)
        cjk = char_ops.bits(cp_info, CJK)  # of the source character
        if self.lower_case:
            src, cp, cp_info, row = self._nfd_strip_marks(src, cp, cp_info, row)
            cp = cp + tf.bitwise.right_shift(cp_info, LOWER_SHIFT)  # lower-case, char by char
            cjk = char_ops.bits(char_ops.lookup(self._info_index, self._info_blocks,
                                                tf.gather(cps, src)), CJK)
        chars = char_ops.mark_words(cp, row, src, cp_info, cjk)
        if not collapse:
            return chars
        return char_ops.collapse_long_words(chars, self._placeholder, self.max_chars_per_word)

    def _by_texts(self, chars: dict, batch_size: tf.Tensor, skip_rows: tf.Tensor,
                  with_offsets: bool) -> tuple:
        """WordPiece over whole normalized texts (separators as spaces); skip_rows left empty.

        Returns (ids [B, (P)],) or (ids, first source, source end) with [P] int64 spans.
        """
        cps = tf.where(chars["space"], 32, chars["cp"])  # [K]
        lines = tf.strings.unicode_encode(
            tf.RaggedTensor.from_row_splits(
                cps, char_ops.splits_from_rows(chars["row"], batch_size), validate=False),
            "UTF-8")  # [B]
        skip = tf.scatter_nd(skip_rows[:, tf.newaxis], tf.ones_like(skip_rows), [batch_size])
        lines = tf.where(skip > 0, "", lines)
        ids, byte_starts, byte_ends = self._wordpiece_texts.tokenize_with_offsets(lines)
        if not with_offsets:
            return (ids,)
        char_bytes = char_ops.exclusive_byte_cumsum(cps)  # [K + 1]
        row_first_char = tf.searchsorted(chars["row"], tf.range(batch_size), out_type=tf.int64)
        base = tf.gather(tf.gather(char_bytes, row_first_char), char_ops.row_ids(ids.row_splits))
        first, last = char_ops.piece_chars(char_bytes, base, byte_starts, byte_ends)
        return ids, tf.gather(chars["src"], first), tf.gather(chars["src"], last) + 1

    def _by_words(self, chars: dict, batch_size: tf.Tensor, with_offsets: bool) -> tuple:
        """WordPiece word by word (words split here)."""
        index = tf.where(~chars["space"])[:, 0]  # [K'] word characters
        words, word_chars, words_per_text = char_ops.words_of(chars, index, batch_size)
        pieces, byte_starts, byte_ends = self._wordpiece_words.tokenize_with_offsets(words)
        word_splits = tf.concat([[0], tf.cumsum(words_per_text)], 0)  # [B + 1]
        ids = tf.RaggedTensor.from_row_splits(pieces.flat_values,
                                              tf.gather(pieces.row_splits, word_splits),
                                              validate=False)  # [B, (P)]
        if not with_offsets:
            return (ids,)
        char_bytes = char_ops.exclusive_byte_cumsum(word_chars.flat_values)  # [K' + 1]
        base = tf.gather(tf.gather(char_bytes, word_chars.row_starts()),
                         char_ops.row_ids(pieces.row_splits))  # [P]
        first, last = char_ops.piece_chars(char_bytes, base, byte_starts, byte_ends)
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
        # [K0] start << 3 | length
        decomp = char_ops.lookup(self._decomp_index, self._decomp_blocks, cp)
        length = tf.cast(tf.where(decomp > 0, char_ops.bits(decomp, 7), 1), tf.int64)  # [K0]
        first_out = tf.cumsum(length, exclusive=True)  # [K0]
        positions = tf.range(tf.reduce_sum(length))  # [M]
        owner = tf.searchsorted(first_out, positions, side="right", out_type=tf.int64) - 1
        k = positions - tf.gather(first_out, owner)  # [M] place within the decomposition
        owner_decomp = tf.gather(decomp, owner)
        decomposed = owner_decomp > 0
        at = tf.where(decomposed, tf.cast(tf.bitwise.right_shift(owner_decomp, 3), tf.int64) + k,
                      tf.constant(0, tf.int64))
        cp = tf.where(decomposed, tf.gather(self._decomp_values, at), tf.gather(cp, owner))
        info = char_ops.lookup(self._info_index, self._info_blocks, cp)  # [M]
        row = tf.gather(row, owner)
        cp, info, first = char_ops.canonical_order(cp, info, tf.equal(k, 0), row)
        src = tf.gather(src, tf.cumsum(tf.cast(first, tf.int64)) - 1)
        unmarked = tf.where(tf.equal(char_ops.bits(info, MARK), 0))[:, 0]
        return char_ops.select(unmarked, src, cp, info, row)


def _fast_wordpiece(tokens: list[str], split_words: bool,
                    max_chars_per_word: int) -> tf_text.FastWordpieceTokenizer:
    """TF Text's WordPiece; with split_words it also splits text at whitespace and punctuation
    (and CJK), else each input string is one word. No word exceeds `max_chars_per_word`
    characters here (longer ones are collapsed first), so the byte limit is set above that many
    characters' worth."""
    try:
        return tf_text.FastWordpieceTokenizer(
            vocab=tokens, suffix_indicator=SUFFIX_INDICATOR,
            max_bytes_per_word=max_chars_per_word * 4, token_out_type=tf.int32,
            unknown_token=vocab_lib.UNK, no_pretokenization=not split_words,
            support_detokenization=False)
    except RuntimeError as e:
        raise ValueError(f"TF Text cannot build WordPiece from this vocab ({len(tokens)} "
                         f"tokens, first ones {tokens[:8]}): {e}") from e
