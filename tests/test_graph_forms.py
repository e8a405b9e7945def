"""The TensorFlow graph forms (tfbert/layers/graph_forms.py): the integer-bitcast axis swap and
the heads-first attention core give keras's values and gradients, and stock_ops() turns them
off."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from model_test_utils import op_types

from tfbert.layers import BertSelfAttention
from tfbert.layers.graph_forms import stock_ops, swap_axes_1_2


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64", "int32"])
def test_swap_values_every_dtype(dtype):
    x = np.random.default_rng(0).normal(size=(2, 5, 3, 4)) * 100
    x = tf.cast(tf.constant(x), dtype)
    expected = np.transpose(x.numpy(), (0, 2, 1, 3))
    np.testing.assert_array_equal(swap_axes_1_2(x).numpy(), expected)
    np.testing.assert_array_equal(tf.function(swap_axes_1_2)(x).numpy(), expected)
    assert swap_axes_1_2(x).dtype == x.dtype


def test_swap_gradient_is_the_swapped_upstream_gradient():
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=(2, 5, 3, 4)).astype("float32"))
    weight = tf.constant(rng.normal(size=(2, 3, 5, 4)).astype("float32"))
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(swap_axes_1_2(x) * weight)
    np.testing.assert_array_equal(tape.gradient(loss, x).numpy(),
                                  np.transpose(weight.numpy(), (0, 2, 1, 3)))


def test_swap_graph_form_and_stock_ops():
    fn = tf.function(swap_axes_1_2)
    x = tf.zeros((1, 4, 2, 3))
    # The float transpose is replaced by one on int32 bits (TensorFlow's kernel, not oneDNN's).
    ops = {op.type: op for op in fn.get_concrete_function(x).graph.get_operations()}
    assert "Bitcast" in ops and ops["Transpose"].inputs[0].dtype == tf.int32
    with stock_ops():
        stock = tf.function(swap_axes_1_2).get_concrete_function(x).graph.get_operations()
    assert "Bitcast" not in {op.type for op in stock}
    assert [op.inputs[0].dtype for op in stock if op.type == "Transpose"] == [tf.float32]


def _attention(dtype_policy: str = "float32", seed: int = 0) -> BertSelfAttention:
    layer = BertSelfAttention(num_heads=4, key_dim=8, dropout=0.0, dtype=dtype_policy)
    layer.build((None, None, 32), (None, None, 32))
    rng = np.random.default_rng(seed)
    layer.set_weights([rng.normal(0, 0.3, w.shape).astype("float32") for w in layer.weights])
    return layer


def _run(layer, x, mask, cross: bool, stock: bool):
    """Output and gradients (input, then every variable) of a fixed linear loss."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        query = x[:, :2] if cross else x
        # Asking for the probabilities runs keras's own call and _compute_attention throughout.
        out = (layer(query, x, attention_mask=mask, return_attention_scores=True)[0] if stock
               else layer(query, x, attention_mask=mask))
        out = tf.cast(out, "float32")
        loss = tf.reduce_sum(out * tf.linspace(-1.0, 1.0, 32))
    return [out, *tape.gradient(loss, [x, *layer.trainable_variables])]


@pytest.mark.parametrize("cross", [False, True])
def test_attention_core_equals_keras_forward_and_backward(cross):
    """tfbert's heads-first core against keras MultiHeadAttention's own path (same layer),
    with a padding mask; self-attention and [CLS]-style cross rows (the last block's query)."""
    layer = _attention()
    x = tf.constant(np.random.default_rng(2).normal(size=(3, 9, 32)).astype("float32"))
    mask = tf.constant(np.arange(9)[None] < np.array([9, 6, 2])[:, None])[:, None, :]
    ours, stock = (_run(layer, x, mask, cross, stock) for stock in (False, True))
    assert tuple(ours[0].shape) == (3, 2 if cross else 9, 32)
    for mine, theirs in zip(ours, stock, strict=True):
        np.testing.assert_allclose(mine, theirs, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("cross", [False, True])
def test_attention_core_bfloat16_error_matches_keras(cross):
    """Under mixed_bfloat16 both paths round differently; each one's error against the float32
    result (same weights) must be of the same size, output and every gradient."""
    x = tf.constant(np.random.default_rng(2).normal(size=(3, 9, 32)).astype("float32"))
    mask = tf.constant(np.arange(9)[None] < np.array([9, 6, 2])[:, None])[:, None, :]
    exact = _run(_attention("float32"), x, mask, cross, stock=False)
    layer = _attention("mixed_bfloat16")
    ours, stock = (_run(layer, x, mask, cross, stock) for stock in (False, True))
    for mine, theirs, truth in zip(ours, stock, exact, strict=True):
        scale = float(np.abs(truth).max())
        my_error = float(np.abs(np.asarray(mine) - truth).max())
        stock_error = float(np.abs(np.asarray(theirs) - truth).max())
        assert my_error <= 2 * stock_error + 1e-3 * scale, (my_error, stock_error, scale)
        if scale > 1e-3:  # (the key bias's gradient is zero in exact arithmetic)
            assert my_error < 0.05 * scale, (my_error, scale)


def test_attention_core_graph_has_no_float_transposes():
    layer = _attention()
    fn = tf.function(lambda x: layer(x, x))
    x = tf.zeros((1, 6, 32))
    graph = fn.get_concrete_function(x).graph.get_operations()
    assert [op for op in graph if op.type == "Transpose" and op.inputs[0].dtype == tf.float32] \
        == []
    assert sum(op.type == "Bitcast" for op in graph) == 8  # 3 swaps in, 1 out, 2 bitcasts each
    with stock_ops():
        assert "Bitcast" not in op_types(tf.function(lambda x: layer(x, x)), x)


def test_attention_over_other_axes_keeps_keras_einsums():
    """A BertSelfAttention built with attention_axes over two axes (rank-4 inputs) is not in
    the heads-first layout: it runs keras's own attention math (softmax over both axes)."""
    layer = BertSelfAttention(num_heads=2, key_dim=4, attention_axes=(1, 2))
    x = tf.constant(np.random.default_rng(3).normal(size=(2, 3, 5, 8)).astype("float32"))
    out = layer(x, x)
    stock = layer(x, x, return_attention_scores=True)[0]
    np.testing.assert_allclose(out, stock, atol=1e-5)
    assert "Bitcast" not in op_types(tf.function(lambda x: layer(x, x)), x)
