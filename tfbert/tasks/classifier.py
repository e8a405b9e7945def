"""Text classification end to end: `run_classifier(ClassifierConfig) -> results`, behind
run_classifier.py.

Data comes from one of: a built-in task (`sentiment`), a benchmark task read by name from its
folder (`task_name` with `data_dir`: GLUE's cola/mnli/mrpc, xnli, CLUE's afqmc/tnews/iflytek/
cmnli/ocnli, `tfbert.data.benchmarks`, layouts in docs/tasks.md), TSV/CSV/JSONL files, or a
TensorFlow Datasets name. The run fine-tunes a BertClassifier (from a checkpoint or random
init), keeps the epoch with the best dev `best_metric`, and writes to output_dir:

    results.json          {"dev": {"accuracy", "macro_f1", "per_class", ...},
                           "test": {...}, "train": {"history", "best_epoch", ...}, "labels": [...],
                           "run_id": ...}
    test_predictions.tsv  index (the row's id where the data has one), text[, text_b], label,
                          predicted, then one probability per class
  and for a benchmark task (data_dir), google-research/bert's files:
    eval_results.txt      its dev report: `key = value` lines eval_accuracy,
                          eval_loss (mean dev cross-entropy), global_step (optimizer steps of
                          this run, 0 without training), loss (the same mean)
    test_results.tsv      its predictions: one row per test example, in
                          order, of tab-separated class probabilities (no header)
    model/                the fine-tuned model (tfbert.save_pretrained; metadata task/labels/
                          max_seq_length/lower_case/run_id), reloadable with
                          tfbert.checkpoints.load_model
    logs/                 TensorBoard
    tfbert_run.json       the manifest naming the run these outputs come from (written last:
                          the outputs are staged and committed together, `ft.task_run`)
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

import tfbert
from tfbert.data import benchmarks
from tfbert.data import classification as data
from tfbert.errors import UserError
from tfbert.evaluation.classification import classification_metrics
from tfbert.training import finetune as ft
from tfbert.training.finetune import TaskConfig
from tfbert.training.outputs import Staging, save_model

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class ClassifierConfig(TaskConfig):
    """One classification run (the flags of run_classifier.py); TaskConfig has the shared
    fields (checkpoint, batch sizes, epochs, learning rate, do_train/do_eval/do_predict, ...).

    Args:
        task_name: str or None. Built-in task "sentiment", or with data_dir a benchmark task
            (`tfbert.data.benchmarks.TASKS`: cola, mnli, mrpc, xnli, afqmc, tnews, iflytek,
            cmnli, ocnli); case-insensitive.
        data_dir: str or None. The benchmark task's folder (docs/tasks.md). Without do_train
            the dev split is read only for do_eval; MNLI's dev_mismatched.tsv is scored too
            (results["dev_mismatched"]) when present.
        xnli_language: str. XNLI's language (train multinli.train.LANG.tsv, dev/test rows).
        predict_batch_size: int or None. Batch for the test predictions (eval_batch_size when
            None).
        train_file, dev_file, test_file: str or None. TSV/CSV/JSONL files (columns text, label,
            optional text_b); test_file may lack labels (predictions only).
        tfds_name: str or None. TensorFlow Datasets name, e.g. "glue/mrpc".
        tfds_data_dir: str or None. TFDS data directory.
        tfds_splits: (train, dev, test) TFDS split names.
        head_hidden_layers: int. Dense layers between the pooled output and the logits (0-3).
        head_hidden_size: int. Width of those layers.
        dropout: float. Dropout in the head.
        best_metric: str. Dev metric that picks the epoch kept: "accuracy" or "macro_f1".
    """

    task_name: str | None = None
    data_dir: str | None = None
    xnli_language: str = "zh"
    predict_batch_size: int | None = None
    train_file: str | None = None
    dev_file: str | None = None
    test_file: str | None = None
    tfds_name: str | None = None
    tfds_data_dir: str | None = None
    tfds_splits: tuple[str, str, str] = ("train", "validation", "test")
    head_hidden_layers: int = 0
    head_hidden_size: int = 128
    dropout: float = 0.1
    best_metric: str = "accuracy"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task_name:
            self.task_name = self.task_name.lower()
        if self.data_dir and self.task_name not in benchmarks.TASKS:
            raise UserError(f"data_dir needs a benchmark task_name (one of "
                            f"{sorted(benchmarks.TASKS)}), got {self.task_name!r}")
        if self.task_name in benchmarks.TASKS and not self.data_dir:
            raise UserError(f"task_name {self.task_name!r} reads its files from data_dir; give "
                            "--data_dir (the task's folder, see docs/tasks.md)")
        if self.predict_batch_size is not None and self.predict_batch_size < 1:
            raise UserError(f"predict_batch_size must be a positive integer, got "
                            f"{self.predict_batch_size!r}")
        sources = [s for s, given in (("task_name", self.task_name),
                                      ("train_file/dev_file/test_file",
                                       self.train_file or self.dev_file or self.test_file),
                                      ("tfds_name", self.tfds_name)) if given]
        if len(sources) != 1:
            raise UserError("give exactly one data source: task_name, train_file/dev_file/"
                            f"test_file or tfds_name (got {sources or 'none'})")
        if self.task_name and self.task_name not in (*data.BUILTIN_TASKS, *benchmarks.TASKS):
            raise UserError(f"unknown task_name {self.task_name!r}; built-in tasks: "
                            f"{data.BUILTIN_TASKS}, benchmark tasks (with data_dir): "
                            f"{sorted(benchmarks.TASKS)}")
        if not 0 <= self.head_hidden_layers <= 3:
            raise UserError(f"head_hidden_layers must be 0-3, got {self.head_hidden_layers}")
        if self.best_metric not in ("accuracy", "macro_f1"):
            raise UserError(f"best_metric must be 'accuracy' or 'macro_f1', got "
                            f"{self.best_metric!r}")


def load_data(config: ClassifierConfig) -> tuple[dict[str, list[Any] | None], list[str] | None]:
    """The train/dev/test examples the run needs (None where a split is not given or not needed)
    and the label names of the source in class-id order (the built-in or benchmark task's, the
    TFDS ClassLabel's, or sorted from the training file; None without training data). A
    benchmark run reads dev only for do_eval (google-research/bert's meaning), and MNLI's
    dev_mismatched beside it when the file is there."""
    needed = {"train": config.do_train,
              "dev": config.do_eval or (config.do_train and not config.data_dir),
              "test": config.do_predict}
    splits: dict[str, list[Any] | None] = {}
    labels = None
    for i, split in enumerate(("train", "dev", "test")):
        examples = None
        if needed[split] and config.data_dir:
            examples = benchmarks.read_task(config.task_name, config.data_dir, split,
                                            config.xnli_language, config.input_encoding)
            labels = list(benchmarks.TASKS[config.task_name].labels)
        elif needed[split] and config.task_name:
            examples, labels = (data.builtin_examples(config.task_name, split),
                                data.builtin_labels(config.task_name))
        elif needed[split] and config.tfds_name:
            examples, labels = data.tfds_examples(config.tfds_name, config.tfds_splits[i],
                                                  config.tfds_data_dir)
        elif needed[split]:
            path = {"train": config.train_file, "dev": config.dev_file,
                    "test": config.test_file}[split]
            examples = (data.read_examples(path, labelled=split != "test",
                                           encoding=config.input_encoding) if path else None)
            if split == "train" and examples:
                labels = data.label_list(examples)
        splits[split] = config.limit(examples, split)
    extra = [s for s in benchmarks.TASKS[config.task_name].splits
             if s not in splits] if config.data_dir and config.do_eval else []
    for split in extra:  # MNLI's dev_mismatched
        path = benchmarks.task_file(config.task_name, config.data_dir, split)
        if os.path.exists(path) or "://" in path:
            splits[split] = config.limit(benchmarks.read_task(
                config.task_name, config.data_dir, split, config.xnli_language,
                config.input_encoding), "dev")
        else:
            logger.info("%s not found: %s not scored", path, split)
    return splits, labels


def run_classifier(config: ClassifierConfig) -> dict[str, Any]:
    """Fine-tunes and/or evaluates a BertClassifier as `config` says; returns results.json.

    Example:
    >>> results = run_classifier(ClassifierConfig(  # doctest: +SKIP
    ...     output_dir="out/sentiment", task_name="sentiment",
    ...     init_checkpoint="output/pretrain_default/model"))
    >>> results["test"]["accuracy"]  # doctest: +SKIP
    """
    with ft.task_run(config, "classification") as run:
        return _run(config, run)


def _run(config: ClassifierConfig, run: Staging) -> dict[str, Any]:
    keras.utils.set_random_seed(config.seed)
    splits, labels = load_data(config)
    train, dev, test = splits["train"], splits["dev"], splits["test"]
    extra = {k: v for k, v in splits.items() if k not in ("train", "dev", "test") and v}
    if config.do_train and not train:
        raise UserError("do_train needs training data (train_file, task_name or tfds_name)")
    if config.do_predict and not test:
        raise UserError("do_predict needs test data (test_file, task_name or tfds_name)")
    pairs = any(e.text_b is not None for e in (train or dev or test or []))
    if pairs and config.max_seq_length < 5:
        raise UserError(f"max_seq_length {config.max_seq_length} is too short for sentence "
                        "pairs: [CLS] A [SEP] B [SEP] needs at least 5")

    if config.do_train:
        model, vocab_file, lower_case = ft.build_model(
            tfbert.BertClassifier, config, num_classes=len(labels),
            head_hidden_layers=config.head_hidden_layers,
            head_hidden_size=config.head_hidden_size, dropout=config.dropout)
    else:
        model, labels, vocab_file, lower_case = ft.load_finetuned(config, "classification")
    ft.check_seq_length(config, model)
    preprocessor = tfbert.BertPreprocessor(vocab_file, config.max_seq_length,
                                           lower_case=lower_case)
    logger.info("labels: %s", labels)
    if config.data_dir and labels != list(benchmarks.TASKS[config.task_name].labels):
        raise UserError(f"{config.init_checkpoint}: the model's labels {labels} are not "
                        f"{config.task_name}'s {list(benchmarks.TASKS[config.task_name].labels)}"
                        " (in that order)")
    for examples in (dev, test, *extra.values()):  # unknown labels fail here, before training
        if examples and data.is_labelled(examples):
            data.label_ids(examples, labels)

    batch = {"test": config.predict_batch_size or config.eval_batch_size}
    eval_ds = {split: data.make_dataset(examples, preprocessor, None,
                                        batch.get(split, config.eval_batch_size))
               for split, examples in (("dev", dev), ("test", test), *extra.items())
               if examples}

    def score(examples: list[data.ClassificationExample], probabilities: np.ndarray
              ) -> dict[str, Any]:
        ids = data.label_ids(examples, labels)
        metrics = classification_metrics(ids, probabilities.argmax(-1), labels)
        metrics["loss"] = cross_entropy(ids, probabilities)
        return metrics

    results: dict[str, Any] = {"labels": labels, "run_id": run.run_id}
    if config.do_train:
        train_ds = data.make_dataset(train, preprocessor, labels, config.micro_batch_size,
                                     shuffle=True, seed=config.seed)
        outcome = ft.finetune(
            model, train_ds,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            config=config.finetune_config(config.best_metric, log_dir=run.path("logs")),
            evaluate_fn=(lambda m: score(dev, predict(m, eval_ds["dev"]))) if dev else None,
            steps_per_epoch=math.ceil(len(train) / config.micro_batch_size))
        results["train"] = {"num_examples": len(train), "best_epoch": outcome.best_epoch,
                            "num_train_steps": outcome.num_train_steps,
                            "history": outcome.history}
        if outcome.best_metrics:
            results["dev"] = outcome.best_metrics
        save_model(model, run.path("model"), vocab_file=vocab_file,
                   metadata={"task": "classification", "labels": labels,
                             "max_seq_length": config.max_seq_length,
                             "lower_case": lower_case,
                             "pair": any(e.text_b is not None for e in train),
                             "run_id": run.run_id})
    if config.do_eval and dev and "dev" not in results:
        results["dev"] = score(dev, predict(model, eval_ds["dev"]))
    for split, examples in extra.items():
        results[split] = score(examples, predict(model, eval_ds[split]))
    if config.data_dir and config.do_eval and "dev" in results:
        write_eval_results(run.path("eval_results.txt"), results["dev"],
                           results.get("train", {}).get("num_train_steps", 0))
    if config.do_predict:
        probabilities = predict(model, eval_ds["test"])
        if data.is_labelled(test):
            results["test"] = score(test, probabilities)
        else:
            logger.info("test data has no labels: writing predictions only")
        write_predictions(run.path("test_predictions.tsv"), test, probabilities, labels)
        if config.data_dir:
            write_test_results(run.path("test_results.tsv"), probabilities)
    for split in ("dev", *extra, "test"):
        if split in results:
            logger.info("%s: accuracy %.4f, macro-F1 %.4f", split, results[split]["accuracy"],
                        results[split]["macro_f1"])
    ft.write_results(run.directory, results)
    return results


def predict(model: Any, ds: Any) -> np.ndarray:
    """Class probabilities [N, C] (softmax of the classifier's logits) over a dataset of inputs."""
    return np.asarray(keras.ops.softmax(model.predict(ds, verbose=0), axis=-1))


def cross_entropy(label_ids: np.ndarray, probabilities: np.ndarray) -> float:
    """Mean -log p(true class) [scalar] over examples; probabilities [N, C]."""
    picked = probabilities[np.arange(len(label_ids)), label_ids]
    return float(-np.mean(np.log(np.maximum(picked, np.finfo(np.float32).tiny))))


def write_eval_results(path: str, dev: dict[str, Any], global_step: int) -> None:
    """google-research/bert's eval_results.txt: sorted `key = value` lines (eval_accuracy,
    eval_loss, global_step, loss), floats as float32 text."""
    values = {"eval_accuracy": np.float32(dev["accuracy"]), "eval_loss": np.float32(dev["loss"]),
              "global_step": int(global_step), "loss": np.float32(dev["loss"])}
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"{key} = {values[key]}\n" for key in sorted(values))
    logger.info("wrote %s", path)


def write_test_results(path: str, probabilities: np.ndarray) -> None:
    """google-research/bert's test_results.tsv: per test example, in order, its class
    probabilities tab-separated, no header."""
    with open(path, "w", encoding="utf-8") as f:
        f.writelines("\t".join(str(np.float32(p)) for p in row) + "\n" for row in probabilities)
    logger.info("wrote %s", path)


def write_predictions(path: str, examples: Sequence[data.ClassificationExample],
                      probabilities: np.ndarray, labels: Sequence[str]) -> None:
    """TSV: index, text[, text_b], label, predicted, then p_<label> for every class."""
    pairs = examples[0].text_b is not None
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
        writer.writerow(["index", "text", *(["text_b"] if pairs else []), "label", "predicted",
                         *(f"p_{name}" for name in labels)])
        for i, (e, p) in enumerate(zip(examples, probabilities, strict=True)):
            writer.writerow([i if e.id is None else e.id, e.text,
                             *([e.text_b] if pairs else []), e.label or "",
                             labels[int(p.argmax())], *(f"{x:.6f}" for x in p)])
    logger.info("wrote %s", path)
