"""Training as google-research/bert trains: tfbert under `optimizer="adamw_google"` against GR's
own runs, step by step.

The golden runs (tests/data/google_training/golden.json, final_weights.npz) are GR's
run_classifier / run_pretraining model_fn pieces and optimization.create_optimizer in plain TF1
session loops, GR's learning-rate race pinned (rate = schedule(step) for the step being taken),
made by tests/make_google_training_golden.py: batch 16, 100 steps, 10 warmup, dropout 0, from
the same Google checkpoints, on the same batches in the recorded order. Here tfbert's
BertClassifier / BertPretrainer load those checkpoints (dropout 0) and take the same steps with
`train_on_batch`.

Asserted: the loss of every step within 1e-5 relative of GR's, through all 100 steps at the
small rates (fine-tuning 2e-5, pretraining 5e-5) and through step 30 at 1e-3; the final
weights within 2e-5 (max abs) at the small rates. The default run takes the first 30 steps of
fine-tuning at 2e-5; the four full runs (and pretraining at 5e-5 under XLA) are `slow`:

    .venv/bin/python -m pytest -q -m slow tests/test_google_training.py
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import tfbert
from tfbert.pretraining_data import google_records

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
GOLDEN_DIR = os.path.join(DATA, "google_training")
with open(os.path.join(GOLDEN_DIR, "golden.json"), encoding="utf-8") as _f:
    GOLDEN = json.load(_f)
SETTINGS = GOLDEN["settings"]
RECORDS = os.path.join(DATA, "google_records", "pretrain.tfrecord")
LOSS_RTOL, WEIGHT_ATOL = 1e-5, 2e-5
SMALL_RATES = {"finetune": 2e-5, "pretrain": 5e-5}
LARGE_RATE_STEPS = 30  # at 1e-3 float noise grows with the steps; asserted this far


def _run_name(kind: str, rate: float) -> str:
    return f"{kind}_lr{rate:g}"


def _data(kind: str) -> dict[str, np.ndarray]:
    """Fine-tuning: the stored examples. Pretraining: GR's records, in file order."""
    if kind == "finetune":
        with np.load(os.path.join(GOLDEN_DIR, "finetune_data.npz")) as data:
            return {k: data[k] for k in data.files}
    spec = google_records.feature_spec(32, 5)
    batch = next(iter(tf.data.TFRecordDataset(RECORDS).batch(1000).map(
        lambda r: tf.io.parse_example(r, spec))))
    return {k: v.numpy().astype(np.float32 if v.dtype == tf.float32 else np.int32)
            for k, v in batch.items()}


def _model(kind: str):
    """The model GR's run starts from: the same checkpoint, dropout 0."""
    path = os.path.join(DATA, *GOLDEN["checkpoints"][kind].split("/")[2:])
    config = tfbert.BertConfig.from_json_file(os.path.join(path, "bert_config.json"))
    config = dataclasses.replace(config, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.0)
    if kind == "finetune":
        return tfbert.BertClassifier.from_pretrained(path, config=config, dropout=0.0)
    return tfbert.BertPretrainer.from_pretrained(path, config=config)


def _train(kind: str, rate: float, steps: int, optimizer: str = "adamw_google",
           jit_compile: bool = False):
    """tfbert's run of `steps` steps: (model, per-step losses)."""
    from tfbert.training.optimization import create_optimizer

    data = _data(kind)
    model = _model(kind)
    model.compile(optimizer=create_optimizer(
        rate, num_train_steps=SETTINGS["num_train_steps"],
        num_warmup_steps=SETTINGS["num_warmup_steps"], optimizer=optimizer,
        weight_decay=SETTINGS["weight_decay_rate"], epsilon=SETTINGS["epsilon"],
        clip_norm=SETTINGS["clip_norm"], variables=model.trainable_variables),
        jit_compile=jit_compile)
    losses = []
    for rows in GOLDEN["orders"][kind][:steps]:
        batch = {k: v[rows] for k, v in data.items()}
        if kind == "finetune":
            labels = batch.pop("label_ids")
            logs = model.train_on_batch(batch, labels, return_dict=True)
        else:
            logs = model.train_on_batch(batch, return_dict=True)
        losses.append(float(logs["loss"]))
    return model, np.array(losses)


