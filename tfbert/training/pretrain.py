"""BERT pretraining (masked LM + next sentence) with Keras `fit`: the library behind
run_pretraining.py.

`run_pretraining(PretrainConfig(...))` reads top to bottom: lock and strategy -> data and vocab
-> model config -> checks -> model and optimizer in the strategy's scope -> restore -> fit ->
results. The runtime it shares with fine-tuning lives beside it: `config` (the shared fields),
`runtime` (precision, strategy, lock, optimizer), `model_source` (config, build, checks),
`reports` (results, markdown, plots) and `builtin_data` (the default corpus).

Steps. A *step* is one optimizer update over `train_batch_size` examples (the global batch: all
replicas, all accumulation micro-batches). With `gradient_accumulation_steps` k each step is k
Keras batches of `train_batch_size / k`, split over the replicas. Keras runs in *loops* (its
epochs) of `iterations_per_loop` steps; the eval set is scored at the end of every loop.

Resume. Checkpoints (`output_dir/checkpoints/ckpt-STEP`, every `save_checkpoints_steps`) hold the
model's weights, the optimizer (moments, update count, hence the learning-rate schedule
position; accumulators; the float16 loss scale), the dropout random-generator states and the
global step. Rerunning the same command restores the latest one and continues from its step;
a larger `num_train_steps` continues training (the schedule is recomputed for the new total).
The data position is not saved: it is a pure function of (seed, step)
(`tfbert.data.pretraining.pretraining_stream`: a stateless file order and record permutation
per epoch, masks keyed by the seed and the global step), so the resumed run starts reading at
the records of its first step without touching the ones before, and sees exactly the batches
an uninterrupted run sees (the final weights match it). Starting at step 500,000 costs what
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

Safety. The run writes only into a new or empty output_dir or a pretraining run's own
(`tfbert.ownership`), holds its lock (`tfbert.rundir`) from start to end, removes
the `ckpt-N_temp/` folders a kill during a save leaves, and reads every input shard once
(`tfbert.data.record_scan.scan_records`, CRCs and truncation) before it builds the model;
`skip_corrupt` trains without the unreadable rest of a damaged shard and reports it.
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
from typing import Any, ClassVar

import keras
import numpy as np
import tensorflow as tf

from tfbert import ownership, rundir
from tfbert.config import BertConfig
from tfbert.data import record_scan, records
from tfbert.data.pretraining import (
    CYCLE_LENGTH,
    SHUFFLE_WINDOW,
    InputMeter,
    pretraining_dataset,
    pretraining_stream,
)
from tfbert.errors import NonFiniteLoss, UserError, failure_notes
from tfbert.models.pretrainer import BertPretrainer
from tfbert.text.vocab import load_vocab
from tfbert.training import callbacks as cb
from tfbert.training import data_service, runtime
from tfbert.training.builtin_data import default_data
from tfbert.training.config import RunConfig, field
from tfbert.training.distribute import get_strategy, is_chief, num_workers, worker_index
from tfbert.training.model_source import (
    build_model,
    check_init_checkpoint,
    check_model_vocab,
    check_seq_length,
    check_vocab_size,
    checkpoint_config,
    model_config,
    vocab_beside,
)
from tfbert.training.outputs import save_model
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

POSITION_INITS = ("auto", "random", "sinusoidal")
# The built-in default's first phase: 90% of the steps on 32-token sequences (3.6x cheaper per
# step than 128 on two CPU cores, and the masked LM falls as far per step; docs/performance.md,
# "The built-in default pretraining").
BUILTIN_PHASE1_SEQ_LENGTH = 32

# The built-in default: a tiny Chinese BERT (bert-tiny's shape: 2 layers, hidden 128), 3,000
# steps of 32 sequences, the first 2,700 of 32 tokens and the last 300 of 128: about 6 minutes
# on two AVX2 CPU cores. A short run on two cores is bounded by the masked-LM plateau
# (bag-of-characters predictions), which a model leaves only after thousands of steps, and the
# loss falls about as far per step at 32 tokens as at 128 (docs/performance.md, "The built-in
# default pretraining"), so cheap steps win; 4 layers of hidden 256 get fewer steps and stay on
# it, and transformers' BertForPreTraining sits on it the same way (`experiments/mlm_dynamics.py`).
# No dropout: a run this short is far from overfitting (Geiping & Goldstein's "Cramming", 2022,
# also turn it off), and the saved config says so, so fine-tuning this model runs without
# encoder dropout as well.
DEFAULT_MODEL = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=512, hidden_act="gelu", max_position_embeddings=512,
                     type_vocab_size=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


@dataclasses.dataclass
class PretrainConfig(RunConfig):
    """Everything a pretraining run needs; the defaults are the built-in default run.

    The shared fields (output, model source, batches, optimizer, runtime) are `RunConfig`'s;
    each field's help (`tfbert.training.config.field_help`) is its documentation and its flag's
    help. Where pretraining differs from the shared default, the override says why.
    """

    # [CLS] A [SEP] B [SEP] needs 5 positions with one token per segment; 8 leaves A and B a few
    # tokens each, the least that gives the masked LM and NSP something to learn from.
    min_seq_length: ClassVar[int] = 8
    min_seq_length_reason: ClassVar[str] = (" for pretraining: [CLS] A [SEP] B [SEP] needs room "
                                            "for a few tokens of each segment")

    # --- overrides of the shared defaults ---
    output_dir: str | None = field(
        "output/pretrain_default", "Where checkpoints, logs, results and the trained model are "
        "written (default: the built-in run's folder).")
    learning_rate: float = field(
        1e-3, "Peak learning rate (linear warmup, then linear decay to 0); 1e-3 suits the "
        "built-in tiny model (BERT-base pretrained at 1e-4).", greater_than=0)
    # Same default, pretraining's own help: here XLA is a measured speed-up users should know of.
    jit_compile: bool = field(
        False, "XLA-compile the train step: for a float32 run 1.2-1.3x faster per step at 32 "
        "tokens on the AVX2 and AVX-512 CPUs measured; in mixed bfloat16 on a CPU, slower at "
        "hidden 512 (docs/performance.md, \"XLA on CPU\"). Off by default: the default run's "
        "published figures come from the no-XLA step, and XLA rounds differently.")
    # --- data ---
    input_file: str | None = field(
        None, "Pretraining TFRecords from create_pretraining_data.py (globs, comma-separated). "
        "Default: the built-in Chinese corpus, built once and cached.")
    eval_input_file: str | None = field(
        None, "TFRecords scored at the end of every loop (default with the built-in data: its "
        "held-out documents).")
    max_predictions_per_seq: int = field(
        20, "Masked-LM predictions per sequence, P (BERT's 20 at length 128).", lower_bound=1)
    masked_lm_prob: float = field(0.15, "Share of tokens to mask (BERT's 15%).",
                                  greater_than=0, less_than=1)
    whole_word_mask: bool = field(
        False, "Mask whole words (jieba words for Chinese; records need word starts, see "
        "create_pretraining_data.py).")
    static_masking: bool = field(
        False, "For google-research/bert format records: train on the masks stored in them "
        "(google-research/bert's behaviour) instead of restoring the tokens and masking afresh "
        "every epoch. No effect on tfbert's own records.")
    position_embedding_init: str = field(
        "auto", "A fresh model's position table: BERT's truncated normal (random), or sinusoids "
        "scaled to the same spread (the masked LM falls a little faster); auto: sinusoidal for "
        "the built-in default model, random with bert_config_file or preset. Ignored with "
        "init_checkpoint and on resume.", choices=list(POSITION_INITS))
    cache_dir: str = field("cache", "Cache for the built-in data.")
    default_num_shards: int = field(4, "TFRecord shards of the built-in training data.",
                                    lower_bound=1)
    # --- length, checkpoints, evaluation ---
    num_train_steps: int = field(
        3000, "Optimizer steps to train to (a total: a rerun resumes and continues up to it); "
        "the built-in run's 3,000 take about 6 minutes on two AVX2 CPU cores.", lower_bound=1)
    num_warmup_steps: int = field(300, "Linear warmup steps (a tenth of the run).",
                                  lower_bound=0)
    save_checkpoints_steps: int = field(500, "Checkpoint every this many steps.",
                                        lower_bound=1)
    keep_checkpoint_max: int = field(5, "Checkpoints to keep.", lower_bound=1)
    iterations_per_loop: int | None = field(
        None, "Steps per Keras loop (the eval interval); default: save_checkpoints_steps.",
        lower_bound=1)
    max_eval_steps: int = field(20, "Eval batches per evaluation.", lower_bound=1)
    # --- sequence-length schedule (the BERT paper's: 90% of the steps at 128, then 512) ---
    phase1_seq_length: int | None = field(
        None, "Train the first phase1_fraction of the steps on sequences of this length, the "
        f"rest at max_seq_length. Default: {BUILTIN_PHASE1_SEQ_LENGTH} with the built-in data, "
        "none with input_file; 0: max_seq_length throughout.", lower_bound=0)
    phase1_fraction: float = field(
        0.9, "Share of num_train_steps in the first phase (with phase1_seq_length); the "
        "boundary is this share of num_train_steps, so a rerun with more steps moves it.",
        greater_than=0, less_than=1)
    phase1_max_predictions_per_seq: int | None = field(
        None, "Masked-LM predictions per sequence in the first phase (default: "
        "max_predictions_per_seq scaled by phase1_seq_length / max_seq_length).", lower_bound=1)
    phase1_input_file: str | None = field(
        None, "Pretraining TFRecords made at phase1_seq_length (create_pretraining_data.py "
        "--max_seq_length=...). Default with the built-in data: built at that length.")
    phase1_eval_input_file: str | None = field(
        None, "Eval TFRecords at phase1_seq_length, scored during the first phase (default "
        "with the built-in data: its held-out documents at that length; else no evaluation "
        "until the second phase).")
    # --- safety ---
    skip_corrupt: bool = field(
        False, "Train without the unreadable rest of a corrupt or truncated shard (every shard "
        "is checked before the model is built; what is skipped goes to the log and "
        "pretrain_results.json) instead of refusing to start.")
    allow_changed_settings: bool = field(
        False, "Resume although a data setting the input stream depends on (input files, "
        "vocab, max_seq_length, masking, seed, batch size) differs from the checkpointed run's; "
        "the change is recorded in pretrain_config.json.")
    # --- input at scale ---
    data_service: str | None = field(
        None, "A tf.data service dispatcher (grpc://host:port) that runs the tokenize/pack/mask "
        "pipeline on its workers (python -m tfbert.training.data_service); every step's batch "
        "is the local pipeline's, the order of its chunks of steps the service's.")

    def validate(self) -> None:
        """Raises UserError (a ValueError) naming the first field that makes no sense."""
        super().validate()  # the fields' own bounds (tfbert.fields) among them
        if not 0 <= self.num_warmup_steps <= self.num_train_steps:
            raise UserError(f"num_warmup_steps {self.num_warmup_steps} must be in "
                            f"[0, num_train_steps={self.num_train_steps}]")
        if self.max_predictions_per_seq > self.max_seq_length:
            raise UserError(f"max_predictions_per_seq {self.max_predictions_per_seq} is larger "
                            f"than max_seq_length {self.max_seq_length}")
        if self.data_service is not None and not self.data_service.startswith("grpc://"):
            raise UserError(f"data_service must be a dispatcher address grpc://HOST:PORT, got "
                            f"{self.data_service!r}")
        if self.phase1_seq_length:
            if not self.min_seq_length <= self.phase1_seq_length < self.max_seq_length:
                raise UserError(f"phase1_seq_length {self.phase1_seq_length} must be in "
                                f"[{self.min_seq_length}, max_seq_length="
                                f"{self.max_seq_length}): the first phase's sequences are the "
                                "shorter ones (0 turns the first phase off)")
        if self.phase1_length:
            if self.phase1_predictions > self.phase1_length:
                raise UserError(f"phase1_max_predictions_per_seq {self.phase1_predictions} is "
                                f"larger than phase1_seq_length {self.phase1_length}")
            if self.input_file and not self.phase1_input_file:
                raise UserError("phase1_seq_length with input_file needs phase1_input_file: "
                                "records made at that length (create_pretraining_data.py "
                                f"--max_seq_length={self.phase1_seq_length})")
        elif self.phase1_input_file or self.phase1_eval_input_file:
            raise UserError("phase1_input_file / phase1_eval_input_file need phase1_seq_length")

    @property
    def steps_per_loop(self) -> int:
        return self.iterations_per_loop or self.save_checkpoints_steps

    @property
    def phase1_predictions(self) -> int:
        """The first phase's masked-LM predictions per sequence."""
        if self.phase1_max_predictions_per_seq is not None:
            return self.phase1_max_predictions_per_seq
        return max(1, round(self.max_predictions_per_seq * self.phase1_length
                            / self.max_seq_length))

    @property
    def phase1_length(self) -> int:
        """The first phase's sequence length; 0: no first phase."""
        if self.phase1_seq_length is not None:
            return self.phase1_seq_length
        builtin = self.input_file is None and self.max_seq_length > BUILTIN_PHASE1_SEQ_LENGTH
        return BUILTIN_PHASE1_SEQ_LENGTH if builtin else 0

    @property
    def phase1_steps(self) -> int:
        """Steps of the first (short-sequence) phase: 0 without one."""
        if not self.phase1_length:
            return 0
        return round(self.phase1_fraction * self.num_train_steps)

    @property
    def position_init(self) -> str:
        """The fresh position table's scheme: "auto" is sinusoidal for the built-in default
        model (no bert_config_file, preset or init_checkpoint), BERT's random otherwise."""
        if self.position_embedding_init != "auto":
            return self.position_embedding_init
        own = self.bert_config_file or self.preset or self.init_checkpoint
        return "random" if own else "sinusoidal"

    def phase1(self) -> PretrainConfig:
        """This config as the first phase trains it: its sequence length, predictions and
        records in place of max_seq_length's."""
        return dataclasses.replace(
            self, max_seq_length=self.phase1_length,
            max_predictions_per_seq=self.phase1_predictions, input_file=self.phase1_input_file,
            eval_input_file=self.phase1_eval_input_file, phase1_seq_length=0,
            phase1_input_file=None, phase1_eval_input_file=None)


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
    lower_case = (config.do_lower_case if config.do_lower_case is not None
                  else known.lower_case if known else None)
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
    lower_case = bert_config.lower_case if config.do_lower_case is None else config.do_lower_case
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
    results.update(_input_report(strategy, config, progress, meter))
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
                        lower_case=True if config.do_lower_case is None else config.do_lower_case,
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


