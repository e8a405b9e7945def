"""What a pretraining resume must keep: the settings its input stream and its checkpoint
depend on, compared with the ones the run saved (`pretrain_config.json`).

A resume starts the input stream at its checkpointed step (`tfbert.training.pretrain`: the
stream is a pure function of the seed and the step), which gives the batches of an
uninterrupted run only when the stream is the same: `REPLAY_SETTINGS` are the resolved input
files with their sizes, the vocab's content, case folding, max_seq_length,
max_predictions_per_seq, masked_lm_prob, whole_word_mask, static_masking, the seed,
train_batch_size (gradient accumulation, replicas and workers only split each batch) and the
record order's shape (`input_order`; a run saved without it used another order). A
changed one is refused, with each setting's old and new value, unless `allow_changed_settings`,
which goes on and records the change (settings, old and new values, the step) under
"setting_changes". `CHECKPOINT_SETTINGS` (the model config, the optimizer, gradient accumulation,
float16 loss scaling) shape the checkpoint's variables and cannot change at all. Everything else
(num_train_steps, learning rate and warmup, logging, the checkpoint interval, the eval set,
precision otherwise) may change freely. The learning-rate schedule too, but a resume keeps the
one the run was started with unless lr_schedule is given (`resumed_lr_schedule`). A resume trains
on from the run's own checkpoint, never from an init_checkpoint, so one other than the run
started from is refused, naming both (it would not be loaded; a new output_dir starts from it);
none given resumes.

Example:
>>> describe_changes({"max_seq_length": (128, 256), "whole_word_mask": (False, True)})
'max_seq_length was 128, now 256; whole_word_mask was False, now True'
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from tfbert import ownership
from tfbert.errors import UserError
from tfbert.pretraining_data.pipeline import INPUT_ORDER
from tfbert.training import callbacks as cb
from tfbert.training.schedules import DEFAULT_LR_SCHEDULE

if TYPE_CHECKING:
    from tfbert.config import BertConfig
    from tfbert.training.pretrain_config import PretrainConfig

logger = logging.getLogger(__name__)

RUN_CONFIG_FILE = ownership.PRETRAIN_RECORD
REPLAY_SETTINGS = ("input_files", "vocab_sha1", "lower_case", "max_seq_length",
                   "max_predictions_per_seq", "masked_lm_prob", "whole_word_mask",
                   "static_masking", "seed", "train_batch_size", "input_order", "phase1")
# What a run saved without "input_order" used: a seeded shuffle buffer, resumed by replay.
REPLAYED_ORDER = "tf.data shuffle buffer, resumed by replaying the pipeline"
CHECKPOINT_SETTINGS = ("bert_config", "optimizer", "gradient_accumulation_steps", "loss_scaling")


def run_settings(config: PretrainConfig, train_files: Sequence[str], vocab_file: str,
                 lower_case: bool | None, bert_config: BertConfig | None,
                 phase1_files: Sequence[str] | None = None) -> dict[str, Any]:
    """This run's REPLAY_SETTINGS and CHECKPOINT_SETTINGS (those not known yet left out);
    `phase1_files`: the first phase's records (with phase1_seq_length)."""
    def resolved(path: str) -> str:
        return path if "://" in path else os.path.abspath(path)

    def described(paths: Sequence[str]) -> list[str]:
        return [f"{resolved(p)} ({tf.io.gfile.stat(p).length} bytes)" for p in paths]

    with tf.io.gfile.GFile(vocab_file, "rb") as f:
        vocab_sha1 = hashlib.sha1(f.read()).hexdigest()
    settings = {
        "input_files": described(train_files),
        "vocab_sha1": vocab_sha1, "lower_case": lower_case,
        "max_seq_length": config.max_seq_length,
        "max_predictions_per_seq": config.max_predictions_per_seq,
        "masked_lm_prob": config.masked_lm_prob, "whole_word_mask": config.whole_word_mask,
        "static_masking": config.static_masking,
        "seed": config.seed, "train_batch_size": config.train_batch_size,
        "input_order": INPUT_ORDER,
        # Always present (also "off"), so a resume that turns the first phase on or off is
        # compared; a file written before the schedule existed lacks it and is not.
        "phase1": {"seq_length": config.phase1_length,
                   "max_predictions_per_seq": config.phase1_predictions,
                   "input_files": described(phase1_files or [])}
        if config.phase1_length else "off",
        "bert_config": bert_config.to_dict() if bert_config is not None else None,
        "optimizer": config.optimizer,
        "gradient_accumulation_steps": config.gradient_accumulation_steps,
        "loss_scaling": config.mixed_precision == "float16"}
    return {k: v for k, v in settings.items() if v is not None}


