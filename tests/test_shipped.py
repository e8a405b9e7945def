"""Shipped models (tfbert.checkpoints.shipped): loaded by name offline wherever a checkpoint
goes, checked against their SHA256SUMS, refused in one line when a file is changed or
truncated; and the shipped tfbert-chinese itself (its record, its corpus, its size)."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import tfbert
from tfbert.checkpoints import CheckpointError, resolve_source, shipped
from tfbert.training import release


@pytest.fixture()
def fake_shipped(tmp_path, monkeypatch, chinese_vocab_file):
    """A tiny model shipped as "tfbert-chinese" in a temporary package folder."""
    config = tfbert.BertConfig(vocab_size=8000, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=64)
    encoder = tfbert.BertEncoder(config)
    source = tmp_path / "run_model"
    tfbert.save_pretrained(encoder, str(source), vocab_file=chinese_vocab_file)
    folder = tmp_path / "shipped" / "tfbert-chinese"
    shutil.copytree(source, folder)
    release.half_precision(str(source / "model.safetensors"), str(folder / "model.safetensors"))
    sums = release.write_sums(str(folder))
    monkeypatch.setattr(shipped, "SHIPPED_DIR", str(tmp_path / "shipped"))
    monkeypatch.setattr(shipped, "SHIPPED", {"tfbert-chinese": sums})
    shipped._verify.cache_clear()
    return folder, encoder


def test_a_shipped_name_loads_offline_wherever_a_checkpoint_goes(fake_shipped):
    folder, encoder = fake_shipped
    assert resolve_source("tfbert-chinese") == str(folder)
    loaded = tfbert.from_pretrained("tfbert-chinese")
    for got, want in zip(loaded.get_weights(), encoder.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want.astype(np.float16).astype(np.float32))
    classifier = tfbert.BertClassifier.from_pretrained("tfbert-chinese", num_classes=3)
    assert classifier.encoder.config.num_hidden_layers == 2
    from tfbert.tasks.classification import ClassificationConfig
    from tfbert.training.pretrain import PretrainConfig

    for cls in (ClassificationConfig, PretrainConfig):
        config = cls(output_dir="o", init_checkpoint="tfbert-chinese",
                     **({"task_name": "sentiment"} if cls is ClassificationConfig else {}))
        assert config.init_checkpoint == str(folder)  # its vocab.txt is beside it


def test_an_unknown_name_lists_the_shipped_ones(fake_shipped):
    with pytest.raises(FileNotFoundError, match="nor a shipped model name: tfbert-chinese"):
        tfbert.from_pretrained("tfbert-klingon")


@pytest.mark.parametrize("damage", ["truncate", "change", "sums"])
def test_a_changed_or_truncated_file_is_one_line_naming_it(fake_shipped, damage):
    folder, _ = fake_shipped
    target = folder / ("SHA256SUMS" if damage == "sums" else "model.safetensors")
    data = target.read_bytes()
    if damage == "truncate":
        target.write_bytes(data[:len(data) // 2])
    else:
        target.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(CheckpointError) as info:
        tfbert.from_pretrained("tfbert-chinese")
    message = str(info.value)
    assert "\n" not in message and target.name in message and "reinstall" in message
    assert ("changed or truncated" in message) if damage != "sums" else "recorded" in message


# --- the shipped tfbert-chinese --------------------------------------------------------------

REAL = shipped.folder("tfbert-chinese")


def _record() -> dict:
    with open(os.path.join(REAL, "pretraining.json"), encoding="utf-8") as f:
        return json.load(f)


def test_tfbert_chinese_ships_checked_small_and_recorded():
    shipped._verify.cache_clear()
    assert shipped.SHIPPED["tfbert-chinese"], "the SHA256SUMS sha256 is recorded"
    assert resolve_source("tfbert-chinese") == REAL  # every file matches SHA256SUMS
    sizes = sum(os.path.getsize(os.path.join(REAL, n)) for n in os.listdir(REAL))
    assert sizes <= 20 * 2**20
    record = _record()
    assert record["bert_config"]["num_hidden_layers"] >= 6
    assert record["command"].startswith("make tfbert-chinese: python run_pretraining.py")
    assert record["wall_seconds"] > 0 and record["tokens_per_second"] > 0
    assert record["processor"]["model_name"] and record["versions"]["tensorflow"]
    with open(os.path.join(REAL, "curve.json"), encoding="utf-8") as f:
        curve = json.load(f)
    assert curve[-1]["step"] == record["steps"]
    assert curve[-1]["val_mlm_loss"] < curve[0]["val_mlm_loss"] - 1.0


def test_tfbert_chinese_was_pretrained_on_exactly_the_clean_corpus():
    from tfbert.data import splits

    assert _record()["corpus_sha256"] == splits.corpus_sha256(splits.pretraining_documents())
