"""The window rules in the graph (tfbert/tasks/serving_windows.py) equal the Python rules training
uses (tfbert/data/windows.py), on every row length, body and stride of a grid."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import tensorflow as tf

from tfbert.data import windows as py_windows
from tfbert.tasks import serving_windows as windows


def _python(lengths, bodies, stride):
    rows, spans = [], []
    for b, (n, body) in enumerate(zip(lengths, bodies, strict=True)):
        for span in py_windows.window_spans(n, body, stride):
            rows.append(b)
            spans.append(span)
    best = np.full((len(lengths), max(lengths, default=0)), -1)
    offset = 0
    for b, (n, body) in enumerate(zip(lengths, bodies, strict=True)):
        row_spans = py_windows.window_spans(n, body, stride)
        for position in range(n):
            chosen = [i for i in range(len(row_spans))
                      if py_windows.is_max_context(row_spans, i, position)]
            assert len(chosen) == 1
            best[b, position] = offset + chosen[0]
        offset += len(row_spans)
    return rows, spans, best


@pytest.mark.parametrize("stride", [1, 2, 3, 5, 8])
def test_graph_windows_equal_the_python_rule(stride):
    lengths = [0, 1, 3, 4, 5, 9, 10, 17, 31]
    for body in (1, 4, 6):
        bodies = [body] * len(lengths)
        row, start, length = windows.window_spans(tf.constant(lengths), body, stride)
        rows, spans, best = _python(lengths, bodies, stride)
        assert row.numpy().tolist() == rows
        assert list(zip(start.numpy().tolist(), length.numpy().tolist(), strict=True)) == spans
        got = windows.max_context(row, start, length, tf.constant(lengths)).numpy()
        np.testing.assert_array_equal(got, best)


def test_bodies_per_row_and_take():
    # Rows with their own body (a pair's second segment after a first of varying length).
    lengths, bodies = [7, 12, 2], [3, 5, 4]
    row, start, length = windows.window_spans(tf.constant(lengths), tf.constant(bodies), 2)
    rows, spans, best = _python(lengths, bodies, 2)
    assert row.numpy().tolist() == rows
    assert list(zip(start.numpy().tolist(), length.numpy().tolist(), strict=True)) == spans
    np.testing.assert_array_equal(
        windows.max_context(row, start, length, tf.constant(lengths)).numpy(), best)
    values = tf.ragged.constant([list(range(100, 100 + n)) for n in lengths])
    pieces = windows.take(values, row, start, length).to_list()
    assert pieces == [list(range(100 + s, 100 + s + n)) if r == 0 else
                      [values[r].numpy().tolist()[i] for i in range(s, s + n)]
                      for r, (s, n) in zip(rows, spans, strict=True)]


def test_in_a_tf_function_with_unknown_batch():
    fn = tf.function(lambda n: windows.max_context(*windows.window_spans(n, 4, 2), n),
                     input_signature=[tf.TensorSpec([None], tf.int32)])
    for lengths in itertools.islice(itertools.product(range(0, 12, 3), repeat=2), 8):
        _, _, best = _python(list(lengths), [4, 4], 2)
        np.testing.assert_array_equal(fn(tf.constant(lengths, tf.int32)).numpy(), best)