def check_resume(output_dir: str, config: PretrainConfig, settings: dict[str, Any],
                 latest: str | None) -> dict[str, tuple[Any, Any]]:
    """Compares a resumed run's settings with the saved ones (`pretrain_config.json`).

    Returns:
        The REPLAY_SETTINGS changes that allow_changed_settings lets through (name -> (old,
        new)); {} when not resuming or nothing changed.

    Raises:
        UserError: an init_checkpoint other than the run's own (naming both), a
            CHECKPOINT_SETTINGS change, or a REPLAY_SETTINGS change without
            allow_changed_settings, listing each setting with its old and new value.
    """
    path = os.path.join(output_dir, RUN_CONFIG_FILE)
    previous = _read_json(path)
    if not latest or previous is None:
        return {}
    previous = {"input_order": REPLAYED_ORDER, **previous}
    changed = {k: (previous[k], v) for k, v in settings.items()
               if k in previous and previous[k] != v}  # a key an older file lacks is not compared
    step = _checkpoint_step(latest)
    _check_init_checkpoint(output_dir, config, previous.get("config"), step)
    fixed = {k: c for k, c in changed.items() if k in CHECKPOINT_SETTINGS}
    if fixed:
        raise UserError(
            f"{output_dir} holds a checkpoint (step {step}) of a run with other "
            f"{', '.join(sorted(fixed))}, which cannot change on resume (the checkpoint's "
            f"variables follow them): {describe_changes(fixed)}. Use a new output_dir, or the "
            f"same settings (see {path}).")
    replay = {k: c for k, c in changed.items() if k in REPLAY_SETTINGS}
    if replay and not config.allow_changed_settings:
        raise UserError(
            f"{output_dir} holds a checkpoint (step {step}) of a run with other data settings, "
            f"so resuming would not replay the batches it trained on: "
            f"{describe_changes(replay)}. Rerun with the old values, use a new output_dir, or "
            f"pass --allow_changed_settings to continue with the new ones (recorded in {path}).")
    if replay:
        logger.warning("resuming from step %d with changed data settings "
                       "(allow_changed_settings): %s", step, describe_changes(replay))
    return replay


def _check_init_checkpoint(output_dir: str, config: PretrainConfig, started: Any,
                           step: int) -> None:
    """Raises UserError when config.init_checkpoint is given and is not the one the run in
    output_dir started from (`started`: its saved config; a record without one is not
    compared). Not even allow_changed_settings lets it through: a resume restores the run's
    checkpoint, so the new weights would never be loaded."""
    if not config.init_checkpoint or not isinstance(started, dict) \
            or "init_checkpoint" not in started:
        return
    started_from, given = started["init_checkpoint"], config.init_checkpoint
    if started_from and _same_source(started_from, given):
        return
    own = (f"with --init_checkpoint={started_from}" if started_from
           else "without --init_checkpoint")
    raise UserError(
        f"{output_dir} holds a checkpoint (step {step}) of a run started from "
        f"{f'init_checkpoint {started_from}' if started_from else 'a random init'}, not "
        f"init_checkpoint {given}: a resume trains on from its own checkpoint and would not "
        f"load {given}. Use a new --output_dir to start from {given}, or rerun {own} to resume "
        f"(see {os.path.join(output_dir, RUN_CONFIG_FILE)}).")


def _same_source(a: str, b: str) -> bool:
    """Whether two init_checkpoint values name the same thing ("out/model" and "./out/model/")."""
    if "://" in a or "://" in b:
        return a.rstrip("/") == b.rstrip("/")
    return os.path.abspath(a) == os.path.abspath(b)


def resumed_lr_schedule(output_dir: str, config: PretrainConfig, latest: str | None) -> str:
    """The learning-rate schedule the run trains with: config.lr_schedule when given; else,
    resuming, the one the run was started with ("linear" for a record without one: runs started
    before the choice decayed so); else "polynomial"."""
    if config.lr_schedule:
        return config.lr_schedule
    previous = _read_json(os.path.join(output_dir, RUN_CONFIG_FILE)) if latest else None
    if previous is None:
        return DEFAULT_LR_SCHEDULE
    schedule = previous.get("lr_schedule", "linear")
    logger.info("resuming with lr_schedule %s, the one the run was started with", schedule)
    return schedule


def describe_changes(changes: dict[str, tuple[Any, Any]]) -> str:
    """"max_seq_length was 32, now 64; input_files: without [...], with [...]; ..."."""
    parts = []
    for name, (old, new) in sorted(changes.items()):
        if isinstance(old, dict) and isinstance(new, dict):
            parts += [f"{name}.{k} was {old.get(k)!r}, now {new.get(k)!r}"
                      for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        elif isinstance(old, list) and isinstance(new, list):
            gone, added = [x for x in old if x not in new], [x for x in new if x not in old]
            parts.append(f"{name}: without {gone}, with {added}" if gone or added
                         else f"{name}: the same {len(old)} in another order, was {old}, now "
                              f"{new}")
        else:
            parts.append(f"{name} was {old!r}, now {new!r}")
    return "; ".join(parts)


def write_run_config(output_dir: str, config: PretrainConfig, settings: dict[str, Any],
                     allowed: dict[str, tuple[Any, Any]], latest: str | None) -> None:
    """pretrain_config.json: the settings, the config, and every allowed change so far.

    A resume records the init_checkpoint the run started from (its weights come from its own
    checkpoint; `check_resume` refuses another init_checkpoint, and none given keeps it).
    """
    path = os.path.join(output_dir, RUN_CONFIG_FILE)
    previous = _read_json(path) if latest else None
    changes = list((previous or {}).get("setting_changes", []))
    if allowed:
        changes.append({"step": _checkpoint_step(latest), "time": ownership.now(),
                        "changed": {k: {"old": old, "new": new}
                                    for k, (old, new) in sorted(allowed.items())}})
    record = {**settings, "config": dataclasses.asdict(config)}
    started = (previous or {}).get("config")
    if isinstance(started, dict) and "init_checkpoint" in started:
        record["config"]["init_checkpoint"] = started["init_checkpoint"]
    if changes:
        record["setting_changes"] = changes
    cb.write_json(path, record)


def _checkpoint_step(path: str) -> int:
    return int(path.rsplit("-", 1)[1])


def _read_json(path: str) -> Any:
    return ownership.read_json_file(path, "tfbert's pretraining record",
                                    ownership.PRETRAIN_RECORD_KEYS)
