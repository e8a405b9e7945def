"""Classification metrics: accuracy, macro-F1 and per-class precision / recall / F1; for
multi-label data micro/macro F1 and the exact-match ratio, and the per-label decision thresholds
tuned on dev.

Single-label metrics are pure Python over label ids, so the numbers are easy to check by hand,
and match scikit-learn's `accuracy_score`, `f1_score(average="macro")` and
`precision_recall_fscore_support`. Multi-label metrics take 0/1 label-set matrices [N, C] and
match `f1_score(average="micro" / "macro", zero_division=0)` and `accuracy_score` (the share of
examples whose whole predicted set is right).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

import numpy as np

DEFAULT_THRESHOLD = 0.5  # a label's threshold when dev cannot tune it


def _ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, 0.0 where the denominator is 0 (scikit-learn's zero_division=0)."""
    return numerator / denominator if denominator else 0.0


def f1_from_counts(true_positives: int, num_predicted: int, num_true: int) -> dict[str, float]:
    """Precision, recall and F1 from counts (shared by the class and entity metrics).

    Args:
        true_positives: int. Items both predicted and true.
        num_predicted: int. Items predicted.
        num_true: int. Items in the gold standard.

    Example:
    >>> f1_from_counts(2, 4, 3)
    {'precision': 0.5, 'recall': 0.6666666666666666, 'f1': 0.5714285714285715}
    """
    precision = _ratio(true_positives, num_predicted)
    recall = _ratio(true_positives, num_true)
    return {"precision": precision, "recall": recall,
            "f1": _ratio(2 * precision * recall, precision + recall)}


def classification_metrics(labels: Sequence[int], predictions: Sequence[int],
                           label_names: Sequence[str] | None = None) -> dict[str, Any]:
    """Accuracy, macro-F1 and per-class precision / recall / F1 / support.

    Macro-F1 averages the F1 of every class that occurs in `labels` or `predictions` (as
    scikit-learn does by default); a class that never occurs in either has no F1 to average.

    Args:
        labels: sequence of int. Gold class ids.
        predictions: sequence of int. Predicted class ids, same length.
        label_names: sequence of str, optional. Names for the per-class keys (index = class id);
            class ids are used as keys when not given.

    Returns:
        {"accuracy": float, "macro_f1": float, "num_examples": int,
         "per_class": {name: {"precision", "recall", "f1", "support"}}}

    Example:
    >>> m = classification_metrics([0, 0, 1, 1], [0, 1, 1, 1], ["neg", "pos"])
    >>> m["accuracy"], round(m["macro_f1"], 4)
    (0.75, 0.7333)
    """
    labels, predictions = [int(x) for x in labels], [int(x) for x in predictions]
    if len(labels) != len(predictions):
        raise ValueError(f"classification_metrics: {len(labels)} labels but "
                         f"{len(predictions)} predictions")
    if not labels:
        raise ValueError("classification_metrics: no examples to score")
    classes = sorted(set(labels) | set(predictions))
    if label_names is not None:
        out_of_range = [c for c in classes if not 0 <= c < len(label_names)]
        if out_of_range:
            raise ValueError(f"classification_metrics: class ids {out_of_range} have no name in "
                             f"label_names {list(label_names)}")
    true_count = collections.Counter(labels)
    pred_count = collections.Counter(predictions)
    hits = collections.Counter(t for t, p in zip(labels, predictions, strict=True) if t == p)
    per_class = {}
    for c in classes:
        name = str(label_names[c]) if label_names is not None else str(c)
        per_class[name] = {**f1_from_counts(hits[c], pred_count[c], true_count[c]),
                           "support": true_count[c]}
    return {
        "accuracy": sum(hits.values()) / len(labels),
        "macro_f1": sum(v["f1"] for v in per_class.values()) / len(per_class),
        "num_examples": len(labels),
        "per_class": per_class,
    }


