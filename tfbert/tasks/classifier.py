"""Text classification end to end: `run_classifier(ClassifierConfig) -> results`, behind
run_classifier.py.

Data comes from one of: a built-in task (`sentiment`), TSV/CSV/JSONL files, or a TensorFlow
Datasets name. The run fine-tunes a BertClassifier (from a checkpoint or random init), keeps the
epoch with the best dev `best_metric`, and writes to output_dir:

    results.json          {"dev": {"accuracy", "macro_f1", "per_class", ...},
                           "test": {...}, "train": {"history", "best_epoch", ...}, "labels": [...],
                           "run_id": ...}
    test_predictions.tsv  index, text[, text_b], label, predicted, then one probability per class
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
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

import tfbert
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
        task_name: str or None. Built-in task: "sentiment".
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
        sources = [s for s, given in (("task_name", self.task_name),
                                      ("train_file/dev_file/test_file",
                                       self.train_file or self.dev_file or self.test_file),
                                      ("tfds_name", self.tfds_name)) if given]
        if len(sources) != 1:
            raise UserError("give exactly one data source: task_name, train_file/dev_file/"
                            f"test_file or tfds_name (got {sources or 'none'})")
        if self.task_name and self.task_name not in data.BUILTIN_TASKS:
            raise UserError(f"unknown task_name {self.task_name!r}; built-in tasks: "
                            f"{data.BUILTIN_TASKS}")
        if not 0 <= self.head_hidden_layers <= 3:
            raise UserError(f"head_hidden_layers must be 0-3, got {self.head_hidden_layers}")
        if self.best_metric not in ("accuracy", "macro_f1"):
            raise UserError(f"best_metric must be 'accuracy' or 'macro_f1', got "
                            f"{self.best_metric!r}")


def load_data(config: ClassifierConfig) -> tuple[dict[str, list[Any] | None], list[str] | None]:
    """The train/dev/test examples the run needs (None where a split is not given or not needed)
    and the label names of the source in class-id order (the built-in task's, the TFDS
    ClassLabel's, or sorted from the training file; None without training data)."""
    needed = {"train": config.do_train, "dev": config.do_train or config.do_eval,
              "test": config.do_predict}
    splits: dict[str, list[Any] | None] = {}
    labels = None
    for i, split in enumerate(("train", "dev", "test")):
        examples = None
        if needed[split] and config.task_name:
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
    for examples in (dev, test):  # unknown labels fail here, before any training
        if examples and data.is_labelled(examples):
            data.label_ids(examples, labels)

    eval_ds = {split: data.make_dataset(examples, preprocessor, None, config.eval_batch_size)
               for split, examples in (("dev", dev), ("test", test)) if examples}

    def score(examples: list[data.ClassificationExample], probabilities: np.ndarray
              ) -> dict[str, Any]:
        return classification_metrics(data.label_ids(examples, labels),
                                      probabilities.argmax(-1), labels)

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
    if config.do_predict:
        probabilities = predict(model, eval_ds["test"])
        if data.is_labelled(test):
            results["test"] = score(test, probabilities)
        else:
            logger.info("test data has no labels: writing predictions only")
        write_predictions(run.path("test_predictions.tsv"), test, probabilities, labels)
    for split in ("dev", "test"):
        if split in results:
            logger.info("%s: accuracy %.4f, macro-F1 %.4f", split, results[split]["accuracy"],
                        results[split]["macro_f1"])
    ft.write_results(run.directory, results)
    return results


def predict(model: Any, ds: Any) -> np.ndarray:
    """Class probabilities [N, C] (softmax of the classifier's logits) over a dataset of inputs."""
    return np.asarray(keras.ops.softmax(model.predict(ds, verbose=0), axis=-1))


def write_predictions(path: str, examples: Sequence[data.ClassificationExample],
                      probabilities: np.ndarray, labels: Sequence[str]) -> None:
    """TSV: index, text[, text_b], label, predicted, then p_<label> for every class."""
    pairs = examples[0].text_b is not None
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
        writer.writerow(["index", "text", *(["text_b"] if pairs else []), "label", "predicted",
                         *(f"p_{name}" for name in labels)])
        for i, (e, p) in enumerate(zip(examples, probabilities, strict=True)):
            writer.writerow([i, e.text, *([e.text_b] if pairs else []), e.label or "",
                             labels[int(p.argmax())], *(f"{x:.6f}" for x in p)])
    logger.info("wrote %s", path)
