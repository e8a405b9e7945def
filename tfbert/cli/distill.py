"""Distil a fine-tuned classification or NER model into a small student and score both.

The teacher's task decides the data: the data flags are its fine-tuning command's
(run_classifier.py: --task_name, --data_dir, --train_file, --dev_file, --test_file,
--tfds_name, --class_weights, --best_metric; run_ner.py: --task_name, --train_file, ...,
--char_level, --long_input, --doc_stride, --label_alignment); with none of them it runs the
task's built-in data (sentiment, people_daily). The student keeps the teacher's vocab, casing,
labels and head; give its shape one way (or a pretrained small model of the teacher's vocab):

    python run_distill.py --teacher_dir=output/sentiment --student_preset=bert-mini \\
        --output_dir=output/sentiment_mini --unlabelled_builtin=reviews
    python run_distill.py --teacher_dir=output/ner --student_layers_from_teacher=2 \\
        --output_dir=output/ner_half --hidden_weight=1 --attention_weight=1
    python run_distill.py --teacher_dir=output/ner --student_checkpoint=small_bert/model \\
        --output_dir=output/ner_small --unlabelled_builtin=people_daily
    python run_distill.py --teacher_dir=hf_finetuned_classifier/ --student_config_file=s.json \\
        --train_file=train.tsv --dev_file=dev.tsv --test_file=test.tsv \\
        --unlabelled_file=unlabelled.txt --teacher_cache=cache/teacher.tfrecord \\
        --output_dir=output/small

Losses: --soft_weight (the teacher's outputs at --temperature), --hard_weight (the gold labels),
--hidden_weight and --attention_weight (TinyBERT's intermediate transfer; the teacher then runs
every step). --teacher_cache keeps the teacher's logits in a TFRecord file for reruns.
--augment_copies adds TinyBERT-style augmented copies of the training texts.

Writes output_dir/results.json (the student's and the teacher's dev and test scores, the share
of the teacher's score kept, parameter counts), test predictions, and the student in
output_dir/model: `python -m tfbert.export --model_dir=output_dir` serves it (TFLite float16 /
int8 with --tflite).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from absl import app, flags

from tfbert.cli import common_flags
from tfbert.data.windows import LONG_INPUT
from tfbert.fields import field_help
from tfbert.fileio import json_text
from tfbert.tasks.distill import (
    REPLACED_FIELDS,
    DistillClassificationConfig,
    distill_config,
    run_distill,
    teacher_model_dir,
    teacher_task,
)

# The shared fine-tuning fields and the distillation fields, with their help; not the fields
# the teacher and the student stand for, nor length buckets (batches are padded).
_SKIPPED = {*REPLACED_FIELDS, "length_buckets"}
for _field in dataclasses.fields(DistillClassificationConfig):
    _help = field_help(DistillClassificationConfig, _field.name)
    if _help is not None and _field.name not in _SKIPPED:
        common_flags.define_field_flag(DistillClassificationConfig, _field.name, _help)
flags.mark_flag_as_required("output_dir")
flags.mark_flag_as_required("teacher_dir")

# The teacher task's own data fields (tfbert/tasks/classification.py, tfbert/tasks/ner.py).
TASK_FLAGS = {
    "classification": ("task_name", "data_dir", "xnli_language", "predict_batch_size",
                       "train_file", "dev_file", "test_file", "tfds_name", "tfds_data_dir",
                       "best_metric", "class_weights"),
    "ner": ("task_name", "train_file", "dev_file", "test_file", "char_level", "long_input",
            "doc_stride", "label_alignment"),
}
flags.DEFINE_string("task_name", None, "The teacher task's data: classification sentiment, "
                    "people_daily_types or a benchmark task with --data_dir; NER "
                    "people_daily (run_classifier.py / run_ner.py --help). Default: the task's "
                    "built-in data when no file is given.")
flags.DEFINE_string("data_dir", None, "Classification: the benchmark task's folder.")
flags.DEFINE_string("xnli_language", None, "Classification, XNLI: the language.")
flags.DEFINE_integer("predict_batch_size", None, "Classification: the test prediction batch.")
flags.DEFINE_string("train_file", None, "Labelled training data in the teacher task's format "
                    "(classification TSV/CSV/JSONL, NER CoNLL).")
flags.DEFINE_string("dev_file", None, "Dev data, scored after every epoch (best epoch kept) "
                    "for the student and once for the teacher.")
flags.DEFINE_string("test_file", None, "Test data, scored for student and teacher.")
flags.DEFINE_string("tfds_name", None, "Classification: a TensorFlow Datasets name.")
flags.DEFINE_string("tfds_data_dir", None, "Classification: the TFDS data directory.")
flags.DEFINE_string("best_metric", None, "Classification: the dev metric that picks the epoch "
                    "kept and that results.json's 'kept' compares (run_classifier.py's).")
flags.DEFINE_string("class_weights", None, "Classification: weigh the hard loss per label "
                    "('balanced' or a file; run_classifier.py's).")
flags.DEFINE_bool("char_level", None, "NER: CoNLL files with one character per line.")
flags.DEFINE_enum("long_input", None, list(LONG_INPUT), "NER: long sentences as windows "
                  "(default) or truncated.")
flags.DEFINE_integer("doc_stride", None, "NER: word pieces between window starts.")
flags.DEFINE_enum("label_alignment", None, ["first", "all"], "NER: labels on each token's "
                  "first word piece (default) or on all of them.")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    FLAGS = flags.FLAGS
    values = {name: FLAGS[name].value for name in _config_flags()
              if FLAGS[name].present or name not in _TEACHER_DEFAULTS}
    given_task_flags = {name for names in TASK_FLAGS.values() for name in names
                        if FLAGS[name].present}
    teacher_dir = values.pop("teacher_dir")
    config = _config(teacher_dir, values, given_task_flags)
    results = run_distill(config)
    metric = results["metric"]
    print(json_text({"student": {s: results[s][metric] for s in ("dev", "test") if s in results},
                     "teacher": {s: results["teacher"][s][metric] for s in ("dev", "test")
                                 if s in results["teacher"]},
                     "kept": results["kept"], "parameters": results["parameters"]}, indent=2))


# Flags whose default comes from the teacher when not given (its max_seq_length).
_TEACHER_DEFAULTS = ("max_seq_length",)


def _config_flags() -> list[str]:
    return [f.name for f in dataclasses.fields(DistillClassificationConfig)
            if f.name in flags.FLAGS and f.name not in _SKIPPED
            and f.name not in {n for names in TASK_FLAGS.values() for n in names}]


def _config(teacher_dir: str, values: dict[str, Any], given: set[str]) -> Any:
    """The run's config: the teacher's task's class, with the task flags given on the command
    line (a flag of the other task is an error)."""
    task, _ = teacher_task(teacher_model_dir(teacher_dir))
    foreign = sorted(given - set(TASK_FLAGS[task.name]))
    if foreign:
        raise app.UsageError(f"{', '.join('--' + n for n in foreign)} do(es) not apply to a "
                             f"{task.name} teacher")
    values.update({name: flags.FLAGS[name].value for name in given})
    return distill_config(teacher_dir, **values)


def entry() -> None:
    """The console command (pyproject.toml's [project.scripts])."""
    common_flags.run(main)


if __name__ == "__main__":
    entry()
