"""Sentence-pair (or single-text) regression end to end: a real-valued score per example, as GLUE's
STS-B (semantic similarity 0-5) asks; `run_regression(RegressionConfig) -> results`.

The command is run_classifier.py's, with --task_name=sts-b and --data_dir (GLUE's STS-B folder),
or with files whose `label` column holds the score:

    python run_classifier.py --task_name=sts-b --data_dir=glue_data/STS-B --do_train=true \\
        --do_eval=true --init_checkpoint=$BERT_BASE_DIR --output_dir=/tmp/stsb

The model is `tfbert.models.regressor.BertRegressor` (transformers' BertForSequenceClassification
with num_labels=1: a dense unit on the pooled output, mean squared error). Scores: Pearson's r
and Spearman's rho between predicted and gold scores (GLUE's STS-B metrics), and the mean squared
error; the epoch with the best dev `best_metric` is kept. Writes to output_dir results.json,
test_predictions.tsv, the model, and for a --data_dir run eval_results.txt (`key = value` as
google-research/bert writes it) and test_results.tsv (one predicted score per line).

STS-B's folder (GLUE's download): train.tsv and dev.tsv with a header row naming at least
sentence1, sentence2 and score (GLUE's has index, genre, filename, year, old_index, source1,
source2 before them), test.tsv the same without score. Columns are found by their header names.
"""

from __future__ import annotations

import csv
import dataclasses
import logging
import math
import os
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfbert import textfiles
from tfbert.data import classification as data
from tfbert.data import length_buckets as lb
from tfbert.errors import UserError
from tfbert.evaluation.classification_outputs import write_eval_results, write_test_results
from tfbert.evaluation.regression import regression_metrics
from tfbert.models.regressor import BertRegressor
from tfbert.tasks.base import Task
from tfbert.text.preprocessor import BertPreprocessor
from tfbert.training import finetune as ft
from tfbert.training.config import field
from tfbert.training.finetune import TaskConfig
from tfbert.training.outputs import Staging, save_model

logger = logging.getLogger(__name__)

TASK_NAMES = ("sts-b", "stsb")  # run_classifier.py's --task_name values of this task
BEST_METRICS = ("pearson", "spearman")
STSB_COLUMNS = {"train": ("sentence1", "sentence2", "score"),
                "dev": ("sentence1", "sentence2", "score"),
                "test": ("sentence1", "sentence2")}


@dataclasses.dataclass
class RegressionConfig(TaskConfig):
    """One regression run (run_classifier.py's flags that apply to it; TaskConfig has the shared
    fields: checkpoint, batch sizes, epochs, learning rate, do_train/do_eval/do_predict, ...).

    Args:
        task_name: str or None. "sts-b" (or "stsb"; case-insensitive): the name that selects
            this task on run_classifier.py.
        data_dir: str or None. STS-B's folder (train.tsv, dev.tsv, test.tsv); or give files.
        predict_batch_size: int or None. Batch for the test predictions (eval_batch_size when
            None).
        train_file, dev_file, test_file: str or None. TSV/CSV/JSONL files with columns text,
            label (the score, a number) and optional text_b; test_file may lack the label.
        dropout: float. Dropout before the output layer.
        best_metric: str or None. Dev metric that picks the epoch kept: "pearson" (default) or
            "spearman".
    """

    task_name: str | None = None
    data_dir: str | None = None
    predict_batch_size: int | None = field(None, lower_bound=1)
    train_file: str | None = None
    dev_file: str | None = None
    test_file: str | None = None
    dropout: float = field(0.1, lower_bound=0, less_than=1)
    best_metric: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.task_name = self.task_name.lower() if self.task_name else None
        files = self.train_file or self.dev_file or self.test_file
        if self.task_name and self.task_name not in TASK_NAMES:
            raise UserError(f"task_name {self.task_name!r} is not a regression task; expected "
                            f"one of {TASK_NAMES}")
        if bool(self.data_dir) == bool(files):
            raise UserError("give exactly one data source: data_dir (STS-B's folder of "
                            "train.tsv, dev.tsv, test.tsv) or train_file/dev_file/test_file")
        self.best_metric = self.best_metric or BEST_METRICS[0]
        if self.best_metric not in BEST_METRICS:
            raise UserError(f"best_metric must be one of {BEST_METRICS} for regression, got "
                            f"{self.best_metric!r}")


# --- data -------------------------------------------------------------------------------------


