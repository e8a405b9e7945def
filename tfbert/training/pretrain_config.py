"""The pretraining run's configuration: `PretrainConfig` (its fields are the flags of
run_pretraining.py) and the built-in default model.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from tfbert.errors import UserError
from tfbert.training.config import RunConfig, field

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
