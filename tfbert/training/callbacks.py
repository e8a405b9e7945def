"""Keras callbacks for training runs: step counting, checkpoints, NaN stop, TensorBoard, and
the best fine-tuning epoch (`KeepBest`, which scores dev after each epoch).

The step callbacks count *optimizer steps* (updates), not Keras batches: with gradient
accumulation k, one step is k batches. `TrainingProgress` does the counting and must come first
in the callback list; the others read it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from tfbert.fileio import write_json  # noqa: F401 - callers import it from here too

logger = logging.getLogger(__name__)

# Metric names in Keras logs that are written to TensorBoard and the history.
SCALARS = ("loss", "mlm_loss", "nsp_loss", "masked_lm_accuracy", "next_sentence_accuracy")


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return True


# What `tf.summary.scalar` attaches; written with the core `tf.summary.write` op, so logging
# does not need the tensorboard package (viewing the logs does).
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))


def write_scalar(name: str, value: float, step: int) -> None:
    """A TensorBoard scalar into the default summary writer."""
    tf.summary.write(name, tf.constant(value, tf.float32), step=step, metadata=_SCALAR_METADATA)


def _floats(logs: dict[str, Any] | None) -> dict[str, float]:
    out = {}
    for name, value in (logs or {}).items():
        try:
            out[name] = float(value)
        except (TypeError, ValueError):
            continue
    return out


class TrainingProgress(keras.callbacks.Callback):
    """Counts optimizer steps and examples and measures throughput. Put it first.

    Args:
        start_step: int. Global step the run starts (or resumes) from.
        gradient_accumulation_steps: int. Keras batches per optimizer step.
        global_batch_size: int. Examples per optimizer step, over all replicas and micro-batches.
        global_step: tf.Variable or None. Kept equal to `step` (so checkpoints carry it).
        stop_at: int or None. Stops training when `step` reaches it.
    """

    def __init__(self, start_step: int, gradient_accumulation_steps: int, global_batch_size: int,
                 global_step: tf.Variable | None = None, stop_at: int | None = None) -> None:
        super().__init__()
        self.stop_at = stop_at
        self.start_step = start_step
        self.step = start_step
        self.accumulation = gradient_accumulation_steps
        self.global_batch_size = global_batch_size
        self.global_step = global_step
        self.at_update = False  # True when the last batch completed an optimizer step
        self._batches = 0
        self._first_end: tuple[float, int] | None = None
        self._last_end: tuple[float, int] | None = None
        self._fit_start: tuple[float, int] | None = None  # (time, step) when this fit began

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._fit_start = (time.perf_counter(), self.step)

    def eta(self) -> str:
        """Time left to `stop_at` at this `fit`'s rate so far ("4m05s"; "" when unknown)."""
        started = self._fit_start
        if self.stop_at is None or started is None or self.step <= started[1]:
            return ""
        seconds = (time.perf_counter() - started[0]) / (self.step - started[1]) * max(
            0, self.stop_at - self.step)
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._batches += 1
        self.at_update = self._batches % self.accumulation == 0
        if self.at_update:
            self.step += 1
            if self.global_step is not None:
                self.global_step.assign(self.step)
            if self.stop_at is not None and self.step >= self.stop_at:
                self.model.stop_training = True
        now = (time.perf_counter(), self.examples)
        self._first_end = self._first_end or now
        self._last_end = now

    @property
    def examples(self) -> int:
        """Examples trained on in this run (all replicas)."""
        return self._batches * self.global_batch_size // self.accumulation

    @property
    def examples_per_second(self) -> float:
        """Throughput after the first batch (which includes tracing and compilation)."""
        if not self._first_end or self._last_end[1] == self._first_end[1]:
            return float("nan")
        (t0, n0), (t1, n1) = self._first_end, self._last_end
        return (n1 - n0) / max(t1 - t0, 1e-9)


def weights_finite(model: keras.Model) -> bool:
    """Whether every trainable weight of `model` is finite (no NaN, no Inf)."""
    return all(bool(tf.reduce_all(tf.math.is_finite(v))) for v in model.trainable_variables)


class StopOnNaN(keras.callbacks.Callback):
    """Stops training at the first non-finite loss and remembers the step (`bad_step`); the
    caller raises `tfbert.errors.NonFiniteLoss` after `fit` when it is set."""

    def __init__(self, progress: TrainingProgress) -> None:
        super().__init__()
        self.progress = progress
        self.bad_step: int | None = None
        self.bad_loss: float | None = None

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        loss = (logs or {}).get("loss")
        if loss is not None and not _finite(loss):
            self.bad_step, self.bad_loss = self.progress.step, float(loss)
            logger.error("loss is %s at step %d; stopping", self.bad_loss, self.bad_step)
            self.model.stop_training = True


