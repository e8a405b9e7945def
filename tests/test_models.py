"""BertEncoder and the task models: the shared checks, padding invariance, the pretraining loss,
mixed precision, parity with Hugging Face's BertForPreTraining, and the JAX backend."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from model_test_utils import assert_all_close, check_model, make_features, tiny_config

import tfbert
from tfbert import (
    BertClassifier,
    BertConfig,
    BertEncoder,
    BertPretrainer,
    BertSpanLabeler,
    BertTokenClassifier,
)

LABEL_KEYS = ("masked_lm_ids", "masked_lm_weights", "next_sentence_labels")


def test_encoder(tmp_path):
    config = tiny_config()
    encoder = BertEncoder(config)
    features = make_features(config)
    check_model(encoder, features, tmp_path, fit=False)  # trained through the task models
    out = encoder(features)
    assert tuple(out["sequence_output"].shape) == (4, 16, 32)
    assert tuple(out["pooled_output"].shape) == (4, 32)
    assert len(out["encoder_outputs"]) == 2
    assert_all_close(out["encoder_outputs"][-1], out["sequence_output"])
    assert isinstance(encoder.config, BertConfig) and encoder.config == config
    assert len(encoder.transformer_layers) == 2
    assert encoder.embeddings.word_embeddings.embeddings.shape == (97, 32)
    assert encoder.pooler.kernel.shape == (32, 32)
    assert encoder.get_config()["config"] == config.to_dict()


def test_encoder_ignores_extra_feature_keys_and_names_missing_ones():
    config = tiny_config()
    encoder = BertEncoder(config)
    features = make_features(config, max_predictions=3)  # carries labels too
    plain = {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}
    assert_all_close(encoder(features), encoder(plain))
    with pytest.raises(ValueError, match=r"needs inputs \['segment_ids'\]"):
        encoder({"input_ids": plain["input_ids"], "input_mask": plain["input_mask"]})


@pytest.mark.parametrize("attention_dropout", [0.1, 0.0])
def test_padding_invariance(attention_dropout):
    """Outputs at real positions do not change when padding (with junk ids) is appended, on
    both attention paths: explicit softmax (probability dropout configured) and Keras's fused
    dot_product_attention (no probability dropout)."""
    config = tiny_config(attention_probs_dropout_prob=attention_dropout)
    encoder = BertEncoder(config)
    features = make_features(config, batch_size=3, seq_length=8)
    features["input_mask"][:] = 1
    junk = {"input_ids": 7, "input_mask": 0, "segment_ids": 1}
    padded = {k: np.concatenate([v, np.full((3, 8), junk[k], "int32")], axis=1)
              for k, v in features.items()}
    short, long = encoder(features), encoder(padded)
    assert_all_close(long["sequence_output"][:, :8], short["sequence_output"])
    assert_all_close(long["pooled_output"], short["pooled_output"])
    for a, b in zip(long["encoder_outputs"], short["encoder_outputs"], strict=True):
        assert_all_close(a[:, :8], b)
    # Without the mask the junk would change the output: the test has teeth.
    padded["input_mask"][:] = 1
    unmasked = encoder(padded)["sequence_output"][:, :8]
    assert np.abs(np.asarray(unmasked) - np.asarray(short["sequence_output"])).max() > 1e-3


def test_attention_probabilities_on_request():
    config = tiny_config()
    features = make_features(config, batch_size=3, seq_length=8)
    encoder = BertEncoder(config, output_attention_probs=True)
    out = encoder(features)
    probs = out["attention_probs"]
    assert len(probs) == 2 and all(p.dtype == "float32" for p in probs)
    assert tuple(probs[0].shape) == (3, 4, 8, 8)  # [B, N, T, T]
    for p in probs:
        p = np.asarray(p)
        np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-5)
        padding = features["input_mask"][:, None, None, :] == 0
        assert np.all(np.where(np.broadcast_to(padding, p.shape), p, 0.0) == 0.0)
    # Same weights, no probabilities requested: same hidden states.
    plain = BertEncoder.from_config({**encoder.get_config(), "output_attention_probs": False})
    plain.set_weights(encoder.get_weights())
    assert "attention_probs" not in plain(features)
    assert_all_close(plain(features)["sequence_output"], out["sequence_output"])


def test_hidden_size_not_divisible_by_heads():
    message = "hidden_size 770 is not a multiple of num_attention_heads 12"
    with pytest.raises(ValueError, match=message):
        BertConfig(hidden_size=770, num_attention_heads=12)
    with pytest.raises(ValueError, match=message):
        BertEncoder({**tiny_config().to_dict(), "hidden_size": 770, "num_attention_heads": 12})
    config = tiny_config()
    config.hidden_size = 770  # mutated after validation
    config.num_attention_heads = 12
    with pytest.raises(ValueError, match=message):
        BertEncoder(config)


@pytest.mark.slow  # 13 s; fast: test_pretraining_loss_values_and_label_sources
def test_pretrainer(tmp_path):
    config = tiny_config()
    model = BertPretrainer(BertEncoder(config))
    features = make_features(config, batch_size=4, max_predictions=3)
    # The one XLA-compiled train step of the suite (mixed precision trains in a plain graph).
    metrics = check_model(model, features, tmp_path, compile_kwargs={"jit_compile": True})
    assert set(metrics) == {"loss", "mlm_loss", "nsp_loss", "masked_lm_accuracy",
                            "next_sentence_accuracy"}
    out = model.predict(features, verbose=0)
    assert out["mlm_logits"].shape == (4, 3, 97) and out["mlm_logits"].dtype == np.float32
    assert out["nsp_logits"].shape == (4, 2)
    assert model.mlm_head.token_embedding is model.encoder.embeddings.word_embeddings


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_pretrainer_last_layer_only_at_read_rows(policy):
    """BertPretrainer.call computes its last block only at [CLS] and the masked positions; its
    logits and every gradient equal those of the full encoder graph (padding positions 0 and
    repeated positions included)."""
    config = tiny_config(num_hidden_layers=3)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        model = BertPretrainer(BertEncoder(config))
    finally:
        keras.config.set_dtype_policy(previous)
    features = make_features(config, batch_size=4, max_predictions=5, seed=5)
    features["masked_lm_positions"][3, 3:] = 0  # padded predictions point at position 0
    features["masked_lm_positions"][2, 1] = features["masked_lm_positions"][2, 0]

    def full_graph(x):
        out = model.encoder(x)
        return {"mlm_logits": model.mlm_head(out["sequence_output"], x["masked_lm_positions"]),
                "nsp_logits": model.nsp_head(out["pooled_output"])}

    def loss_and_grads(forward):
        with tf.GradientTape() as tape:
            out = forward(features)
            loss = model.compute_loss(features, None, out)
        return out, loss, tape.gradient(loss, model.trainable_variables)

    ours, loss, grads = loss_and_grads(model)
    ref, ref_loss, ref_grads = loss_and_grads(full_graph)
    tol = 1e-5 if policy == "float32" else 2e-2
    assert ours["mlm_logits"].shape == (4, 5, 97)
    for key in ref:
        assert_all_close(ours[key], ref[key], atol=tol, what=key)
    np.testing.assert_allclose(float(loss), float(ref_loss), rtol=tol)
    for var, g, r in zip(model.trainable_variables, grads, ref_grads, strict=True):
        g, r = tf.convert_to_tensor(g), tf.convert_to_tensor(r)
        if policy == "float32":
            error, scale = tf.reduce_max(tf.abs(g - r)), tf.reduce_max(tf.abs(r))
        else:
            # bfloat16 keeps 8 significant bits and the two graphs round different shapes (a
            # matmul over all rows against one over the read rows; a bfloat16 kernel's tiling
            # differs between processors), so a single element of a sum that nearly cancels
            # can be off by several percent: the whole gradient is compared, by its norm, within
            # about six bfloat16 steps (2**-7 each) relative.
            error, scale = tf.norm(g - r), tf.norm(r)
        scale = float(scale) + 1e-6
        if var.path.endswith("attention/key/bias"):
            # Zero in exact arithmetic (the softmax ignores a per-query shift of the scores):
            # both sides are rounding noise, so only their size is checked.
            scale = max(scale, 1e-4)
        grad_tol = tol if policy == "float32" else 5e-2
        assert float(error) <= grad_tol * scale, (var.path, float(error), scale)
    block = model.encoder.transformer_layers[-1]
    with pytest.raises(ValueError, match="query_positions needs a \\[B, 1, T\\] key-padding"):
        block(tf.zeros((2, 8, 32)), attention_mask=tf.ones((2, 8, 8), "bool"),
              query_positions=tf.zeros((2, 3), "int32"))


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_classifier_last_layer_only_at_cls(policy):
    """BertClassifier.call computes its last block only at [CLS]; its logits and every gradient
    equal those of the full encoder graph (ragged padding, a hidden head layer)."""
    config = tiny_config(num_hidden_layers=3)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        model = BertClassifier(BertEncoder(config), num_classes=3, head_hidden_layers=1,
                               head_hidden_size=16)
    finally:
        keras.config.set_dtype_policy(previous)
    features = make_features(config, batch_size=4, seed=7)
    labels = np.array([0, 2, 1, 2])

    def full_graph(x):
        h = model.encoder(x)["pooled_output"]
        return model.output_dense(model.hidden_layers[0](h))

    def loss_and_grads(forward):
        with tf.GradientTape() as tape:
            logits = forward(features)
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True))
        return logits, tape.gradient(loss, model.trainable_variables)

    ours, grads = loss_and_grads(model)
    ref, ref_grads = loss_and_grads(full_graph)
    tol = 1e-5 if policy == "float32" else 2e-2
    assert tuple(ours.shape) == (4, 3) and ours.dtype == tf.float32
    assert_all_close(ours, ref, atol=tol, what="logits")
    for var, g, r in zip(model.trainable_variables, grads, ref_grads, strict=True):
        if r is None:  # the last block's unused rows: no gradient either way
            assert g is None, var.path
            continue
        g, r = tf.convert_to_tensor(g), tf.convert_to_tensor(r)
        scale = float(tf.reduce_max(tf.abs(r))) + 1e-6
        if var.path.endswith("attention/key/bias"):
            # Zero in exact arithmetic (the softmax ignores a per-query shift of the scores):
            # both sides are rounding noise, so only their size is checked.
            scale = max(scale, 1e-4)
        assert float(tf.reduce_max(tf.abs(g - r))) <= tol * scale, var.path


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_feed_forward_matches_dense_layers(policy):
    """The block's feed-forward (one 2-D matmul + BiasAdd + GELU per Dense, for Grappler's fused
    MatMul kernel) gives the Dense layers' own result, exact and tanh GELU alike."""
    from tfbert.layers.transformer import BertTransformerLayer

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        for act in ("gelu", "gelu_tanh"):
            block = BertTransformerLayer(hidden_size=32, num_attention_heads=4,
                                         intermediate_size=64, hidden_act=act)
            x = tf.random.stateless_normal((3, 5, 32), seed=(1, 2))
            block(x)  # built
            got = block._feed_forward(x)
            want = block.output_dense(block.intermediate_dense(x))
            assert tuple(got.shape) == (3, 5, 32) and got.dtype == want.dtype
            tol = 1e-6 if policy == "float32" else 1e-2
            assert_all_close(got, want, atol=tol, what=act)
    finally:
        keras.config.set_dtype_policy(previous)


