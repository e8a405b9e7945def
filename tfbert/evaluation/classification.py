"""Classification metrics: accuracy, macro-F1 and per-class precision / recall / F1.

Pure Python over label ids, so the numbers are easy to check by hand and match scikit-learn's
`accuracy_score`, `f1_score(average="macro")` and `precision_recall_fscore_support`.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any


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
