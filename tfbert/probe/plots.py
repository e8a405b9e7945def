"""The probe's PNGs: scores against layer, one sentence's attention maps, per-head statistics.

matplotlib's object API with the Agg canvas (no pyplot, no global backend switch).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tfbert.fileio import atomic_write
from tfbert.probe.attention import STATISTICS

__all__ = ["plot_attention", "plot_heads", "plot_scores"]

logger = logging.getLogger(__name__)

_LABELS = {"cls": "to [CLS]", "sep": "to [SEP]", "previous": "to previous token",
           "next": "to next token", "entropy": "entropy (nats)"}


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure


def _save(figure: Any, path: str) -> None:
    with atomic_write(path, "wb") as f:
        figure.savefig(f, format="png", bbox_inches="tight")


def plot_scores(tasks: Mapping[str, Mapping[str, Any]], path: str, title: str = "") -> None:
    """probe.png: each task's score against layer (solid: the model, dashed: random init), and
    its selectivity (model - control task) beside it.

    Args:
        tasks: probe.json's "tasks".
        path: str. The PNG to write.
        title: str. Figure title.
    """
    figure = _figure(11, 4.2)
    scores, selectivity = figure.subplots(1, 2)
    for i, (task, entry) in enumerate(tasks.items()):
        color = f"C{i}"
        layers = np.arange(len(entry["model"]))
        scores.plot(layers, entry["model"], "-o", color=color, label=f"{task} ({entry['metric']})")
        scores.plot(layers, entry["random_init"], "--", color=color, alpha=0.7,
                    label=f"{task}, random init")
        selectivity.plot(layers, entry["selectivity"], "-o", color=color, label=task)
    for axes, name in ((scores, "score on probe-test"), (selectivity, "selectivity (− control)")):
        axes.set_xlabel("layer (0 = embeddings)")
        axes.set_ylabel(name)
        axes.grid(alpha=0.3)
        axes.xaxis.get_major_locator().set_params(integer=True)
    scores.set_ylim(0, 1)
    scores.legend(fontsize=7)
    selectivity.legend(fontsize=7)
    figure.suptitle(title)
    _save(figure, path)


def plot_attention(probs: Sequence[np.ndarray], tokens: Sequence[str], path: str,
                   font: str | None, title: str = "") -> None:
    """One layer's attention maps, one panel per head (rows: queries, columns: keys).

    Args:
        probs: N arrays [T, T]. The layer's heads.
        tokens: the T tokens, for the axis labels.
        path: str. The PNG to write.
        font: str or None. A font family that shows the tokens; None labels by position.
        title: str. Figure title.
    """
    heads = len(probs)
    columns = min(heads, 4)
    rows = -(-heads // columns)
    size = max(2.6, 0.28 * len(tokens) + 1.0)
    figure = _figure(size * columns, size * rows + 0.4)
    grid = np.atleast_1d(figure.subplots(rows, columns, squeeze=False)).ravel()
    labels = list(tokens) if font else [str(i) for i in range(len(tokens))]
    text = {"fontfamily": font, "fontsize": 8} if font else {"fontsize": 8}
    for head, axes in enumerate(grid):
        if head >= heads:
            axes.axis("off")
            continue
        axes.imshow(probs[head], cmap="viridis", vmin=0, vmax=1)
        axes.set_title(f"head {head + 1}", fontsize=9)
        axes.set_xticks(range(len(labels)), labels, rotation=90, **text)
        axes.set_yticks(range(len(labels)), labels, **text)
    figure.suptitle(title, **({"fontfamily": font} if font else {}))  # the title holds the text
    _save(figure, path)


def plot_heads(statistics: Mapping[str, Sequence[Sequence[float]]], path: str,
               title: str = "") -> None:
    """attention_heads.png: one heatmap per statistic, layers down, heads across, values
    written in the cells.

    Args:
        statistics: {statistic: [L][N]} (`AttentionStatistics.result`).
        path: str. The PNG to write.
        title: str. Figure title.
    """
    layers, heads = np.asarray(statistics["cls"]).shape
    width = max(2.4, 0.45 * heads + 1.2)
    figure = _figure(width * len(STATISTICS), max(2.2, 0.4 * layers + 1.2))
    for axes, name in zip(figure.subplots(1, len(STATISTICS), squeeze=False)[0], STATISTICS,
                          strict=True):
        values = np.asarray(statistics[name], np.float64)
        top = 1.0 if name != "entropy" else max(float(values.max()), 1e-6)
        axes.imshow(values, cmap="magma", vmin=0, vmax=top, aspect="auto")
        axes.set_title(_LABELS[name], fontsize=9)
        axes.set_xticks(range(heads), [str(h + 1) for h in range(heads)], fontsize=7)
        axes.set_yticks(range(layers), [str(layer + 1) for layer in range(layers)], fontsize=7)
        axes.set_xlabel("head", fontsize=8)
        axes.set_ylabel("layer", fontsize=8)
        if layers * heads <= 64:
            for (r, c), v in np.ndenumerate(values):
                axes.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=6,
                          color="white" if v < 0.6 * top else "black")
    figure.suptitle(title)
    _save(figure, path)
