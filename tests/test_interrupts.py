"""How a run ends early: a loss that becomes NaN/Inf, Ctrl-C, a full disk. Each is one line
(exit 2, 130, 2) saying what was kept and what a rerun does, and the output folder holds what
it held before (fine-tuning) or its last good checkpoint (pretraining)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from pretrain_test_utils import pretrain_config, pretrain_flags

from tfbert import rundir
from tfbert.errors import NonFiniteLoss, UserError, error_line, failure_notes, run_cli
from tfbert.training import outputs
from tfbert.training.finetune import FinetuneConfig, finetune

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")


# --- the error boundary --------------------------------------------------------------------


def _raises(error: BaseException):
    def main():
        raise error
    return main


def test_ctrl_c_is_one_line_and_exit_130(capsys, monkeypatch):
    monkeypatch.delenv("TFBERT_TRACEBACK", raising=False)

    def main():
        with failure_notes(kept="out/ as it was", rerun="start again"):
            with failure_notes(step=lambda: 7):
                raise KeyboardInterrupt

    with pytest.raises(SystemExit) as exit_info:
        run_cli(main, prog="x")
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == ("x: interrupted at step 7; kept: out/ as it was; rerun "
                                       "the same command to start again\n")
    with pytest.raises(SystemExit) as exit_info:
        run_cli(_raises(KeyboardInterrupt()), prog="x")
    assert exit_info.value.code == 130 and capsys.readouterr().err == "x: interrupted\n"
    monkeypatch.setenv("TFBERT_TRACEBACK", "1")
    with pytest.raises(KeyboardInterrupt):
        run_cli(_raises(KeyboardInterrupt()))


def test_full_disk_is_one_line_and_exit_2(capsys, monkeypatch):
    monkeypatch.delenv("TFBERT_TRACEBACK", raising=False)
    for code, words in ((errno.ENOSPC, "no space left on device"),
                        (errno.EDQUOT, "disk quota exceeded")):
        with pytest.raises(SystemExit) as exit_info:
            run_cli(_raises(OSError(code, os.strerror(code), "out/model.safetensors")), prog="x")
        assert exit_info.value.code == 2
        assert capsys.readouterr().err == f"x: error: {words} writing out/model.safetensors\n"
    with pytest.raises(OSError):  # another OSError is not known to be the user's: a traceback
        run_cli(_raises(OSError(errno.EIO, "Input/output error")))


def test_notes_are_for_runs_that_ended_early():
    with pytest.raises(UserError) as error:  # a plain mistake: nothing to report as kept
        with failure_notes(kept="out/ as it was", rerun="start again"):
            raise UserError("train.tsv:3: 2 fields but the header has 3")
    assert error_line(error.value) == "train.tsv:3: 2 fields but the header has 3"


def test_an_empty_note_silences_the_outer_one():
    with pytest.raises(NonFiniteLoss) as error:
        with failure_notes(kept="outer"), failure_notes(kept=""):
            raise NonFiniteLoss("loss became nan at step 3. The checkpoint of step 2 is kept.")
    assert error_line(error.value) == "loss became nan at step 3. The checkpoint of step 2 is kept."
    assert isinstance(error.value, FloatingPointError) and isinstance(error.value, UserError)


# --- NaN/Inf in fine-tuning's loop (every task trains through `finetune`) ------------------


class _WeightsNaNAtTheEnd(keras.callbacks.Callback):
    """Turns the weights NaN after the last batch (its loss, computed before, is finite)."""

    def on_train_end(self, logs=None):
        for v in self.model.trainable_variables:
            v.assign(tf.fill(v.shape, np.nan))


def _tiny(nan_row: int | None = None):
    x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
    if nan_row is not None:
        x[nan_row] = np.nan
    ds = tf.data.Dataset.from_tensor_slices((x, (x[:, 0] > 0).astype("int32"))).batch(4)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    return model, ds, keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@pytest.mark.parametrize("case, message", [
    ("train", "the training loss became nan at step 3 of 16; training stopped and its model is "
              "not kept (lower learning_rate, now 0.001, or check the training data)"),
    ("dev", "the dev loss is nan after epoch 1 (step 8 of 16); training stopped"),
    ("weights", "the weights hold NaN/Inf after step 16 of 16; training stopped"),
])
def test_finetune_stops_at_a_non_finite_loss(case, message):
    model, ds, loss = _tiny(nan_row=9 if case == "train" else None)  # row 9: batch 3
    scored = []

    def evaluate(m):
        scored.append(1)
        return {"accuracy": 0.5, "loss": float("nan") if case == "dev" else 0.5}

    config = FinetuneConfig(learning_rate=1e-3, num_train_epochs=2, verbose=0)
    with pytest.raises(NonFiniteLoss) as error:
        # (with a dev set the best epoch's weights would replace the NaN ones: none here)
        finetune(model, ds, loss, config, evaluate_fn=None if case == "weights" else evaluate,
                 callbacks=[_WeightsNaNAtTheEnd()] if case == "weights" else [])
    assert str(error.value).startswith(message), str(error.value)
    assert len(scored) == {"train": 0, "dev": 1, "weights": 0}[case]  # no scoring after NaN


# --- a real fine-tuning run: NaN, Ctrl-C, a full disk leave the previous run ----------------


def _tiny_task(root) -> dict:
    """A 1-layer hidden-16 BERT, a 50-token vocab and 64 two-class reviews."""
    chars = list("好差很太坏棒一二三四五六七八九十的了是不我你他她它们这那个有在人")
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *"0123456789"]
    (root / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    (root / "bert_config.json").write_text(json.dumps(dict(
        vocab_size=len(tokens), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64, hidden_act="gelu", lower_case=False)))
    rows = "".join(f"{w}{i % 10}\t{'positive' if '好' in w else 'negative'}\n"
                   for i in range(16) for w in ("好", "差", "很好", "太差"))
    for split in ("train", "dev", "test"):
        (root / f"{split}.tsv").write_text("text\tlabel\n" + rows, encoding="utf-8")
    return dict(bert_config_file=str(root / "bert_config.json"),
                vocab_file=str(root / "vocab.txt"), train_file=str(root / "train.tsv"),
                dev_file=str(root / "dev.tsv"), test_file=str(root / "test.tsv"),
                max_seq_length=8, train_batch_size=16, num_train_epochs=1,
                distribution_strategy="one_device", verbose=0)


def _previous_run(out) -> str:
    """A complete classification run in `out` (what the user does not want to lose)."""
    with rundir.RunLock(str(out)), outputs.staged(str(out), "classification") as run:
        os.makedirs(run.path("model"))
        with open(run.path("results.json"), "w") as f:
            json.dump({"run_id": run.run_id, "dev": {"accuracy": 0.75}}, f)
        with open(os.path.join(run.path("model"), "model.safetensors"), "w") as f:
            f.write("good weights")
    return run.run_id


def _tree(folder) -> dict[str, bytes]:
    """Every file under `folder` with its bytes (the lock file aside: it names its holder)."""
    found = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            if name != rundir.LOCK_FILE:
                with open(path, "rb") as f:
                    found[os.path.relpath(path, folder)] = f.read()
    return found


def _kept(out, run_id: str) -> str:
    finished = outputs.read_manifest(str(out))["finished"]
    return f"kept: the previous run in {out} (run {run_id}, finished {finished}), untouched"


@pytest.mark.parametrize("end", ["ctrl_c", "full_disk"])
def test_a_finetuning_run_that_ends_early_says_what_it_kept(tmp_path, end):
    """task_run (every fine-tuning task's run) notes what the folder keeps; fast: no model."""
    from tfbert import fileio
    from tfbert.tasks.classification import ClassificationConfig
    from tfbert.training.finetune import task_run

    out = tmp_path / "out"
    previous = _previous_run(out)
    before = _tree(out)
    config = ClassificationConfig(output_dir=str(out), **_tiny_task(tmp_path))
    with pytest.raises(KeyboardInterrupt if end == "ctrl_c" else OSError) as error:
        with task_run(config, "classification") as run:
            with fileio.atomic_write(run.path("results.json")) as f:
                f.write("{")
                if end == "ctrl_c":
                    raise KeyboardInterrupt
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as write() raises it
    happened = ("interrupted" if end == "ctrl_c" else
                f"no space left on device writing {run.path('results.json')}")
    assert error_line(error.value) == (f"{happened}; {_kept(out, previous)}; rerun the same "
                                       "command to start again")
    assert _tree(out) == before  # no staging folder, no temp file left


@pytest.mark.slow  # 20-60 s; fast: test_finetune_stops_at_a_non_finite_loss, and the above
def test_a_diverged_finetuning_keeps_the_previous_run(tmp_path, capsys, monkeypatch):
    """--learning_rate=1e6 on a folder holding a good run: one line, exit 2, nothing of the
    diverged run committed (its NaN model, its results)."""
    from tfbert.tasks.classification import ClassificationConfig, run_classification

    monkeypatch.delenv("TFBERT_TRACEBACK", raising=False)
    out = tmp_path / "out"
    previous = _previous_run(out)
    before = _tree(out)
    config = ClassificationConfig(output_dir=str(out), learning_rate=1e6, **_tiny_task(tmp_path))
    with pytest.raises(SystemExit) as exit_info:
        run_cli(run_classification, config, prog="run_classifier.py")
    assert exit_info.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("run_classifier.py: error: the ")
    assert " is nan " in line or " became nan " in line
    assert line.endswith("training stopped and its model is not kept (lower learning_rate, now "
                         f"1e+06, or check the training data); {_kept(out, previous)}")
    assert _tree(out) == before


@pytest.mark.slow  # 20 s; fast: test_a_finetuning_run_that_ends_early_says_what_it_kept
def test_a_full_disk_during_finetuning_keeps_the_previous_run(tmp_path, capsys, monkeypatch):
    from tfbert import fileio
    from tfbert.tasks.classification import ClassificationConfig, run_classification
    from tfbert.training import finetune as ft

    def full_disk(output_dir, results, name="results.json"):
        with fileio.atomic_write(os.path.join(output_dir, name)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as write() raises it

    monkeypatch.delenv("TFBERT_TRACEBACK", raising=False)
    monkeypatch.setattr(ft, "write_results", full_disk)
    out = tmp_path / "out"
    previous = _previous_run(out)
    before = _tree(out)
    with pytest.raises(SystemExit) as exit_info:
        run_cli(run_classification,
                ClassificationConfig(output_dir=str(out), **_tiny_task(tmp_path)),
                prog="run_classifier.py")
    assert exit_info.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    staging = os.path.join(str(out), outputs.STAGING_PREFIX)
    assert line.startswith(f"run_classifier.py: error: no space left on device writing {staging}")
    assert line.endswith(f"/results.json; {_kept(out, previous)}; rerun the same command to "
                         "start again")
    assert _tree(out) == before  # no staging folder, no temp file left


# A fine-tuning or pretraining command that sends itself SIGINT (what Ctrl-C sends) from
# inside its training loop after optimizer step `at`.
_CTRL_C_CHILD = textwrap.dedent("""
    import os, signal, sys
    from tfbert.training import callbacks

    command, at = sys.argv[1], int(sys.argv[2])
    count = callbacks.TrainingProgress.on_train_batch_end

    def on_train_batch_end(self, batch, logs=None):
        count(self, batch, logs)
        if self.step == at and self.at_update:
            os.kill(os.getpid(), signal.SIGINT)

    callbacks.TrainingProgress.on_train_batch_end = on_train_batch_end
    sys.argv = [command + ".py", *sys.argv[3:]]
    if command == "run_classifier":
        from tfbert.cli import classifier as cli
    else:
        from tfbert.cli import pretrain as cli
    cli.entry()
""")


def _ctrl_c(command: str, at: int, args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _CTRL_C_CHILD, command, str(at), *args],
                          cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # 20-40 s (a process); fast: test_ctrl_c_is_one_line_and_exit_130
def test_ctrl_c_during_finetuning_keeps_the_previous_run(tmp_path):
    out = tmp_path / "out"
    previous = _previous_run(out)
    before = _tree(out)
    flags = dict(_tiny_task(tmp_path), output_dir=out, num_train_epochs=2)
    done = _ctrl_c("run_classifier", 2, [f"--{k}={v}" for k, v in flags.items()])
    assert done.returncode == 130, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"run_classifier.py: interrupted at step 2; {_kept(out, previous)}; rerun the same "
        "command to start again")
    assert _tree(out) == before


@pytest.mark.slow  # 30-60 s (a process and pretraining records)
def test_ctrl_c_during_pretraining_keeps_its_checkpoints(tmp_path, tiny_data):

    out = tmp_path / "run"
    config = pretrain_config(tiny_data, out, num_train_steps=40, save_checkpoints_steps=10,
                             eval_input_file=None)
    done = _ctrl_c("run_pretraining", 13, pretrain_flags(config))
    assert done.returncode == 130, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    checkpoints = out / "checkpoints"
    assert done.stderr.strip().splitlines()[-1] == (
        f"run_pretraining.py: interrupted at step 13; kept: the checkpoint of step 10 in "
        f"{checkpoints}; rerun the same command to resume from step 10")
    assert tf.train.latest_checkpoint(str(checkpoints)).endswith("ckpt-10")
