"""Overlapping windows over word pieces, as graph ops: the export's form of tfbert.data.windows.

A serving signature that takes raw text tokenizes a batch into ragged pieces [B, (P)]; a row
longer than the model's window body is read as several windows, by the same two rules training
uses (tfbert/data/windows.py): a window every `doc_stride` pieces until one reaches the end, and
each piece read from the window where it has the most context. The windows of all rows are
flattened into one batch W for the model; `row` says which input row each window came from.

Shape legend: B = input rows, W = windows of the whole batch, P = pieces of the longest row.

    row, start, length = window_spans(lengths, body, doc_stride)  # [W] each
    pieces = take(ids, row, start, length)                        # ragged [W, (length)]
    best = max_context(row, start, length, lengths)               # [B, P]: window per piece

Only TensorFlow core ops (ragged range/gather, segment reductions), so the functions also run
inside tf.function, tf.data and the TFLite converter's supported set.
"""

from __future__ import annotations

import tensorflow as tf


def window_spans(lengths: tf.Tensor, body: tf.Tensor | int, doc_stride: int
                 ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """The windows of every row, in row order (tfbert.data.windows.window_spans per row).

    Args:
        lengths: int [B]. Pieces in each row.
        body: int [B] or int. Pieces one window holds for each row (>= 0).
        doc_stride: int. Pieces between window starts (>= 1; a stride over the body steps by
            the body, as the Python rule does).

    Returns:
        (row, start, length), int32 [W] each: the input row of each window, its first piece
        and its piece count. A row that fits (an empty one too) has one window.

    Example:
    >>> row, start, length = window_spans(tf.constant([10, 3]), 4, 2)
    >>> row.numpy().tolist(), start.numpy().tolist(), length.numpy().tolist()
    ([0, 0, 0, 0, 1], [0, 2, 4, 6, 0], [4, 4, 4, 4, 3])
    """
    if doc_stride < 1:
        raise ValueError(f"window_spans: doc_stride must be >= 1, got {doc_stride}")
    lengths = tf.cast(lengths, tf.int32)
    body = tf.broadcast_to(tf.cast(body, tf.int32), tf.shape(lengths))
    step = tf.maximum(tf.minimum(body, doc_stride), 1)  # [B]
    # Windows start at 0, step, 2 step, ... until one reaches the end: 1 + ceil((n - body) /
    # step) of them for a row longer than the body.
    over = tf.maximum(lengths - body, 0)
    counts = 1 + (over + step - 1) // step  # [B]
    row = tf.repeat(tf.range(tf.size(lengths), dtype=tf.int32), counts)  # [W]
    index = tf.ragged.range(counts).flat_values  # [W]: 0, 1, ... within each row
    start = index * tf.gather(step, row)
    length = tf.minimum(tf.gather(lengths, row) - start, tf.gather(body, row))
    return row, start, length


def take(values: tf.RaggedTensor, row: tf.Tensor, start: tf.Tensor, length: tf.Tensor
         ) -> tf.RaggedTensor:
    """The pieces of each window: values[row[w], start[w] : start[w] + length[w]].

    Args:
        values: RaggedTensor [B, (P)] (ids, or character offsets of the pieces).
        row, start, length: int [W], from `window_spans`.

    Returns:
        RaggedTensor [W, (length)] of values' dtype.

    Example:
    >>> values = tf.ragged.constant([[1, 2, 3, 4, 5], [7]])
    >>> take(values, *window_spans(values.row_lengths(), 3, 2)).to_list()
    [[1, 2, 3], [3, 4, 5], [7]]
    """
    first = tf.gather(tf.cast(values.row_starts(), tf.int32), row) + start  # [W]
    positions = tf.ragged.range(first, first + length)  # [W, (length)] into flat_values
    return tf.gather(values.flat_values, positions)


def max_context(row: tf.Tensor, start: tf.Tensor, length: tf.Tensor, lengths: tf.Tensor
                ) -> tf.Tensor:
    """For every piece of every row, the window where it has the most context.

    The score of piece p in a window [s, e] is min(p - s, e - p) + 0.01 * window length
    (computed exactly, as integers scaled by 100); the highest wins, ties to the earlier
    window: tfbert.data.windows.is_max_context.

    Scores are computed only for the (window, piece) pairs where the window holds the piece,
    sum(length) of them (each piece lies in at most ceil(body / stride) windows), so time and
    memory grow linearly with the text, not with windows x pieces.

    Args:
        row, start, length: int [W], from `window_spans`.
        lengths: int [B]. Pieces in each row.

    Returns:
        int32 [B, P] (P = the longest row's pieces): the window index (into W) of each piece,
        -1 past the row's end.

    Example:
    >>> lengths = tf.constant([10])
    >>> max_context(*window_spans(lengths, 4, 2), lengths).numpy().tolist()
    [[0, 0, 0, 1, 1, 2, 2, 3, 3, 3]]
    """
    lengths = tf.cast(lengths, tf.int64)
    row, start, length = (tf.cast(x, tf.int64) for x in (row, start, length))
    row_first = tf.cumsum(lengths, exclusive=True)  # [B]: the row's first piece, all rows flat
    num_pieces = tf.reduce_sum(lengths)
    pairs = tf.ragged.range(start, start + length)  # [W, (length)]: the pieces of each window
    window = pairs.value_rowids()  # [M]: (window, piece) pairs, M = sum(length)
    p = pairs.flat_values  # [M]
    s, n = tf.gather(start, window), tf.gather(length, window)
    score = 100 * tf.minimum(p - s, s + n - 1 - p) + n  # [M]
    piece = tf.gather(row_first, tf.gather(row, window)) + p  # [M]: index into all pieces
    best = tf.math.unsorted_segment_max(score, piece, num_pieces)  # [N]
    none = tf.cast(tf.size(row), tf.int64)
    winner = tf.where(tf.equal(score, tf.gather(best, piece)), window, none)  # [M]
    first = tf.math.unsorted_segment_min(winner, piece, num_pieces)  # [N], int64 max if none
    first = tf.where(first < none, first, -1)
    return tf.cast(tf.RaggedTensor.from_row_lengths(first, lengths, validate=False)
                   .to_tensor(default_value=-1), tf.int32)  # [B, P]