def read_stsb(data_dir: str, split: str, encoding: str = textfiles.DEFAULT_ENCODING
              ) -> list[data.ClassificationExample]:
    """STS-B's `split` ("train", "dev", "test") file as examples: text sentence1, text_b
    sentence2, label the score's text (None in test.tsv). Rows are tab-separated without
    quoting (GLUE's files hold quote characters inside sentences).

    Raises:
        UserError: a header without the columns, a row with too few fields, or a score that is
            not a finite number (naming the file and line).
    """
    path = os.path.join(data_dir, f"{split}.tsv")
    textfiles.check_file(path, f"STS-B {split} file")
    rows = textfiles.tsv_rows(path, encoding)
    header = next(rows, (0, None))[1]
    wanted = STSB_COLUMNS[split]
    names = [h.strip().lower() for h in header or []]
    if any(name not in names for name in wanted):
        raise UserError(f"{path}: header {header} lacks column(s) "
                        f"{[n for n in wanted if n not in names]}; STS-B's {split}.tsv has a "
                        f"header row naming {', '.join(wanted)}")
    columns = [names.index(name) for name in wanted]
    examples = []
    for line, fields in rows:
        if not any(f.strip() for f in fields):
            continue
        source = f"{path}:{line}"
        if len(fields) <= max(columns):
            raise UserError(f"{source}: {len(fields)} fields, expected {len(names)} as the "
                            "header names")
        text, text_b, *score = (fields[i] for i in columns)
        examples.append(data.ClassificationExample(
            text, _score_text(score[0], source) if score else None, text_b, source))
    if not examples:
        raise UserError(f"{path}: no rows after the header")
    return examples


def _score_text(value: str, source: str) -> str:
    try:
        score = float(value)
    except ValueError:
        score = math.nan
    if not math.isfinite(score):
        raise UserError(f"{source}: score {value!r} is not a finite number")
    return value.strip()


def read_scored(path: str, labelled: bool, encoding: str) -> list[data.ClassificationExample]:
    """A TSV/CSV/JSONL file (`tfbert.data.classification.read_examples`' columns) whose label
    is a score; UserError naming the line of a label that is not a finite number."""
    examples = data.read_examples(path, labelled=labelled, encoding=encoding)
    return [dataclasses.replace(e, label=None if e.label is None
                                else _score_text(str(e.label), e.source)) for e in examples]


def scores(examples: Sequence[data.ClassificationExample]) -> np.ndarray:
    """The examples' gold scores [N] float32."""
    return np.asarray([float(e.label) for e in examples], np.float32)


def load_data(config: RegressionConfig) -> dict[str, list[data.ClassificationExample] | None]:
    """The train/dev/test examples the run needs (None where not given or not needed); a
    data_dir run reads dev only for do_eval, as google-research/bert's run_classifier.py."""
    needed = {"train": config.do_train,
              "dev": config.do_eval or (config.do_train and not config.data_dir),
              "test": config.do_predict}
    files = {"train": config.train_file, "dev": config.dev_file, "test": config.test_file}
    splits = {}
    for split, wanted in needed.items():
        examples = None
        if wanted and config.data_dir:
            examples = read_stsb(config.data_dir, split, config.input_encoding)
        elif wanted and files[split]:
            examples = read_scored(files[split], split != "test", config.input_encoding)
        splits[split] = config.limit(examples, split)
    return splits


def make_dataset(examples: Sequence[data.ClassificationExample], preprocessor: Any,
                 batch_size: int, with_scores: bool = False, shuffle: bool = False,
                 seed: int | None = None, length_buckets: bool = False) -> Any:
    """Batches of model inputs, or (inputs, scores [B] float32) with `with_scores`; packed once
    (`tfbert.data.classification.make_dataset`, which caches them). With `length_buckets`
    (False: the library default) batches of one bucket each, cut to its length
    (`tfbert.data.length_buckets`); without shuffle each input dict carries `example_index`
    for `tfbert.data.length_buckets.predict_in_order`."""
    if not with_scores:
        return data.make_dataset(examples, preprocessor, None, batch_size,
                                 length_buckets=length_buckets)
    ds = data.make_dataset(examples, preprocessor, None, batch_size)
    ds = tf.data.Dataset.zip((ds.unbatch(), tf.data.Dataset.from_tensor_slices(scores(examples))))
    ds = ds.apply(tf.data.experimental.assert_cardinality(len(examples)))  # (unbatch hides it)
    if length_buckets:
        return lb.batch_by_length(ds, batch_size, lb.packed_length(ds), shuffle=shuffle,
                                  seed=seed)
    if shuffle:
        ds = ds.shuffle(len(examples), seed=seed, reshuffle_each_iteration=True)
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)


# --- the run ----------------------------------------------------------------------------------


