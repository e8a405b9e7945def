"""Extractive QA: `run_qa`, the one call behind run_squad.py (span decoding and the
prediction files: `tfbert.tasks.qa_predictions`).

The v2.0 threshold of a run is, in this order: `null_score_diff_threshold` when given (0.0
included); the model's own (tfbert.json "null_score_diff_threshold") when predicting from a saved
model; tuned on dev when the run scores a dev set with answers: the threshold with the best dev F1
in evaluate-v2.0.py's best-threshold search over each question's best non-null answer
(`tfbert.evaluation.squad.best_null_threshold`); else 0.0, Google's default. Training runs store
it with the model (the export answers with it), and dev and test are scored with it.

`run_qa(QAConfig)` reads the data (the built-in People's Daily QA set when no file is
given), windows it, fine-tunes a BertSpanLabeler with the shared runner
(`tfbert.training.finetune`, best dev F1 kept), and writes to output_dir:

    results.json                 {"dev": {"exact_match", "f1", "total", "missing", "scoring",
                                  v2.0: "HasAns_*", "NoAns_*", "best_f1", "best_f1_threshold",..},
                                  "test": {...}, "train": {"history", "best_epoch", ...},
                                  "data": {split: feature counts and data problems},
                                  v2.0: "null_score_diff_threshold": {"value", "source": "flag",
                                  "model", "tuned_on_dev" or "default"}, "dev_at_threshold_0":
                                  dev's scores at Google's default 0.0}
    predictions.json             question id -> answer text (test split, else dev)
    nbest_predictions.json       question id -> [{"text", "probability", "start_logit",
                                  "end_logit"}, ...], best first (the same split)
    null_odds.json               v2.0: question id -> null score - best span score
    {split}_predictions.json, {split}_nbest_predictions.json, {split}_null_odds.json (v2.0)
    model/                       tfbert format; tfbert.json metadata task "qa", max_seq_length,
                                 max_query_length, doc_stride, max_answer_length,
                                 version_2_with_negative, lower_case, run_id, and v2.0
                                 null_score_diff_threshold (with its source)
    data/                        the built-in QA set as SQuAD JSON (when no file is given)
    logs/                        TensorBoard
    tfbert_run.json              the manifest naming the run these outputs come from (written
                                 last: the outputs are staged and committed together,
                                 `tfbert.training.finetune.task_run`)
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from tfbert.data import length_buckets as lb
from tfbert.data import squad as qa_data
from tfbert.data.qa_features import QAFeature
from tfbert.data.squad import ON_BAD_ANSWER
from tfbert.errors import UserError
from tfbert.evaluation.squad import SCORERS, apply_null_threshold, best_null_threshold, evaluate
from tfbert.models.span_labeler import BertSpanLabeler
from tfbert.tasks.base import Task
from tfbert.tasks.qa_predictions import postprocess_predictions, write_predictions
from tfbert.text.tokenizer import BertTokenizer
from tfbert.training import finetune as ft
from tfbert.training.config import field
from tfbert.training.finetune import TaskConfig
from tfbert.training.outputs import Staging, save_model

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class QAConfig(TaskConfig):
    """One extractive-QA run (the flags of run_squad.py); TaskConfig has the shared fields
    (checkpoint, vocab, max_seq_length, batch sizes, epochs, learning rate, do_train/do_eval/
    do_predict, max_train_examples/max_eval_examples, precision, strategy, ...).

    Args:
        train_file, dev_file, test_file: str or None. SQuAD v1.1/v2.0 (or CMRC2018) JSON files.
            With none of them the built-in People's Daily QA set is used (written as SQuAD JSON
            to output_dir/data/).
        doc_stride: int. Word pieces between the starts of consecutive context windows.
        max_query_length: int. Question word pieces kept.
        max_answer_length: int. Longest answer predicted, in word pieces.
        n_best_size: int. Candidates per window and in the n-best files.
        version_2_with_negative: bool. SQuAD v2.0: questions may have no answer (the built-in
            set then makes about a third unanswerable).
        null_score_diff_threshold: float or None. v2.0: predict "" when null score - best span
            score exceeds it. None: the saved model's threshold (runs without do_train), else
            tuned on dev (best F1), else 0.0; see the module docstring.
        on_bad_answer: str. "warn" (repair or skip, counted) or "error" for answers whose text
            is not at answer_start.
        scoring: str. "auto", "squad" or "cmrc2018" (character-level F1 for Chinese).
    """

    max_seq_length: int = 384
    num_train_epochs: float = 2.0
    train_file: str | None = None
    dev_file: str | None = None
    test_file: str | None = None
    doc_stride: int = field(128, lower_bound=1)
    max_query_length: int = field(64, lower_bound=1)
    max_answer_length: int = field(30, lower_bound=1)
    n_best_size: int = field(20, lower_bound=1)
    version_2_with_negative: bool = False
    null_score_diff_threshold: float | None = None
    on_bad_answer: str = "warn"
    scoring: str = "auto"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_seq_length <= self.max_query_length + 3:
            raise UserError(f"max_seq_length ({self.max_seq_length}) must be greater than "
                            f"max_query_length ({self.max_query_length}) + 3")
        if self.on_bad_answer not in ON_BAD_ANSWER:
            raise UserError(f"on_bad_answer must be one of {ON_BAD_ANSWER}, got "
                            f"{self.on_bad_answer!r}")
        if self.scoring != "auto" and self.scoring not in SCORERS:
            raise UserError(f"scoring must be 'auto' or one of {sorted(SCORERS)}, got "
                            f"{self.scoring!r}")

    @property
    def builtin(self) -> bool:
        """Whether the run uses the built-in QA set (no data file given)."""
        return not (self.train_file or self.dev_file or self.test_file)


def load_data(config: QAConfig, data_dir: str | None = None) -> dict[str, Any]:
    """split -> SquadData for the splits the run needs (None where none is given); the built-in
    set is written to `data_dir` (default output_dir/data) first."""
    paths = {"train": config.train_file, "dev": config.dev_file, "test": config.test_file}
    if config.builtin:
        paths = qa_data.write_builtin_qa(data_dir or os.path.join(config.output_dir, "data"),
                                         config.version_2_with_negative)
        logger.info("built-in People's Daily QA set written to %s",
                    os.path.dirname(paths["train"]))
    needed = {"train": config.do_train, "test": config.do_predict,
              "dev": (config.do_train or config.do_eval
                      or (config.do_predict and not paths["test"]))}
    splits: dict[str, Any] = {}
    for split, path in paths.items():
        if not (needed[split] and path):
            splits[split] = None
            continue
        data = qa_data.read_squad_json(path, config.on_bad_answer,
                                       encoding="utf-8" if config.builtin
                                       else config.input_encoding)
        data.examples = config.limit(data.examples, split)
        impossible = [ex.qas_id for ex in data.examples if ex.is_impossible]
        if impossible and not config.version_2_with_negative:
            raise UserError(f"{path}: {len(impossible)} question(s) are marked is_impossible "
                            f"(e.g. {impossible[0]!r}); SQuAD v2.0 data needs "
                            "version_2_with_negative")
        logger.info("%s: %d questions from %s", split, len(data.examples), path)
        splits[split] = data
    return splits


def span_loss(labels: Any, logits: Any) -> Any:
    """Half the sparse cross-entropy of one boundary: start + end halves add up to Google's
    (start loss + end loss) / 2."""
    return 0.5 * keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)


# The start and end logit of a position past a length bucket's cut: below any logit a model
# gives, so no such position is among a window's best starts or ends.
PAST_BUCKET_LOGIT = -1e9


def predict_logits(model: Any, features: Sequence[QAFeature], batch_size: int,
                   length_buckets: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The span labeler's start and end logits [N, T] for every feature, in feature order.

    With `length_buckets` (False: the library default) the features run in batches cut to
    their bucket's length (`tfbert.data.length_buckets`); positions past the cut get
    PAST_BUCKET_LOGIT (without buckets they hold the model's logits of padding, which no
    answer can start or end at either).
    """
    ds = qa_data.make_dataset(features, batch_size, with_labels=False,
                              length_buckets=length_buckets)
    out = lb.predict_in_order(model, ds, per_token=True,
                              max_seq_length=features[0].input_ids.shape[0],
                              pad_value=PAST_BUCKET_LOGIT)
    return np.asarray(out["start_logits"]), np.asarray(out["end_logits"])


