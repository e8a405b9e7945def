"""Damaged checkpoints are one line naming the file and what is wrong, and a missing or empty
init_checkpoint is named before any vocab is looked for beside it."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import tfbert
from tfbert import checkpoints
from tfbert.checkpoints.canonical import CheckpointError
from tfbert.errors import UserError, run_cli
from tfbert.tasks.classification import ClassificationConfig, run_classification
from tfbert.training import model_source

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
TINY = os.path.join(DATA, "tiny_pretraining")  # HF: config.json + model.safetensors (106688 B)
GOOGLE = os.path.join(DATA, "google_heads", "classifier")  # bert_model.ckpt.data: 97036 B
SAFETENSORS_SIZE, DATA_SIZE = 106688, 97036
DATA_FILE = "bert_model.ckpt.data-00000-of-00001"


def _copy(source: str, tmp_path, name: str = "ckpt") -> str:
    target = str(tmp_path / name)
    shutil.copytree(source, target)
    return target


def _truncate(path: str, size: int) -> None:
    os.truncate(path, size)


def test_fixture_sizes():
    """The sizes the messages below quote are the fixtures' own."""
    assert os.path.getsize(os.path.join(TINY, "model.safetensors")) == SAFETENSORS_SIZE
    assert os.path.getsize(os.path.join(GOOGLE, DATA_FILE)) == DATA_SIZE


@pytest.mark.parametrize("size, problem", [
    (0, "0 bytes, shorter than the 8 bytes that give its header's length"),
    (5, "5 bytes, shorter than the 8 bytes that give its header's length"),
    (200, "200 bytes, its header alone takes 4824"),
    (50000, f"50000 bytes, its header expects {SAFETENSORS_SIZE}"),
    (SAFETENSORS_SIZE - 1, f"{SAFETENSORS_SIZE - 1} bytes, its header expects "
                           f"{SAFETENSORS_SIZE}"),
])
def test_truncated_safetensors(tmp_path, size, problem):
    path = _copy(TINY, tmp_path)
    weights = os.path.join(path, "model.safetensors")
    _truncate(weights, size)
    with pytest.raises(CheckpointError) as error:
        tfbert.from_pretrained(path)
    assert str(error.value) == f"{weights} is damaged or truncated: {problem}"


def test_garbage_safetensors_keeps_the_readers_reason(tmp_path):
    path = _copy(TINY, tmp_path)
    weights = os.path.join(path, "model.safetensors")
    with open(weights, "wb") as f:
        f.write(b"\xff" * 64)  # a header length no safetensors file has
    with pytest.raises(CheckpointError, match=r"model\.safetensors is damaged or truncated: "
                                              r".*\(not a safetensors file\?\)$"):
        checkpoints.read_checkpoint(path)


def test_truncated_tfbert_model_in_load_model(tmp_path):
    """tfbert's own format (save_pretrained / load_model) reads the same file the same way."""
    encoder = tfbert.from_pretrained(TINY)
    out = str(tmp_path / "saved")
    tfbert.save_pretrained(encoder, out, vocab_file=os.path.join(TINY, "vocab.txt"))
    weights = os.path.join(out, "model.safetensors")
    size = os.path.getsize(weights)
    _truncate(weights, size - 10)
    with pytest.raises(CheckpointError) as error:
        checkpoints.load_model(out)
    assert str(error.value) == (f"{weights} is damaged or truncated: {size - 10} bytes, its "
                                f"header expects {size}")


def test_tensor_of_the_wrong_shape_is_named(tmp_path):
    """A safetensors file whose header is sound but one tensor's shape is not the config's."""
    path = _copy(TINY, tmp_path)
    weights = os.path.join(path, "model.safetensors")
    state = load_file(weights)
    name = "bert.encoder.layer.1.attention.self.query.weight"
    state[name] = np.zeros((32, 16), np.float32)
    save_file(state, weights)
    with pytest.raises(CheckpointError) as error:
        tfbert.from_pretrained(path)
    message = str(error.value)
    assert message.startswith(f"{weights}: 1 weight(s) do not match the config")
    assert ("encoder.layer.1.attention.self.query.weight: config expects (32, 32), "
            "checkpoint has (32, 16)") in message


@pytest.mark.parametrize("size", [0, 1000, 50000, DATA_SIZE - 1])
def test_truncated_google_data(tmp_path, size):
    path = _copy(GOOGLE, tmp_path)
    data = os.path.join(path, DATA_FILE)
    _truncate(data, size)
    with pytest.raises(CheckpointError) as error:
        tfbert.from_pretrained(path)
    assert str(error.value) == f"{data}: truncated ({size} bytes, the index expects {DATA_SIZE})"


@pytest.mark.parametrize("size, reason", [(0, "file is too short to be an sstable"),
                                          (800, r"not an sstable \(bad magic number\)")])
