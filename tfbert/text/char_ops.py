"""Tensor kernels of the tokenizer: table lookups, word boundaries, long words, canonical
ordering, and the ragged bookkeeping between them. Core TensorFlow ops only, no control flow.

Shapes: B texts, N code points, K characters kept (K' in the texts normalized step by step),
W words, P word pieces.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfbert.text.char_tables import BLOCK_BITS, CCC_SHIFT, MAX_CHARS_PER_WORD, PUNCT, SPACE


def merge_rows(a: tf.RaggedTensor, b: tf.RaggedTensor) -> tuple[tf.RaggedTensor, dict]:
    """Row i of a and row i of b joined, where each row is empty in at least one of them.

    Returns:
        (merged [B, (P)], {"rows": the row of each value of a then b [Pa + Pb], "values": a
        function merging two more [Pa] and [Pb] value tensors the same way}).
    """
    splits_a, splits_b = a.row_splits, b.row_splits
    splits = splits_a + splits_b  # [B + 1]
    rows_a, rows_b = row_ids(splits_a), row_ids(splits_b)
    at = tf.concat([tf.range(splits_a[-1]) + tf.gather(splits_b, rows_a),
                    tf.range(splits_b[-1]) + tf.gather(splits_a, rows_b)], 0)

    def values(x: tf.Tensor, y: tf.Tensor) -> tf.RaggedTensor:
        merged = tf.reshape(tf.scatter_nd(at[:, tf.newaxis], tf.concat([x, y], 0),
                                          splits[-1:]), [-1])
        return tf.RaggedTensor.from_row_splits(merged, splits, validate=False)

    return (values(a.flat_values, b.flat_values),
            {"rows": tf.concat([rows_a, rows_b], 0), "values": values})


def map_strings(texts: Any, fn: Any) -> Any:
    """Applies fn (tf.string [B] -> ragged [B, (...)]) to strings of any rank or raggedness."""
    if isinstance(texts, tf.RaggedTensor):
        return texts.with_flat_values(map_strings(texts.flat_values, fn))
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


def lookup(index: tf.Tensor, blocks: tf.Tensor, cp: tf.Tensor) -> tf.Tensor:
    """Two-level table lookup: blocks[index[cp >> 7] * 128 + cp % 128]."""
    block = tf.gather(index, tf.bitwise.right_shift(cp, BLOCK_BITS))
    return tf.gather(blocks, block * (1 << BLOCK_BITS) + bits(cp, (1 << BLOCK_BITS) - 1))


def bits(x: tf.Tensor, mask: int) -> tf.Tensor:
    return tf.bitwise.bitwise_and(x, tf.constant(mask, x.dtype))


def row_ids(splits: tf.Tensor) -> tf.Tensor:
    """Row of each value from row splits: a running count of the row ends passed.
    (RaggedTensor.value_rowids builds a [rows, longest row] mask and is several times slower.)"""
    size = splits[-1]
    ends = splits[1:-1]  # [B - 1] where rows 1.. begin (repeated for empty rows)
    marks = tf.scatter_nd(ends[:, tf.newaxis], tf.ones_like(ends), [size + 1])
    return tf.cumsum(marks[:size])


def splits_from_rows(row_ids: tf.Tensor, nrows: tf.Tensor) -> tf.Tensor:
    """Row splits from sorted row ids (from_value_rowids counts with a slow bincount)."""
    return tf.searchsorted(row_ids, tf.range(nrows + 1), side="left", out_type=tf.int64)


def select(index: tf.Tensor, *tensors: tf.Tensor) -> tuple[tf.Tensor, ...]:
    return tuple(tf.gather(t, index) for t in tensors)


def exclusive_byte_cumsum(cps: tf.Tensor) -> tf.Tensor:
    """UTF-8 byte offset of each code point in their concatenation, plus the total: [K + 1]."""
    byte_len = (1 + tf.cast(cps >= 0x80, tf.int64) + tf.cast(cps >= 0x800, tf.int64)
                + tf.cast(cps >= 0x10000, tf.int64))
    return tf.concat([[0], tf.cumsum(byte_len)], 0)


def piece_chars(char_bytes: tf.Tensor, base: tf.Tensor, byte_starts: tf.RaggedTensor,
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


def mark_words(cp: tf.Tensor, row: tf.Tensor, src: tf.Tensor, classes: tf.Tensor,
           cjk: tf.Tensor) -> dict:
    """Word boundaries of normalized characters: separators (whitespace) and characters that are
    words of their own (punctuation by `classes`, CJK by `cjk` of the source character)."""
    space = tf.not_equal(bits(classes, SPACE), 0)
    alone = tf.not_equal(bits(classes, PUNCT) + cjk, 0)
    boundary = tf.concat([[True], (alone | space)[:-1] | tf.not_equal(row[1:], row[:-1])], 0)
    return {"cp": cp, "row": row, "src": src, "space": space,
            "word_start": ~space & (alone | boundary)}


def long_word_breaks(chars: dict, max_chars: int = MAX_CHARS_PER_WORD
                     ) -> tuple[tf.Tensor, tf.Tensor]:
    """(breaks [K], inside [J]): a running count of word starts and separators, and the
    characters followed by `max_chars` more of the same word (so in a word of over `max_chars`
    characters)."""
    breaks = tf.cumsum(tf.cast(chars["word_start"] | chars["space"], tf.int32))
    inside = tf.where(tf.equal(breaks[max_chars:], breaks[:-max_chars])
                      & ~chars["space"][:-max_chars])[:, 0]  # usually empty
    return breaks, inside


def in_long_words(chars: dict, max_chars: int = MAX_CHARS_PER_WORD) -> tf.Tensor:
    """bool [K]: the character's text holds a word of over `max_chars` characters (at its
    first)."""
    _, inside = long_word_breaks(chars, max_chars)
    return tf.scatter_nd(inside[:, tf.newaxis], tf.ones_like(inside),
                         tf.shape(chars["row"], out_type=tf.int64)) > 0


def words_of(chars: dict, index: tf.Tensor, batch_size: tf.Tensor) -> tuple:
    """The words made of the word characters `index` ([K'] positions among the K).

    Returns:
        (words tf.string [W], their code points ragged [W, (chars)], words per text [B]).
    """
    starts = tf.gather(chars["word_start"], index)
    word_of_char = tf.cumsum(tf.cast(starts, tf.int64)) - 1  # [K']
    num_words = tf.reduce_sum(tf.cast(starts, tf.int64))
    word_chars = tf.RaggedTensor.from_row_splits(tf.gather(chars["cp"], index),
                                                 splits_from_rows(word_of_char, num_words),
                                                 validate=False)
    word_row = tf.boolean_mask(tf.gather(chars["row"], index), starts)  # [W]
    words_per_text = tf.math.unsorted_segment_sum(tf.ones_like(word_row), word_row, batch_size)
    return tf.strings.unicode_encode(word_chars, "UTF-8"), word_chars, words_per_text


def collapse_long_words(chars: dict, placeholder: int, max_chars: int = MAX_CHARS_PER_WORD
                        ) -> dict:
    """Adds `src_end`; a word of more than `max_chars` characters becomes one placeholder character
    (not in the vocab, so WordPiece gives [UNK]) whose source span covers the word; its other
    characters become separators."""
    word_start, space = chars["word_start"], chars["space"]
    breaks, inside = long_word_breaks(chars, max_chars)
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


def canonical_order(cp: tf.Tensor, info: tf.Tensor, first: tf.Tensor,
                     row: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """NFD's canonical ordering: a run of combining characters (ccc > 0) is stably sorted by
    combining class. Per-character decompositions are already ordered, so only runs where marks
    of different characters meet out of order move (rare: sorted as a small subset).

    Returns (cp, info, first) reordered; `first` marks characters that begin a decomposition.
    """
    ccc = tf.cast(bits(tf.bitwise.right_shift(info, CCC_SHIFT), 255), tf.int64)  # [M]
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
