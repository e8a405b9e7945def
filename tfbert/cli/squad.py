r"""Fine-tune BERT for extractive question answering (SQuAD v1.1 / v2.0, CMRC2018) and score it.

With no data file it runs on the built-in QA set: cloze questions about the people, places and
organisations of People's Daily (Jan 1998), split train/dev/test by a stable hash:

    python run_squad.py --init_checkpoint=output/pretrain_default/model --output_dir=output/qa \\
        --max_seq_length=256
    python run_squad.py --train_file=train-v1.1.json --dev_file=dev-v1.1.json \\
        --init_checkpoint=uncased_L-12_H-768_A-12 --output_dir=output/squad \\
        --max_seq_length=384 --doc_stride=128 --train_batch_size=32 --learning_rate=3e-5
    python run_squad.py --train_file=train-v2.0.json --dev_file=dev-v2.0.json \\
        --version_2_with_negative ...    # null_score_diff_threshold tuned on dev (best F1)
    python run_squad.py --train_file=cmrc2018_train.json --dev_file=cmrc2018_dev.json \\
        --init_checkpoint=bert-base-chinese --output_dir=output/cmrc2018

google-research/bert's commands run as they are: with --predict_file (or --train_file alone) the
command is Google-style, so --do_train and --do_predict are off unless given, the predict file is
predicted (and scored when it has answers) with the weights training ends with, and the TPU
flags are accepted (--use_tpu --tpu_name pick the TPU strategy; the others are named in a warning
when given, as they do nothing here):

    python run_squad.py --vocab_file=$BERT_BASE_DIR/vocab.txt \\
        --bert_config_file=$BERT_BASE_DIR/bert_config.json \\
        --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --do_train=True \\
        --train_file=train-v2.0.json --do_predict=True --predict_file=dev-v2.0.json \\
        --train_batch_size=24 --learning_rate=3e-5 --num_train_epochs=2.0 \\
        --max_seq_length=384 --doc_stride=128 --output_dir=output/squad2 \\
        --version_2_with_negative=True

Writes output_dir/results.json ({"dev": {"exact_match", "f1", ...}, "test": {...}}; F1 is
character-level for Chinese answers, as CMRC2018 scores it), predictions.json (question id ->
answer text; the test split's, or dev's without a test file), nbest_predictions.json and (v2.0)
null_odds.json of the same split in the formats of Google's write_predictions, the same per split
({split}_predictions.json, ...), and the fine-tuned model in output_dir/model (tfbert format).
--nodo_train with --init_checkpoint=output_dir/model scores or predicts with a fine-tuned model.
"""

from __future__ import annotations

import logging

from absl import app, flags

from tfbert.cli import common_flags
from tfbert.fileio import json_text
from tfbert.tasks.qa import TASK, QAConfig

_D = QAConfig(output_dir="unused")  # defaults of its own flags

common_flags.define_finetune_flags(
    QAConfig, train_help="SQuAD-format training JSON (v1.1, v2.0 or CMRC2018). Without any "
    "data file: the built-in People's Daily QA set.",
    dev_help="SQuAD-format dev JSON, scored after every epoch (the best epoch by F1 is kept).",
    test_help="SQuAD-format test JSON (answers optional: predictions only).")
# google-research/bert's run_squad.py flags (its commands run as they are).
flags.DEFINE_string("predict_file", None, "google-research/bert's: SQuAD JSON to predict with "
                    "--do_predict (read as --test_file: scored too when it has answers). It, or "
                    "--train_file without --dev_file/--test_file, makes the command Google-style: "
                    "--do_train, --do_eval and --do_predict are off unless given, as there.")
flags.DEFINE_integer("predict_batch_size", None, "google-research/bert's name for "
                     "--eval_batch_size (wins when given; Google's default 8, tfbert's 64: the "
                     "predictions do not depend on it).", lower_bound=1)
flags.DEFINE_bool("verbose_logging", False, "Log every data problem (each bad answer with its "
                  "question id) instead of counts and the first ids.")
common_flags.define_google_tpu_flags()
# Extractive QA.
flags.DEFINE_integer("doc_stride", _D.doc_stride, "Word pieces between the starts of "
                     "consecutive windows over a long context.", lower_bound=1)
flags.DEFINE_integer("max_query_length", _D.max_query_length, "Question word pieces kept "
                     "(longer questions are cut).", lower_bound=1)
flags.DEFINE_integer("max_answer_length", _D.max_answer_length, "Longest answer predicted, in "
                     "word pieces.", lower_bound=1)
flags.DEFINE_integer("n_best_size", _D.n_best_size, "Candidate answers per window and in the "
                     "n-best files.", lower_bound=1)
flags.DEFINE_bool("version_2_with_negative", _D.version_2_with_negative, "SQuAD v2.0: some "
                  "questions have no answer (the built-in set then makes a third unanswerable).")
common_flags.define_field_flag(
    QAConfig, "null_score_diff_threshold", "v2.0: answer \"\" when null score - best span "
    "score exceeds this. Given (0.0 included), it is used as given, as in google-research/bert. "
    "Not given: a saved model's own threshold when predicting with --nodo_train, else the one "
    "with the best dev F1 (evaluate-v2.0.py's search; stored with the model, used by its "
    "export), else 0.0 (no dev set, Google's default). results.json names the value and its "
    "source.")
flags.DEFINE_enum("on_bad_answer", _D.on_bad_answer, ["warn", "error"], "An answer whose text "
                  "is not at its answer_start: warn (move it to the nearest occurrence, or skip "
                  "it in training; counted in results.json) or error.")
flags.DEFINE_enum("scoring", _D.scoring, ["auto", "squad", "cmrc2018"], "EM/F1 flavour: SQuAD "
                  "(English tokens) or CMRC2018 (Chinese characters); auto picks by the answers.")


def google_overrides() -> dict:
    """Config overrides for google-research/bert's flags (see --predict_file)."""
    FLAGS = flags.FLAGS
    overrides = common_flags.google_tpu_overrides()
    if FLAGS.predict_file:
        if FLAGS.test_file:
            raise app.UsageError("give --predict_file or --test_file, not both")
        overrides["test_file"] = FLAGS.predict_file
    if FLAGS.predict_file or (FLAGS.train_file and not (FLAGS.dev_file or FLAGS.test_file)):
        overrides.update({name: False for name in ("do_train", "do_eval", "do_predict")
                          if not FLAGS[name].present})
    if FLAGS.predict_batch_size:
        overrides["eval_batch_size"] = FLAGS.predict_batch_size
    if FLAGS.verbose_logging:
        logging.getLogger("tfbert").setLevel(logging.DEBUG)
    return overrides


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config = common_flags.config_from_flags(TASK.config_class, **google_overrides())
    results = common_flags.run_task(TASK.run, config, TASK.name, "f1")
    print(json_text({k: results[k] for k in ("dev", "test") if k in results}, indent=2,
                     ensure_ascii=False))


def entry() -> None:
    """The console command (pyproject.toml's [project.scripts])."""
    common_flags.run(main)


if __name__ == "__main__":
    entry()