def multi_label_metrics(labels: Any, predictions: Any,
                        label_names: Sequence[str] | None = None) -> dict[str, Any]:
    """Micro/macro F1, the exact-match ratio and per-label precision / recall / F1 / support.

    Micro F1 counts true positives, predictions and gold labels over all (example, label)
    entries; macro F1 averages the F1 of every label, a label never true nor predicted counting
    0 (scikit-learn's zero_division=0).

    Args:
        labels: 0/1 [N, C]. Gold label sets.
        predictions: 0/1 (or bool) [N, C]. Predicted label sets.
        label_names: sequence of str, optional. Names for the per-label keys (label ids
            otherwise).

    Returns:
        {"micro_f1", "micro_precision", "micro_recall", "macro_f1", "exact_match",
         "num_examples", "per_label": {name: {"precision", "recall", "f1", "support"}}}.

    Example:
    >>> m = multi_label_metrics([[1, 0], [1, 1], [0, 0]], [[1, 0], [1, 0], [0, 1]], ["A", "B"])
    >>> round(m["micro_f1"], 4), round(m["macro_f1"], 4), round(m["exact_match"], 4)
    (0.6667, 0.5, 0.3333)
    """
    y = np.asarray(labels).astype(bool)
    p = np.asarray(predictions).astype(bool)
    if y.shape != p.shape or y.ndim != 2:
        raise ValueError(f"multi_label_metrics: labels {y.shape} and predictions {p.shape} must "
                         "be two [N, C] matrices of the same shape")
    if not len(y):
        raise ValueError("multi_label_metrics: no examples to score")
    names = ([str(c) for c in range(y.shape[1])] if label_names is None
             else [str(n) for n in label_names])
    if len(names) != y.shape[1]:
        raise ValueError(f"multi_label_metrics: {len(names)} label names for {y.shape[1]} "
                         "labels")
    hits, predicted, true = (y & p).sum(0), p.sum(0), y.sum(0)  # [C] each
    per_label = {name: {**f1_from_counts(int(hits[c]), int(predicted[c]), int(true[c])),
                        "support": int(true[c])} for c, name in enumerate(names)}
    micro = f1_from_counts(int(hits.sum()), int(predicted.sum()), int(true.sum()))
    return {"micro_f1": micro["f1"], "micro_precision": micro["precision"],
            "micro_recall": micro["recall"],
            "macro_f1": sum(v["f1"] for v in per_label.values()) / max(len(per_label), 1),
            "exact_match": float((y == p).all(1).mean()), "num_examples": int(len(y)),
            "per_label": per_label}


def tune_thresholds(labels: Any, probabilities: Any) -> np.ndarray:
    """Per-label decision thresholds [C] float32: each the one that maximises that label's F1.

    A label is predicted when its probability >= its threshold. The search is exact: over a
    label's dev probabilities sorted high to low, predicting the top k for every k (0..N) at
    which the sorted values change, F1(k) = 2 TP(k) / (k + positives); the threshold of the best
    k is the midpoint between the k-th and the (k+1)-th probability (between the highest and 1
    for k = 0, half the lowest for k = N; float32, and above the (k+1)-th where rounding would
    meet it), so the dev predictions are exactly those of the best k and the threshold keeps
    the most distance from both. Equal F1 goes to the k whose threshold
    is nearest DEFAULT_THRESHOLD (0.5). A label with no positive dev example keeps 0.5 (every
    threshold gives F1 0 there).

    Args:
        labels: 0/1 [N, C]. Dev label sets.
        probabilities: float [N, C]. The model's dev probabilities (sigmoid of the logits).

    Example:
    >>> tune_thresholds([[1], [0], [1], [0]], [[0.9], [0.4], [0.3], [0.1]]).tolist()
    [0.20000000298023224]
    """
    y = np.asarray(labels).astype(bool)
    prob = np.asarray(probabilities, np.float32)
    if y.shape != prob.shape or y.ndim != 2:
        raise ValueError(f"tune_thresholds: labels {y.shape} and probabilities {prob.shape} "
                         "must be two [N, C] matrices of the same shape")
    thresholds = np.full(y.shape[1], DEFAULT_THRESHOLD, np.float32)
    for c in range(y.shape[1]):
        positives = int(y[:, c].sum())
        if not positives:
            continue
        order = np.argsort(-prob[:, c], kind="stable")
        values = prob[order, c]  # [N], high to low
        hits = np.concatenate([[0], np.cumsum(y[order, c])])  # [N + 1]: TP of the top k
        k = np.arange(len(values) + 1)
        f1 = 2 * hits / (k + positives)
        valid = np.ones(len(k), bool)  # k is a cut where the k-th and (k+1)-th values differ
        valid[1:-1] = values[:-1] > values[1:]
        cuts = np.array([_cut(values[j - 1] if j else None, values[j] if j < len(values)
                              else None) for j in k], np.float32)
        best = np.flatnonzero(valid & (f1 >= f1[valid].max() - 1e-12))
        thresholds[c] = cuts[best[np.argmin(np.abs(cuts[best] - DEFAULT_THRESHOLD))]]
    return thresholds


def _cut(above: np.float32 | None, below: np.float32 | None) -> np.float32:
    """A float32 threshold t with below < t <= above: the midpoint, or the next float above
    `below` where float32 rounding would land on it (None: no value on that side; 1 bounds
    the probabilities from above, 0 from below)."""
    if above is None:  # nothing predicted: above the highest probability
        mid = np.float32((float(below) + 1.0) / 2)
        return mid if mid > below else np.nextafter(below, np.float32(np.inf))
    if below is None:  # everything predicted: half the lowest
        return np.float32(above / 2)
    mid = np.float32((float(above) + float(below)) / 2)
    return max(mid, np.nextafter(below, np.float32(np.inf)))
