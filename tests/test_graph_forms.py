"""The TensorFlow forms of tfbert.ops: the integer-bitcast axis swap, the heads-first attention
core and the 2-D projections give the plain forms' values and gradients (use_forms("plain")),
and use_forms("stock") turns the swap and core off; the switch itself."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from model_test_utils import op_types

from tfbert.layers import BertSelfAttention, BertTransformerLayer
from tfbert.ops import FORM_SETS, default_forms, forms, has_gpu, swap_axes_1_2, use_forms


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


def test_swap_graph_form_and_stock_forms():
    fn = tf.function(swap_axes_1_2)
    x = tf.zeros((1, 4, 2, 3))
    # The float transpose is replaced by one on int32 bits (TensorFlow's kernel, not oneDNN's).
    ops = {op.type: op for op in fn.get_concrete_function(x).graph.get_operations()}
    assert "Bitcast" in ops and ops["Transpose"].inputs[0].dtype == tf.int32
    with use_forms("stock"):
        stock = tf.function(swap_axes_1_2).get_concrete_function(x).graph.get_operations()
    assert "Bitcast" not in {op.type for op in stock}
    assert [op.inputs[0].dtype for op in stock if op.type == "Transpose"] == [tf.float32]


def _attention(dtype_policy: str = "float32", seed: int = 0) -> BertSelfAttention:
    layer = BertSelfAttention(num_heads=4, key_dim=8, dropout=0.0, dtype=dtype_policy)
    layer.build((None, None, 32), (None, None, 32))
    rng = np.random.default_rng(seed)
    layer.set_weights([rng.normal(0, 0.3, w.shape).astype("float32") for w in layer.weights])
    return layer


def _run(layer, x, mask, cross: bool, plain: bool):
    """Output and gradients (input, then every variable) of a fixed linear loss; plain=True:
    under the plain forms (keras.ops einsums and the EinsumDense layers' own calls)."""
    with use_forms("plain" if plain else forms().name), tf.GradientTape() as tape:
        tape.watch(x)
        query = x[:, :2] if cross else x
        out = tf.cast(layer(query, x, attention_mask=mask), "float32")
        loss = tf.reduce_sum(out * tf.linspace(-1.0, 1.0, 32))
    return [out, *tape.gradient(loss, [x, *layer.trainable_variables])]


@pytest.mark.parametrize("cross", [False, True])
def test_attention_core_equals_plain_forward_and_backward(cross):
    """tfbert's heads-first core and 2-D projections against the plain forms (same layer),
    with a padding mask; self-attention and [CLS]-style cross rows (the last block's query)."""
    layer = _attention()
    x = tf.constant(np.random.default_rng(2).normal(size=(3, 9, 32)).astype("float32"))
    mask = tf.constant(np.arange(9)[None] < np.array([9, 6, 2])[:, None])[:, None, :]
    ours, stock = (_run(layer, x, mask, cross, plain) for plain in (False, True))
    assert tuple(ours[0].shape) == (3, 2 if cross else 9, 32)
    for mine, theirs in zip(ours, stock, strict=True):
        np.testing.assert_allclose(mine, theirs, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("cross", [False, True])
def test_attention_core_bfloat16_error_matches_plain(cross):
    """Under mixed_bfloat16 both paths round differently; each one's error against the float32
    result (same weights) must be of the same size, output and every gradient."""
    x = tf.constant(np.random.default_rng(2).normal(size=(3, 9, 32)).astype("float32"))
    mask = tf.constant(np.arange(9)[None] < np.array([9, 6, 2])[:, None])[:, None, :]
    exact = _run(_attention("float32"), x, mask, cross, plain=False)
    layer = _attention("mixed_bfloat16")
    ours, stock = (_run(layer, x, mask, cross, plain) for plain in (False, True))
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
    with use_forms("stock"):
        assert "Bitcast" not in op_types(tf.function(lambda x: layer(x, x)), x)
    # The projections: four 2-D MatMuls; the plain forms' are EinsumDense's batch matmuls.
    assert sum(op.type == "MatMul" for op in graph) == 4
    with use_forms("plain"):
        plain = op_types(tf.function(lambda x: layer(x, x)), x)
    assert "Bitcast" not in plain and "MatMul" not in plain


def test_returned_probabilities_take_the_same_forms():
    """With the probabilities returned the output is the same, and the probabilities equal
    the plain forms' (rows sum to 1, masked keys exactly 0)."""
    layer = _attention()
    x = tf.constant(np.random.default_rng(4).normal(size=(3, 9, 32)).astype("float32"))
    mask = tf.constant(np.arange(9)[None] < np.array([9, 6, 2])[:, None])[:, None, :]
    out, probs = layer(x, x, attention_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(out, layer(x, x, attention_mask=mask), atol=1e-6)
    with use_forms("plain"):
        plain_out, plain_probs = layer(x, x, attention_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(out, plain_out, atol=2e-5)
    np.testing.assert_allclose(probs, plain_probs, atol=1e-6)
    assert probs.dtype == tf.float32 and tuple(probs.shape) == (3, 4, 9, 9)
    np.testing.assert_allclose(np.asarray(probs).sum(-1), 1.0, atol=1e-6)
    assert np.all(np.asarray(probs)[2, :, :, 2:] == 0.0)


@pytest.mark.parametrize("training", [False, True])
def test_block_forms_equal_plain_forward_and_backward(training):
    """A whole block (2-D feed-forward with BiasAdd, fused LayerNorm at inference, the attention
    forms) against the plain forms: output and every gradient (dropout off)."""
    block = BertTransformerLayer(hidden_size=32, num_attention_heads=4, intermediate_size=64,
                                 hidden_dropout=0.0, attention_dropout=0.0)
    block.build((None, None, 32))
    rng = np.random.default_rng(5)
    block.set_weights([rng.normal(0, 0.3, w.shape).astype("float32") for w in block.weights])
    x = tf.constant(rng.normal(size=(2, 7, 32)).astype("float32"))
    mask = tf.constant(np.arange(7)[None] < np.array([7, 4])[:, None])[:, None, :]
    results = []
    for name in (forms().name, "plain"):
        with use_forms(name), tf.GradientTape() as tape:
            tape.watch(x)
            out = block(x, attention_mask=mask, training=training)
            loss = tf.reduce_sum(out * tf.linspace(-1.0, 1.0, 32))
        results.append([out, *tape.gradient(loss, [x, *block.trainable_variables])])
    for mine, plain in zip(*results, strict=True):
        np.testing.assert_allclose(mine, plain, atol=2e-5, rtol=1e-5)
    graph = tf.function(lambda x: block(x, attention_mask=mask, training=False)
                        ).get_concrete_function(x).graph.get_operations()
    count = lambda kind: sum(op.type == kind for op in graph)
    # Q, K, V, attention output, intermediate, output: 2-D MatMul + BiasAdd each
    assert count("MatMul") == count("BiasAdd") == 6 and count("BatchMatMulV2") == 2


def test_the_switch():
    """The default set follows backend and device; use_forms nests and restores; unknown names
    say what exists."""
    assert forms() == FORM_SETS["tensorflow_gpu" if has_gpu() else "tensorflow_cpu"]
    assert forms().fused_layer_norm is not has_gpu()
    with use_forms("stock"):
        assert forms() == FORM_SETS["stock"] and not forms().heads_first
        with use_forms("plain"):
            assert not forms().tensorflow
        assert forms().name == "stock"
    assert forms() == default_forms()
    with pytest.raises(ValueError, match="unknown form set 'fast'"), use_forms("fast"):
        pass


@pytest.mark.slow  # (a fresh process importing JAX + Keras: run before a GPU benchmark)
def test_plain_forms_run_under_jax_without_tensorflow(tmp_path):
    """Under Keras's JAX backend, with TensorFlow unimportable, the model runs its plain forms
    (keras.ops only) and the TensorFlow sets are refused."""
    pytest.importorskip("jax")
    blocked = tmp_path / "tensorflow"
    blocked.mkdir()
    (blocked / "__init__.py").write_text("raise ImportError('TensorFlow is blocked here')\n")
    script = (
        "import numpy as np, pytest\n"
        "from tfbert.config import BertConfig\n"
        "from tfbert.models.encoder import BertEncoder\n"
        "from tfbert.ops import forms, use_forms\n"
        "assert forms().name == 'plain'\n"
        "config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,\n"
        "                    num_attention_heads=2, intermediate_size=32)\n"
        "ids = np.ones((2, 8), 'int32')\n"
        "out = BertEncoder(config, output_attention_probs=True)(\n"
        "    {'input_ids': ids, 'input_mask': ids, 'segment_ids': ids * 0}, training=True)\n"
        "assert out['sequence_output'].shape == (2, 8, 16)\n"
        "assert np.allclose(np.asarray(out['attention_probs'][0]).sum(-1), 1, atol=1e-5)\n"
        "with pytest.raises(ValueError, match='needs the TensorFlow backend'):\n"
        "    with use_forms('stock'):\n"
        "        pass\n")
    env = {**os.environ, "KERAS_BACKEND": "jax",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.path.dirname(os.path.dirname(
               os.path.abspath(__file__)))])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
