"""Parity with the reference implementation (transformers' BertModel / BertForPreTraining).

The default run compares against golden slices made by tests/make_golden.py (no torch needed);
when torch and transformers are installed, the same inputs also run through the reference here
and whole outputs are compared. Tolerance: max abs diff <= 1e-4 in float32.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

import tfbert
from tfbert import checkpoints

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
TINY = os.path.join(DATA, "tiny_pretraining")
INPUTS = ("input_ids", "input_mask", "segment_ids")
TOLERANCE = 1e-4


def _golden(name: str) -> dict[str, np.ndarray]:
    with np.load(os.path.join(DATA, name)) as data:
        return {k: data[k] for k in data.files}


def _max_diff(a, b, mask=None) -> float:
    diff = np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32))
    return float((diff[mask.astype(bool)] if mask is not None else diff).max())


def _run(model, batch: dict) -> dict[str, np.ndarray]:
    out = model({k: np.asarray(v, np.int32) for k, v in batch.items()}, training=False)
    return {k: np.asarray(v) for k, v in out.items() if not isinstance(v, list)}


@pytest.fixture(scope="module")
def minilm_golden(minilm_dir):
    golden = _golden("minilm_golden.npz")
    digest = hashlib.sha256(open(os.path.join(minilm_dir, "model.safetensors"), "rb").read())
    if digest.hexdigest() != str(golden["model_sha256"]):
        pytest.fail(f"{minilm_dir}/model.safetensors is not the checkpoint "
                    "tests/data/minilm_golden.npz was made from; rerun tests/make_golden.py")
    return golden


@pytest.fixture(scope="module")
def minilm_encoder(minilm_dir):
    return tfbert.BertEncoder.from_pretrained(minilm_dir)


@pytest.mark.parametrize("batch", ["single", "pair"])
def test_minilm_matches_golden(minilm_encoder, minilm_golden, batch):
    """Padded batch of sentences of different lengths, and sentence pairs (segment ids 0/1)."""
    inputs = {k: minilm_golden[f"{batch}/{k}"] for k in INPUTS}
    assert inputs["input_mask"].min() == 0  # really padded
    if batch == "pair":
        assert inputs["segment_ids"].max() == 1
    out = _run(minilm_encoder, inputs)
    stride = int(minilm_golden["sequence_stride"])
    sequence = out["sequence_output"][:, :, ::stride]
    assert sequence.shape == minilm_golden[f"{batch}/sequence_output"].shape
    assert _max_diff(sequence, minilm_golden[f"{batch}/sequence_output"],
                     inputs["input_mask"]) <= TOLERANCE
    assert _max_diff(out["pooled_output"], minilm_golden[f"{batch}/pooled_output"]) <= TOLERANCE


def test_minilm_google_format_same_outputs(tmp_path, minilm_encoder, minilm_golden):
    """The same weights written as a TF1 checkpoint under Google's names load identically."""
    import tensorflow as tf

    tfbert.save_pretrained(minilm_encoder, str(tmp_path / "google"), format="google",
                           approximate_activation=True)  # (tfbert reads the exact GELU back)
    names = tf.train.load_checkpoint(str(tmp_path / "google" / "bert_model.ckpt"))
    assert names.get_variable_to_shape_map()[
        "bert/encoder/layer_5/attention/self/query/kernel"] == [384, 384]
    encoder = tfbert.from_pretrained(str(tmp_path / "google"))
    assert encoder.config == minilm_encoder.config
    for batch in ("single", "pair"):
        inputs = {k: minilm_golden[f"{batch}/{k}"] for k in INPUTS}
        expected, out = _run(minilm_encoder, inputs), _run(encoder, inputs)
        assert _max_diff(out["sequence_output"], expected["sequence_output"]) <= 1e-6
        assert _max_diff(out["pooled_output"], expected["pooled_output"]) <= 1e-6
        assert _max_diff(out["pooled_output"],
                         minilm_golden[f"{batch}/pooled_output"]) <= TOLERANCE


def test_tiny_pretrainer_matches_golden():
    """BertForPreTraining's heads: MLM transform + tied decoder + bias, NSP on pooled output."""
    golden = _golden("tiny_pretraining_golden.npz")
    model = tfbert.BertPretrainer.from_pretrained(TINY)
    out = _run(model, {k: golden[k] for k in (*INPUTS, "masked_lm_positions")})
    assert _max_diff(out["mlm_logits"], golden["mlm_logits"]) <= TOLERANCE
    assert _max_diff(out["nsp_logits"], golden["nsp_logits"]) <= TOLERANCE
    encoded = _run(model.encoder, {k: golden[k] for k in INPUTS})
    assert _max_diff(encoded["sequence_output"], golden["sequence_output"],
                     golden["input_mask"]) <= TOLERANCE
    assert _max_diff(encoded["pooled_output"], golden["pooled_output"]) <= TOLERANCE


def test_tiny_pretrainer_google_round_trip(tmp_path):
    golden = _golden("tiny_pretraining_golden.npz")
    inputs = {k: golden[k] for k in (*INPUTS, "masked_lm_positions")}
    model = tfbert.BertPretrainer.from_pretrained(TINY)
    tfbert.save_pretrained(model, str(tmp_path / "g"), format="google",
                           approximate_activation=True)  # (tfbert reads the exact GELU back)
    reloaded = tfbert.BertPretrainer.from_pretrained(str(tmp_path / "g"))
    for key, value in _run(model, inputs).items():
        assert _max_diff(_run(reloaded, inputs)[key], value) <= 1e-6, key


