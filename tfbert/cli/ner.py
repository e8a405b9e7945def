"""Fine-tune BERT for named-entity recognition and score it (entity-level P/R/F1).

With only --output_dir and a model it runs the built-in People's Daily NER (January 1998;
person, place and organisation names as character-level BIO tags; sentences split train/dev/test
by a stable hash of their text):

    python run_ner.py --init_checkpoint=output/pretrain_default/model --output_dir=output/ner
    python run_ner.py --train_file=train.txt --dev_file=dev.txt --test_file=test.txt \\
        --init_checkpoint=cased_L-12_H-768_A-12 --output_dir=output/conll03

Files are CoNLL-style: one `token<TAB>tag` per line (BIO or BIOES), a blank line between
sentences; --char_level for files with one Chinese character per line. Labels go on each
token's first word piece (--label_alignment=all: on every piece). A sentence longer than
--max_seq_length pieces is read as overlapping windows (--doc_stride apart), each token
predicted from the window where it has the most context (--long_input=truncate cuts it
instead). --crf adds a linear-chain CRF head. Writes output_dir/results.json ({"dev":
{"precision", "recall", "f1", "per_type", ...}, "test": {...}, "data": {split: windows and
tokens without a prediction, ...}}), test_predictions.jsonl (entities with character
offsets), test_predictions.conll (for conlleval) and the fine-tuned model in
output_dir/model.
"""

from __future__ import annotations

from absl import app, flags

from tfbert.cli import common_flags
from tfbert.data.windows import LONG_INPUT
from tfbert.fileio import json_text
from tfbert.tasks.ner import BUILTIN_TASKS, TASK, NerConfig

_D = NerConfig(output_dir="unused", task_name="people_daily")  # defaults of its own flags

common_flags.define_finetune_flags(
    NerConfig, train_help="Training data, CoNLL-style (token<TAB>tag).",
    dev_help="Dev data, scored after every epoch (best epoch kept).",
    test_help="Test data, scored and predicted.")
common_flags.define_google_tpu_flags()
flags.DEFINE_enum("task_name", None, list(BUILTIN_TASKS), "Built-in data (the default when no "
                  "file is given): People's Daily 1998-01, PER/LOC/ORG.")
flags.DEFINE_bool("char_level", _D.char_level, "CoNLL files hold one character per line of "
                  "text written without spaces (Chinese).")
common_flags.define_field_flag(NerConfig, "dropout", "Dropout before the tagging layer.")
flags.DEFINE_enum("long_input", _D.long_input, list(LONG_INPUT), "Sentences longer "
                  "than max_seq_length - 2 word pieces: overlapping windows, each token read "
                  "from the window where it has the most context (every window a training "
                  "example), or truncate (the rest gets no prediction).")
flags.DEFINE_integer("doc_stride", None, "Word pieces between window starts, in [1, "
                     "max_seq_length - 2); default max_seq_length // 2.")
flags.DEFINE_enum("label_alignment", _D.label_alignment, ["first", "all"], "Train on each "
                  "token's first word piece, or on all of its pieces (one entity spread over "
                  "them); predictions read the first piece.")
flags.DEFINE_bool("crf", _D.crf, "A linear-chain CRF head: trained with its negative "
                  "log-likelihood, decoded by Viterbi.")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    FLAGS = flags.FLAGS
    files = FLAGS.train_file or FLAGS.dev_file or FLAGS.test_file
    task_name = FLAGS.task_name or (None if files else "people_daily")
    steps = {} if FLAGS.task_name else common_flags.steps_for_files()
    config = common_flags.config_from_flags(TASK.config_class, task_name=task_name, **steps,
                                            **common_flags.google_tpu_overrides())
    results = common_flags.run_task(TASK.run, config, TASK.name, "f1")
    print(json_text({k: {m: results[k][m] for m in ("precision", "recall", "f1")}
                      for k in ("dev", "test") if k in results}, indent=2))


def entry() -> None:
    """The console command (pyproject.toml's [project.scripts])."""
    common_flags.run(main)


if __name__ == "__main__":
    entry()
