"""absl flag definitions shared by every run_*.py script.

Each script calls the `define_*` groups it needs, passing its own defaults, then turns the parsed
flags into its library config with `config_from_flags`. Flag names are the original BERT ones
where they exist (bert_config_file, vocab_file, init_checkpoint, max_seq_length,
train_batch_size, learning_rate, num_train_steps, ...), and equal the config field names, so a
flag, a config field and the docs say the same thing.

Example (a script's top):

    import common_flags
    from tfbert.training.pretrain import PretrainConfig

    common_flags.define_model_flags()
    common_flags.define_training_flags(learning_rate=1e-4)
    common_flags.define_runtime_flags()

    def main(argv):
        config = common_flags.config_from_flags(PretrainConfig)
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any

from absl import app, flags

from tfbert.errors import EXIT_USER_ERROR, run_cli

FLAGS = flags.FLAGS


def run(main: Callable[[list[str]], Any]) -> None:
    """`app.run(main)` with tfbert's error boundary: a bad flag, an unexpected argument or a
    user error from the library prints one line on stderr and exits with 2 (absl's own parser
    prints the whole help and exits with 1)."""

    def parse(argv: list[str]) -> list[str]:
        try:
            return FLAGS(argv)
        except flags.Error as e:
            _fail(str(e))

    def guarded(argv: list[str]) -> Any:
        try:
            return run_cli(main, argv)
        except app.UsageError as e:
            _fail(str(e))

    app.run(guarded, flags_parser=parse)


def _fail(message: str) -> None:
    print(f"{os.path.basename(sys.argv[0])}: error: {message}", file=sys.stderr)
    sys.exit(EXIT_USER_ERROR)


def define_model_flags(max_seq_length: int = 128) -> None:
    """The model, its vocab and its starting weights."""
    flags.DEFINE_string("bert_config_file", None,
                        "Model config JSON (tfbert, Google bert_config.json or HF config.json).")
    flags.DEFINE_string("preset", None, "A tfbert.PRESETS model shape (e.g. bert-mini), instead "
                        "of --bert_config_file.")
    flags.DEFINE_string("vocab_file", None, "WordPiece vocab.txt.")
    flags.DEFINE_string("init_checkpoint", None, "Initial weights: a Hugging Face, Google TF1, "
                        "keras-hub or tfbert checkpoint (anything tfbert.from_pretrained reads).")
    flags.DEFINE_bool("do_lower_case", None, "Lower-case and strip accents when tokenizing; "
                      "default: the model config's lower_case.")
    flags.DEFINE_integer("max_seq_length", max_seq_length, "Tokens per sequence, [CLS] and "
                         "[SEP] included.", lower_bound=2)


def define_training_flags(output_dir: str | None = None, train_batch_size: int = 32,
                          eval_batch_size: int = 8, learning_rate: float = 5e-5,
                          optimizer: str = "adamw", weight_decay: float = 0.01,
                          save_checkpoints_steps: int = 1000, keep_checkpoint_max: int = 5,
                          log_steps: int = 100, seed: int = 12345) -> None:
    """Output, batch sizes, optimizer, checkpointing and the seed."""
    flags.DEFINE_string("output_dir", output_dir, "Where checkpoints, logs, results and the "
                        "trained model are written.")
    flags.DEFINE_integer("train_batch_size", train_batch_size, "Global training batch per "
                         "optimizer step (all replicas and accumulation micro-batches).",
                         lower_bound=1)
    flags.DEFINE_integer("eval_batch_size", eval_batch_size, "Global eval batch.", lower_bound=1)
    flags.DEFINE_float("learning_rate", learning_rate, "Peak learning rate (linear warmup, then "
                       "linear decay to 0).")
    flags.DEFINE_enum("optimizer", optimizer, ["adamw", "lamb"], "AdamW or LAMB, with weight "
                      "decay excluding LayerNorm and biases, epsilon 1e-6, clip norm 1.0.")
    flags.DEFINE_float("weight_decay", weight_decay, "Weight decay rate.")
    flags.DEFINE_integer("gradient_accumulation_steps", 1, "Micro-batches per optimizer step "
                         "(each train_batch_size / this).", lower_bound=1)
    flags.DEFINE_integer("save_checkpoints_steps", save_checkpoints_steps, "Checkpoint every "
                         "this many steps.", lower_bound=1)
    flags.DEFINE_integer("keep_checkpoint_max", keep_checkpoint_max, "Checkpoints to keep.",
                         lower_bound=1)
    flags.DEFINE_integer("log_steps", log_steps, "TensorBoard scalar interval in steps.",
                         lower_bound=1)
    flags.DEFINE_integer("seed", seed, "Random seed (weights, dropout, data order, masks).")


def define_step_flags(num_train_steps: int = 100000, num_warmup_steps: int = 10000,
                      iterations_per_loop: int | None = None) -> None:
    """Training length in optimizer steps (pretraining)."""
    flags.DEFINE_integer("num_train_steps", num_train_steps, "Optimizer steps to train to "
                         "(a total: a rerun resumes and continues up to it).", lower_bound=1)
    flags.DEFINE_integer("num_warmup_steps", num_warmup_steps, "Linear warmup steps.",
                         lower_bound=0)
    flags.DEFINE_integer("iterations_per_loop", iterations_per_loop, "Steps per Keras loop "
                         "(the eval interval); default: save_checkpoints_steps.", lower_bound=1)


def define_epoch_flags(num_train_epochs: float = 3.0, warmup_proportion: float = 0.1) -> None:
    """Training length in epochs (fine-tuning)."""
    flags.DEFINE_float("num_train_epochs", num_train_epochs, "Epochs over the training set.")
    flags.DEFINE_float("warmup_proportion", warmup_proportion, "Share of the steps spent in "
                       "linear warmup.")


def define_runtime_flags(distribution_strategy: str = "auto",
                         mixed_precision: str = "float32") -> None:
    """Precision, compilation and distribution."""
    flags.DEFINE_enum("mixed_precision", mixed_precision,
                      ["float32", "bfloat16", "float16", "auto"],
                      "Compute dtype (float32 master weights; float16 uses dynamic loss "
                      "scaling); auto: bfloat16 where the hardware runs it natively (TPU, "
                      "GPUs from Ampere, CPUs with AMX), else float32.")
    flags.DEFINE_bool("jit_compile", False, "XLA-compile the train step.")
    flags.DEFINE_enum("distribution_strategy", distribution_strategy,
                      ["auto", "one_device", "mirrored", "multi_worker", "tpu"],
                      "auto: TPU if configured, else all GPUs, else the CPU. multi_worker: "
                      "MultiWorkerMirroredStrategy from $TF_CONFIG.")
    flags.DEFINE_string("tpu", None, "TPU name or grpc:// address (default $TPU_NAME).")


def define_finetune_flags(defaults: Any, train_help: str, dev_help: str, test_help: str,
                          unit: str = "examples") -> None:
    """Every flag a fine-tuning script shares: model, training, epochs, runtime, data files and
    run modes, with defaults from the task's config dataclass instance `defaults`.

    Args:
        defaults: a TaskConfig instance (tfbert.training.finetune) holding the task's defaults.
        train_help, dev_help, test_help: str. What the task's data files hold.
        unit: str. What one example is called in the help text ("sentences", "questions").
    """
    define_model_flags(max_seq_length=defaults.max_seq_length)
    define_training_flags(
        train_batch_size=defaults.train_batch_size, eval_batch_size=defaults.eval_batch_size,
        learning_rate=defaults.learning_rate, optimizer=defaults.optimizer,
        weight_decay=defaults.weight_decay, log_steps=defaults.log_steps, seed=defaults.seed)
    define_epoch_flags(num_train_epochs=defaults.num_train_epochs,
                       warmup_proportion=defaults.warmup_proportion)
    define_runtime_flags(distribution_strategy=defaults.distribution_strategy)
    flags.DEFINE_string("train_file", None, train_help)
    flags.DEFINE_string("dev_file", None, dev_help)
    flags.DEFINE_string("test_file", None, test_help)
    flags.DEFINE_string("input_encoding", defaults.input_encoding, "The text encoding of "
                        "--train_file/--dev_file/--test_file, e.g. gb18030 for GBK (any Python "
                        "codec name; the built-in data is UTF-8).")
    flags.DEFINE_bool("do_train", defaults.do_train, "Fine-tune.")
    flags.DEFINE_bool("do_eval", defaults.do_eval, "Score the dev set.")
    flags.DEFINE_bool("do_predict", defaults.do_predict,
                      "Score the test set and write its predictions.")
    flags.DEFINE_integer("max_train_examples", None, f"Use only the first N training {unit}.",
                         lower_bound=1)
    flags.DEFINE_integer("max_eval_examples", None, f"Use only the first N dev and test {unit}.",
                         lower_bound=1)
    flags.mark_flag_as_required("output_dir")


def config_from_flags(cls: type, **overrides: Any) -> Any:
    """An instance of dataclass `cls` from the parsed flags whose names are its fields.

    Args:
        cls: a dataclass type (e.g. PretrainConfig).
        **overrides: field values that win over the flags.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"config_from_flags needs a dataclass type, got {cls!r}")
    values = {f.name: FLAGS[f.name].value for f in dataclasses.fields(cls) if f.name in FLAGS}
    values.update(overrides)
    try:
        return cls(**values)
    except (TypeError, ValueError) as e:
        raise app.UsageError(str(e)) from None
