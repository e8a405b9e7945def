"""The fine-tuning loop every task shares: BERT's optimizer, fit, keep the best dev epoch.

    result = finetune(model, train_ds, loss=loss, evaluate_fn=lambda m: {"f1": ...},
                      config=FinetuneConfig(learning_rate=5e-5, num_train_epochs=3, metric="f1"))
    result.best_metrics          # what evaluate_fn said for the epoch now in `model`
    write_results(output_dir, {"dev": result.best_metrics, "test": ...})

A task (classification, NER, SQuAD) brings its model, its tf.data pipeline, its loss and an
`evaluate_fn(model) -> dict` that scores the dev set. `finetune` compiles the model with
`tfbert.training.optimization.create_optimizer` (AdamW by default, linear warmup over
warmup_proportion of the steps, then google-research/bert's linear decay to 0), trains for
num_train_epochs (a fraction trains part of the last epoch), calls evaluate_fn after every epoch,
and leaves the model holding the weights of the epoch with the best `metric`; with
early_stopping_patience=N it stops when that metric has not improved for N epochs (Keras's
EarlyStopping on the dev scores). A loss that becomes NaN or Inf stops training and raises
`NonFiniteLoss` (inside `task_run` nothing of the run is committed: the folder keeps the previous
run).

`TaskConfig` extends the shared `RunConfig` (tfbert.training.config) with the fields every
fine-tuning command line has (their flags come from the fields, tfbert/cli/common_flags.py);
`build_model` makes the task model from a checkpoint, a config file or a preset inside the
configured strategy and precision (`tfbert.training.model_source`, which pretraining uses too);
`load_finetuned` reopens a fine-tuned model for eval/predict-only runs (a tfbert run's, or
any checkpoint with the task's head: google-research/bert's, Hugging Face's); `task_run` holds
output_dir for a run (its lock, `tfbert.training.runtime.run_lock`) and stages every output,
committing them together at the end (`tfbert.training.outputs`), so the folder holds the
previous complete run or the new one, never a mix; `write_results` writes results.json.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import keras
import tensorflow as tf

from tfbert import ownership
from tfbert.config import BertConfig
from tfbert.errors import NonFiniteLoss, UserError, failure_notes
from tfbert.text.vocab import load_vocab
from tfbert.textfiles import check_encoding
from tfbert.training import callbacks as cb
from tfbert.training import model_source, outputs, runtime
from tfbert.training.config import RunConfig, check_fields, field
from tfbert.training.distribute import tf_config_task
from tfbert.training.model_source import Finetuned, checkpoint_vocab, load_finetuned
from tfbert.training.optimization import OPTIMIZERS
from tfbert.training.reports import write_results
from tfbert.training.schedules import LR_SCHEDULES

logger = logging.getLogger(__name__)

# Tasks call these through this module (`ft.load_finetuned(...)`, `ft.write_results(...)`).
__all__ = ["FinetuneConfig", "FinetuneResult", "Finetuned", "TaskConfig", "build_model",
           "check_seq_length", "checkpoint_vocab", "default_learning_rate", "early_stopping",
           "finetune", "load_finetuned", "task_run", "write_results"]

EvaluateFn = Callable[[Any], dict[str, Any]]


@dataclasses.dataclass
class FinetuneConfig:
    """How to train. Defaults are BERT's fine-tuning recipe (Devlin et al., 2018, A.3).

    Args:
        learning_rate: float. Peak learning rate (2e-5 .. 5e-5 for BERT-base).
        num_train_epochs: float. Passes over the training data; dev is scored after each one
            (and after the partial last one of a fractional value).
        warmup_proportion: float. Fraction of the steps with linear warmup (then linear decay).
        optimizer: str. "adamw", "lamb" or "adamw_google" (`create_optimizer`).
        lr_schedule: str or None. "polynomial" (None: the default) or "linear"
            (`create_optimizer`).
        weight_decay: float. Decay on all weights but LayerNorm parameters and biases.
        clip_norm: float or None. Global gradient-norm clip.
        gradient_accumulation_steps: int. Batches of train_ds per optimizer update.
        metric: str. Key of evaluate_fn's result that picks the best epoch.
        higher_is_better: bool. Whether a larger `metric` is better (False for a loss).
        jit_compile: bool. XLA-compile the train step.
        train_batch_size: int. Examples per optimizer update (for the throughput log).
        log_dir: str or None. TensorBoard logs: training loss, learning rate and throughput
            every `log_steps` updates (log_dir/train), the dev metrics every epoch (log_dir/eval).
        log_steps: int. TensorBoard interval in optimizer updates.
        early_stopping_patience: int or None. Stop when the dev `metric` has not improved for
            this many epochs (the best epoch's weights are kept either way); None trains every
            epoch. Needs evaluate_fn.
        verbose: int or None. Keras fit verbosity (1 a progress bar, 2 a line per epoch);
            None: a progress bar on a terminal, else a line per epoch.
    """

    learning_rate: float = field(5e-5, greater_than=0)
    num_train_epochs: float = field(3.0, greater_than=0)
    warmup_proportion: float = field(0.1, lower_bound=0, upper_bound=1)
    optimizer: str = field("adamw", choices=OPTIMIZERS)
    lr_schedule: str | None = field(None, choices=LR_SCHEDULES)
    weight_decay: float = field(0.01, lower_bound=0)
    clip_norm: float | None = field(1.0, greater_than=0)
    gradient_accumulation_steps: int = field(1, lower_bound=1)
    metric: str = "accuracy"
    higher_is_better: bool = True
    jit_compile: bool = False
    train_batch_size: int = field(32, lower_bound=1)
    log_dir: str | None = None
    log_steps: int = field(20, lower_bound=1)
    early_stopping_patience: int | None = field(None, lower_bound=1)
    verbose: int | None = field(None, lower_bound=0, upper_bound=2)

    def __post_init__(self) -> None:
        check_fields(self)  # UserError naming the field (tfbert.fields)


@dataclasses.dataclass
class FinetuneResult:
    """What `finetune` did.

    Attributes:
        history: one dict per epoch: {"epoch", "train_loss", and evaluate_fn's scalars}.
        best_epoch: int. 1-based epoch whose weights the model now holds.
        best_metrics: dict. evaluate_fn's full result for that epoch ({} without evaluate_fn).
        num_train_steps: int. Optimizer updates made.
        stopped_epoch: int or None. 1-based epoch after which early stopping ended training
            (None: every epoch ran).
    """

    history: list[dict[str, Any]]
    best_epoch: int
    best_metrics: dict[str, Any]
    num_train_steps: int
    stopped_epoch: int | None = None


def finetune(model: Any, train_ds: Any, loss: Any, config: FinetuneConfig,
             evaluate_fn: EvaluateFn | None = None, steps_per_epoch: int | None = None,
             metrics: Sequence[Any] | None = None, callbacks: Sequence[Any] = ()
             ) -> FinetuneResult:
    """Compiles `model` with BERT's optimizer, trains it, and keeps the best dev epoch.

    The optimizer is created in the scope of the strategy the model was built in (build the
    model inside `strategy.scope()` to train on several devices); a float16 model gets dynamic
    loss scaling.

    Args:
        model: keras.Model. A task model (e.g. tfbert.BertClassifier); compiled here.
        train_ds: tf.data.Dataset. Batches of (inputs, labels) or (inputs, labels, weights) of
            train_batch_size / gradient_accumulation_steps examples; one pass is one epoch,
            shuffled by the caller.
        loss: Keras loss (or dict of losses for dict outputs) for `model.compile`.
        config: FinetuneConfig. Learning rate, epochs, warmup, the metric to keep the best by.
        evaluate_fn: callable(model) -> dict of metrics, or None. Scores the dev set after each
            epoch; the model ends with the weights of the best `config.metric`. With None the
            model keeps its last weights (and early stopping has nothing to watch: an error).
        steps_per_epoch: int or None. Batches in one pass over train_ds; taken from
            `train_ds.cardinality()` when None (then it must be known).
        metrics: sequence of Keras metrics shown while training (optional).
        callbacks: sequence of keras.callbacks.Callback, added to fit.

    Returns:
        FinetuneResult.

    Raises:
        NonFiniteLoss: the loss (or the weights) became NaN/Inf; training stopped at that step
            (a UserError: run_cli prints one line).

    Example:
    >>> result = finetune(classifier, train_ds, loss, FinetuneConfig(num_train_epochs=2),
    ...                   evaluate_fn=lambda m: {"accuracy": accuracy_on_dev(m)})  # doctest: +SKIP
    """
    if config.early_stopping_patience and evaluate_fn is None:
        raise UserError(f"early_stopping_patience={config.early_stopping_patience} watches the "
                        "dev metric, and there is no dev set to score")
    steps_per_epoch = steps_per_epoch or _cardinality(train_ds)
    k = config.gradient_accumulation_steps
    num_train_steps = max(1, round(config.num_train_epochs * steps_per_epoch / k))  # updates
    total_batches = num_train_steps * k
    num_warmup_steps = int(config.warmup_proportion * num_train_steps)
    with _scope(model):
        runtime.compile_for_training(
            model, config, num_train_steps, num_warmup_steps,
            loss_scale=getattr(model.dtype_policy, "name", "") == "mixed_float16",
            clip_norm=config.clip_norm, loss=loss, metrics=list(metrics or []))
    progress = cb.TrainingProgress(0, k, config.train_batch_size, stop_at=num_train_steps)
    nan_guard = cb.StopOnNaN(progress)
    keeper = cb.KeepBest(evaluate_fn, config.metric, config.higher_is_better, nan_guard)
    logs = ([cb.TensorBoardScalars(progress, config.log_dir, config.log_steps)]
            if config.log_dir else [])
    stopper = early_stopping(config)
    logger.info("fine-tuning: %g epochs of %d batches, %d optimizer steps (%d warmup), peak "
                "learning rate %g", config.num_train_epochs, steps_per_epoch, num_train_steps,
                num_warmup_steps, config.learning_rate)
    with failure_notes(step=lambda: progress.step):  # for a Ctrl-C's line (tfbert.errors)
        model.fit(train_ds.repeat() if total_batches > steps_per_epoch else train_ds,
                  epochs=math.ceil(total_batches / steps_per_epoch),
                  steps_per_epoch=steps_per_epoch,
                  callbacks=[progress, nan_guard, keeper, *logs,
                             *([stopper] if stopper else []), *callbacks],
                  verbose=runtime.fit_verbosity(config.verbose),
                  shuffle=False)  # the caller's tf.data pipeline shuffles
    if nan_guard.bad_step is None and keeper.non_finite is None:
        keeper.restore(model)
    of = f"step {progress.step} of {num_train_steps}"
    if nan_guard.bad_step is not None:
        problem = f"the training loss became {nan_guard.bad_loss} at {of}"
    elif keeper.non_finite is not None:
        problem = "the dev {} is {} after epoch {} ({})".format(*keeper.non_finite, of)
    elif not cb.weights_finite(model):
        problem = f"the weights hold NaN/Inf after {of}"
    else:
        problem = None
    if problem:
        raise NonFiniteLoss(f"{problem}; training stopped and its model is not kept (lower "
                            f"learning_rate, now {config.learning_rate:g}, or check the "
                            "training data)")
    stopped = stopper.stopped_epoch + 1 if stopper and stopper.stopped_epoch else None
    if stopped:
        logger.info("early stopping after epoch %d: dev %s has not improved for %d epoch(s) "
                    "(best: epoch %d)", stopped, config.metric, config.early_stopping_patience,
                    keeper.best_epoch)
    return FinetuneResult(keeper.history, keeper.best_epoch, keeper.best_metrics, progress.step,
                          stopped)


def early_stopping(config: FinetuneConfig) -> keras.callbacks.EarlyStopping | None:
    """Keras's EarlyStopping on the dev `config.metric` (the `val_<metric>` that `finetune`'s
    dev scoring puts in the epoch logs), or None without early_stopping_patience.

    It only stops: `finetune` keeps the best epoch's weights itself. For a `model.fit` of one's
    own, put it after a callback that writes `val_<metric>` into the logs (Keras's own
    validation_data does).

    Example:
    >>> early_stopping(FinetuneConfig(metric="f1", early_stopping_patience=2)).monitor
    'val_f1'
    """
    if not config.early_stopping_patience:
        return None
    return keras.callbacks.EarlyStopping(
        monitor=f"val_{config.metric}", patience=config.early_stopping_patience,
        mode="max" if config.higher_is_better else "min", restore_best_weights=False)


def _scope(model: Any) -> Any:
    strategy = getattr(model, "distribute_strategy", None)
    return strategy.scope() if strategy is not None else contextlib.nullcontext()


def _cardinality(ds: Any) -> int:
    n = int(ds.cardinality())
    if n in (int(tf.data.INFINITE_CARDINALITY), int(tf.data.UNKNOWN_CARDINALITY)) or n <= 0:
        raise ValueError("finetune: the number of batches in train_ds is not known "
                         f"(cardinality {n}); pass steps_per_epoch")
    return n


# --- what every fine-tuning command line shares -------------------------------------------------

# The default peak learning rate (no --learning_rate) follows the model's width.
# BERT's fine-tuning rate, for a pretrained model and for a random-init one of BERT-base's width
# or more:
PRETRAINED_LEARNING_RATE = 5e-5
# For a random-init model narrower than SMALL_HIDDEN_SIZE, and for a checkpoint no wider than
# TINY_HIDDEN_SIZE (bert-tiny's width; run_pretraining.py's built-in default). Measured on the
# built-in data with the 2-layer hidden-128 model: People's Daily NER, 3,000 sentences, 3 epochs,
# test entity F1 from random init 0.000 at 5e-5, 0.174 at 5e-4, 0.193 at 1e-3, 0.127 at 2e-3, and
# from the default checkpoint 0.000 at 5e-5, 0.275 at 1e-3 (experiments/ner_diagnosis.py);
# sentiment, 1,000 reviews, 4 epochs, dev accuracy from random init 51.9% at 1e-4, 73.7% at
# 1e-3, from the default checkpoint 57.1% at 1e-4, 64.6% at 3e-4, 70.1% at 1e-3 (2e-3
# diverges; demo.py); 3,000 reviews from random init at 5e-5: the majority class
# (experiments/grid_sentiment.py); all 13,846 reviews, 2 epochs: dev accuracy at 1e-3 within
# 1.1 points of the best of 1e-4 / 3e-4 / 1e-3 (3e-4) for both starts
# (bench/quality.py --learning_rate 1e-4,3e-4,1e-3).
SMALL_MODEL_LEARNING_RATE = 1e-3
SMALL_HIDDEN_SIZE = 768
TINY_HIDDEN_SIZE = 128
# For a checkpoint wider than TINY_HIDDEN_SIZE and no wider than SMALL_PRETRAINED_HIDDEN_SIZE
# (tfbert-chinese: 6 layers, hidden 256). Tuned on dev: sentiment, 1,000 reviews, 4 epochs, seed
# 12345, dev accuracy from tfbert-chinese 69.2% at 5e-5, 73.8% at 1e-4, 76.7% at 3e-4, 73.5% at
# 1e-3 (python -m bench.quality --pretrained=tfbert-chinese --setups=sentiment_1000
# --only=pretrained --seeds=12345 --learning_rate=5e-5,1e-4,3e-4,1e-3).
SMALL_PRETRAINED_LEARNING_RATE = 3e-4
SMALL_PRETRAINED_HIDDEN_SIZE = 256


def default_learning_rate(config: TaskConfig) -> float:
    """The peak learning rate a fine-tuning run gets when none is given.

    PRETRAINED_LEARNING_RATE (BERT's 5e-5) from an init_checkpoint wider than
    SMALL_PRETRAINED_HIDDEN_SIZE, SMALL_PRETRAINED_LEARNING_RATE (3e-4) from one wider than
    TINY_HIDDEN_SIZE and no wider than that (tfbert-chinese); PRETRAINED_LEARNING_RATE for
    random init of a model of hidden_size >= SMALL_HIDDEN_SIZE;
    SMALL_MODEL_LEARNING_RATE (1e-3) from a checkpoint of hidden_size <= TINY_HIDDEN_SIZE and
    for random init of a narrower model (its shape from bert_config_file or preset; with
    neither the run fails later for want of a model, and 5e-5 is returned).

    Example:
    >>> from tfbert.tasks.classification import ClassificationConfig
    >>> default_learning_rate(ClassificationConfig(output_dir="o", task_name="sentiment",
    ...                                            preset="bert-base-uncased"))
    5e-05
    """
    if config.init_checkpoint:
        known = model_source.checkpoint_config(config.init_checkpoint)
        hidden = known.hidden_size if known is not None else None
        if hidden is not None and hidden <= TINY_HIDDEN_SIZE:
            return SMALL_MODEL_LEARNING_RATE
        if hidden is not None and hidden <= SMALL_PRETRAINED_HIDDEN_SIZE:
            return SMALL_PRETRAINED_LEARNING_RATE
        return PRETRAINED_LEARNING_RATE
    if config.bert_config_file and os.path.exists(config.bert_config_file):
        hidden = BertConfig.from_json_file(config.bert_config_file).hidden_size
    elif config.preset:
        hidden = BertConfig.from_preset(config.preset).hidden_size
    else:
        return PRETRAINED_LEARNING_RATE
    return SMALL_MODEL_LEARNING_RATE if hidden < SMALL_HIDDEN_SIZE else PRETRAINED_LEARNING_RATE


@dataclasses.dataclass
class TaskConfig(RunConfig):
    """The fields every fine-tuning run shares; names equal the flags of tfbert/cli/common_flags.py.

    The shared fields (output, model source, batches, optimizer, runtime) are `RunConfig`'s;
    each field's help (`tfbert.training.config.field_help`) is its documentation and its flag's
    help. Where fine-tuning differs from the shared default, the override says why.
    """

    # [CLS] one word piece [SEP]: the shortest input a fine-tuned model can learn from.
    min_seq_length: ClassVar[int] = 3

    # --- overrides of the shared defaults ---
    eval_batch_size: int = field(
        64, "Global eval batch (prediction only, no gradients: twice the training batch fits).",
        lower_bound=1)
    mixed_precision: str = field(
        "float32", "Compute dtype (float32 master weights; float16 uses dynamic loss scaling); "
        "auto: bfloat16 where the hardware runs it natively (TPU, GPUs from Ampere, CPUs with "
        "AMX or AVX512-BF16), else float32. Default float32: dev and test scores are the "
        "numbers a fine-tuning run reports, and they stay the same on every machine.",
        choices=list(runtime.PRECISION_CHOICES))
    learning_rate: float | None = field(
        None, "Peak learning rate (linear warmup, then linear decay to 0). Default: 5e-5 "
        "(BERT's fine-tuning rate) for a pretrained model (--init_checkpoint) or a random-init "
        "one of hidden_size >= 768; 1e-3 for a random-init model of hidden_size < 768 and for a "
        "checkpoint of hidden_size <= 128 such as run_pretraining.py's default (at 5e-5 the "
        "built-in tiny model tags no entity in 3 epochs of NER, from scratch or pretrained, "
        "and from scratch predicts the majority class of 3,000 reviews). A value given always "
        "wins; results.json records the rate used.")
    # --- fine-tuning only ---
    input_encoding: str = field(
        "utf-8", "The text encoding of --train_file/--dev_file/--test_file, e.g. gb18030 for "
        "GBK (any Python codec name; the built-in data is UTF-8).")
    num_train_epochs: float = field(3.0, "Epochs over the training set (BERT's 3).",
                                    greater_than=0)
    warmup_proportion: float = field(0.1, "Share of the steps spent in linear warmup.",
                                     lower_bound=0, upper_bound=1)
    do_train: bool = field(True, "Fine-tune.")
    do_eval: bool = field(True, "Score the dev set.")
    do_predict: bool = field(True, "Score the test set and write its predictions.")
    max_train_examples: int | None = field(None, "Use only the first N training examples.",
                                           lower_bound=1)
    max_eval_examples: int | None = field(None, "Use only the first N dev and test examples.",
                                          lower_bound=1)
    early_stopping_patience: int | None = field(
        None, "Stop training when the dev metric has not improved for N epochs (the best "
        "epoch's model is kept either way); default: train every epoch.", lower_bound=1)
    length_buckets: bool = field(
        True, "Batch examples of similar length and cut each batch to the shortest of a few "
        "lengths that holds them (multiples of 16 up to 128, at most 8 lengths: "
        "tfbert.data.length_buckets) in training, evaluation and prediction; false: every "
        "batch is padded to max_seq_length.")

    def __post_init__(self) -> None:
        if self.learning_rate is None:
            self.learning_rate = default_learning_rate(self)
        super().__post_init__()

    def validate(self) -> None:
        """Raises UserError (a ValueError) naming the first field that makes no sense."""
        super().validate()
        check_encoding(self.input_encoding)
        if not self.output_dir:
            raise UserError("output_dir is required")
        if not (self.do_train or self.do_eval or self.do_predict):
            raise UserError("nothing to do: set do_train, do_eval or do_predict")
        FinetuneConfig(**self.finetune_kwargs())  # validates the training fields early

    def finetune_kwargs(self, log_dir: str | None = None) -> dict[str, Any]:
        return dict(learning_rate=self.learning_rate, num_train_epochs=self.num_train_epochs,
                    warmup_proportion=self.warmup_proportion, optimizer=self.optimizer,
                    lr_schedule=self.lr_schedule, weight_decay=self.weight_decay,
                    gradient_accumulation_steps=self.gradient_accumulation_steps,
                    jit_compile=self.jit_compile, train_batch_size=self.train_batch_size,
                    log_dir=log_dir or os.path.join(self.output_dir, "logs"),
                    log_steps=self.log_steps,
                    early_stopping_patience=self.early_stopping_patience, verbose=self.verbose)

    def finetune_config(self, metric: str, higher_is_better: bool = True,
                        log_dir: str | None = None) -> FinetuneConfig:
        """The FinetuneConfig of this run, keeping the best dev `metric` (TensorBoard logs in
        `log_dir`, default output_dir/logs)."""
        return FinetuneConfig(**self.finetune_kwargs(log_dir), metric=metric,
                              higher_is_better=higher_is_better)

    def limit(self, examples: Sequence[Any] | None, split: str) -> Any:
        """The first max_train_examples (train) or max_eval_examples (dev/test) examples."""
        n = self.max_train_examples if split == "train" else self.max_eval_examples
        return examples[:n] if examples and n else examples


def build_model(cls: type, config: TaskConfig, **head_kwargs: Any) -> tuple[Any, str, bool]:
    """The task model a training run starts from, in the configured strategy and precision.

    From `init_checkpoint` (any format `from_pretrained` reads; `bert_config_file` or `preset`
    overrides its config), else random init from `bert_config_file` or `preset`
    (`tfbert.training.model_source`).

    Args:
        cls: type. The task model class, e.g. tfbert.BertClassifier.
        config: TaskConfig. init_checkpoint, bert_config_file, preset, vocab_file,
            do_lower_case and the runtime fields.
        **head_kwargs: the head's arguments, e.g. num_classes=2.

    Returns:
        (model, vocab_file, lower_case).
    """
    vocab_file = config.vocab_file or checkpoint_vocab(config.init_checkpoint)
    model_source.check_model_vocab(config, vocab_file)
    vocab_size = len(load_vocab(vocab_file))
    bert_config, _ = model_source.model_config(config, vocab_size)
    with runtime.build_scope(config):
        model = model_source.build_model(cls, bert_config, config.init_checkpoint,
                                         **head_kwargs)
    if not config.init_checkpoint:
        logger.info("random initialisation (%s)", config.model_source)
    model_source.check_vocab_size(vocab_size, vocab_file, model.encoder.config,
                                  config.model_source)
    lower_case = config.lower_case(model.encoder.config.lower_case)
    return model, vocab_file, lower_case


def check_seq_length(config: TaskConfig, model: Any) -> None:
    """Raises UserError when max_seq_length exceeds the model's position table (call it right
    after the model is built, before anything is tokenized)."""
    model_source.check_seq_length(config.max_seq_length,
                                  model.encoder.config.max_position_embeddings,
                                  config.model_source)


@contextlib.contextmanager
def task_run(config: TaskConfig, task: str) -> Iterator[outputs.Staging]:
    """Holds config.output_dir for one fine-tuning run; yields the staging folder its outputs
    go to (`run.path("results.json")`, ...), committed together when the block ends.

    The folder must be new, empty or a `task` run's own (`tfbert.ownership`; another kind of
    run, files no run wrote, an existing file or one of the run's inputs are refused before
    anything is written). The run takes the folder's lock (a second run on it fails at once,
    naming this one), finishes or clears what an interrupted run left (logging which), and on
    success replaces the previous run's outputs with its own (`tfbert.training.outputs`); on
    an error the folder keeps what it held. Outputs of the previous run that this one reads
    (an eval-only run's init_checkpoint=output_dir/model) are kept. A non-chief multi-worker
    task stages in a temporary folder and discards it: the chief's outputs are the run's.
    """
    ownership.claim_folder(config.output_dir, task, ownership.config_inputs(config))
    chief = config.distribution_strategy != "multi_worker" or tf_config_task()[0]
    with runtime.run_lock(config), outputs.staged(
            config.output_dir, task, dataclasses.asdict(config), keep=_inputs_inside(config),
            discard=not chief) as run:
        declared = _declared_model_config(config)
        if declared is not None:  # before any data is read (check_seq_length repeats it on
            # the model, for a source only the built model tells)
            model_source.check_seq_length(config.max_seq_length,
                                          declared.max_position_embeddings, config.model_source)
        with failure_notes(kept=lambda: _kept_note(config.output_dir), rerun="start again"):
            yield run


def _kept_note(output_dir: str) -> str:
    """What output_dir holds when a run ends early: the previous run, as it was."""
    manifest = outputs.read_manifest(output_dir)
    if manifest is None:
        return f"{output_dir} as it was (it holds no earlier run's outputs)"
    return (f"the previous run in {output_dir} (run {manifest['run_id']}, finished "
            f"{manifest['finished']}), untouched")


def _declared_model_config(config: TaskConfig) -> BertConfig | None:
    """The model config that config's bert_config_file, preset or init_checkpoint's config file
    declares, read without building anything; None where only the model tells (a keras-hub
    preset)."""
    if config.bert_config_file:
        return BertConfig.from_json_file(config.bert_config_file)
    if config.preset:
        return BertConfig.from_preset(config.preset)
    return model_source.checkpoint_config(config.init_checkpoint)


def _inputs_inside(config: TaskConfig) -> list[str]:
    """Top-level entries of output_dir that the config reads from."""
    root = os.path.realpath(config.output_dir)
    names = []
    for path in (config.init_checkpoint, config.vocab_file, config.bert_config_file,
                 *(getattr(config, f, None) for f in ("train_file", "dev_file", "test_file"))):
        if path and "://" not in path:
            relative = os.path.relpath(os.path.realpath(path), root)
            if relative != os.curdir and not relative.startswith(os.pardir):
                names.append(relative.split(os.sep)[0])
    return names
