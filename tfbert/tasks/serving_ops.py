"""Graph pieces the serving signatures share (tfbert/export/saved_model.py and the serving
heads, tfbert/tasks/*_serving.py): trimming the padding, ragged to dense, character substrings.
"""

from __future__ import annotations

import tensorflow as tf

TRIM_MULTIPLE = 16  # trimmed lengths are multiples of this: few distinct shapes to compile


def trimmed_length(mask: tf.Tensor, t: int) -> tf.Tensor:
    """One past the batch's last attended position (mask != 0), rounded up to a multiple of
    TRIM_MULTIPLE, at least one multiple and at most T: int32 scalar."""
    attended = tf.cast(tf.not_equal(mask, 0), tf.int32)  # [B, T]
    last = tf.reduce_max(attended * tf.range(1, t + 1)[tf.newaxis, :])  # int32 min if B = 0
    rounded = tf.maximum(last + TRIM_MULTIPLE - 1, TRIM_MULTIPLE) // TRIM_MULTIPLE
    return tf.minimum(rounded * TRIM_MULTIPLE, t)


def pad_positions(x: tf.Tensor, t: int) -> tf.Tensor:
    """[B, L, ...] -> [B, T, ...]: zeros at the positions trim_padding cut off."""
    paddings = [[0, 0], [0, t - tf.shape(x)[1]]] + [[0, 0]] * (x.shape.rank - 2)
    y = tf.pad(x, paddings)
    y.set_shape([x.shape[0], t, *x.shape[2:]])
    return y


def valid_utf8(text: tf.Tensor) -> tf.Tensor:
    """Invalid UTF-8 byte sequences become U+FFFD (as the tokenizer decodes them)."""
    return tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace",
                                        replacement_char=0xFFFD)


def segment_lengths(inputs: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
    """Pieces of segment a and b in `[CLS] a [SEP] (b [SEP])` packed inputs: int32 [B] each."""
    mask = tf.cast(inputs["input_mask"], tf.int32)
    seg_b = tf.cast(tf.equal(inputs["segment_ids"], 1), tf.int32) * mask
    n_b = tf.reduce_sum(seg_b, axis=1)
    n_a = tf.reduce_sum(mask, axis=1) - n_b
    return tf.maximum(n_a - 2, 0), tf.maximum(n_b - 1, 0)


def take_positions(values: tf.RaggedTensor, index: tf.Tensor, width: int) -> tf.Tensor:
    """values[b, index[b, j]] for ragged values [B, (P)] and index [B, J] (-1 past a row)."""
    dense = tf.cast(values.to_tensor(default_value=-1, shape=[None, width]), tf.int32)
    return tf.gather(dense, index, batch_dims=1)


def dense(values: tf.RaggedTensor, default: int) -> tf.Tensor:
    """A ragged int [B, (P)] as int32 [B, P] (P = the longest row), `default` past each row."""
    return tf.cast(values.to_tensor(default_value=default), tf.int32)


def ragged_head(values: tf.RaggedTensor, keep: tf.Tensor) -> tf.RaggedTensor:
    """The first keep[b] items of each row of a ragged [B, (P)] tensor."""
    starts = values.row_starts()
    keep = tf.minimum(tf.cast(keep, starts.dtype), values.row_lengths())
    index = tf.ragged.range(starts, starts + keep).flat_values
    return tf.RaggedTensor.from_row_lengths(tf.gather(values.flat_values, index), keep,
                                            validate=False)


def substr(text: tf.Tensor, start: tf.Tensor, end: tf.Tensor) -> tf.Tensor:
    """text[b][start[b, ...]:end[b, ...]] in Unicode characters; "" where start < 0.

    The texts (valid UTF-8) are decoded to code points once and each substring encoded from
    its own: time and memory grow with the texts and the substrings (tf.strings.substr over
    the text broadcast to start's shape copies the whole text for every substring).
    """
    chars = tf.strings.unicode_decode(text, "UTF-8")  # [B, (N)] code points
    shape = tf.shape(start)
    rank = start.shape.rank
    row = tf.reshape(tf.range(tf.shape(text)[0]), tf.concat([[-1], tf.ones([rank - 1],
                                                                             tf.int32)], 0))
    row = tf.reshape(tf.broadcast_to(row, shape), [-1])  # [K]: the text of each substring
    size = tf.cast(tf.gather(chars.row_lengths(), row), tf.int32)
    first = tf.clip_by_value(tf.reshape(start, [-1]), 0, size)
    last = tf.where(tf.reshape(start, [-1]) >= 0,
                    tf.clip_by_value(tf.reshape(end, [-1]), first, size), first)
    offset = tf.cast(tf.gather(chars.row_starts(), row), tf.int32)
    points = tf.gather(chars.flat_values, tf.ragged.range(offset + first, offset + last))
    return tf.reshape(tf.strings.unicode_encode(points, "UTF-8"), shape)
