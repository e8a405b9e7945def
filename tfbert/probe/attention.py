"""Per-head attention statistics (Clark et al., 2019, "What Does BERT Look At?").

For each layer and head, averaged over every real query token of every probe sentence
(padding left out; inputs are `[CLS] text [SEP]`):

  cls       attention from the token to [CLS] (position 0)
  sep       attention to [SEP] (the sequence's last real position)
  previous  attention to the token just before (queries that have one: all but [CLS])
  next      attention to the token just after (queries that have one: all but [SEP])
  entropy   -sum_k p_k ln p_k of the token's attention distribution, in nats (ln T for
            uniform attention over T tokens, 0 for attention on one token)

Shape legend: B = batch, N = heads, T = sequence length, L = layers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

__all__ = ["CJK_FONTS", "STATISTICS", "AttentionStatistics", "batch_sums", "chinese_font"]

logger = logging.getLogger(__name__)

STATISTICS = ("cls", "sep", "previous", "next", "entropy")
# Fonts that show Chinese, in order of preference (matplotlib family names).
CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans SC", "Source Han Sans SC",
             "Source Han Sans CN", "WenQuanYi Micro Hei", "WenQuanYi Zen Hei",
             "Droid Sans Fallback", "AR PL UMing CN", "SimHei", "Microsoft YaHei",
             "PingFang SC", "Heiti SC")


def batch_sums(probs: np.ndarray, mask: np.ndarray) -> tuple[dict[str, np.ndarray], dict]:
    """Sums of each statistic over a batch's queries, per head, and how many queries each
    sum covers.

    Args:
        probs: float [B, N, T, T]. One layer's attention probabilities (query, key).
        mask: int [B, T]. 1 for real tokens.

    Returns:
        ({statistic: float [N] sum}, {statistic: query count}).

    Example:
    >>> p = np.array([[[[1.0, 0.0], [0.5, 0.5]]]])  # one sentence of 2 tokens, one head
    >>> sums, counts = batch_sums(p, np.array([[1, 1]]))
    >>> float(sums["cls"][0]), counts["cls"], float(sums["previous"][0]), counts["previous"]
    (1.5, 2, 0.5, 1)
    """
    probs = probs.astype(np.float64)
    m = mask.astype(np.float64)  # [B, T]
    lengths = mask.sum(axis=1).astype(np.int64)  # [B]
    last = np.maximum(lengths - 1, 0)
    pairs = m[:, 1:] * m[:, :-1]  # [B, T - 1]: query and neighbour both real
    rows = np.arange(len(lengths))
    logs = np.log(np.where(probs > 0, probs, 1.0))
    sums = {
        "cls": np.einsum("bnq,bq->n", probs[:, :, :, 0], m),
        "sep": np.einsum("bnq,bq->n", probs[rows, :, :, last], m),  # [B, N, T] -> [N]
        "previous": np.einsum("bnq,bq->n", np.diagonal(probs, -1, 2, 3), pairs),
        "next": np.einsum("bnq,bq->n", np.diagonal(probs, 1, 2, 3), pairs),
        "entropy": np.einsum("bnq,bq->n", -(probs * logs).sum(axis=-1), m)}
    total, neighbours = int(m.sum()), int(pairs.sum())
    counts = {"cls": total, "sep": total, "previous": neighbours, "next": neighbours,
              "entropy": total}
    return sums, counts


class AttentionStatistics:
    """Accumulates `batch_sums` over batches and layers; `result()` gives the means.

    Args:
        num_layers: int. L.
        num_heads: int. N.
    """

    def __init__(self, num_layers: int, num_heads: int) -> None:
        self.sums = {s: np.zeros((num_layers, num_heads)) for s in STATISTICS}
        self.counts = {s: np.zeros(num_layers) for s in STATISTICS}
        self.sentences = 0

    def add(self, probs: Sequence[np.ndarray], mask: np.ndarray) -> None:
        """Adds one batch: `probs` L arrays [B, N, T, T], `mask` [B, T]."""
        for layer, p in enumerate(probs):
            sums, counts = batch_sums(p, mask)
            for s in STATISTICS:
                self.sums[s][layer] += sums[s]
                self.counts[s][layer] += counts[s]
        self.sentences += len(mask)

    def result(self) -> dict[str, list[list[float]]]:
        """{statistic: [L][N] mean}; a statistic without queries is 0."""
        return {s: (self.sums[s] / np.maximum(self.counts[s], 1)[:, None]).round(6).tolist()
                for s in STATISTICS}


def chinese_font() -> str | None:
    """The family name of an installed font that shows Chinese (`CJK_FONTS` first, then any
    font whose name says CJK / Hei / Song / Kai / Ming / Fallback), or None."""
    from matplotlib import font_manager

    installed = {f.name for f in font_manager.fontManager.ttflist}
    for name in CJK_FONTS:
        if name in installed:
            return name
    hints = ("CJK", "Hei", "Song", "Kai", "Ming", "Fallback", "Han Sans")
    return next((n for n in sorted(installed) if any(h in n for h in hints)), None)