def build_pretrainer(bert_config: BertConfig | None, init_checkpoint: str | None
                     ) -> BertPretrainer:
    """A BertPretrainer: fresh from `bert_config`, or with `init_checkpoint`'s weights (its
    MLM/NSP heads too when it has them; `bert_config`, if given, overrides its config file)."""
    return build_model(BertPretrainer, bert_config, init_checkpoint)


def model_positions(config: PretrainConfig) -> tuple[int | None, str]:
    """The model's max_position_embeddings, known before any data work (None: only once the
    init_checkpoint is loaded), and where it comes from."""
    if config.bert_config_file:
        return BertConfig.from_json_file(config.bert_config_file).max_position_embeddings, \
            config.bert_config_file
    if config.preset:
        return BertConfig.from_preset(config.preset).max_position_embeddings, \
            f"preset {config.preset}"
    if config.init_checkpoint:
        peek = checkpoint_config(config.init_checkpoint)
        return (peek.max_position_embeddings if peek else None), config.init_checkpoint
    return DEFAULT_MODEL["max_position_embeddings"], "the built-in default model"


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


def sinusoidal_positions(rows: int, width: int, stddev: float) -> Any:
    """Vaswani et al.'s sinusoid table [rows, width], scaled to standard deviation `stddev`.

    A starting point for BERT's learned position table, not a change of architecture: the
    table stays a trainable variable and checkpoints are unchanged. In a sinusoid table the
    row of position t + k is a fixed rotation of row t's frequency pairs, so "attend to the
    previous token" is one linear map of the query/key projections for every position at once;
    from random rows it has to be learned pair by pair, which is what keeps a short masked-LM
    run on its bag-of-characters plateau (README, "Fine-tuning quality").
    """
    position = np.arange(rows, dtype="float64")[:, None]
    rate = 10000.0 ** (-np.arange(0, width, 2, dtype="float64") / width)  # [ceil(W / 2)]
    table = np.zeros((rows, width))
    table[:, 0::2] = np.sin(position * rate)
    table[:, 1::2] = np.cos(position * rate[:width // 2])
    return (table * stddev / table.std()).astype("float32")


def init_position_embeddings(encoder: Any, scheme: str) -> None:
    """Sets a fresh encoder's position table by `scheme` ("random": keep it, "sinusoidal")."""
    if scheme == "random":
        return
    config = encoder.config
    table = encoder.embeddings.position_embeddings.embeddings
    table.assign(sinusoidal_positions(config.max_position_embeddings, config.hidden_size,
                                      config.initializer_range))


def _seed_states(model: keras.Model) -> list[Any]:
    """The model's random-generator states (dropout): in `variables`, not in `weights`."""
    weights = {id(w) for w in model.weights}
    return [v for v in model.variables if id(v) not in weights]


def _pipeline_args(config: PretrainConfig, vocab_file: str, lower_case: bool,
                   readable_bytes: dict[str, int] | None) -> dict[str, Any]:
    return dict(vocab_file=vocab_file, max_seq_length=config.max_seq_length,
                max_predictions_per_seq=config.max_predictions_per_seq,
                masked_lm_prob=config.masked_lm_prob, whole_word_mask=config.whole_word_mask,
                lower_case=lower_case, skip_corrupt=config.skip_corrupt,
                readable_bytes=readable_bytes, static_masking=config.static_masking)


def _distribute_options(multi_worker: bool) -> tf.data.Options:
    options = tf.data.Options()
    # The eval set under multi-worker: every worker reads the (small, cached) set and keeps its
    # share of each batch. One worker has nothing to shard (its replicas split each batch).
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA if multi_worker
        else tf.data.experimental.AutoShardPolicy.OFF)
    return options


# tf.data service: steps per chunk handed to a service worker (DYNAMIC sharding).
SERVICE_CHUNK_STEPS = 64


def train_dataset(config: PretrainConfig, files: Sequence[str], record_counts: Sequence[int],
                  vocab_file: str, lower_case: bool, start_step: int = 0, workers: int = 1,
                  worker: int = 0, input_context: tf.distribute.InputContext | None = None,
                  meter: InputMeter | None = None, end_step: int | None = None
                  ) -> tf.data.Dataset:
    """One worker's training micro-batches from global step `start_step` on
    (`tfbert.data.pretraining.pretraining_stream`): its rows of each global batch of
    `train_batch_size`, in `gradient_accumulation_steps` micro-batches per step.

    Under `distribute_datasets_from_function`, `input_context` gives the worker and the
    replicas: the micro-batches are then split into per-replica batches. With
    `config.data_service` the stream is read from that tf.data service
    (`tfbert.training.data_service`).

    Args:
        config: PretrainConfig.
        files: list of str. The training TFRecords.
        record_counts: list of int. Readable records of each (`record_scan.scan_records`).
        vocab_file: str. WordPiece vocab.
        lower_case: bool. As for `BertTokenizer`.
        start_step: int. The first global step (a resume's checkpointed step).
        workers: int. Input pipelines (multi-worker workers).
        worker: int. This one's index.
        input_context: tf.distribute.InputContext or None. Overrides workers and worker.
        meter: InputMeter or None. Counts this worker's input work (local pipelines).
        end_step: int or None. The step the stream is read to with data_service (default
            num_train_steps).

    Returns:
        tf.data.Dataset of feature dicts, endless (with data_service: up to num_train_steps).
    """
    if input_context is not None:
        workers, worker = input_context.num_input_pipelines, input_context.input_pipeline_id
    k = config.gradient_accumulation_steps
    stream = dict(files=files, record_counts=record_counts, vocab_file=vocab_file,
                  max_seq_length=config.max_seq_length,
                  max_predictions_per_seq=config.max_predictions_per_seq,
                  batch_size=config.train_batch_size, seed=config.seed,
                  masked_lm_prob=config.masked_lm_prob, whole_word_mask=config.whole_word_mask,
                  lower_case=lower_case, static_masking=config.static_masking,
                  start_step=start_step, micro_batches=k, num_workers=workers,
                  worker_index=worker, cycle_length=CYCLE_LENGTH,
                  shuffle_window=SHUFFLE_WINDOW)
    if config.data_service:
        ds = data_service.read(
            pretraining_stream(**stream, chunk_steps=SERVICE_CHUNK_STEPS,
                               end_step=end_step or config.num_train_steps),
            config.data_service, data_service.job_name(config, start_step, worker))
        ds = data_service.without_step(ds)
        if k > 1:
            ds = ds.rebatch(config.train_batch_size // (k * workers), drop_remainder=True)
    else:
        ds = pretraining_stream(**stream, meter=meter)
    if input_context is not None:
        per_replica = input_context.get_per_replica_batch_size(config.train_batch_size // k)
        if per_replica != config.train_batch_size // (k * workers):
            ds = ds.rebatch(per_replica, drop_remainder=True)
    return ds


def _input_report(strategy: tf.distribute.Strategy, config: PretrainConfig,
                  progress: cb.TrainingProgress, meter: InputMeter) -> dict[str, Any]:
    """The input work of each worker next to the step rate: `workerI_input_examples`, the
    examples its pipeline made (prefetched ones included), and
    `workerI_input_examples_per_core_second`, their rate per busy CPU-second of its parse/
    tokenize/pack/mask stage (None with a data service, whose workers do that work)."""
    mine = [float(meter.examples), meter.examples_per_core_second or float("nan")]
    if num_workers(strategy) > 1:  # every worker's numbers, gathered to each
        local = strategy.extended.worker_devices
        gathered = strategy.gather(strategy.run(lambda: tf.constant([mine], tf.float32)),
                                   axis=0).numpy()
        per_worker = gathered[::len(local)].tolist()
    else:
        per_worker = [mine]
    speed = progress.examples_per_second
    report: dict[str, Any] = {
        "steps_per_second": speed / config.train_batch_size if math.isfinite(speed) else None,
        "input_workers": len(per_worker)}
    for i, (examples, rate) in enumerate(per_worker):  # flat keys: one number per key
        local = not config.data_service
        report[f"worker{i}_input_examples"] = int(examples) if local else None
        report[f"worker{i}_input_examples_per_core_second"] = (
            rate if local and math.isfinite(rate) else None)
    return report


def eval_dataset(config: PretrainConfig, files: str | Sequence[str], vocab_file: str,
                 lower_case: bool, multi_worker: bool = False, num_batches: int | None = None,
                 readable_bytes: dict[str, int] | None = None) -> tf.data.Dataset:
    """`max_eval_steps` fixed eval batches, cached so every evaluation sees the same masks
    (`num_batches`, when known, declares how many there are)."""
    ds = pretraining_dataset(files, batch_size=config.eval_batch_size, seed=config.seed + 1,
                             repeat=False, shuffle=False,
                             **_pipeline_args(config, vocab_file, lower_case, readable_bytes))
    ds = ds.take(config.max_eval_steps).cache()
    if num_batches:
        ds = ds.apply(tf.data.experimental.assert_cardinality(
            min(num_batches, config.max_eval_steps)))
    return ds.with_options(_distribute_options(multi_worker))