def checkpoint_manager(checkpoint: tf.train.Checkpoint, directory: str, max_to_keep: int,
                       chief: bool = True, worker: int = 0) -> tf.train.CheckpointManager:
    """A CheckpointManager; non-chief workers of multi-worker training get a scratch directory.

    Every multi-worker worker must take part in saving (the variables are synchronised by
    collectives), but only the chief's files are kept; `CheckpointSaver` deletes the others.
    """
    if not chief:
        directory = worker_scratch_dir(directory, worker)
    return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=max_to_keep,
                                      step_counter=None, checkpoint_name="ckpt")


def resume_notes(checkpoint_dir: str) -> dict[str, Callable[[], str]]:
    """`tfbert.errors.failure_notes` for a run that resumes from its checkpoints: what it keeps
    and what a rerun does, read from `checkpoint_dir` when the run ends early."""

    def latest() -> int | None:
        path = tf.train.latest_checkpoint(checkpoint_dir)
        return int(path.rsplit("-", 1)[1]) if path else None

    def kept() -> str:
        step = latest()
        return (f"the checkpoint of step {step} in {checkpoint_dir}" if step is not None
                else f"no checkpoint yet in {checkpoint_dir}")

    def rerun() -> str:
        step = latest()
        return f"resume from step {step}" if step is not None else "start again"

    return {"kept": kept, "rerun": rerun}


def worker_scratch_dir(directory: str, worker: int) -> str:
    """Where non-chief multi-worker task `worker` saves its (discarded) checkpoints."""
    return os.path.join(directory, f".worker_{worker}_tmp")


class CheckpointSaver(keras.callbacks.Callback):
    """Saves the checkpoint every `every_steps` optimizer steps (never with a non-finite loss).

    Args:
        progress: TrainingProgress. The step counter.
        manager: tf.train.CheckpointManager. Its checkpoint holds model, optimizer and step.
        every_steps: int. Save interval in optimizer steps.
        chief: bool. False on non-chief multi-worker tasks (their files are deleted).
    """

    def __init__(self, progress: TrainingProgress, manager: tf.train.CheckpointManager,
                 every_steps: int, chief: bool = True) -> None:
        super().__init__()
        self.progress = progress
        self.manager = manager
        self.every_steps = every_steps
        self.chief = chief
        self.last_saved: int | None = None

    def save(self) -> str | None:
        """Saves now, named by the global step; returns the path (None, with an error log,
        when a weight is NaN/Inf: such a state is never checkpointed)."""
        if not weights_finite(self.model):
            logger.error("not saving step %d: the weights hold NaN/Inf", self.progress.step)
            return None
        path = self.manager.save(checkpoint_number=self.progress.step)
        self.last_saved = self.progress.step
        if self.chief:
            logger.info("saved checkpoint %s", path)
        else:
            shutil.rmtree(self.manager.directory, ignore_errors=True)
        return path

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        p = self.progress
        if p.at_update and p.step % self.every_steps == 0 and p.step != self.last_saved:
            if _finite((logs or {}).get("loss", 0.0)):
                self.save()


class TensorBoardScalars(keras.callbacks.Callback):
    """Writes training scalars every `every_steps` steps and eval scalars at each loop end.

    Training scalars (under `log_dir/train`): the Keras logs in SCALARS (running means since the
    start of the current loop, as the progress bar shows them), `learning_rate` and
    `examples_per_second` over the last interval. Eval scalars (`log_dir/eval`): the `val_`
    metrics of each periodic evaluation. The x axis is the global step, continuous over resumes.
    """

    def __init__(self, progress: TrainingProgress, log_dir: str, every_steps: int) -> None:
        super().__init__()
        self.progress = progress
        self.every_steps = max(1, every_steps)
        self.log_dir = log_dir
        self._mark: tuple[float, int] | None = None

    def on_train_begin(self, logs: dict | None = None) -> None:
        # Opened per `fit` and closed at its end: a run of several fits (one per phase of the
        # sequence-length schedule) writes each its own event files into the same folders.
        self.train_writer = tf.summary.create_file_writer(os.path.join(self.log_dir, "train"))
        self.eval_writer = tf.summary.create_file_writer(os.path.join(self.log_dir, "eval"))
        self._mark = None

    def learning_rate(self) -> float:
        return float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        p = self.progress
        if not p.at_update:
            return
        now = (time.perf_counter(), p.examples)
        if self._mark is None:
            self._mark = now  # the first step includes tracing; measure from here
            return
        if p.step % self.every_steps:
            return
        (t0, n0), (t1, n1) = self._mark, now
        self._mark = now
        with self.train_writer.as_default():
            for name, value in _floats(logs).items():
                if name in SCALARS:
                    write_scalar(name, value, p.step)
            write_scalar("learning_rate", self.learning_rate(), p.step)
            write_scalar("examples_per_second", (n1 - n0) / max(t1 - t0, 1e-9), p.step)
        self.train_writer.flush()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        values = {k[4:]: v for k, v in _floats(logs).items() if k.startswith("val_")}
        if values:
            with self.eval_writer.as_default():
                for name, value in values.items():
                    write_scalar(name, value, self.progress.step)
            self.eval_writer.flush()

    def on_train_end(self, logs: dict | None = None) -> None:
        self.train_writer.close()
        self.eval_writer.close()