# --- full comparisons against the reference (need torch + transformers) -----------------------


def _torch_bert(path: str, cls_name: str = "BertModel"):
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    return getattr(transformers, cls_name).from_pretrained(path).eval()


def _torch_run(model, batch: dict, **kwargs):
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                     attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
                     token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long),
                     **kwargs)


def test_minilm_matches_transformers(minilm_dir, minilm_encoder, minilm_golden):
    reference = _torch_bert(minilm_dir)
    for batch in ("single", "pair"):
        inputs = {k: minilm_golden[f"{batch}/{k}"] for k in INPUTS}
        expected = _torch_run(reference, inputs, output_hidden_states=True)
        out = minilm_encoder(inputs, training=False)
        mask = inputs["input_mask"]
        assert _max_diff(out["sequence_output"], expected.last_hidden_state.numpy(),
                         mask) <= TOLERANCE
        assert _max_diff(out["pooled_output"], expected.pooler_output.numpy()) <= TOLERANCE
        for ours, theirs in zip(out["encoder_outputs"], expected.hidden_states[1:], strict=True):
            assert _max_diff(ours, theirs.numpy(), mask) <= TOLERANCE


@pytest.mark.slow  # 33 s; the fast parity tests read transformers' checkpoints
def test_save_pretrained_is_readable_by_transformers(tmp_path):
    """A tfbert directory (with its `head.*` and tfbert.json extras) loads in transformers."""
    golden = _golden("tiny_pretraining_golden.npz")
    inputs = {k: golden[k] for k in INPUTS}
    model = tfbert.BertPretrainer.from_pretrained(TINY)
    classifier = tfbert.BertClassifier(model.encoder, num_classes=3)
    tfbert.save_pretrained(classifier, str(tmp_path / "clf"), vocab_file=f"{TINY}/vocab.txt")
    tfbert.save_pretrained(model, str(tmp_path / "pre"))
    ours = _run(model.encoder, inputs)
    reference = _torch_run(_torch_bert(str(tmp_path / "clf")), inputs)
    assert _max_diff(ours["sequence_output"], reference.last_hidden_state.numpy(),
                     inputs["input_mask"]) <= TOLERANCE
    assert _max_diff(ours["pooled_output"], reference.pooler_output.numpy()) <= TOLERANCE
    pretraining = _torch_run(_torch_bert(str(tmp_path / "pre"), "BertForPreTraining"), inputs)
    positions = golden["masked_lm_positions"]
    mlm = np.take_along_axis(pretraining.prediction_logits.numpy(), positions[:, :, None], 1)
    assert _max_diff(mlm, golden["mlm_logits"]) <= TOLERANCE
    assert _max_diff(pretraining.seq_relationship_logits.numpy(), golden["nsp_logits"]) <= TOLERANCE


# --- keras-hub --------------------------------------------------------------------------------


def _tiny_backbone():
    import keras
    import keras_hub

    keras.utils.set_random_seed(1)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=60, num_layers=2, num_heads=4, hidden_dim=32, intermediate_dim=64,
        max_sequence_length=24, num_segments=2)
    rng = np.random.default_rng(0)
    for variable in backbone.weights:  # non-zero biases and LayerNorm weights too
        variable.assign(rng.normal(0, 0.2, tuple(variable.shape)).astype(np.float32))
    return backbone


def _keras_hub_inputs():
    mask = np.array([[1] * 10, [1] * 6 + [0] * 4], np.int32)
    ids = np.random.default_rng(1).integers(1, 60, (2, 10)).astype(np.int32) * mask
    segments = np.array([[0] * 5 + [1] * 5, [0] * 3 + [1] * 3 + [0] * 4], np.int32)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def test_keras_hub_backbone_to_tfbert(tmp_path):
    backbone = _tiny_backbone()
    inputs = _keras_hub_inputs()
    expected = backbone({"token_ids": inputs["input_ids"], "segment_ids": inputs["segment_ids"],
                         "padding_mask": inputs["input_mask"]}, training=False)
    encoder = tfbert.from_pretrained(backbone)
    assert encoder.config.hidden_act == "gelu_tanh"  # keras-hub's gelu_approximate
    assert encoder.config.max_position_embeddings == 24
    out = _run(encoder, inputs)
    mask = inputs["input_mask"]
    assert _max_diff(out["sequence_output"], expected["sequence_output"], mask) <= 1e-5
    assert _max_diff(out["pooled_output"], expected["pooled_output"]) <= 1e-5

    backbone.save_to_preset(str(tmp_path / "preset"))
    assert checkpoints.detect_format(str(tmp_path / "preset")) == "keras_hub"
    from_preset = _run(tfbert.from_pretrained(str(tmp_path / "preset")), inputs)
    assert _max_diff(from_preset["pooled_output"], out["pooled_output"]) <= 1e-6


def test_tfbert_to_keras_hub_backbone():
    from tfbert.checkpoints import keras_hub as kh

    checkpoint = checkpoints.read_checkpoint(_tiny_backbone())
    backbone = kh.write_backbone(checkpoint)
    again = kh.read_backbone(backbone)
    assert sorted(again.weights) == sorted(checkpoint.weights)
    for key, value in checkpoint.weights.items():
        np.testing.assert_array_equal(again.weights[key], value, err_msg=key)
    with pytest.raises(checkpoints.CheckpointError, match="tanh GELU"):
        kh.write_backbone(checkpoints.read_checkpoint(TINY))
