"""tfbert/export/streams.py: the stream-parallel inference form of BertTransformerLayer equals
the layer (every mask and query form, 1-4 streams, float32 and mixed bfloat16), its graph
holds S independent matmul chains that read only the cut weights, training is untouched, and
bad settings say what is wrong. (Exports with cpu_streams: tests/test_export.py.)"""

from __future__ import annotations

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfbert.export.streams import StreamedBlock, split_streams, streamed
from tfbert.layers import BertTransformerLayer

B, T, H, N, INTER = 2, 12, 32, 4, 64


def block(seed: int = 0, dtype=None) -> BertTransformerLayer:
    """A built block with O(1) random weights and biases (init range 0.2, biases random too, so a
    bias applied twice or not at all shows)."""
    keras.utils.set_random_seed(seed)
    layer = BertTransformerLayer(hidden_size=H, num_attention_heads=N, intermediate_size=INTER,
                                 hidden_dropout=0.0, attention_dropout=0.0,
                                 initializer_range=0.2, dtype=dtype)
    layer.build((None, None, H))
    rng = np.random.default_rng(seed)
    for v in layer.weights:
        if "bias" in v.path or "beta" in v.path:
            v.assign(rng.normal(scale=0.2, size=v.shape).astype("float32"))
    return layer


def inputs(seed: int = 1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B, T, H)).astype("float32")
    lengths = np.array([T, 5])
    padding = (np.arange(T)[None] < lengths[:, None])[:, None, :]  # [B, 1, T]
    full = np.tril(np.ones((T, T), bool))[None].repeat(B, 0)  # [B, T, T] (causal, any pattern)
    return x, padding, full


def op_counts(graph) -> collections.Counter:
    return collections.Counter(op.type for op in graph.get_operations())


CASES = ("no mask", "padding mask", "full mask", "query positions")


def run(layer, case: str, x, padding, full):
    if case == "no mask":
        return layer(x, training=False)
    if case == "padding mask":
        return layer(x, attention_mask=padding, training=False)
    if case == "full mask":
        return layer(x, attention_mask=full, training=False)
    positions = np.array([[0, 3], [0, 4]], "int32")  # [CLS] and one row each
    return layer(x, attention_mask=padding, training=False, query_positions=positions)


@pytest.mark.parametrize("streams", [1, 2, pytest.param(4, marks=pytest.mark.slow)])
@pytest.mark.parametrize("case", CASES)
def test_streamed_block_equals_the_layer(streams, case):
    layer = block()
    x, padding, full = inputs()
    want = run(layer, case, x, padding, full).numpy()
    split = StreamedBlock(layer, streams)
    with streamed([split]):
        eager = run(layer, case, x, padding, full).numpy()
        traced = tf.function(lambda: run(layer, case, x, padding, full))().numpy()
    assert eager.shape == want.shape == (B, 2 if case == "query positions" else T, H)
    np.testing.assert_allclose(eager, want, atol=1e-5)
    np.testing.assert_allclose(traced, want, atol=1e-5)
    assert np.abs(want).mean() > 0.3  # O(1) outputs: the tolerance is tight


def test_streamed_block_under_mixed_bfloat16():
    """Under mixed_bfloat16 the streamed form rounds as the layer does (matmuls in bfloat16,
    softmax, residual and LayerNorms in float32): its error against the float32 layer is of the
    layer's own size."""
    x, padding, _ = inputs()
    exact = block(dtype="float32")(x, attention_mask=padding, training=False).numpy()
    mixed = block(dtype="mixed_bfloat16")
    plain = mixed(x, attention_mask=padding, training=False)
    with streamed([StreamedBlock(mixed, 2)]):
        cut = mixed(x, attention_mask=padding, training=False)
    assert cut.dtype == plain.dtype == tf.float32
    plain_error = np.abs(plain.numpy() - exact).max()
    cut_error = np.abs(cut.numpy() - exact).max()
    assert 1e-4 < plain_error < 0.1
    assert cut_error < 2 * plain_error