def _expected_pretraining_metrics(out, features):
    def ce(logits, labels):
        logits = logits - logits.max(-1, keepdims=True)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        return -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]

    w = features["masked_lm_weights"]
    mlm = (ce(out["mlm_logits"], features["masked_lm_ids"]) * w).sum() / (w.sum() + 1e-5)
    nsp_labels = features["next_sentence_labels"][:, 0]
    nsp = ce(out["nsp_logits"], nsp_labels).mean()
    mlm_acc = ((out["mlm_logits"].argmax(-1) == features["masked_lm_ids"]) * w).sum() / w.sum()
    nsp_acc = (out["nsp_logits"].argmax(-1) == nsp_labels).mean()
    return {"loss": mlm + nsp, "mlm_loss": mlm, "nsp_loss": nsp, "masked_lm_accuracy": mlm_acc,
            "next_sentence_accuracy": nsp_acc}


def test_pretraining_loss_values_and_label_sources():
    """evaluate() reproduces the reference loss formula from the predicted logits, whether the
    labels ride in the feature dict or come as a (features, labels) pair."""
    config = tiny_config()
    model = BertPretrainer(BertEncoder(config))
    model.compile(optimizer=keras.optimizers.SGD(0.01), jit_compile=False)
    features = make_features(config, batch_size=4, max_predictions=3, seed=3)
    expected = _expected_pretraining_metrics(model.predict(features, verbose=0), features)
    got = model.evaluate(features, batch_size=4, verbose=0, return_dict=True)
    for key, value in expected.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-5, err_msg=key)
    inputs = {k: v for k, v in features.items() if k not in LABEL_KEYS}
    labels = {k: features[k] for k in LABEL_KEYS}
    ds = tf.data.Dataset.from_tensor_slices((inputs, labels)).batch(4)
    got = model.evaluate(ds, verbose=0, return_dict=True)
    np.testing.assert_allclose(got["loss"], expected["loss"], rtol=1e-5)
    history = model.fit(tf.data.Dataset.from_tensor_slices(features).batch(2), verbose=0)
    assert np.isfinite(history.history["loss"][0])

    with pytest.raises(ValueError, match="needs 'masked_lm_weights'"):
        model.evaluate({k: v for k, v in features.items() if k != "masked_lm_weights"},
                       verbose=0)
    with pytest.raises(ValueError, match="computes its own MLM"):
        model.compile(optimizer="adam", loss="mse")


