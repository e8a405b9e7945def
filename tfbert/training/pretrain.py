"""BERT pretraining (masked LM + next sentence) with Keras `fit`: the library behind
run_pretraining.py.

`run_pretraining(PretrainConfig(...))` reads top to bottom: lock and strategy -> data and vocab
-> model config -> checks -> model and optimizer in the strategy's scope -> restore -> fit ->
results. The runtime it shares with fine-tuning lives beside it: `config` (the shared fields),
`runtime` (precision, strategy, lock, optimizer), `model_source` (config, build, checks),
`reports` (results, markdown, plots) and `tfbert.pretraining_data.builtin` (the default corpus).

Steps. A *step* is one optimizer update over `train_batch_size` examples (the global batch: all
replicas, all accumulation micro-batches). With `gradient_accumulation_steps` k each step is k
Keras batches of `train_batch_size / k`, split over the replicas. Keras runs in *loops* (its
epochs) of `iterations_per_loop` steps; the eval set is scored at the end of every loop.

Resume. Checkpoints (`output_dir/checkpoints/ckpt-STEP`, every `save_checkpoints_steps`) hold the
model's weights, the optimizer (moments, update count, hence the learning-rate schedule position;
accumulators; the float16 loss scale), the dropout random-generator states and the global step.
Rerunning the same command restores the latest one and continues from its step; a larger
`num_train_steps` continues training (the schedule is recomputed for the new total). The data
position is not saved: it is a pure function of (seed, step)
(`tfbert.pretraining_data.pipeline.pretraining_stream`: a stateless file order and record
permutation per epoch, masks keyed by the seed and the global step), so the resumed run starts
reading at the records of its first step without touching the ones before, and sees exactly the
batches an uninterrupted run sees (the final weights match it). Starting at step 500,000 costs what
starting at step 0 does.

Workers. Each multi-worker worker parses, tokenizes and masks only its rows of each global
batch (1/W of the input work, `pretraining.worker_rows`), through
`strategy.distribute_datasets_from_function`; the global batches do not depend on the number
of workers, so a resume may use another number of workers (the examples of every step stay the
same; they are re-sharded by their index in the global batch). With `data_service` the
tokenize/pack/mask work runs on a tf.data service cluster instead (`tfbert.training.
data_service`).

The stream holds only for the same data settings, so a resume compares them with
`pretrain_config.json` and refuses a change, listing each setting with its old and new value;
`allow_changed_settings` continues anyway and records the change (`tfbert.training.resume`).
An init_checkpoint other than the run's own is refused too (its weights would not be loaded).

Safety. The run writes only into a new or empty output_dir or a pretraining run's own
(`tfbert.ownership`), holds its lock (`tfbert.rundir`) from start to end, removes the `ckpt-N_temp/`
folders a kill during a save leaves, and reads every input shard once
(`tfbert.pretraining_data.record_scan.scan_records`, CRCs and truncation) before it builds the
model; `skip_corrupt` trains without the unreadable rest of a damaged shard and reports it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from tfbert import ownership, rundir
from tfbert.errors import NonFiniteLoss, UserError, failure_notes
from tfbert.models.pretrainer import BertPretrainer
from tfbert.pretraining_data import record_scan, records
from tfbert.pretraining_data.builtin import default_data
from tfbert.pretraining_data.pipeline import (
    InputMeter,
)
from tfbert.text.vocab import load_vocab
from tfbert.training import callbacks as cb
from tfbert.training import runtime
from tfbert.training.distribute import get_strategy, is_chief, num_workers, worker_index
from tfbert.training.model_source import (
    check_init_checkpoint,
    check_model_vocab,
    check_seq_length,
    check_vocab_size,
    checkpoint_config,
    model_config,
    vocab_beside,
)
from tfbert.training.outputs import save_model
from tfbert.training.pretrain_config import DEFAULT_MODEL, PretrainConfig
from tfbert.training.pretrain_inputs import eval_dataset, input_report, train_dataset
from tfbert.training.pretrain_model import (
    build_pretrainer,
    init_position_embeddings,
    model_positions,
)
from tfbert.training.reports import (
    HISTORY_FILE,
    METRICS,
    RESULTS_FILE,
    plot_history,
    pretrain_results,
)
from tfbert.training.resume import (
    RUN_CONFIG_FILE,
    check_resume,
    resumed_lr_schedule,
    run_settings,
    write_run_config,
)

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- the run


def run_pretraining(config: PretrainConfig,
                    callbacks: Sequence[keras.callbacks.Callback] = ()) -> dict[str, Any]:
    """Pretrains (or resumes pretraining) a BertPretrainer; returns the results dict.

    Writes into `config.output_dir`: `checkpoints/` (resumable), `logs/` (TensorBoard),
    `pretrain_history.json` (metrics per loop), `pretrain_config.json` (the settings a resume is
    checked against), `pretrain_results.json` and `model/` (the encoder and heads in tfbert's
    own format, for `from_pretrained` and fine-tuning). It holds the folder's lock
    (`tfbert.rundir`) throughout: a second run on it fails at once.

    Args:
        config: PretrainConfig.
        callbacks: extra Keras callbacks for `fit` (after tfbert's own).

    Returns:
        The results: masked_lm_accuracy, next_sentence_accuracy, loss, mlm_loss, nsp_loss
        (from the eval set when there is one, else the last training loop), global_step,
        examples_per_second, the training-loop values as train_*, and with skip_corrupt
        `skipped_corrupt` (per damaged file: records read and skipped, the problem).

    Raises:
        UserError, FileNotFoundError: bad input or a busy output_dir, found before training
            starts (a UserError is a ValueError).
        NonFiniteLoss: the loss became NaN/Inf (a FloatingPointError; the last good
            checkpoint is kept).
    """
    config.validate()
    check_init_checkpoint(config.init_checkpoint)
    # Only into a new or empty folder, or a pretraining run's own (tfbert.ownership).
    ownership.claim_folder(config.output_dir, ownership.PRETRAINING,
                           ownership.config_inputs(config))
    with runtime.run_lock(config):  # before any TensorFlow work: a busy folder is refused at once
        # The strategy first: multi-worker collectives must be set up before other TF ops run.
        strategy = get_strategy(config.distribution_strategy, config.tpu)
        # What an error or Ctrl-C leaves, for its one line (tfbert.errors.run_cli).
        with failure_notes(**cb.resume_notes(os.path.join(config.output_dir, "checkpoints"))):
            return _pretrain(config, strategy, is_chief(strategy), callbacks)


def _pretrain(config: PretrainConfig, strategy: tf.distribute.Strategy, chief: bool,
              callbacks: Sequence[keras.callbacks.Callback]) -> dict[str, Any]:
    if config.mixed_precision == "auto":
        config = dataclasses.replace(
            config, mixed_precision=runtime.resolve_precision(config.mixed_precision))
        logger.info("mixed_precision auto: %s on this hardware", config.mixed_precision)
    replicas = strategy.num_replicas_in_sync
    k = config.gradient_accumulation_steps
    if config.train_batch_size % (k * replicas):
        raise UserError(f"train_batch_size {config.train_batch_size} must be a multiple of "
                        f"gradient_accumulation_steps x replicas = {k} x {replicas}")
    if config.eval_batch_size % replicas:
        raise UserError(f"eval_batch_size {config.eval_batch_size} must be a multiple of the "
                        f"{replicas} replicas")
    output_dir = config.output_dir
    checkpoint_dir = os.path.join(output_dir, "checkpoints")
    if chief:  # what a kill left: unfinished checkpoint saves and atomic-write temp files
        rundir.remove_checkpoint_temp_dirs(checkpoint_dir)
        rundir.remove_atomic_temp_files(output_dir, (RESULTS_FILE, HISTORY_FILE, RUN_CONFIG_FILE))
    else:
        shutil.rmtree(cb.worker_scratch_dir(checkpoint_dir, worker_index(strategy)),
                      ignore_errors=True)
    positions, position_source = model_positions(config)
    if positions is not None:  # before the built-in data is made or anything is tokenized
        check_seq_length(config.max_seq_length, positions, position_source)
    keras.utils.set_random_seed(config.seed)

    # --- data and vocab ---
    train_files, eval_files, vocab_file, data_lower_case = _input_files(config)
    first = config.phase1() if config.phase1_steps else None
    if first is not None:
        first_files = _input_files(first)
        if vocab_file and first_files[2] and not _same_file_bytes(vocab_file, first_files[2]):
            raise AssertionError(f"the built-in data's vocabs differ: {vocab_file}, "
                                 f"{first_files[2]}")
    vocab_file = config.vocab_file or vocab_file or _vocab_beside_model(config)
    if not vocab_file:
        raise UserError("vocab_file is required with input_file (the records are tokenized or "
                        "masked with it), and there is no vocab.txt beside bert_config_file or "
                        "init_checkpoint")
    check_model_vocab(config, vocab_file)
    vocab_size = len(load_vocab(vocab_file))
    bert_config, source = model_config(config, vocab_size, DEFAULT_MODEL, data_lower_case)
    if bert_config is not None:
        check_vocab_size(vocab_size, vocab_file, bert_config, source)
    train_paths = records.expand_file_pattern(train_files)
    latest = tf.train.latest_checkpoint(checkpoint_dir)
    known = bert_config or checkpoint_config(config.init_checkpoint)
    lower_case = config.lower_case(known.lower_case if known else None)
    first_paths = records.expand_file_pattern(first_files[0]) if first else None
    check_resume(output_dir, config,  # early: before the shards are read
                 run_settings(config, train_paths, vocab_file, lower_case, known, first_paths),
                 latest)
    lr_schedule = resumed_lr_schedule(output_dir, config, latest)
    phases, damaged = [], []
    if first is not None:
        phases.append(_phase(first, first_paths, first_files[0], first_files[1],
                             config.phase1_steps, vocab_size, damaged, "phase1_"))
    phases.append(_phase(config, train_paths, train_files, eval_files, config.num_train_steps,
                         vocab_size, damaged))
    readable = {r.path: r.bytes_read for r in damaged}

    # --- model, optimizer, checkpoint ---
    with runtime.build_scope(config, strategy):
        model = build_pretrainer(bert_config, config.init_checkpoint)
        bert_config = model.encoder.config
        check_vocab_size(vocab_size, vocab_file, bert_config, source)
        optimizer = runtime.compile_for_training(
            model, config, config.num_train_steps, config.num_warmup_steps,
            loss_scale=config.mixed_precision == "float16", lr_schedule=lr_schedule)
        optimizer.build(model.trainable_variables)
        if not config.init_checkpoint:  # a resume restores the table below
            init_position_embeddings(model.encoder, config.position_init)
        runtime.skip_symbolic_build(model)
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                  aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    if positions is None:
        check_seq_length(config.max_seq_length, bert_config.max_position_embeddings, source)
    lower_case = config.lower_case(bert_config.lower_case)
    settings = {**run_settings(config, train_paths, vocab_file, lower_case, bert_config,
                               first_paths), "lr_schedule": lr_schedule}
    allowed = check_resume(output_dir, config, settings, latest)
    if chief:
        write_run_config(output_dir, config, settings, allowed, latest)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, global_step=global_step,
                                     rng=_seed_states(model))
    manager = cb.checkpoint_manager(checkpoint, checkpoint_dir, config.keep_checkpoint_max, chief,
                                    worker_index(strategy))
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
        logger.info("resumed from %s (step %d)", latest, int(global_step.numpy()))
    start_step = int(global_step.numpy())

    # --- train ---
    progress = cb.TrainingProgress(start_step, k, config.train_batch_size, global_step,
                                   stop_at=config.num_train_steps)
    nan_guard = cb.StopOnNaN(progress)
    saver = cb.CheckpointSaver(progress, manager, config.save_checkpoints_steps, chief)
    saver.last_saved = start_step if latest else None
    history = cb.LoopHistory(progress, os.path.join(output_dir, HISTORY_FILE) if chief else None)
    callbacks = [progress, nan_guard, saver, history, *callbacks]
    if chief:
        callbacks.append(cb.TensorBoardScalars(progress, os.path.join(output_dir, "logs"),
                                               config.log_steps))
    workers, worker = num_workers(strategy), worker_index(strategy)
    meter = InputMeter()
    for phase in phases:
        if progress.step >= phase.end_step:
            continue
        history.extra = {"seq_length": phase.config.max_seq_length}  # in every entry
        with failure_notes(step=lambda: progress.step):
            _fit_phase(model, phase, progress, callbacks, strategy, vocab_file, lower_case,
                       workers, worker, meter, readable)
        if nan_guard.bad_step is not None:
            with failure_notes(kept=""):  # (the message says what is kept)
                raise NonFiniteLoss(
                    f"loss became {nan_guard.bad_loss} at step {nan_guard.bad_step}; training "
                    f"stopped. {_kept_checkpoint(saver, manager)} Lower --learning_rate or "
                    "raise --num_warmup_steps, or check the input data.")
    if progress.step > start_step:
        if saver.last_saved != progress.step and saver.save() is None:
            with failure_notes(kept=""):
                raise NonFiniteLoss(f"the weights hold NaN/Inf after step {progress.step}. "
                                    f"{_kept_checkpoint(saver, manager)}")
    else:
        logger.info("already trained to step %d (num_train_steps %d); nothing to train",
                    start_step, config.num_train_steps)

    # --- results ---
    last = history.entries[-1] if history.entries else {}
    train_logs = last if last.get("step") == progress.step else {}
    eval_scores = None
    last_phase = phases[-1]
    if last_phase.eval_paths:
        eval_scores = {n: train_logs[f"val_{n}"] for n in METRICS if f"val_{n}" in train_logs}
        if len(eval_scores) < len(METRICS):
            eval_scores = model.evaluate(
                _phase_eval(last_phase, vocab_file, lower_case, num_workers(strategy) > 1,
                            readable), return_dict=True, verbose=0)
    results = pretrain_results(train_logs, eval_scores, progress)
    results.update(input_report(strategy, config, progress, meter))
    if config.skip_corrupt:
        results["skipped_corrupt"] = [r.summary() for r in damaged]
        for r in damaged:
            logger.warning("skipped (skip_corrupt) in %s: %s records, %s bytes after its first "
                           "%d records: %s", r.path, r.skipped_records, r.skipped_bytes,
                           r.records, r.problem)
    if chief:
        save_model(model, os.path.join(output_dir, "model"), vocab_file=vocab_file,
                   metadata={"task": "pretraining", "max_seq_length": config.max_seq_length,
                             "global_step": progress.step})
        cb.write_json(os.path.join(output_dir, RESULTS_FILE), results)
        if history.entries:
            plot_history(history.entries, os.path.join(output_dir, "pretrain_history.png"))
    logger.info("pretraining results: %s", json.dumps(results, sort_keys=True))
    return results


# --------------------------------------------------------------------------- its parts


def _vocab_beside_model(config: PretrainConfig) -> str | None:
    """vocab.txt in the folder of bert_config_file or init_checkpoint (google-research/bert's
    commands name the model folder, $BERT_BASE_DIR, and no vocab), else None."""
    for path in (config.bert_config_file, config.init_checkpoint):
        found = vocab_beside(path)
        if found:
            logger.info("vocab_file: %s (beside %s)", found, path)
            return found
    return None


def _input_files(config: PretrainConfig) -> tuple[str, str | None, str | None, bool | None]:
    """(training files, eval files, the built-in data's vocab, its lower_case) for config's
    max_seq_length: the user's files, or the built-in data built (once) at that length."""
    if config.input_file is not None:
        return config.input_file, config.eval_input_file, None, None
    data = default_data(config.cache_dir, config.max_seq_length,
                        lower_case=config.lower_case(True),
                        whole_word_mask=config.whole_word_mask,
                        num_shards=config.default_num_shards)
    return data.train_files, config.eval_input_file or data.eval_files, data.vocab_file, \
        data.lower_case


def _same_file_bytes(a: str, b: str) -> bool:
    with tf.io.gfile.GFile(a, "rb") as fa, tf.io.gfile.GFile(b, "rb") as fb:
        return fa.read() == fb.read()


@dataclasses.dataclass
class _Phase:
    """One sequence length's share of the run: its config (max_seq_length and
    max_predictions_per_seq are the phase's), checked records, and the step it ends at."""
    config: PretrainConfig
    train_paths: list[str]
    record_counts: list[int]
    eval_paths: list[str]
    eval_batches: int
    end_step: int


def _phase(config: PretrainConfig, train_paths: list[str], train_files: str,
           eval_files: str | None, end_step: int, vocab_size: int,
           damaged: list[record_scan.ShardReport], flag: str = "") -> _Phase:
    """Checks a phase's records (`_scan`; damaged shards are added to `damaged`); `train_paths`
    are `train_files` expanded."""
    eval_paths = records.expand_file_pattern(eval_files) if eval_files else []
    reports = _scan(train_paths, train_files, f"{flag}input_file", config, vocab_size)
    damaged += [r for r in reports if r.problem]
    eval_batches = 0
    if eval_paths:
        eval_reports = _scan(eval_paths, eval_files, f"{flag}eval_input_file", config,
                             vocab_size, minimum=config.eval_batch_size)
        found = sum(r.records for r in eval_reports)
        eval_batches = min(found, config.max_eval_steps * config.eval_batch_size) \
            // config.eval_batch_size
        damaged += [r for r in eval_reports if r.problem]
    return _Phase(config, train_paths, [r.records for r in reports], eval_paths, eval_batches,
                  end_step)


def _phase_eval(phase: _Phase, vocab_file: str, lower_case: bool, multi_worker: bool,
                readable: dict[str, int]) -> tf.data.Dataset:
    return eval_dataset(phase.config, phase.eval_paths, vocab_file, lower_case, multi_worker,
                        phase.eval_batches, readable)


def _fit_phase(model: BertPretrainer, phase: _Phase, progress: cb.TrainingProgress,
               callbacks: list[keras.callbacks.Callback], strategy: tf.distribute.Strategy,
               vocab_file: str, lower_case: bool, workers: int, worker: int,
               meter: InputMeter, readable: dict[str, int]) -> None:
    """Trains from `progress.step` to the phase's end step, in loops of steps_per_loop, on
    its sequence length (a new length retraces the train step once)."""
    config, start = phase.config, progress.step
    k = config.gradient_accumulation_steps

    def make_train(context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
        return train_dataset(config, phase.train_paths, phase.record_counts, vocab_file,
                             lower_case, start, workers, worker, context, meter,
                             end_step=phase.end_step)

    train_ds = (strategy.distribute_datasets_from_function(make_train) if workers > 1
                else make_train())
    progress.stop_at = phase.end_step
    loops = math.ceil((phase.end_step - start) / config.steps_per_loop)
    logger.info("pretraining steps %d..%d at seq %d: %d loop(s) of %d steps, global batch %d "
                "over %d replica(s), %d micro-batch(es) per step", start, phase.end_step,
                config.max_seq_length, loops, config.steps_per_loop, config.train_batch_size,
                strategy.num_replicas_in_sync, k)
    validation = (_phase_eval(phase, vocab_file, lower_case, workers > 1, readable)
                  if phase.eval_paths else None)
    model.fit(train_ds, epochs=loops, steps_per_epoch=config.steps_per_loop * k,
              validation_data=validation, callbacks=callbacks, shuffle=False,  # the stream's
              verbose=runtime.fit_verbosity(config.verbose))


def _kept_checkpoint(saver: cb.CheckpointSaver, manager: tf.train.CheckpointManager) -> str:
    if saver.last_saved is None:
        return "No checkpoint was saved yet; rerunning starts again."
    return (f"The last good checkpoint (step {saver.last_saved}) in {manager.directory} is "
            "kept; rerunning resumes from it.")


def _scan(paths: list[str], files: str, what: str, config: PretrainConfig, vocab_size: int,
          minimum: int = 1) -> list[record_scan.ShardReport]:
    """Checks every record of the files (`record_scan.scan_records`: integrity, one known record
    format, google-format shapes against the config); returns a report per file (its readable
    records, its problem if damaged). Raises UserError when there are under `minimum`
    records."""
    started = time.perf_counter()
    reports = record_scan.scan_records(
        paths, what, skip_corrupt=config.skip_corrupt, max_seq_length=config.max_seq_length,
        max_predictions_per_seq=config.max_predictions_per_seq if config.static_masking
        else None, vocab_size=vocab_size)
    found = sum(r.records for r in reports)
    megabytes = sum(tf.io.gfile.stat(p).length for p in paths) / 1e6
    logger.info("%s: %d records in %d file(s), %.1f MB, checked in %.1f s", what, found,
                len(paths), megabytes, time.perf_counter() - started)
    if found < minimum:
        raise UserError(f"{what} {files!r} holds {found} records ({len(paths)} files); "
                        f"at least {minimum} needed")
    return reports


def _seed_states(model: keras.Model) -> list[Any]:
    """The model's random-generator states (dropout): in `variables`, not in `weights`."""
    weights = {id(w) for w in model.weights}
    return [v for v in model.variables if id(v) not in weights]