def null_threshold_source(config: QAConfig, metadata: dict[str, Any] | None,
                          dev_scored: bool) -> tuple[float | None, str]:
    """The v2.0 null_score_diff_threshold a run uses and where it comes from.

    Args:
        config: QAConfig. Its null_score_diff_threshold wins when given.
        metadata: dict or None. tfbert.json of the model predicted from (None when training).
        dev_scored: bool. The run scores a dev split that has gold answers.

    Returns:
        (threshold, source): source "flag", "model" (the saved model's), "tuned_on_dev"
        (threshold None: tuned on the final model's dev predictions) or "default" (0.0).
    """
    if config.null_score_diff_threshold is not None:
        return float(config.null_score_diff_threshold), "flag"
    stored = (metadata or {}).get("null_score_diff_threshold")
    if stored is not None:
        return float(stored), "model"
    if dev_scored:
        return None, "tuned_on_dev"
    return 0.0, "default"


def run_qa(config: QAConfig) -> dict[str, Any]:
    """Fine-tunes and/or evaluates a BertSpanLabeler as `config` says; returns results.json.

    Writes to output_dir: results.json (`dev`/`test`: exact_match, f1, ...; `train`: history;
    `data`: feature and data-problem counts), predictions.json (question id -> answer text: the
    test split's, or dev's when there is no test split) with nbest_predictions.json and
    null_odds.json (v2.0) of the same split in Google's formats, {dev,test}_predictions.json,
    {dev,test}_nbest_predictions.json, {dev,test}_null_odds.json (v2.0), and model/ (tfbert
    format, metadata task "qa" with the windowing settings), committed together at the end
    (`tfbert.training.finetune.task_run`).

    Example:
    >>> results = run_qa(QAConfig(  # doctest: +SKIP
    ...     output_dir="out/qa", init_checkpoint="output/pretrain_default/model",
    ...     max_seq_length=256))
    >>> results["dev"]["f1"]  # doctest: +SKIP
    """
    with ft.task_run(config, "qa") as run:
        return _run(config, run)


