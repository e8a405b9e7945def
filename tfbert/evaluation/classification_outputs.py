"""What run_classification computes from a classifier's logits and writes: probabilities, the
loss, and the files of its output_dir:

    results.json          {"dev": {"accuracy", "macro_f1", "per_class", ...},
                           "test": {...}, "train": {"history", "best_epoch", ...}, "labels": [...],
                           "long_input": {"mode", "doc_stride"}, "run_id": ...}; multi-label:
                           dev/test {"micro_f1", "macro_f1", "exact_match", "per_label", ...},
                           "thresholds" {label: threshold}; with class_weights
                           "class_weights" {"source", "weights" or "positive_weights"}; with
                           windows "data" {split: window counts}
    test_predictions.tsv  index (the row's id where the data has one), text[, text_b], label,
                          predicted, then one probability per class
    test_predictions.jsonl  (multi-label, instead) one object per test example: index, text
                          [, text_b], labels (gold set, where known), predicted (the set),
                          probabilities {label: p}
    model/                the fine-tuned model (tfbert.save_pretrained; metadata task/labels/
                          max_seq_length/lower_case/pair/multi_label/thresholds (multi-label)/
                          long_input/doc_stride (windows)/run_id), reloadable with
                          tfbert.checkpoints.load_model
    logs/                 TensorBoard
    tfbert_run.json       the manifest naming the run these outputs come from (written last:
                          the outputs are staged and committed together, `ft.task_run`)
  and for a benchmark task (data_dir), google-research/bert's files:
    eval_results.txt      its dev report: `key = value` lines eval_accuracy,
                          eval_loss (mean dev cross-entropy), global_step (optimizer steps of
                          this run; without training the step of a google-research/bert
                          checkpoint, else 0), loss (the same mean)
    test_results.tsv      its predictions: one row per test example, in
                          order, of tab-separated class probabilities (no header)
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from tfbert.data import classification as data
from tfbert.data.length_buckets import predict_in_order
from tfbert.fileio import json_text

logger = logging.getLogger(__name__)


def predict(model: Any, ds: Any) -> np.ndarray:
    """Class probabilities [N, C] (softmax of the classifier's logits) over a dataset of inputs."""
    return softmax(predict_logits(model, ds))


def predict_logits(model: Any, ds: Any) -> np.ndarray:
    """Logits [N, C] float32 over a dataset of inputs, in example order (length-bucketed
    batches too: `tfbert.data.length_buckets.predict_in_order`); a document's pooled logits
    for a WindowPooledClassifier on `make_window_dataset` batches."""
    return np.asarray(predict_in_order(model, ds), np.float32)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Class probabilities [N, C] of logits [N, C] (Keras's softmax)."""
    return np.asarray(keras.ops.softmax(logits, axis=-1))


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Per-label probabilities [N, C] of multi-label logits [N, C] (Keras's sigmoid)."""
    return np.asarray(keras.ops.sigmoid(logits))


def cross_entropy(label_ids: np.ndarray, probabilities: np.ndarray) -> float:
    """Mean -log p(true class) [scalar] over examples; probabilities [N, C]."""
    picked = probabilities[np.arange(len(label_ids)), label_ids]
    return float(-np.mean(np.log(np.maximum(picked, np.finfo(np.float32).tiny))))


def write_eval_results(path: str, dev: dict[str, Any], global_step: int,
                       metrics: Sequence[str] = ("accuracy",)) -> None:
    """google-research/bert's eval_results.txt: sorted `key = value` lines (eval_<metric> for
    each of `metrics`, eval_loss, global_step, loss), floats as float32 text (`str`, as GR
    writes them)."""
    values = {f"eval_{name}": np.float32(dev[name]) for name in (*metrics, "loss")}
    values.update(global_step=int(global_step), loss=np.float32(dev["loss"]))
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"{key} = {values[key]!s}\n" for key in sorted(values))  # GR's str()
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


def write_multi_label_predictions(path: str, examples: Sequence[data.ClassificationExample],
                                  probabilities: np.ndarray, thresholds: np.ndarray,
                                  labels: Sequence[str]) -> None:
    """JSONL, one object per example: index (the row's id where it has one), text[, text_b],
    labels (the gold set, where the data has it), predicted (the labels whose probability
    >= their threshold) and probabilities {label: p}."""
    with open(path, "w", encoding="utf-8") as f:
        for i, (e, p) in enumerate(zip(examples, probabilities, strict=True)):
            row: dict[str, Any] = {"index": i if e.id is None else e.id, "text": e.text}
            if e.text_b is not None:
                row["text_b"] = e.text_b
            if e.labels is not None:
                row["labels"] = list(e.labels)
            row["predicted"] = [name for name, x, t in zip(labels, p, thresholds, strict=True)
                                if x >= t]
            row["probabilities"] = {name: round(float(x), 6)
                                    for name, x in zip(labels, p, strict=True)}
            f.write(json_text(row, ensure_ascii=False) + "\n")
    logger.info("wrote %s", path)
