"""BertLayerNorm and tfbert.ops.layer_norm: keras LayerNormalization's results, one _MklLayerNorm
op at inference."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from model_test_utils import op_types

from tfbert.layers import BertLayerNorm
from tfbert.ops import use_forms


def _pair(width: int, seed: int = 0, **kwargs) -> tuple[BertLayerNorm, keras.layers.Layer]:
    """A BertLayerNorm and a stock LayerNormalization with the same random gamma and beta."""
    ours = BertLayerNorm(epsilon=1e-12, **kwargs)
    stock = keras.layers.LayerNormalization(epsilon=1e-12, **kwargs)
    ours.build((None, width))
    stock.build((None, width))
    rng = np.random.default_rng(seed)
    weights = [rng.normal(1.0, 0.3, w.shape).astype("float32") for w in stock.weights]
    ours.set_weights(weights)
    stock.set_weights(weights)
    return ours, stock


def _inputs(shape: tuple, seed: int = 1) -> tf.Tensor:
    # Rows with different means and spreads, as a residual stream has.
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape) * rng.uniform(0.1, 5.0, shape[:-1] + (1,))
    return tf.constant((x + rng.normal(size=shape[:-1] + (1,)) * 3).astype("float32"))


@pytest.mark.parametrize("shape", [(2, 7, 48), (5, 48)])
@pytest.mark.parametrize("training", [False, True])
def test_values_equal_keras_layer_norm(shape, training):
    ours, stock = _pair(shape[-1])
    x = _inputs(shape)
    fn = tf.function(lambda t: ours(t, training=training))
    np.testing.assert_allclose(fn(x), stock(x), rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(ours(x, training=training), stock(x), rtol=1e-5, atol=2e-6)
    # The fused formulation only at inference; training keeps keras's own ops.
    assert ("FusedBatchNormV3" in op_types(fn, x)) is (not training)


def test_epsilon_is_not_raised_to_fused_batch_norms_minimum():
    # tf.nn.fused_batch_norm would lift epsilon to 1.001e-5: a row with variance 4e-7 would
    # come out scaled by 0.2 instead of 1.
    layer = BertLayerNorm(epsilon=1e-12)
    x = np.linspace(-1e-3, 1e-3, 16)[None]
    want = (x - x.mean()) / np.sqrt(x.var() + 1e-12)
    np.testing.assert_allclose(layer(tf.constant(x, tf.float32), training=False), want,
                               rtol=1e-4, atol=1e-4)


def test_inference_gradients_equal_keras():
    ours, stock = _pair(32)
    x = _inputs((3, 4, 32))
    weights = tf.constant(np.random.default_rng(2).normal(size=(3, 4, 32)).astype("float32"))
    grads = []
    for layer, kwargs in ((ours, {"training": False}), (stock, {})):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(layer(x, **kwargs) * weights)
        grads.append(tape.gradient(loss, [x, *layer.trainable_weights]))
    for got, want in zip(*grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kwargs", [{"center": False}, {"scale": False},
                                    {"rms_scaling": True}])
def test_other_configurations_take_keras_path(kwargs):
    ours, stock = _pair(8, **kwargs)
    x = _inputs((4, 8))
    fn = tf.function(lambda t: ours(t, training=False))
    np.testing.assert_allclose(fn(x), stock(x), rtol=1e-5, atol=1e-6)
    assert "FusedBatchNormV3" not in op_types(fn, x)


@pytest.mark.parametrize("name", ["stock", "plain"])
def test_stock_and_plain_forms_trace_keras_ops(name):
    ours, stock = _pair(8)
    x = _inputs((4, 8))
    fn = tf.function(lambda t: ours(t, training=False))
    with use_forms(name):
        ops = op_types(fn, x)
        np.testing.assert_allclose(ours(x), stock(x), rtol=1e-6, atol=1e-6)
    assert "FusedBatchNormV3" not in ops
    assert "FusedBatchNormV3" in op_types(tf.function(lambda t: ours(t, training=False)), x)


def test_config_round_trip():
    layer = BertLayerNorm(epsilon=1e-12, name="LayerNorm")
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(clone) is BertLayerNorm
    assert clone.epsilon == 1e-12 and clone.name == "LayerNorm"


def test_grappler_rewrites_it_into_one_mkl_layer_norm():
    """The reason for the formulation: TF's oneDNN remapper turns it into `_MklLayerNorm`
    (checked on the optimized graph a session actually runs)."""
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )
    from tensorflow.python.util import _pywrap_util_port

    if not _pywrap_util_port.IsMklEnabled():
        pytest.skip("TensorFlow runs without oneDNN here (TF_ENABLE_ONEDNN_OPTS=0 or no x86)")
    ours, stock = _pair(64)
    fn = tf.function(lambda t: ours(t, training=False),
                     input_signature=[tf.TensorSpec([None, 16, 64], tf.float32)])
    frozen = convert_variables_to_constants_v2(fn.get_concrete_function())
    x = _inputs((2, 16, 64))
    with tf.Graph().as_default() as graph:
        tf.graph_util.import_graph_def(frozen.graph.as_graph_def(), name="")
        feed, fetch = frozen.inputs[0].name, frozen.outputs[0].name
        with tf.compat.v1.Session(graph=graph) as session:
            metadata = tf.compat.v1.RunMetadata()
            out = session.run(fetch, {feed: x.numpy()}, run_metadata=metadata,
                              options=tf.compat.v1.RunOptions(output_partition_graphs=True))
    ops = {node.op for g in metadata.partition_graphs for node in g.node}
    assert "_MklLayerNorm" in ops, sorted(ops)
    assert not ops & {"FusedBatchNormV3", "_MklNativeFusedBatchNormV3", "Mean"}, sorted(ops)
    np.testing.assert_allclose(out, stock(x), rtol=1e-4, atol=1e-5)