@pytest.mark.parametrize("head_hidden_layers", [0, 2])
def test_classifier(tmp_path, head_hidden_layers):
    config = tiny_config()
    model = BertClassifier(BertEncoder(config), num_classes=3,
                           head_hidden_layers=head_hidden_layers, head_hidden_size=16)
    features = make_features(config)
    labels = np.array([0, 2, 1, 2], "int32")
    if head_hidden_layers:
        metrics = check_model(model, features, tmp_path, labels=labels, jit=False)
        assert set(metrics) == {"loss", "accuracy"}
    logits = model(features)
    assert tuple(logits.shape) == (4, 3) and logits.dtype == "float32"
    assert [layer.kernel.shape for layer in model.hidden_layers] == (
        [(32, 16), (16, 16)] if head_hidden_layers else [])
    assert model.output_dense.kernel.shape == (16 if head_hidden_layers else 32, 3)
    assert model.get_config()["head_hidden_layers"] == head_hidden_layers
    if head_hidden_layers:  # a compiled model reloads compiled (compile_from_config)
        path = str(tmp_path / "compiled.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
        assert loaded.compiled and loaded.get_compile_config() == model.get_compile_config()
        np.testing.assert_allclose(loaded.evaluate(features, labels, verbose=0),
                                   model.evaluate(features, labels, verbose=0), rtol=1e-5)


def test_classifier_rejects_bad_head():
    encoder = BertEncoder(tiny_config())
    with pytest.raises(ValueError, match="head_hidden_layers must be 0-3, got 4"):
        BertClassifier(encoder, num_classes=2, head_hidden_layers=4)
    with pytest.raises(ValueError, match="num_classes must be a positive int, got 0"):
        BertClassifier(encoder, num_classes=0)
    with pytest.raises(TypeError, match="wraps a tfbert.BertEncoder"):
        BertClassifier(keras.layers.Dense(2), num_classes=2)


def test_token_classifier(tmp_path):
    config = tiny_config()
    model = BertTokenClassifier(BertEncoder(config), num_classes=5)
    features = make_features(config)
    labels = (np.arange(16)[None] % 5 * features["input_mask"]).astype("int32")
    check_model(model, features, tmp_path, labels=labels, jit=False)
    logits = model(features)
    assert tuple(logits.shape) == (4, 16, 5) and logits.dtype == "float32"


def test_span_labeler(tmp_path):
    config = tiny_config()
    model = BertSpanLabeler(BertEncoder(config))
    features = make_features(config)
    labels = {"start_logits": np.array([1, 2, 3, 4], "int32"),
              "end_logits": np.array([2, 2, 5, 6], "int32")}
    metrics = check_model(model, features, tmp_path, labels=labels, jit=False)
    assert {"loss", "start_logits_loss", "end_logits_loss"} <= set(metrics)
    out = model(features)
    assert tuple(out["start_logits"].shape) == (4, 16)
    assert tuple(out["end_logits"].shape) == (4, 16)
    # start/end are the two columns of one dense over sequence_output.
    sequence = np.asarray(model.encoder(features)["sequence_output"])
    expected = sequence @ np.asarray(model.output_dense.kernel) + np.asarray(
        model.output_dense.bias)
    np.testing.assert_allclose(out["end_logits"], expected[..., 1], atol=1e-5)


def test_from_pretrained_delegates_to_the_loader(monkeypatch):
    from tfbert.models import pretrained

    calls = []
    monkeypatch.setattr(pretrained, "model_from_pretrained",
                        lambda cls, path, **kw: calls.append((cls, path, kw)) or "model")
    assert BertClassifier.from_pretrained("ckpt", num_classes=3) == "model"
    assert BertSpanLabeler.from_pretrained("ckpt") == "model"
    assert BertEncoder.from_pretrained("ckpt", strict=False) == "model"
    assert calls == [(BertClassifier, "ckpt", {"num_classes": 3}),
                     (BertSpanLabeler, "ckpt", {}), (BertEncoder, "ckpt", {"strict": False})]


def test_mixed_bfloat16():
    """Variables, LayerNorm outputs (the residual stream), softmax and logits stay float32 while
    the matmuls run in bfloat16; a fit step trains."""
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        config = tiny_config()
        encoder = BertEncoder(config, output_attention_probs=True)
        model = BertPretrainer(encoder)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert {w.dtype for w in model.weights} == {"float32"}
    block = encoder.transformer_layers[0]
    assert block.intermediate_dense.compute_dtype == "bfloat16"
    assert block.attention.query_dense.compute_dtype == "bfloat16"
    assert block.attention_layer_norm.compute_dtype == "float32"
    assert block.attention.softmax_dtype == "float32"
    features = make_features(config, max_predictions=3)
    out = tf.nest.map_structure(lambda t: keras.backend.standardize_dtype(t.dtype),
                                encoder(features))
    assert out["sequence_output"] == "float32"
    assert set(out["encoder_outputs"]) == {"float32"}
    assert set(out["attention_probs"]) == {"float32"}
    assert out["pooled_output"] == "bfloat16"
    probs = encoder(features)["attention_probs"][0]
    np.testing.assert_allclose(np.asarray(probs).sum(-1), 1.0, atol=1e-5)
    model.compile(optimizer=keras.optimizers.SGD(0.1), jit_compile=False)
    before = np.array(encoder.transformer_layers[0].intermediate_dense.kernel)
    history = model.fit(features, batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert not np.array_equal(before, encoder.transformer_layers[0].intermediate_dense.kernel)
    predicted = model.predict(features, verbose=0)
    assert predicted["mlm_logits"].dtype == np.float32
    assert predicted["nsp_logits"].dtype == np.float32


def _hf_state_dict(model: BertPretrainer) -> dict[str, np.ndarray]:
    """tfbert weights under Hugging Face BertForPreTraining names, through the layout
    documented in tfbert/models/encoder.py (kernels [in, out] -> torch [out, in])."""
    enc = model.encoder
    h = enc.config.hidden_size
    a = lambda v: np.asarray(v)
    sd = {"bert.embeddings.word_embeddings.weight": a(enc.embeddings.word_embeddings.embeddings),
          "bert.embeddings.position_embeddings.weight":
              a(enc.embeddings.position_embeddings.embeddings),
          "bert.embeddings.token_type_embeddings.weight":
              a(enc.embeddings.token_type_embeddings.embeddings),
          "bert.embeddings.LayerNorm.weight": a(enc.embeddings.layer_norm.gamma),
          "bert.embeddings.LayerNorm.bias": a(enc.embeddings.layer_norm.beta),
          "bert.pooler.dense.weight": a(enc.pooler.kernel).T,
          "bert.pooler.dense.bias": a(enc.pooler.bias)}
    for i, layer in enumerate(enc.transformer_layers):
        p = f"bert.encoder.layer.{i}."
        att = layer.attention
        for name, d in (("query", att.query_dense), ("key", att.key_dense),
                        ("value", att.value_dense)):
            sd[p + f"attention.self.{name}.weight"] = a(d.kernel).reshape(h, h).T
            sd[p + f"attention.self.{name}.bias"] = a(d.bias).reshape(h)
        sd[p + "attention.output.dense.weight"] = a(att.output_dense.kernel).reshape(h, h).T
        sd[p + "attention.output.dense.bias"] = a(att.output_dense.bias)
        for prefix, ln in (("attention.output.LayerNorm", layer.attention_layer_norm),
                           ("output.LayerNorm", layer.output_layer_norm)):
            sd[p + prefix + ".weight"], sd[p + prefix + ".bias"] = a(ln.gamma), a(ln.beta)
        for prefix, d in (("intermediate.dense", layer.intermediate_dense),
                          ("output.dense", layer.output_dense)):
            sd[p + prefix + ".weight"], sd[p + prefix + ".bias"] = a(d.kernel).T, a(d.bias)
    head = model.mlm_head
    sd["cls.predictions.transform.dense.weight"] = a(head.transform_dense.kernel).T
    sd["cls.predictions.transform.dense.bias"] = a(head.transform_dense.bias)
    sd["cls.predictions.transform.LayerNorm.weight"] = a(head.transform_layer_norm.gamma)
    sd["cls.predictions.transform.LayerNorm.bias"] = a(head.transform_layer_norm.beta)
    sd["cls.predictions.bias"] = a(head.output_bias)
    sd["cls.seq_relationship.weight"] = a(model.nsp_head.kernel).T
    sd["cls.seq_relationship.bias"] = a(model.nsp_head.bias)
    return sd


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                    reason="transformers is not installed")
@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_tanh"])
def test_parity_with_hugging_face(hidden_act):
    """The documented variable layout is right: copying weights into HF's BertForPreTraining
    gives the same hidden states, pooled output, MLM and NSP logits."""
    import torch
    import transformers

    config = tiny_config(hidden_act=hidden_act)
    model = BertPretrainer(BertEncoder(config))
    hf_config = transformers.BertConfig(**{
        k: v for k, v in config.to_dict().items() if k not in ("lower_case", "hidden_act")},
        hidden_act={"gelu": "gelu", "gelu_tanh": "gelu_new"}[hidden_act],
        attn_implementation="eager")
    hf = transformers.BertForPreTraining(hf_config).eval()
    state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in
             _hf_state_dict(model).items()}
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"cls.predictions.decoder.weight",
                                               "cls.predictions.decoder.bias",
                                               "bert.embeddings.position_ids"}
    hf.tie_weights()
    features = make_features(config, max_predictions=3, seed=5)
    with torch.no_grad():
        ref = hf(input_ids=torch.from_numpy(features["input_ids"]).long(),
                 attention_mask=torch.from_numpy(features["input_mask"]).long(),
                 token_type_ids=torch.from_numpy(features["segment_ids"]).long(),
                 output_hidden_states=True)
    out = model.encoder(features)
    np.testing.assert_allclose(out["sequence_output"], ref.hidden_states[-1].numpy(), atol=1e-4)
    for ours, theirs in zip(out["encoder_outputs"], ref.hidden_states[1:], strict=True):
        np.testing.assert_allclose(ours, theirs.numpy(), atol=1e-4)
    mlm_ref = np.take_along_axis(ref.prediction_logits.numpy(),
                                 features["masked_lm_positions"][..., None], axis=1)
    pred = model(features)
    np.testing.assert_allclose(pred["mlm_logits"], mlm_ref, atol=1e-4)
    np.testing.assert_allclose(pred["nsp_logits"], ref.seq_relationship_logits.numpy(),
                               atol=1e-4)
    # pooled output through HF's pooler
    with torch.no_grad():
        pooled = hf.bert.pooler(ref.hidden_states[-1]).numpy()
    np.testing.assert_allclose(out["pooled_output"], pooled, atol=1e-4)