def test_graph_has_independent_streams_on_the_cut_weights():
    layer = block()
    x, padding, _ = inputs()
    split = StreamedBlock(layer, 2)
    fn = tf.function(lambda x: layer(x, attention_mask=padding, training=False))
    with streamed([split]):
        graph = fn.get_concrete_function(tf.TensorSpec([None, None, H])).graph
    ops = op_counts(graph)
    # per stream: Q, K, V, attention output, intermediate, output; plus scores and context
    assert ops["MatMul"] == 2 * 6 and ops["BatchMatMulV2"] == 2 * 2
    captured = {id(external) for external, _ in graph.captures}
    handles = {id(v.handle) for v in split.variables}
    assert handles <= captured
    replaced = {id(v.value.handle) for v in split.replaced}
    assert not replaced & captured  # the layer's own kernels are not read
    assert len(split.replaced) == 10 and len(split.variables) == 20
    assert sum(np.prod(v.shape) for v in split.variables) == sum(
        np.prod(v.shape) for v in split.replaced)  # the same weights, cut


def test_training_and_attention_probs_keep_the_plain_form():
    layer = block()
    x, padding, _ = inputs()
    split = StreamedBlock(layer, 2)
    with streamed([split]), tf.GradientTape() as tape:
        y = layer(x, attention_mask=padding, training=True)
        loss = tf.reduce_sum(y * y)
    grads = tape.gradient(loss, [v.value for v in split.replaced] + split.variables)
    assert all(g is not None for g in grads[:len(split.replaced)])  # the layer's kernels train
    assert all(g is None for g in grads[len(split.replaced):])  # the cut copies are not used
    np.testing.assert_allclose(y, layer(x, attention_mask=padding, training=True), atol=1e-6)
    with streamed([split]):
        out, probs = layer(x, attention_mask=padding, training=False,
                           return_attention_probs=True)
    assert tuple(probs.shape) == (B, N, T, T)


def test_only_the_named_layers_stream():
    first, second = block(0), block(1)
    x, _, _ = inputs()
    with streamed([StreamedBlock(first, 2)]):
        graph = tf.function(lambda x: second(first(x, training=False), training=False)
                            ).get_concrete_function(tf.TensorSpec([None, None, H])).graph
    # first: 12 stream matmuls; second (not streamed): Q, K, V, output, intermediate, output
    assert op_counts(graph)["MatMul"] == 12 + 6


def test_the_layer_is_plain_again_after_the_block():
    """streamed() binds each StreamedBlock as its layer's call only inside the `with` block."""
    layer = block()
    x, padding, _ = inputs()
    with streamed([StreamedBlock(layer, 2)]):
        assert "call" in vars(layer)
    assert "call" not in vars(layer)
    graph = tf.function(lambda x: layer(x, training=False)).get_concrete_function(
        tf.TensorSpec([None, None, H])).graph
    assert op_counts(graph)["MatMul"] == 6  # Q, K, V, output, intermediate, output


def test_split_streams_finds_every_block():
    import tfbert

    config = tfbert.BertConfig(vocab_size=50, hidden_size=H, num_hidden_layers=3,
                               num_attention_heads=N, intermediate_size=INTER)
    model = tfbert.BertClassifier(tfbert.BertEncoder(config), num_classes=2)
    blocks = split_streams(model, 2)
    assert sorted(b.layer.name for b in blocks) == ["layer_0", "layer_1", "layer_2"]


def test_bad_stream_counts_say_what_is_wrong():
    layer = block()
    with pytest.raises(ValueError, match="3 streams must divide the 4 attention heads and the "
                                         "intermediate size 64"):
        StreamedBlock(layer, 3)
    for bad in (0, -2, True, 2.0):
        with pytest.raises(ValueError, match="streams must be a positive int"):
            StreamedBlock(layer, bad)
