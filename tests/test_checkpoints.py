"""Checkpoint readers/writers (HF, Google TF1, keras-hub, tfbert's own format) and their errors.

Parity with the reference implementation lives in test_parity.py.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import tfbert
from tfbert import checkpoints
from tfbert.checkpoints import google, hf, names
from tfbert.checkpoints.canonical import CheckpointError
from tfbert.config import BertConfig
from tfbert.models import weights as model_weights

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
TINY = os.path.join(DATA, "tiny_pretraining")  # a random BertForPreTraining saved by transformers


def _assert_same_weights(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def _copy_tiny(tmp_path, name="tiny") -> str:
    target = str(tmp_path / name)
    shutil.copytree(TINY, target)
    return target


def _rewrite_state(path: str, edit) -> None:
    """Loads model.safetensors of a directory, applies edit(state) and writes it back."""
    state = load_file(os.path.join(path, "model.safetensors"))
    edit(state)
    save_file(state, os.path.join(path, "model.safetensors"))


# --- Hugging Face ---------------------------------------------------------------------------


def test_read_hf_minilm(minilm_dir):
    checkpoint = checkpoints.read_checkpoint(minilm_dir)
    checkpoint.check()
    config = checkpoint.config
    assert checkpoint.format == "hf"
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
            config.intermediate_size, config.vocab_size) == (6, 384, 12, 1536, 30522)
    assert config.hidden_act == "gelu" and config.lower_case  # from tokenizer_config.json
    assert checkpoint.vocab_file == os.path.join(minilm_dir, "vocab.txt")
    assert len(checkpoint.weights) == 5 + 6 * 16 + 2  # position_ids buffer dropped
    assert not checkpoint.has_mlm and not checkpoint.has_nsp
    raw = load_file(os.path.join(minilm_dir, "model.safetensors"))
    np.testing.assert_array_equal(checkpoint.weights["encoder.layer.3.attention.self.key.weight"],
                                  raw["encoder.layer.3.attention.self.key.weight"])


def test_hf_round_trip_is_identical(tmp_path, minilm_dir):
    first = checkpoints.read_checkpoint(minilm_dir)
    hf.write_hf(first, str(tmp_path / "out"))
    written = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert "bert.embeddings.word_embeddings.weight" in written
    second = checkpoints.read_checkpoint(str(tmp_path / "out"))
    assert second.config == first.config
    _assert_same_weights(first.weights, second.weights)
    with open(tmp_path / "out" / "tokenizer_config.json") as f:
        assert json.load(f)["do_lower_case"] is True
    assert (tmp_path / "out" / "vocab.txt").read_text() == open(first.vocab_file).read()


def test_hf_key_variants(tmp_path, caplog):
    """No `bert.` prefix, old LayerNorm gamma/beta, tied decoder weight/bias, a foreign head."""
    reference = checkpoints.read_checkpoint(TINY).weights
    path = _copy_tiny(tmp_path)

    def edit(state):
        for key in list(state):
            value = state.pop(key)
            key = key.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
                "LayerNorm.bias", "LayerNorm.beta")
            state[key[len("bert."):] if key.startswith("bert.") else key] = value
        state["embeddings.position_ids"] = np.arange(64, dtype=np.int64)[None]
        state["cls.predictions.decoder.weight"] = state["embeddings.word_embeddings.weight"]
        state["cls.predictions.decoder.bias"] = state.pop("cls.predictions.bias")

    _rewrite_state(path, edit)
    checkpoint = checkpoints.read_checkpoint(path)
    checkpoint.check()
    _assert_same_weights(reference, checkpoint.weights)

    def add_classifier(state):
        for key in list(state):
            if not key.startswith("cls."):
                state["bert." + key] = state.pop(key)
        state["classifier.weight"] = np.ones((3, 32), np.float32)

    _rewrite_state(path, add_classifier)
    with caplog.at_level(logging.INFO, logger="tfbert.checkpoints"):
        checkpoint = checkpoints.read_checkpoint(path)
        checkpoint.check()
    assert list(checkpoint.foreign) == ["classifier.weight"]
    assert "classifier.weight" in caplog.text


def test_hf_untied_decoder_warns(tmp_path, caplog):
    path = _copy_tiny(tmp_path)
    _rewrite_state(path, lambda s: s.__setitem__(
        "cls.predictions.decoder.weight", s["bert.embeddings.word_embeddings.weight"] + 1))
    with caplog.at_level(logging.WARNING, logger="tfbert.checkpoints"):
        checkpoints.read_checkpoint(path).check()
    assert "cls.predictions.decoder.weight differs from the word embeddings" in caplog.text


def test_hf_pytorch_bin(tmp_path, monkeypatch):
    path = _copy_tiny(tmp_path)
    state = load_file(os.path.join(path, "model.safetensors"))
    os.remove(os.path.join(path, "model.safetensors"))
    torch = pytest.importorskip("torch")
    torch.save({k: torch.from_numpy(v) for k, v in state.items()},
               os.path.join(path, "pytorch_model.bin"))
    _assert_same_weights(checkpoints.read_checkpoint(TINY).weights,
                         checkpoints.read_checkpoint(path).weights)
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    with pytest.raises(CheckpointError, match="pytorch_model.bin needs torch"):
        checkpoints.read_checkpoint(path)


def test_hf_sharded_safetensors(tmp_path):
    path = _copy_tiny(tmp_path)
    state = load_file(os.path.join(path, "model.safetensors"))
    os.remove(os.path.join(path, "model.safetensors"))
    keys = sorted(state)
    weight_map = {}
    for i, part in enumerate((keys[: len(keys) // 2], keys[len(keys) // 2:])):
        shard = f"model-0000{i + 1}-of-00002.safetensors"
        save_file({k: state[k] for k in part}, os.path.join(path, shard))
        weight_map.update({k: shard for k in part})
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": weight_map}, f)
    _assert_same_weights(checkpoints.read_checkpoint(TINY).weights,
                         checkpoints.read_checkpoint(path).weights)


# --- Google TF1 -----------------------------------------------------------------------------


def test_google_round_trip_with_heads(tmp_path):
    import tensorflow as tf

    first = checkpoints.read_checkpoint(TINY)
    prefix = google.write_google(first, str(tmp_path / "g"), approximate_activation=True)
    assert sorted(os.listdir(tmp_path / "g")) == [
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
        "vocab.txt"]
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    assert len(shapes) == len(first.weights) == 5 + 2 * 16 + 2 + 5 + 2
    query = first.weights["encoder.layer.1.attention.self.query.weight"]
    np.testing.assert_array_equal(
        reader.get_tensor("bert/encoder/layer_1/attention/self/query/kernel"), query.T)
    assert shapes["bert/encoder/layer_0/intermediate/dense/kernel"] == [32, 64]  # [in, out]
    assert shapes["cls/seq_relationship/output_weights"] == [2, 32]
    assert shapes["cls/predictions/output_bias"] == [120]
    np.testing.assert_array_equal(reader.get_tensor("bert/embeddings/LayerNorm/gamma"),
                                  first.weights["embeddings.LayerNorm.weight"])
    second = checkpoints.read_checkpoint(str(tmp_path / "g"))
    assert second.format == "google" and second.config == first.config
    _assert_same_weights(first.weights, second.weights)
    assert checkpoints.read_checkpoint(prefix).config == first.config  # the prefix works too


def _save_v2(prefix: str, tensors: dict) -> None:
    import tensorflow as tf

    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=list(tensors),
                      shape_and_slices=[""] * len(tensors), tensors=list(tensors.values()))


def _google_tensors(weights: dict, num_layers: int) -> dict:
    out = {}
    for entry in names.all_entries(num_layers):
        if entry.canonical in weights:
            value = weights[entry.canonical]
            out[entry.google] = value.T if entry.transpose else value
    return out


def test_google_training_checkpoint_skips_optimizer_state(tmp_path):
    """A real pretraining checkpoint also holds adam_m/adam_v slots and global_step."""
    config = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                        hidden_act="gelu_tanh")
    weights = checkpoints.read_checkpoint(TINY).weights
    tensors = _google_tensors(weights, 2)
    for name in list(tensors):
        tensors[name + "/adam_m"] = np.zeros_like(tensors[name])
        tensors[name + "/adam_v"] = np.ones_like(tensors[name])
    tensors["global_step"] = np.array(1000, np.int64)
    directory = tmp_path / "uncased_L-2_H-32_A-4"
    directory.mkdir()
    _save_v2(str(directory / "model.ckpt-1000"), tensors)
    with open(directory / "checkpoint", "w") as f:
        f.write('model_checkpoint_path: "model.ckpt-1000"\n')
    config.to_json_file(str(directory / "bert_config.json"), "google")
    checkpoint = checkpoints.read_checkpoint(str(directory))
    checkpoint.check()
    _assert_same_weights(weights, checkpoint.weights)
    assert checkpoint.config.hidden_act == "gelu_tanh"  # Google's "gelu"
    assert checkpoint.config.lower_case  # Google's rule: an "uncased_L-" model


def test_google_lower_case_from_vocab(tmp_path):
    config = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                        hidden_act="gelu_tanh")
    directory = tmp_path / "my_model"
    directory.mkdir()
    config.to_json_file(str(directory / "bert_config.json"), "google")
    cased = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [
        w for w in ("The", "And", "Paris", "London", "He", "She", "It", "We", "They", "You",
                    "Berlin", "Rome")]
    (directory / "vocab.txt").write_text("\n".join(cased) + "\n")
    assert google.read_config(str(directory), str(directory / "vocab.txt")).lower_case is False
    (directory / "vocab.txt").write_text("\n".join(w.lower() for w in cased) + "\n")
    assert google.read_config(str(directory), str(directory / "vocab.txt")).lower_case is True


# --- errors ---------------------------------------------------------------------------------


def test_missing_path():
    with pytest.raises(FileNotFoundError, match="checkpoint path not found: /no/such/dir"):
        checkpoints.read_checkpoint("/no/such/dir")


def test_unknown_format(tmp_path):
    (tmp_path / "weights.h5").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"unknown checkpoint format.*weights\.h5"):
        checkpoints.read_checkpoint(str(tmp_path))
    with pytest.raises(CheckpointError, match="is a file"):
        checkpoints.read_checkpoint(str(tmp_path / "weights.h5"))
    with pytest.raises(CheckpointError, match="keras_hub.models.BertBackbone"):
        checkpoints.read_checkpoint(42)


def test_missing_files(tmp_path):
    path = _copy_tiny(tmp_path)
    os.remove(os.path.join(path, "model.safetensors"))
    with pytest.raises(CheckpointError, match="has config.json but no weights.*model.safetensors"):
        checkpoints.read_checkpoint(path)

    checkpoint = checkpoints.read_checkpoint(TINY)
    google.write_google(checkpoint, str(tmp_path / "g"), approximate_activation=True)
    os.remove(tmp_path / "g" / "bert_config.json")
    with pytest.raises(CheckpointError, match="missing bert_config.json"):
        checkpoints.read_checkpoint(str(tmp_path / "g"))

    google.write_google(checkpoint, str(tmp_path / "g2"), approximate_activation=True)
    for name in os.listdir(tmp_path / "g2"):
        if name.startswith("bert_model.ckpt"):
            os.remove(tmp_path / "g2" / name)
    with pytest.raises(CheckpointError, match="no TF checkpoint found"):
        checkpoints.read_checkpoint(str(tmp_path / "g2"))

    google.write_google(checkpoint, str(tmp_path / "g3"), approximate_activation=True)
    os.remove(tmp_path / "g3" / "bert_model.ckpt.data-00000-of-00001")
    with pytest.raises(CheckpointError, match="cannot read the TF checkpoint"):
        checkpoints.read_checkpoint(str(tmp_path / "g3"))


def test_wrong_shapes_are_listed(tmp_path):
    path = _copy_tiny(tmp_path)
    with open(os.path.join(path, "config.json")) as f:
        values = json.load(f)
    values["intermediate_size"] = 128
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(values, f)
    with pytest.raises(CheckpointError) as error:
        checkpoints.read_checkpoint(path).check()
    message = str(error.value)
    assert "6 weight(s) do not match the config" in message
    assert "intermediate_size=128" in message
    assert ("encoder.layer.1.intermediate.dense.weight: config expects (128, 32), "
            "checkpoint has (64, 32)") in message
    assert "encoder.layer.0.output.dense.weight: config expects (32, 128)" in message
    assert "encoder.layer.0.intermediate.dense.bias: config expects (128,)" in message


def test_missing_and_unused_are_listed(tmp_path, caplog):
    path = _copy_tiny(tmp_path)

    def edit(state):
        del state["bert.encoder.layer.1.output.LayerNorm.weight"]
        del state["bert.pooler.dense.bias"]
        del state["cls.predictions.transform.dense.bias"]
        state["bert.encoder.layer.2.output.dense.weight"] = np.zeros((32, 64), np.float32)
        state["cls.extra"] = np.zeros((3,), np.float32)

    _rewrite_state(path, edit)
    checkpoint = checkpoints.read_checkpoint(path)
    with pytest.raises(CheckpointError) as error:
        checkpoint.check()
    message = str(error.value)
    assert "3 variable(s) missing" in message
    for name in ("encoder.layer.1.output.LayerNorm.weight", "pooler.dense.bias",
                 "cls.predictions.transform.dense.bias", "encoder.layer.2.output.dense.weight",
                 "cls.extra"):
        assert name in message
    assert "2 variable(s) that belong to no BERT weight (unused)" in message
    with caplog.at_level(logging.WARNING, logger="tfbert.checkpoints"):
        checkpoint.check(strict=False)
    assert "pooler.dense.bias" in caplog.text


def test_google_unused_variables_are_listed(tmp_path):
    checkpoint = checkpoints.read_checkpoint(TINY)
    tensors = _google_tensors(checkpoint.weights, 2)
    tensors["bert/encoder/layer_2/output/dense/kernel"] = np.zeros((64, 32), np.float32)
    tensors["answer_class/kernel"] = np.zeros((32, 5), np.float32)
    _save_v2(str(tmp_path / "bert_model.ckpt"), tensors)
    checkpoint.config.to_json_file(str(tmp_path / "bert_config.json"), "tfbert")
    with pytest.raises(CheckpointError, match=r"2 variable\(s\) that belong to no BERT weight"
                                              r"(?s:.*)answer_class/kernel"):
        checkpoints.read_checkpoint(str(tmp_path)).check()


def test_non_float_weight_is_an_error(tmp_path):
    path = _copy_tiny(tmp_path)
    _rewrite_state(path, lambda s: s.__setitem__(
        "bert.pooler.dense.bias", np.zeros((32,), np.int32)))
    with pytest.raises(CheckpointError, match="bert.pooler.dense.bias has dtype int32"):
        checkpoints.read_checkpoint(path)


def test_bad_tfbert_metadata(tmp_path):
    path = _copy_tiny(tmp_path)
    (tmp_path / "tiny" / "tfbert.json").write_text('{"format_version": 7}')
    with pytest.raises(CheckpointError, match="format_version 7 is not supported"):
        checkpoints.read_checkpoint(path)
    with pytest.raises(CheckpointError, match="missing tfbert.json"):
        checkpoints.read_metadata(TINY)


# --- Keras models: from_pretrained, save_pretrained, load_model ------------------------------


def _tiny_inputs(with_positions: bool = False) -> dict:
    mask = np.array([[1] * 8, [1] * 5 + [0] * 3], np.int32)
    ids = np.random.default_rng(0).integers(5, 120, (2, 8)).astype(np.int32) * mask
    inputs = {"input_ids": ids, "input_mask": mask,
              "segment_ids": np.array([[0] * 4 + [1] * 4, [0] * 8], np.int32)}
    if with_positions:
        inputs["masked_lm_positions"] = np.array([[1, 3], [2, 4]], np.int32)
    return inputs


def _outputs(model, inputs) -> dict:
    out = model(inputs, training=False)
    out = out if isinstance(out, dict) else {"logits": out}
    return {k: np.asarray(v) for k, v in out.items() if not isinstance(v, list)}


def _assert_same_outputs(a, b, inputs) -> None:
    out_a, out_b = _outputs(a, inputs), _outputs(b, inputs)
    assert sorted(out_a) == sorted(out_b)
    for key in out_a:
        np.testing.assert_array_equal(out_a[key], out_b[key], err_msg=key)


def _tiny_encoder():
    return tfbert.from_pretrained(TINY)


def test_from_pretrained_copies_every_weight():
    checkpoint = checkpoints.read_checkpoint(TINY)
    encoder = tfbert.from_pretrained(TINY)
    assert isinstance(encoder, tfbert.BertEncoder) and encoder.config == checkpoint.config
    round_trip = model_weights.to_checkpoint(encoder).weights
    encoder_names = {k for k in checkpoint.weights if names.is_encoder(k)}
    assert set(round_trip) == encoder_names
    for key in encoder_names:
        np.testing.assert_array_equal(round_trip[key], checkpoint.weights[key], err_msg=key)
    query = encoder.transformer_layers[1].attention.query_dense.kernel  # [H, N, D]
    np.testing.assert_array_equal(
        np.asarray(query)[:, 2, :],
        checkpoint.weights["encoder.layer.1.attention.self.query.weight"][16:24].T)


@pytest.mark.parametrize("kind", ["pretrainer", "classifier", "token_classifier", "span"])
def test_save_pretrained_load_model_round_trip(tmp_path, kind):
    encoder = _tiny_encoder()
    model = {"pretrainer": lambda: tfbert.BertPretrainer(encoder),
             "classifier": lambda: tfbert.BertClassifier(
                 encoder, num_classes=3, head_hidden_layers=2, head_hidden_size=16, dropout=0.2),
             "token_classifier": lambda: tfbert.BertTokenClassifier(encoder, num_classes=5),
             "span": lambda: tfbert.BertSpanLabeler(encoder)}[kind]()
    rng = np.random.default_rng(0)  # random heads, so a head that did not load shows
    for variable in model.weights:
        if variable.path.startswith(("head_", "logits", "span_logits", "mlm_head", "nsp_head")):
            variable.assign(rng.normal(0, 0.5, tuple(variable.shape)).astype(np.float32))
    directory = str(tmp_path / kind)
    metadata = {"task": kind, "labels": ["a", "b", "c"], "max_seq_length": 8}
    tfbert.save_pretrained(model, directory, vocab_file=f"{TINY}/vocab.txt", metadata=metadata)
    assert sorted(os.listdir(directory)) == ["config.json", "model.safetensors", "tfbert.json",
                                             "tokenizer_config.json", "vocab.txt"]
    saved = checkpoints.read_metadata(directory)
    assert saved["model_class"] == type(model).__name__
    assert {k: saved[k] for k in metadata} == metadata and saved["format_version"] == 1
    assert "encoder" not in saved["model_config"]
    keys = load_file(os.path.join(directory, "model.safetensors"))
    assert "bert.encoder.layer.1.output.LayerNorm.weight" in keys
    if kind == "pretrainer":
        assert "cls.seq_relationship.weight" in keys and keys["cls.seq_relationship.weight"].shape \
            == (2, 32)
    if kind == "classifier":
        assert keys["head.head_hidden_1.kernel"].shape == (16, 16)
        assert saved["model_config"]["head_hidden_layers"] == 2

    loaded = checkpoints.load_model(directory)
    assert type(loaded) is type(model)
    assert loaded.get_config() | {"name": None} == model.get_config() | {"name": None}
    _assert_same_outputs(model, loaded, _tiny_inputs(kind == "pretrainer"))

    # The class's own from_pretrained on a tfbert dir of the same class restores the head too.
    again = type(model).from_pretrained(directory)
    _assert_same_outputs(model, again, _tiny_inputs(kind == "pretrainer"))


def test_model_from_pretrained_heads(tmp_path, caplog):
    inputs = _tiny_inputs()
    classifier = tfbert.BertClassifier.from_pretrained(TINY, num_classes=4)
    reference = _tiny_encoder()
    _assert_same_outputs(classifier.encoder, reference, inputs)
    tfbert.save_pretrained(classifier, str(tmp_path / "clf"))

    # A different num_classes cannot reuse the head: the encoder loads, the head starts fresh.
    with caplog.at_level(logging.WARNING, logger="tfbert.checkpoints"):
        other = tfbert.BertClassifier.from_pretrained(str(tmp_path / "clf"), num_classes=2)
    assert "does not fit BertClassifier(num_classes=2)" in caplog.text
    assert _outputs(other, inputs)["logits"].shape == (2, 2)
    _assert_same_outputs(other.encoder, reference, inputs)

    # A different task on the same directory: encoder only.
    tagger = tfbert.BertTokenClassifier.from_pretrained(str(tmp_path / "clf"), num_classes=3)
    _assert_same_outputs(tagger.encoder, reference, inputs)

    # BertPretrainer from a checkpoint without heads: encoder loads, heads logged as fresh.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tfbert.checkpoints"):
        pretrainer = tfbert.BertPretrainer.from_pretrained(str(tmp_path / "clf"))
    assert "has no masked-LM head" in caplog.text and "has no next-sentence head" in caplog.text
    _assert_same_outputs(pretrainer.encoder, reference, inputs)


def test_strict_false_keeps_initial_values(tmp_path, caplog):
    path = _copy_tiny(tmp_path)
    _rewrite_state(path, lambda s: (s.pop("bert.pooler.dense.weight"),
                                    s.pop("bert.pooler.dense.bias")))
    with pytest.raises(CheckpointError, match=r"2 variable\(s\) missing"):
        tfbert.from_pretrained(path)
    with caplog.at_level(logging.WARNING, logger="tfbert.checkpoints"):
        encoder = tfbert.from_pretrained(path, strict=False)
    assert "pooler.dense.weight" in caplog.text
    reference = _tiny_encoder()
    inputs = _tiny_inputs()
    np.testing.assert_array_equal(_outputs(encoder, inputs)["sequence_output"],
                                  _outputs(reference, inputs)["sequence_output"])


def test_save_pretrained_hf_format_round_trip(tmp_path):
    first = checkpoints.read_checkpoint(TINY)
    model = tfbert.BertPretrainer.from_pretrained(TINY)
    tfbert.save_pretrained(tfbert.BertClassifier(model.encoder, 2), str(tmp_path / "enc"),
                           format="hf")
    assert not os.path.exists(tmp_path / "enc" / "tfbert.json")
    assert not any(k.startswith("head.") for k in
                   load_file(str(tmp_path / "enc" / "model.safetensors")))
    tfbert.save_pretrained(model, str(tmp_path / "hf"), vocab_file=f"{TINY}/vocab.txt",
                           format="hf")
    second = checkpoints.read_checkpoint(str(tmp_path / "hf"))
    assert second.format == "hf" and second.config == first.config
    _assert_same_weights(first.weights, second.weights)
    hf.write_hf(second, str(tmp_path / "hf2"))  # read -> write -> read: identical arrays
    _assert_same_weights(second.weights, checkpoints.read_checkpoint(str(tmp_path / "hf2")).weights)
    with pytest.raises(ValueError, match="metadata is written to tfbert.json"):
        tfbert.save_pretrained(model, str(tmp_path / "x"), metadata={"a": 1}, format="hf")
    with pytest.raises(ValueError, match="reserved"):
        tfbert.save_pretrained(model, str(tmp_path / "x"), metadata={"model_class": "X"})


def test_load_model_refuses_mismatched_weights(tmp_path):
    encoder = _tiny_encoder()
    tfbert.save_pretrained(tfbert.BertClassifier(encoder, num_classes=3), str(tmp_path / "c"))
    _rewrite_state(str(tmp_path / "c"), lambda s: s.pop("head.logits.bias"))
    with pytest.raises(CheckpointError, match=r"1 model variable\(s\) missing(?s:.*)"
                                              r"head\.logits\.bias"):
        checkpoints.load_model(str(tmp_path / "c"))
    with pytest.raises(CheckpointError, match="missing tfbert.json"):
        checkpoints.load_model(TINY)


def test_hf_config_without_model_type(tmp_path):
    """pytorch-pretrained-bert's config.json: no model_type, and its "gelu" is exact erf."""
    path = _copy_tiny(tmp_path)
    with open(os.path.join(path, "config.json")) as f:
        values = json.load(f)
    del values["model_type"]
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(values, f)
    config = checkpoints.read_checkpoint(path).config
    assert config.hidden_act == "gelu" and config.hidden_size == 32 and config.lower_case