JAX_SCRIPT = textwrap.dedent("""
    import numpy as np, keras
    assert keras.backend.backend() == "jax", keras.backend.backend()
    from tfbert.config import BertConfig
    from tfbert.models.encoder import BertEncoder
    from tfbert.models.pretrainer import BertPretrainer
    config = BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64)
    rng = np.random.default_rng(0)
    f = {"input_ids": rng.integers(5, 97, (4, 16)).astype("int32"),
         "input_mask": np.ones((4, 16), "int32"), "segment_ids": np.zeros((4, 16), "int32"),
         "masked_lm_positions": rng.integers(0, 16, (4, 3)).astype("int32"),
         "masked_lm_ids": rng.integers(5, 97, (4, 3)).astype("int32"),
         "masked_lm_weights": np.ones((4, 3), "float32"),
         "next_sentence_labels": rng.integers(0, 2, (4, 1)).astype("int32")}
    encoder = BertEncoder(config)
    out = encoder(f)
    assert out["sequence_output"].shape == (4, 16, 32), out["sequence_output"].shape
    model = BertPretrainer(encoder)
    model.compile(optimizer="adam")
    history = model.fit(f, batch_size=4, epochs=2, verbose=0).history
    assert np.all(np.isfinite(history["loss"])), history
    assert history["loss"][1] < history["loss"][0], history
    assert set(history) >= {"mlm_loss", "nsp_loss", "masked_lm_accuracy",
                            "next_sentence_accuracy"}, history
    assert model.predict(f, verbose=0)["mlm_logits"].shape == (4, 3, 97)
    print("JAX OK", history["loss"])
""")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_runs_under_jax_backend():
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, "-c", JAX_SCRIPT], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "JAX OK" in result.stdout


def test_lazy_exports():
    assert tfbert.BertEncoder is BertEncoder
    assert tfbert.count_parameters("bert-mini")["total"] == 11_170_560


def test_pretrainer_auto_jit_compile_on_cpu():
    """jit_compile="auto": XLA for a float32 model on a CPU-only TensorFlow, none under mixed
    precision (oneDNN's bfloat16 matmuls beat XLA's CPU dots)."""
    import tensorflow as tf

    from tfbert.models.pretrainer import _auto_jit_compile

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("CPU-only rule")
    assert _auto_jit_compile("float32") is True
    assert _auto_jit_compile("bfloat16") is False
