"""The answer-span search of extractive QA, in TensorFlow ops: one implementation for training's
decoding (`tfbert.tasks.qa`, called eagerly on numpy logits) and the SavedModel's
(`tfbert.export.saved_model`, inside the serving graph).

It follows Google's run_squad.py `write_predictions`: take the `n_best_size` best start and the
`n_best_size` best end positions of a window (ties: the lower position first) and cross them; a
pair (s, e) is a candidate when s may start an answer, e may end one, and
s <= e < s + max_answer_length. Its score is start_logits[s] + end_logits[e].

Shape legend: B = windows, T = positions, K = min(n_best_size, T).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf


def span_candidates(start_logits: Any, end_logits: Any, start_ok: Any, end_ok: Any,
                    n_best_size: int, max_answer_length: int) -> tuple[Any, Any, Any]:
    """The best start and end positions of each window and which of their pairs are candidates.

    Args:
        start_logits, end_logits: float [B, T] (tensors or numpy arrays, any float dtype).
        start_ok, end_ok: bool [B, T]. Positions that may start / end an answer.
        n_best_size: int. Start and end positions considered per window.
        max_answer_length: int. Longest answer, in positions.

    Returns:
        (starts, ends, ok): int32 [B, K] positions, best logit first; bool [B, K, K], ok[b, i, j]
        when (starts[b, i], ends[b, j]) is a candidate. Reading ok in row-major order gives
        run_squad's candidate order (start rank, then end rank).
    """
    start_logits, end_logits = tf.convert_to_tensor(start_logits), tf.convert_to_tensor(end_logits)
    k = min(n_best_size, start_logits.shape[-1])
    _, starts = tf.math.top_k(start_logits, k=k)  # [B, K]
    _, ends = tf.math.top_k(end_logits, k=k)  # [B, K]
    start_fits = tf.gather(tf.convert_to_tensor(start_ok, tf.bool), starts, batch_dims=1)
    end_fits = tf.gather(tf.convert_to_tensor(end_ok, tf.bool), ends, batch_dims=1)
    length = ends[:, None, :] - starts[:, :, None] + 1  # [B, K, K]
    ok = (start_fits[:, :, None] & end_fits[:, None, :] & (length >= 1)
          & (length <= max_answer_length))
    return starts, ends, ok


def best_span(start_logits: Any, end_logits: Any, start_ok: Any, end_ok: Any,
              n_best_size: int, max_answer_length: int) -> tuple[Any, Any, Any, Any]:
    """The highest-scoring candidate span of each window (`span_candidates`).

    Returns:
        (start, end, score, found): int32 [B] positions (inclusive), float [B] start + end
        logit, bool [B] whether the window has any candidate (else start, end and score are
        meaningless). Equal scores go to the first candidate in run_squad's order.
    """
    starts, ends, ok = span_candidates(start_logits, end_logits, start_ok, end_ok,
                                       n_best_size, max_answer_length)
    k = starts.shape[-1]
    scores = (tf.gather(start_logits, starts, batch_dims=1)[:, :, None]
              + tf.gather(end_logits, ends, batch_dims=1)[:, None, :])  # [B, K, K]
    flat = tf.reshape(tf.where(ok, scores, -np.inf), [-1, k * k])
    best = tf.argmax(flat, axis=-1, output_type=tf.int32)  # [B]
    start = tf.gather(starts, best // k, batch_dims=1)
    end = tf.gather(ends, best % k, batch_dims=1)
    found = tf.reduce_any(tf.reshape(ok, [-1, k * k]), axis=-1)
    return start, end, tf.reduce_max(flat, axis=-1), found
