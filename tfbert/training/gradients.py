"""Gradients before the update: sparse rows summed or made dense, the squares a global norm
counts, and the sum over tf.distribute replicas.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf


def dense_gradients(grads: Sequence[Any]) -> list[Any]:
    """`grads` with each `tf.IndexedSlices` made a dense tensor (rows of the same index
    summed), so a global norm over them is the true one; None and dense tensors pass through.

    Keras's and TensorFlow's global norms count an IndexedSlices' rows one by one: the
    token-type table's gradient (one row per position over 2 ids) reads smaller than it is.
    """
    return [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]


def summed_rows(grads: Sequence[Any]) -> list[Any]:
    """`grads` with the rows of each `tf.IndexedSlices` that share an index summed into one
    (still sparse: [unique ids, ...] rows, not the whole table), so a global norm that counts
    rows one by one is the true one; None and dense tensors pass through.

    Keras's and TensorFlow's global norms count an IndexedSlices' rows one by one: the
    token-type table's gradient (one row per position over 2 ids) reads smaller than it is.
    Summing the rows costs a pass over the batch's rows; making the gradient dense
    (`dense_gradients`) would cost passes over the whole word table in the clip and slows a
    fine-tuning step (docs/performance.md, "Optimizers and schedules").
    """
    out = []
    for g in grads:
        if isinstance(g, tf.IndexedSlices):
            ids, position = tf.unique(g.indices)
            g = tf.IndexedSlices(tf.math.unsorted_segment_sum(g.values, position,
                                                              tf.shape(ids)[0]),
                                 ids, g.dense_shape)
        out.append(g)
    return out


def clip_by_global_norm(grads: Sequence[Any], clip_norm: float, norm: Any = None) -> list[Any]:
    """`grads` times clip_norm / max(norm, clip_norm), the formula of Keras's and TensorFlow's
    `clip_by_global_norm` (NaN where the norm is not finite), each `tf.IndexedSlices` staying
    sparse. `norm` defaults to the grads' own, for which an IndexedSlices' rows must be unique
    (`summed_rows`), so the squares of its values are those of its dense form; a caller that
    counts the norm another way passes it.

    Keras's clip makes every sparse gradient dense (once for the norm, once for the product):
    with the word table's gradient that is passes over the whole table at every step, the
    largest part of a small model's optimizer step (docs/performance.md, "Optimizers and
    schedules").
    """
    norm = tf.sqrt(row_squares(grads)) if norm is None else norm
    clip = tf.constant(clip_norm, "float32")
    scale = clip * tf.minimum(1.0 / norm, 1.0 / clip) + (norm - norm)

    def scaled(g: Any) -> Any:
        if isinstance(g, tf.IndexedSlices):
            return tf.IndexedSlices(g.values * tf.cast(scale, g.values.dtype), g.indices,
                                    g.dense_shape)
        return g * tf.cast(scale, g.dtype)

    return [None if g is None else scaled(g) for g in grads]


def row_squares(grads: Sequence[Any]) -> Any:
    """The sum of squares over `grads` as `tf.clip_by_global_norm` counts it: each row of an
    IndexedSlices on its own (float32)."""
    total = tf.constant(0.0)
    for g in grads:
        if g is None:
            continue
        values = g.values if isinstance(g, tf.IndexedSlices) else g
        total += 2.0 * tf.cast(tf.nn.l2_loss(values), "float32")  # as tf.linalg.global_norm
    return total


def all_reduce_gradients(grads: Sequence[Any]) -> list[Any]:
    """Sums `grads` over the replicas of the current tf.distribute strategy (None kept as None).

    A no-op outside a multi-replica replica context, so it costs nothing on one device. Keras
    scales each replica's loss by 1/replicas, so the sum is the global mean gradient.
    """
    grads = list(grads)
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return grads
    present = [i for i, g in enumerate(grads) if g is not None]
    reduced = context.all_reduce(tf.distribute.ReduceOp.SUM, [grads[i] for i in present])
    for i, g in zip(present, reduced, strict=True):
        grads[i] = g
    return grads
