"""Linear probes: one multinomial logistic regression per layer and task, and their summaries.

Each probe standardises the layer's features (mean and scale from probe-train), then fits
scikit-learn's `LogisticRegression` (lbfgs, multinomial) with a fixed L2 strength `l2` on the
mean cross-entropy (sklearn's C = 1 / (l2 * n_train)) and a fixed iteration budget
`max_iter`, so every layer gets the same optimisation; it is scored on probe-test.

Metrics: "accuracy", or for the entity task "entity_macro_f1": the mean over PER, LOC and ORG
of each class's character-level F1 (O characters count only as the other classes' errors),
which a probe that answers O everywhere scores 0 on.

Centre of gravity (Tenney et al., 2019, "BERT Rediscovers the Classical NLP Pipeline"): with
s_0 the embeddings' score and s_l layer l's, expected_layer = sum_l l * (s_l - s_{l-1}) /
sum_l (s_l - s_{l-1}) for l = 1..L: the layer at which the score is gained, on average. The
denominator is s_L - s_0; when the last layer gains nothing over the embeddings (s_L <= s_0)
it is undefined (None).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["DEFAULT_L2", "METRICS", "best_layer", "expected_layer", "majority_score",
           "probe_layers", "score", "train_probe"]

METRICS = ("accuracy", "entity_macro_f1")
# L2 strength on the mean cross-entropy, chosen on held-out probe-train (docs/probing.md, "The
# probe's L2"): segmentation and POS probes are selective from 0.1 on at a cost of at most 4
# points of accuracy; 0.3 costs POS 8.5.
DEFAULT_L2 = 0.1


def score(metric: str, labels: np.ndarray, predicted: np.ndarray,
          classes: Sequence[int] = ()) -> float:
    """The metric of predictions, in [0, 1].

    Args:
        metric: str. "accuracy" or "entity_macro_f1".
        labels: int [n]. True labels.
        predicted: int [n]. Predicted labels.
        classes: the label ids averaged by "entity_macro_f1" (PER, LOC, ORG).

    Example:
    >>> score("entity_macro_f1", np.array([0, 1, 1, 2]), np.array([0, 1, 0, 0]), [1, 2])
    0.3333333333333333
    """
    labels, predicted = np.asarray(labels), np.asarray(predicted)
    if metric == "accuracy":
        return float(np.mean(labels == predicted)) if len(labels) else 0.0
    if metric != "entity_macro_f1":
        raise ValueError(f"unknown metric {metric!r}; metrics: {METRICS}")
    f1 = []
    for c in classes:
        hits = float(np.sum((labels == c) & (predicted == c)))
        wanted, given = float(np.sum(labels == c)), float(np.sum(predicted == c))
        f1.append(2 * hits / (wanted + given) if wanted + given else 0.0)
    return float(np.mean(f1)) if f1 else 0.0


def train_probe(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray,
                l2: float = DEFAULT_L2, max_iter: int = 100, seed: int = 0) -> np.ndarray:
    """Fits one linear probe on probe-train and returns its predictions on probe-test.

    Args:
        train_x: float [n, H]. Probe-train features.
        train_y: int [n]. Probe-train labels.
        test_x: float [m, H]. Probe-test features.
        l2: float. L2 strength on the mean cross-entropy.
        max_iter: int. lbfgs iterations (a fixed budget: not-converged warnings are silenced).
        seed: int. sklearn's random_state.

    Returns:
        int [m]. Predicted labels.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    classes = np.unique(train_y)
    if len(classes) < 2:  # nothing to learn: the one label seen
        return np.full(len(test_x), classes[0] if len(classes) else 0, np.int64)
    x = train_x.astype(np.float32)
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-6
    probe = LogisticRegression(C=1.0 / (l2 * len(x)), max_iter=max_iter, tol=1e-6,
                               random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        probe.fit((x - mean) / std, train_y)
    return probe.predict((test_x.astype(np.float32) - mean) / std).astype(np.int64)


def probe_layers(train: np.ndarray, train_y: np.ndarray, test: np.ndarray, test_y: np.ndarray,
                 metric: str = "accuracy", classes: Sequence[int] = (), l2: float = DEFAULT_L2,
                 max_iter: int = 100, seed: int = 0, progress: Any = None) -> list[float]:
    """One probe per layer; the score of each on probe-test.

    Args:
        train: float [L + 1, n, H]. Probe-train features of every layer.
        train_y: int [n]. Probe-train labels.
        test: float [L + 1, m, H]. Probe-test features.
        test_y: int [m]. Probe-test labels.
        metric: str. See `score`.
        classes: label ids for "entity_macro_f1".
        l2: float. See `train_probe`.
        max_iter: int. See `train_probe`.
        seed: int. See `train_probe`.
        progress: a tqdm bar or None, advanced once per layer.

    Returns:
        L + 1 scores, index 0 = embeddings.
    """
    from threadpoolctl import threadpool_limits

    scores = []
    # One BLAS thread: lbfgs's small matmuls gain little from a second thread, and on a busy
    # host (TensorFlow's pools, another job) two OpenBLAS threads made a fit 7-9x slower.
    with threadpool_limits(1):
        for layer in range(len(train)):
            predicted = train_probe(train[layer], train_y, test[layer], l2, max_iter, seed)
            scores.append(round(score(metric, test_y, predicted, classes), 6))
            if progress is not None:
                progress.update(1)
    return scores


def majority_score(train_y: np.ndarray, test_y: np.ndarray, metric: str = "accuracy",
                   classes: Sequence[int] = ()) -> float:
    """The score of always answering probe-train's most frequent label (a chance baseline)."""
    common = int(np.bincount(train_y).argmax()) if len(train_y) else 0
    return round(score(metric, test_y, np.full(len(test_y), common), classes), 6)


def expected_layer(scores: Sequence[float]) -> float | None:
    """Tenney et al.'s centre of gravity of `scores` (index 0 = embeddings); None when the last
    layer scores no higher than the embeddings.

    Example:
    >>> expected_layer([0.5, 0.6, 0.9, 0.9])  # gains 0.1 at layer 1, 0.3 at layer 2
    1.75
    """
    s = np.asarray(scores, np.float64)
    gains = np.diff(s)
    total = float(gains.sum())
    if len(gains) == 0 or total <= 1e-9:
        return None
    return round(float(np.sum(np.arange(1, len(s)) * gains) / total), 6)


def best_layer(scores: Sequence[float]) -> int:
    """The layer with the highest score (the lowest such layer on a tie)."""
    return int(np.argmax(np.asarray(scores)))