class LoopHistory(keras.callbacks.Callback):
    """Records the metrics of every loop (Keras epoch) against the global step, in a JSON file.

    Entries from earlier (resumed) runs up to `progress.start_step` are kept, so the file holds
    one continuous history: a list of {"step": int, "loss": ..., "val_loss": ..., ...}.
    """

    def __init__(self, progress: TrainingProgress, path: str | None) -> None:
        super().__init__()
        self.progress = progress
        self.path = path
        self.entries: list[dict[str, float]] = []
        self.extra: dict[str, float] = {}  # added to every entry (e.g. the phase's seq_length)
        if path and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                self.entries = [e for e in json.load(f) if e["step"] <= progress.start_step]

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        entry = {"step": self.progress.step, **self.extra, **_floats(logs)}
        entry["learning_rate"] = float(
            keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
        self.entries.append(entry)
        if self.path:
            write_json(self.path, self.entries)
        scores = " ".join(f"{k} {entry[k]:.4f}" for k in ("val_mlm_loss",
                                                          "val_masked_lm_accuracy",
                                                          "mlm_loss") if k in entry)
        stop, eta = self.progress.stop_at, self.progress.eta()
        logger.info("step %d%s %s%s", self.progress.step, f"/{stop}" if stop else "", scores,
                    f", ETA {eta}" if eta else "")


class KeepBest(keras.callbacks.Callback):
    """Scores dev after each epoch (`evaluate_fn(model) -> dict`) and remembers the best
    weights (in memory) by `metric`; `restore(model)` puts them back.

    The dev scalars go into the epoch's logs as `val_<name>`, for the callbacks after it.
    """

    def __init__(self, evaluate_fn: Callable[[Any], dict[str, Any]] | None, metric: str,
                 higher_is_better: bool, nan_guard: StopOnNaN | None = None) -> None:
        super().__init__()
        self.evaluate_fn, self.metric, self.higher = evaluate_fn, metric, higher_is_better
        self.nan_guard = nan_guard  # after a non-finite loss there is nothing to score
        self.non_finite: tuple[str, float, int] | None = None  # (dev score, value, epoch)
        self.history: list[dict[str, Any]] = []
        self.best_epoch, self.best_metrics = 0, {}
        self.best_value: float | None = None
        self.best_weights: list[Any] | None = None

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self.nan_guard is not None and self.nan_guard.bad_step is not None:
            return
        epoch += 1
        record: dict[str, Any] = {"epoch": epoch}
        if logs and "loss" in logs:
            record["train_loss"] = float(logs["loss"])
        if self.evaluate_fn is None:
            self.best_epoch = epoch
            self.history.append(record)
            return
        scores = self.evaluate_fn(self.model)
        if self.metric not in scores:
            raise KeyError(f"evaluate_fn returned no {self.metric!r} to pick the best epoch by "
                           f"(it returned {sorted(scores)})")
        value = float(scores[self.metric])
        scalars = {k: v for k, v in scores.items() if isinstance(v, (int, float))}
        bad = [k for k in scalars if (k == self.metric or k.endswith("loss"))
               and not math.isfinite(scalars[k])]
        if bad:  # the weights overflow on dev: a diverged model
            self.non_finite = (bad[0], scalars[bad[0]], epoch)
            self.model.stop_training = True
            return
        record.update(scalars)
        if logs is not None:
            logs.update({f"val_{k}": v for k, v in scalars.items()})
        self.history.append(record)
        better = self.best_value is None or (value > self.best_value if self.higher
                                             else value < self.best_value)
        logger.info("epoch %d: dev %s = %.4f%s", epoch, self.metric, value,
                    " (best so far)" if better else f" (best {self.best_value:.4f})")
        if better:
            self.best_epoch, self.best_value, self.best_metrics = epoch, value, scores
            self.best_weights = self.model.get_weights()

    def restore(self, model: Any) -> None:
        if self.best_weights is not None and self.best_epoch != len(self.history):
            logger.info("restoring the weights of epoch %d (best dev %s)", self.best_epoch,
                        self.metric)
            model.set_weights(self.best_weights)
