"""Regression metrics (STS-B): Pearson's r, Spearman's rank correlation and the mean squared
error, in NumPy."""

from __future__ import annotations

import math

import numpy as np


def _ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, tied values sharing the mean of their ranks (Spearman's convention)."""
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    return (np.cumsum(counts) - (counts - 1) / 2.0)[inverse]


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson's r; 0 where either side is constant (no linear relation can be read)."""
    a, b = a - a.mean(), b - b.mean()
    norm = math.sqrt(float(np.dot(a, a)) * float(np.dot(b, b)))
    return float(np.dot(a, b) / norm) if norm > 0 else 0.0


def regression_metrics(gold: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """pearson, spearman (Pearson's r of the ranks, ties averaged), mse (also `loss`, the
    training loss) and the number of examples.

    Example:
    >>> m = regression_metrics(np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 3.0, 2.0, 5.0]))
    >>> round(m["pearson"], 4), round(m["spearman"], 4), m["mse"]
    (0.8315, 0.8, 0.75)
    """
    gold, predicted = np.asarray(gold, np.float64), np.asarray(predicted, np.float64)
    mse = float(np.mean((gold - predicted) ** 2))
    return {"pearson": _pearson(gold, predicted),
            "spearman": _pearson(_ranks(gold), _ranks(predicted)),
            "mse": mse, "loss": mse, "num_examples": int(gold.size)}