def _run(config: QAConfig, run: Staging) -> dict[str, Any]:
    keras.utils.set_random_seed(config.seed)
    splits = load_data(config, run.path("data"))
    if config.do_train and not splits["train"]:
        raise UserError("do_train needs training data (train_file, or no files for the "
                        "built-in set)")
    if config.do_predict and not splits["test"] and not splits["dev"]:
        raise UserError("do_predict needs test_file or dev_file")

    saved = None  # the metadata of the fine-tuned model predicted from
    if config.do_train:
        model, vocab_file, lower_case = ft.build_model(BertSpanLabeler, config)
    else:
        loaded = ft.load_finetuned(config, "qa", labelled=False)
        model, vocab_file, lower_case = loaded.model, loaded.vocab_file, loaded.lower_case
        saved = loaded.metadata
    ft.check_seq_length(config, model)
    tokenizer = BertTokenizer(vocab_file, lower_case=lower_case)

    results: dict[str, Any] = {"data": {}, "run_id": run.run_id}
    features: dict[str, list[QAFeature]] = {}
    for split, data in splits.items():
        if data is None:
            continue
        examples = data.examples
        if split == "train":  # the reader counted them (data.problems) and warned
            skipped = [ex.qas_id for ex in examples if not ex.trainable]
            if skipped:
                logger.warning("train: %d question(s) are not trained on (a blank question, or "
                               "an answer not in the context): %s", len(skipped),
                               ", ".join(skipped[:10]) + (", ..." if len(skipped) > 10 else ""))
            examples = data.examples = [ex for ex in examples if ex.trainable]
        features[split], stats = qa_data.convert_examples(
            examples, tokenizer, config.max_seq_length, config.doc_stride,
            config.max_query_length)
        stats.update(data.problem_counts())
        results["data"][split] = stats
        logger.info("%s features: %s", split, stats)

    v2 = config.version_2_with_negative
    gold = {split: qa_data.gold_answers(data.examples) for split, data in splits.items() if data}
    dev_wanted = config.do_train or config.do_eval or (config.do_predict and not splits["test"])
    scored = [s for s, wanted in (("dev", dev_wanted), ("test", config.do_predict))
              if wanted and splits[s] is not None]
    threshold, source = null_threshold_source(
        config, saved, dev_scored="dev" in scored and bool(gold["dev"]))
    decoded: dict[str, tuple[dict, dict, dict]] = {}  # split -> outputs of the final model

    def decode(split: str) -> tuple[dict, dict, dict]:
        """postprocess_predictions of the split; v2.0 answers are the best non-null ones."""
        start, end = predict_logits(model, features[split], config.eval_batch_size,
                                    length_buckets=config.length_buckets)
        return postprocess_predictions(
            splits[split].examples, features[split], start, end, config.n_best_size,
            config.max_answer_length, v2, math.inf)

    def score(split: str, cut: float | None, outputs: tuple[dict, dict, dict] | None = None
              ) -> tuple[dict[str, Any], tuple[dict, dict, dict]]:
        """Metrics and (predictions, nbest, null_odds) at threshold `cut` (None: tuned here)."""
        answers, nbest, null_odds = outputs or decode(split)
        metrics: dict[str, Any] = {}
        if v2 and cut is None:
            cut, _ = best_null_threshold(gold[split], answers, null_odds, config.scoring)
        predictions = apply_null_threshold(answers, null_odds, cut) if v2 else answers
        if gold[split]:
            metrics = evaluate(gold[split], predictions, v2, config.scoring, null_odds or None)
            if v2:
                metrics["null_score_diff_threshold"] = cut
        return metrics, (predictions, nbest, null_odds)

    if config.do_train:
        train_ds = qa_data.make_dataset(features["train"], config.micro_batch_size,
                                        training=True, seed=config.seed,
                                        length_buckets=config.length_buckets)
        outcome = ft.finetune(  # each epoch's dev F1 at that epoch's tuned threshold when tuning
            model, train_ds, loss={"start_logits": span_loss, "end_logits": span_loss},
            config=config.finetune_config("f1", log_dir=run.path("logs")),
            evaluate_fn=(lambda m: score("dev", threshold)[0]) if splits["dev"] else None)
        results["train"] = {"learning_rate": config.learning_rate,
                            "num_examples": len(splits["train"].examples),
                            "num_features": len(features["train"]),
                            "best_epoch": outcome.best_epoch,
                            "num_train_steps": outcome.num_train_steps,
                            "stopped_epoch": outcome.stopped_epoch,
                            "history": outcome.history}
    for split in scored:
        decoded[split] = decode(split)
    if v2:
        if threshold is None:
            answers, _, null_odds = decoded["dev"]
            threshold, _ = best_null_threshold(gold["dev"], answers, null_odds, config.scoring)
            logger.info("null_score_diff_threshold %.4f: the best dev F1", threshold)
        results["null_score_diff_threshold"] = {"value": threshold, "source": source}
    if config.do_train:
        save_model(model, run.path("model"), vocab_file=vocab_file, metadata={
            "task": "qa", "max_seq_length": config.max_seq_length,
            "max_query_length": config.max_query_length, "doc_stride": config.doc_stride,
            "max_answer_length": config.max_answer_length,
            "version_2_with_negative": v2, "lower_case": lower_case, "run_id": run.run_id,
            **({"null_score_diff_threshold": threshold,
                "null_score_diff_threshold_source": source} if v2 else {})})

    for split in scored:
        metrics, (predictions, nbest, null_odds) = score(split, threshold, decoded[split])
        if metrics:
            results[split] = metrics
            logger.info("%s: exact match %.2f, F1 %.2f (%s scoring, %d questions)", split,
                        metrics["exact_match"], metrics["f1"], metrics["scoring"],
                        metrics["total"])
            if v2 and split == "dev":  # and at Google's default, for comparison
                results["dev_at_threshold_0"] = score(split, 0.0, decoded[split])[0]
        else:
            logger.info("%s has no gold answers: writing predictions only", split)
        odds = null_odds if v2 else None
        prefixes = [f"{split}_"] + ([""] if split == scored[-1] else [])
        for prefix in prefixes:  # the last split's files also under Google's names
            write_predictions(predictions, nbest, odds, run.path(f"{prefix}predictions.json"),
                              run.path(f"{prefix}nbest_predictions.json"),
                              run.path(f"{prefix}null_odds.json"))
        if split == scored[-1]:
            results["predictions_split"] = split
    ft.write_results(run.directory, results)
    return results


TASK = Task("qa", BertSpanLabeler, export="qa", command="squad", config_class=QAConfig,
            run=run_qa)