def _google_weights(model, directory: str) -> dict[str, np.ndarray]:
    """The model's variables under GR's names (tfbert's Google writer)."""
    tfbert.save_pretrained(model, directory, format="google")
    reader = tf.train.load_checkpoint(os.path.join(directory, "bert_model.ckpt"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def _relative(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return np.abs(got - want) / np.abs(want)


def _assert_losses(got: np.ndarray, want: np.ndarray, name: str) -> None:
    error = _relative(got, np.array(want[:len(got)]))
    worst = int(np.argmax(error))
    assert error[worst] <= LOSS_RTOL, (
        f"{name}: step {worst} loss {got[worst]:.8g} vs GR {want[worst]:.8g} "
        f"(relative {error[worst]:.3g}); first step over {LOSS_RTOL}: "
        f"{int(np.argmax(error > LOSS_RTOL))}")


def test_fixture_schedule_is_google_research_bert_s():
    """The recorded rates are GR's schedule: warmup, then peak * (1 - s / total)."""
    run = GOLDEN["runs"]["finetune_lr0.001"]
    rates = np.array(run["learning_rates"])
    steps = np.arange(SETTINGS["num_train_steps"])
    want = np.where(steps < 10, 1e-3 * steps / 10, 1e-3 * (1 - steps / 100))
    np.testing.assert_allclose(rates, want, rtol=1e-6, atol=1e-12)
    assert rates[10] == pytest.approx(9e-4) and rates[55] == pytest.approx(4.5e-4)


@pytest.mark.parametrize("kind", ["finetune", "pretrain"])
def test_same_start_same_first_loss(kind):
    """Same checkpoint, same first batch: tfbert's forward loss is GR's step-0 loss."""
    data = _data(kind)
    model = _model(kind)
    batch = {k: v[GOLDEN["orders"][kind][0]] for k, v in data.items()}
    run = GOLDEN["runs"][_run_name(kind, SMALL_RATES[kind])]
    if kind == "finetune":
        logits = np.asarray(model(batch, training=False), np.float64)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        loss = -log_probs[np.arange(len(logits)), batch["label_ids"]].mean()
    else:
        model.compile(jit_compile=False)
        loss = float(model.test_on_batch(batch, return_dict=True)["loss"])
    assert abs(loss - run["losses"][0]) / run["losses"][0] <= LOSS_RTOL


def test_finetune_follows_google_research_bert():
    """The first 30 steps of fine-tuning at 2e-5, loss for loss."""
    _, losses = _train("finetune", 2e-5, 30)
    _assert_losses(losses, GOLDEN["runs"]["finetune_lr2e-05"]["losses"], "finetune_lr2e-05")


@pytest.mark.slow
@pytest.mark.parametrize("kind, rate, jit_compile", [
    ("finetune", 2e-5, False), ("finetune", 1e-3, False), ("pretrain", 5e-5, False),
    ("pretrain", 1e-3, False),
    ("pretrain", 5e-5, True)])  # XLA: BertPretrainer's default on a CPU
def test_full_run_follows_google_research_bert(kind, rate, jit_compile, tmp_path):
    """100 steps: losses through all steps at the small rates, through step 30 at 1e-3; final
    weights at the small rates."""
    name = _run_name(kind, rate)
    run = GOLDEN["runs"][name]
    small = rate == SMALL_RATES[kind]
    model, losses = _train(kind, rate, SETTINGS["num_train_steps"], jit_compile=jit_compile)
    _assert_losses(losses if small else losses[:LARGE_RATE_STEPS + 1], run["losses"], name)
    if not small:
        return
    weights = _google_weights(model, str(tmp_path / "model"))
    with np.load(os.path.join(GOLDEN_DIR, "final_weights.npz")) as golden:
        kept = {k.split(":", 1)[1]: golden[k] for k in golden.files if k.startswith(name + ":")}
    assert len(kept) >= 8
    for variable, want in kept.items():
        diff = float(np.max(np.abs(weights[variable] - want)))
        assert diff <= WEIGHT_ATOL, f"{name}: {variable} max abs diff {diff:.3g}"
