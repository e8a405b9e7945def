"""Layers: activations, embeddings, the transformer block, the masked-LM head.

Values are checked against small numpy implementations of Google's modeling.py, reading the
Keras weights through the layout documented in tfbert/models/encoder.py.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
from model_test_utils import check_layer

from tfbert.layers import (
    BertEmbeddings,
    BertTransformerLayer,
    MaskedLMHead,
    gather_positions,
    get_activation,
)

B, T, H, N, FFN, V = 3, 8, 32, 4, 64, 50


def np_gelu(x, approximate: bool):
    if approximate:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def np_layer_norm(x, layer, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * np.array(layer.gamma) + np.array(layer.beta)


def np_dense(x, layer):
    """A Dense or MultiHeadAttention EinsumDense as the reference [in, out] matmul."""
    kernel, bias = np.array(layer.kernel), np.array(layer.bias)
    fan_in = x.shape[-1]
    return x @ kernel.reshape(fan_in, -1) + bias.reshape(-1)


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_activations_match_formulas():
    x = np.linspace(-4, 4, 41).astype("float32")
    np.testing.assert_allclose(get_activation("gelu")(x), np_gelu(x, False), atol=1e-6)
    np.testing.assert_allclose(get_activation("gelu_tanh")(x), np_gelu(x, True), atol=1e-6)
    # The two GELUs are different functions (checkpoint parity depends on picking the right one).
    assert np.abs(np_gelu(x, False) - np_gelu(x, True)).max() > 1e-4
    np.testing.assert_allclose(get_activation("relu")(x), np.maximum(x, 0))
    np.testing.assert_allclose(get_activation("silu")(x), x / (1 + np.exp(-x)), atol=1e-6)
    np.testing.assert_allclose(get_activation("tanh")(x), np.tanh(x), atol=1e-6)
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        get_activation("swish")


def test_embeddings(tmp_path):
    layer = BertEmbeddings(vocab_size=V, hidden_size=H, max_position_embeddings=16,
                           type_vocab_size=2, dropout=0.1, name="embeddings")
    rng = np.random.default_rng(0)
    ids = rng.integers(0, V, (B, T)).astype("int32")
    segments = rng.integers(0, 2, (B, T)).astype("int32")
    out = check_layer(layer, [ids, segments], tmp_path, expected_shape=(B, T, H))

    word = np.array(layer.word_embeddings.embeddings)
    position = np.array(layer.position_embeddings.embeddings)
    token_type = np.array(layer.token_type_embeddings.embeddings)
    assert position.shape == (16, H) and token_type.shape == (2, H)
    expected = np_layer_norm(word[ids] + token_type[segments] + position[:T], layer.layer_norm)
    np.testing.assert_allclose(layer(ids, segments), expected, atol=1e-5)
    assert out.dtype == "float32"

    with pytest.raises(ValueError, match="sequence length 17 exceeds max_position_embeddings 16"):
        layer(np.zeros((1, 17), "int32"), np.zeros((1, 17), "int32"))


def reference_block(x, mask, layer: BertTransformerLayer, approximate_gelu=False):
    """Google's transformer_model() for one layer, mask as the additive -10000 bias."""
    heads = layer.num_attention_heads
    d = layer.hidden_size // heads

    def split(t):  # [B, T, H] -> [B, N, T, D]
        return t.reshape(t.shape[0], t.shape[1], heads, d).transpose(0, 2, 1, 3)

    attention = layer.attention
    q, k, v = (split(np_dense(x, dense)) for dense in
               (attention.query_dense, attention.key_dense, attention.value_dense))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)  # [B, N, T, T]
    scores += (1.0 - mask[:, None, None, :]) * -10000.0
    probs = np_softmax(scores)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape)  # [B, T, H]
    x = np_layer_norm(x + np_dense(context, attention.output_dense), layer.attention_layer_norm)
    h = np_gelu(np_dense(x, layer.intermediate_dense), approximate_gelu)
    return np_layer_norm(x + np_dense(h, layer.output_dense), layer.output_layer_norm), probs


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_tanh"])
def test_transformer_layer_matches_reference(tmp_path, hidden_act):
    layer = BertTransformerLayer(hidden_size=H, num_attention_heads=N, intermediate_size=FFN,
                                 hidden_act=hidden_act, name="layer_0")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(B, T, H)).astype("float32")
    mask = (np.arange(T)[None] < np.array([T, 5, 3])[:, None]).astype("float32")
    bool_mask = mask.astype(bool)[:, None, :]  # [B, 1, T]
    if hidden_act == "gelu":  # the full helper once; values for both activations
        check_layer(layer, [x], tmp_path, kwargs={"attention_mask": bool_mask},
                    expected_shape=(B, T, H))
    out, probs = layer(x, attention_mask=bool_mask, return_attention_probs=True)
    assert layer.attention.query_dense.kernel.shape == (H, N, H // N)
    assert layer.attention.output_dense.kernel.shape == (N, H // N, H)
    expected, expected_probs = reference_block(x, mask, layer, hidden_act == "gelu_tanh")
    np.testing.assert_allclose(out, expected, atol=2e-5)
    np.testing.assert_allclose(probs, expected_probs, atol=1e-6)
    # Without probabilities the mask takes the additive-bias path: the same outputs.
    np.testing.assert_allclose(layer(x, attention_mask=bool_mask), expected, atol=2e-5)
    assert np.all(np.asarray(probs)[1, :, :, 5:] == 0.0)


def test_transformer_layer_rejects_bad_head_count():
    with pytest.raises(ValueError, match="hidden_size 770 is not a multiple of "
                                         "num_attention_heads 12"):
        BertTransformerLayer(hidden_size=770, num_attention_heads=12, intermediate_size=64)


def test_masked_lm_head(tmp_path):
    table = keras.layers.Embedding(V, H, name="word_embeddings")
    table.build()
    head = MaskedLMHead(V, H, hidden_act="gelu_tanh", token_embedding=table, name="mlm_head")
    rng = np.random.default_rng(2)
    sequence = rng.normal(size=(B, T, H)).astype("float32")
    positions = np.array([[0, 3], [7, 7], [2, 1]], "int32")
    check_layer(head, [sequence, positions], tmp_path, expected_shape=(B, 2, V))

    gathered = np.stack([sequence[b, positions[b]] for b in range(B)])  # [B, P, H]
    np.testing.assert_allclose(gather_positions(sequence, positions), gathered)
    h = np_layer_norm(np_gelu(np_dense(gathered, head.transform_dense), True),
                      head.transform_layer_norm)
    expected = h @ np.array(table.embeddings).T + np.array(head.output_bias)
    logits = head(sequence, positions)
    assert logits.dtype == "float32"
    np.testing.assert_allclose(logits, expected, atol=1e-5)
    # Tied: the head's decoder is the embedding variable itself, not a copy.
    assert head.token_embedding.embeddings is table.embeddings
    with pytest.raises(ValueError, match=r"token_embedding is \[50, 32\], expected "
                                         r"\[vocab_size 60, hidden_size 32\]"):
        MaskedLMHead(60, H, token_embedding=table)


def test_bert_dropout_statistics_gradient_and_seeding():
    import tensorflow as tf

    from tfbert.layers import BertDropout

    layer = BertDropout(0.1, seed=7)
    x = tf.ones([1000, 1000])
    y = layer(x, training=True).numpy()
    dropped = (y == 0).mean()
    assert abs(dropped - 0.1) < 0.002, dropped  # 1e6 Bernoulli draws: std 0.0003
    kept = y[y != 0]
    np.testing.assert_allclose(kept, 65536 / (65536 - 6554), rtol=1e-6)  # 1 / keep probability
    assert abs(y.mean() - 1.0) < 0.003
    # Each call draws a new mask; the same seed replays the same sequence of masks.
    again = BertDropout(0.1, seed=7)
    assert np.array_equal(again(x, training=True).numpy(), y)
    assert not np.array_equal(layer(x, training=True).numpy(), y)
    # Odd sizes, bfloat16, inference, rate 0.
    odd = BertDropout(0.5, seed=1, dtype="bfloat16")(tf.ones([3, 5], "bfloat16"), training=True)
    assert odd.dtype == tf.bfloat16 and odd.shape == (3, 5)
    assert set(np.unique(odd.numpy().astype(np.float32))) <= {0.0, 2.0}
    assert np.array_equal(layer(x, training=False).numpy(), x.numpy())
    assert np.array_equal(BertDropout(0.0)(x, training=True).numpy(), x.numpy())
    # The gradient is the mask itself.
    v = tf.Variable(tf.fill([64, 64], 2.0))
    with tf.GradientTape() as tape:
        out = layer(v, training=True)
        loss = tf.reduce_sum(out)
    np.testing.assert_allclose(tape.gradient(loss, v).numpy(), out.numpy() / 2.0)


def test_bert_dropout_in_every_block():
    from tfbert.layers import BertDropout

    block = BertTransformerLayer(hidden_size=H, num_attention_heads=N, intermediate_size=FFN,
                                 hidden_dropout=0.1, attention_dropout=0.2)
    block.build((B, T, H))
    # attention_dropout is the probabilities' rate; the attention output takes the hidden rate.
    assert isinstance(block.attention._dropout_layer, BertDropout)
    assert block.attention._dropout_layer.rate == block.attention.dropout == 0.2
    assert isinstance(block.attention_output_dropout, BertDropout)
    assert block.attention_output_dropout.rate == 0.1
    assert isinstance(block.output_dropout, BertDropout) and block.output_dropout.rate == 0.1


def test_attention_sublayers_keep_lora_and_quantization():
    """The projections are keras EinsumDense layers: LoRA and int8 quantization work through
    their own calls (LoRA starts as a zero update; int8 stays close)."""
    block = BertTransformerLayer(hidden_size=H, num_attention_heads=N, intermediate_size=FFN,
                                 hidden_dropout=0.0, attention_dropout=0.0)
    x = np.random.default_rng(3).normal(size=(B, T, H)).astype("float32")
    want = np.asarray(block(x))
    attention = block.attention
    for dense in (attention.query_dense, attention.value_dense):
        dense.enable_lora(2)
    np.testing.assert_allclose(block(x), want, atol=1e-6)
    attention.query_dense.lora_kernel_b.assign(np.ones(attention.query_dense.lora_kernel_b.shape))
    assert np.abs(np.asarray(block(x)) - want).max() > 1e-3  # the LoRA update is used
    plain = BertTransformerLayer(hidden_size=H, num_attention_heads=N, intermediate_size=FFN,
                                 hidden_dropout=0.0, attention_dropout=0.0)
    want = np.asarray(plain(x))
    plain.attention.output_dense.quantize("int8")
    assert plain.attention.output_dense.quantization_mode == "int8"
    np.testing.assert_allclose(plain(x), want, atol=0.05)
