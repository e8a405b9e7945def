"""The fields every training run shares, pretraining and fine-tuning, with one set of defaults.

`RunConfig` holds them; `PretrainConfig` (tfbert.training.pretrain) and `TaskConfig`
(tfbert.training.finetune) extend it, and override a default only where pretraining and
fine-tuning really differ (each override says why). Every field carries its help text and its
bounds (`tfbert.fields`), and tfbert/cli/common_flags.py defines the command-line flags from the
fields, so a field, its flag, its help and the values it refuses are one definition. Names are
google-research/bert's flag names where it has one.

Example:
>>> config = RunConfig(output_dir="out", learning_rate=1e-4)
>>> config.micro_batch_size, field_help(RunConfig, "seed")[:11]
(32, 'Random seed')
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from tfbert.checkpoints import resolve_source
from tfbert.errors import UserError
from tfbert.fields import check_fields, field, field_bounds, field_help, field_option
from tfbert.training.distribute import STRATEGIES
from tfbert.training.optimization import OPTIMIZER_HELP, OPTIMIZERS, check_schedule
from tfbert.training.runtime import PRECISION_CHOICES
from tfbert.training.schedules import LR_SCHEDULE_HELP, LR_SCHEDULES

# The field helpers are tfbert.fields'; the configs import them from here too.
__all__ = ["RunConfig", "check_fields", "field", "field_bounds", "field_help", "field_option"]


@dataclasses.dataclass
class RunConfig:
    """What every training run needs: output, model source, batches, optimizer, runtime.

    Each field's help (`field_help`) is its documentation and its flag's help.
    """

    # The shortest input the run can learn from (subclasses set theirs, with the reason).
    min_seq_length: ClassVar[int] = 3
    min_seq_length_reason: ClassVar[str] = ": [CLS] and [SEP] leave no room for a word"

    # --- output and model source ---
    output_dir: str | None = field(
        None, "Where checkpoints, logs, results and the trained model are written.")
    init_checkpoint: str | None = field(
        None, "Initial weights: a Hugging Face, Google TF1, keras-hub or tfbert checkpoint "
        "(anything tfbert.from_pretrained reads), or tfbert-chinese, the Chinese BERT shipped "
        "with tfbert.")
    bert_config_file: str | None = field(
        None, "Model config JSON (tfbert, Google bert_config.json or HF config.json); with "
        "init_checkpoint it overrides the checkpoint's config.")
    preset: str | None = field(
        None, "A tfbert.PRESETS model shape (e.g. bert-mini), instead of --bert_config_file; "
        "its vocab_size follows the vocab.")
    vocab_file: str | None = field(None, "WordPiece vocab.txt.")
    do_lower_case: bool | None = field(
        None, "Lower-case and strip accents when tokenizing; default: the model config's "
        "lower_case.")
    allow_changed_vocab: bool = field(
        False, "Tokenize with a vocab_file or do_lower_case other than init_checkpoint's own "
        "(its vocab.txt, its stated casing); without it such a run is refused.")
    # --- batches and optimizer ---
    max_seq_length: int = field(
        128, "Tokens per sequence, [CLS] and [SEP] included (BERT's default; attention cost "
        "grows with its square).", lower_bound=2)
    train_batch_size: int = field(
        32, "Global training batch per optimizer step (all replicas and accumulation "
        "micro-batches); BERT's fine-tuning batch.", lower_bound=1)
    eval_batch_size: int = field(32, "Global eval batch.", lower_bound=1)
    learning_rate: float = field(
        5e-5, "Peak learning rate (linear warmup, then linear decay to 0); BERT's default.",
        greater_than=0)
    optimizer: str = field("adamw", OPTIMIZER_HELP + ".", choices=list(OPTIMIZERS))
    lr_schedule: str | None = field(
        None, LR_SCHEDULE_HELP + ". Default: polynomial; a resumed pretraining run keeps the "
        "schedule it was started with.", choices=list(LR_SCHEDULES))
    weight_decay: float = field(0.01, "Weight decay rate (BERT's 0.01).", lower_bound=0)
    gradient_accumulation_steps: int = field(
        1, "Micro-batches per optimizer step (each train_batch_size / this): a large batch "
        "in little memory.", lower_bound=1)
    log_steps: int = field(
        20, "TensorBoard scalar interval in optimizer steps (cheap: a few scalars).",
        lower_bound=1)
    seed: int = field(
        12345, "Random seed (weights, dropout, data order, masks); google-research/bert's "
        "12345.", lower_bound=0, upper_bound=2**32 - 1)  # numpy's seed range
    # --- runtime ---
    mixed_precision: str = field(
        "auto", "Compute dtype (float32 master weights; float16 uses dynamic loss scaling); "
        "auto: bfloat16 where the hardware runs it natively (TPU, GPUs from Ampere, CPUs with "
        "AMX or AVX512-BF16), else float32.", choices=list(PRECISION_CHOICES))
    jit_compile: bool = field(False, "XLA-compile the train step.")
    distribution_strategy: str = field(
        "auto", "auto: TPU if configured, else all GPUs, else the CPU. multi_worker: "
        "MultiWorkerMirroredStrategy from $TF_CONFIG.", choices=list(STRATEGIES))
    tpu: str | None = field(None, "TPU name or grpc:// address (default $TPU_NAME).")
    verbose: int | None = field(
        None, "Keras progress output: 0 none, 1 a progress bar, 2 a line per loop or epoch; "
        "default: a progress bar on a terminal, else a line per loop or epoch.", lower_bound=0,
        upper_bound=2)

    def __post_init__(self) -> None:
        # A shipped model's name (tfbert-chinese) becomes its checked folder here, once: what
        # reads init_checkpoint afterwards (its vocab.txt, its config) sees a folder.
        self.init_checkpoint = resolve_source(self.init_checkpoint)
        self.validate()

    def validate(self) -> None:
        """Raises UserError (a ValueError) naming the first field that makes no sense."""
        check_fields(self)  # choices, types and bounds, from the fields (tfbert.fields)
        if self.max_seq_length < self.min_seq_length:
            raise UserError(f"max_seq_length {self.max_seq_length} is below the minimum "
                            f"{self.min_seq_length}{self.min_seq_length_reason}")
        if self.bert_config_file and self.preset:
            raise UserError("give bert_config_file or preset, not both")
        check_schedule(self.optimizer, self.lr_schedule)
        if self.train_batch_size % self.gradient_accumulation_steps:
            raise UserError(f"train_batch_size {self.train_batch_size} is not a multiple of "
                            f"gradient_accumulation_steps {self.gradient_accumulation_steps}")

    @property
    def micro_batch_size(self) -> int:
        """Examples per Keras batch: train_batch_size / gradient_accumulation_steps."""
        return self.train_batch_size // self.gradient_accumulation_steps

    def lower_case(self, model_lower_case: bool | None) -> bool | None:
        """The casing text is tokenized with: do_lower_case where given (google-research/bert's
        flag name), else the model's own `model_lower_case`."""
        return model_lower_case if self.do_lower_case is None else self.do_lower_case

    @property
    def model_source(self) -> str:
        """Where the model comes from, for messages."""
        return (self.init_checkpoint or self.bert_config_file
                or (f"preset {self.preset}" if self.preset else "the built-in default model"))