def test_truncated_google_index(tmp_path, size, reason):
    path = _copy(GOOGLE, tmp_path)
    index = os.path.join(path, "bert_model.ckpt.index")
    _truncate(index, size)
    with pytest.raises(CheckpointError, match=rf"^{index} is damaged or truncated \({size} "
                                              rf"bytes\): {reason}; cannot read the TF "):
        tfbert.from_pretrained(path)


def test_damaged_google_data_names_the_tensor(tmp_path):
    """Bytes changed in place (same size): TF's checksum catches it, the message names the
    shard and the tensor."""
    path = _copy(GOOGLE, tmp_path)
    data = os.path.join(path, DATA_FILE)
    with open(data, "r+b") as f:
        f.seek(50000)
        f.write(b"\xff\xff\xff\xff")
    with pytest.raises(CheckpointError, match=rf"^{data}: damaged at tensor bert/\S+ \(.*"
                                              r"Checksum does not match"):
        tfbert.from_pretrained(path)


def test_missing_google_data_shard(tmp_path):
    path = _copy(GOOGLE, tmp_path)
    os.remove(os.path.join(path, DATA_FILE))
    with pytest.raises(CheckpointError) as error:
        tfbert.from_pretrained(path)
    assert str(error.value) == (f"{path}/bert_model.ckpt.data-00000-of-00001: no such file "
                                "(the tensors of bert_model.ckpt.index); cannot read the TF "
                                "checkpoint")


# --- init_checkpoint of a run ----------------------------------------------------------------


def test_init_checkpoint_missing_or_holding_nothing(tmp_path):
    missing = str(tmp_path / "nothere")
    with pytest.raises(UserError) as error:
        model_source.checkpoint_vocab(missing)  # before looking for vocab.txt beside it
    assert str(error.value) == f"init_checkpoint {missing}: no such file or folder"

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match=rf"^init_checkpoint {empty} holds no checkpoint tfbert "
                                        r"reads .*Files present: \[\]$"):
        model_source.checkpoint_vocab(str(empty))

    config_only = _copy(TINY, tmp_path, "config_only")
    os.remove(os.path.join(config_only, "model.safetensors"))
    with pytest.raises(UserError, match=rf"^init_checkpoint {config_only}: Hugging Face "
                                        r"directory has config.json but no weights"):
        model_source.check_init_checkpoint(config_only)

    bert_config_only = _copy(GOOGLE, tmp_path, "google_config_only")
    for name in os.listdir(bert_config_only):
        if name.startswith("bert_model.ckpt"):
            os.remove(os.path.join(bert_config_only, name))
    with pytest.raises(UserError, match=rf"^init_checkpoint {bert_config_only}: no TF "
                                        "checkpoint found"):
        model_source.check_init_checkpoint(bert_config_only)

    for fine in (TINY, GOOGLE, os.path.join(GOOGLE, "bert_model.ckpt"), "gs://bucket/ckpt",
                 None):
        model_source.check_init_checkpoint(fine)  # no error


def _classifier(tmp_path, **kwargs) -> ClassificationConfig:
    return ClassificationConfig(output_dir=str(tmp_path / "out"), task_name="sentiment",
                                max_seq_length=16, max_train_examples=8, max_eval_examples=8,
                                distribution_strategy="one_device", verbose=0, **kwargs)


@pytest.mark.parametrize("do_train", [True, False])
def test_run_with_a_missing_init_checkpoint_is_one_line(tmp_path, capsys, do_train):
    """What run_classifier.py prints: the init_checkpoint named first, exit 2 (it once said
    "no vocab.txt in .")."""
    config = _classifier(tmp_path, init_checkpoint="nothere", do_train=do_train)
    with pytest.raises(SystemExit) as exit_:
        run_cli(run_classification, config, prog="run_classifier.py")
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("run_classifier.py: error: init_checkpoint nothere: no such "
                               "file or folder")


def test_run_with_a_truncated_init_checkpoint_is_one_line(tmp_path, capsys):
    path = _copy(TINY, tmp_path)
    weights = os.path.join(path, "model.safetensors")
    _truncate(weights, 50000)
    config = _classifier(tmp_path, init_checkpoint=path)
    with pytest.raises(SystemExit) as exit_:
        run_cli(run_classification, config, prog="run_classifier.py")
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"run_classifier.py: error: {weights} is damaged or truncated: "
                               f"50000 bytes, its header expects {SAFETENSORS_SIZE}")


def test_truncated_keras_hub_preset(tmp_path):
    pytest.importorskip("keras_hub")
    from tfbert.checkpoints import keras_hub

    backbone = keras_hub.write_backbone(checkpoints.read_checkpoint(GOOGLE))  # tanh GELU
    path = str(tmp_path / "preset")
    backbone.save_to_preset(path)
    weights = os.path.join(path, "model.weights.h5")
    size = os.path.getsize(weights)
    _truncate(weights, size // 2)
    with pytest.raises(CheckpointError) as error:
        tfbert.from_pretrained(path)
    assert str(error.value) == f"{weights}: truncated ({size // 2} bytes, the file says {size})"