def run_regression(config: RegressionConfig) -> dict[str, Any]:
    """Fine-tunes and/or evaluates a BertRegressor as `config` says; returns results.json."""
    with ft.task_run(config, "regression") as run:
        return _run(config, run)


def _run(config: RegressionConfig, run: Staging) -> dict[str, Any]:
    keras.utils.set_random_seed(config.seed)
    splits = load_data(config)
    train, dev, test = splits["train"], splits["dev"], splits["test"]
    if config.do_train and not train:
        raise UserError("do_train needs training data (train_file, or task_name with data_dir)")
    if config.do_predict and not test:
        raise UserError("do_predict needs test data (test_file, or task_name with data_dir)")
    global_step = 0
    if config.do_train:
        model, vocab_file, lower_case = ft.build_model(BertRegressor, config,
                                                       dropout=config.dropout)
    else:
        loaded = ft.load_finetuned(config, "regression", labelled=False)
        model, vocab_file, lower_case = loaded.model, loaded.vocab_file, loaded.lower_case
        global_step = loaded.global_step
    ft.check_seq_length(config, model)
    preprocessor = BertPreprocessor(vocab_file, config.max_seq_length, lower_case=lower_case)
    batch = {"test": config.predict_batch_size or config.eval_batch_size}
    eval_ds = {split: make_dataset(examples, preprocessor,
                                   batch.get(split, config.eval_batch_size),
                                   length_buckets=config.length_buckets)
               for split, examples in (("dev", dev), ("test", test)) if examples}
    predict = lambda m, split: np.asarray(lb.predict_in_order(m, eval_ds[split]), np.float32)
    results: dict[str, Any] = {"run_id": run.run_id}
    if config.do_train:
        train_ds = make_dataset(train, preprocessor, config.micro_batch_size, with_scores=True,
                                shuffle=True, seed=config.seed,
                                length_buckets=config.length_buckets)
        outcome = ft.finetune(
            model, train_ds, loss=keras.losses.MeanSquaredError(),
            config=config.finetune_config(config.best_metric, log_dir=run.path("logs")),
            evaluate_fn=(lambda m: regression_metrics(scores(dev), predict(m, "dev")))
            if dev else None)
        results["train"] = {"learning_rate": config.learning_rate, "num_examples": len(train),
                            "best_epoch": outcome.best_epoch,
                            "num_train_steps": outcome.num_train_steps,
                            "stopped_epoch": outcome.stopped_epoch, "history": outcome.history}
        if outcome.best_metrics:
            results["dev"] = outcome.best_metrics
        save_model(model, run.path("model"), vocab_file=vocab_file,
                   metadata={"task": "regression", "max_seq_length": config.max_seq_length,
                             "lower_case": lower_case,
                             "pair": any(e.text_b is not None for e in train),
                             "run_id": run.run_id})
    if config.do_eval and dev and "dev" not in results:
        results["dev"] = regression_metrics(scores(dev), predict(model, "dev"))
    if config.data_dir and config.do_eval and "dev" in results:
        write_eval_results(run.path("eval_results.txt"), results["dev"],
                           results.get("train", {}).get("num_train_steps", global_step),
                           metrics=BEST_METRICS)
    if config.do_predict:
        predicted = predict(model, "test")
        if all(e.label is not None for e in test):
            results["test"] = regression_metrics(scores(test), predicted)
        _write_predictions(run.path("test_predictions.tsv"), test, predicted)
        if config.data_dir:  # one column: the predicted score
            write_test_results(run.path("test_results.tsv"), predicted[:, None])
    for split in ("dev", "test"):
        if split in results:
            logger.info("%s: pearson %.4f, spearman %.4f, mse %.4f", split,
                        results[split]["pearson"], results[split]["spearman"],
                        results[split]["mse"])
    ft.write_results(run.directory, results)
    return results


def _write_predictions(path: str, examples: Sequence[data.ClassificationExample],
                       predicted: np.ndarray) -> None:
    """TSV: index, text[, text_b], score (gold, empty when unknown), predicted."""
    pairs = examples[0].text_b is not None
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(["index", "text", *(["text_b"] if pairs else []), "score", "predicted"])
        for i, (e, p) in enumerate(zip(examples, predicted, strict=True)):
            writer.writerow([i if e.id is None else e.id, e.text, *([e.text_b] if pairs else []),
                             e.label or "", f"{float(p):.6f}"])


TASK = Task("regression", BertRegressor, export="regression", command="classifier",
            task_names=TASK_NAMES, config_class=RegressionConfig, run=run_regression)
