"""probe.json's task entries, the explainers' claim scaled to the model, and probe.md.

The claim (Tenney et al., 2019; Jawahar et al., 2019) for a 12-layer BERT: lexical information
peaks in layers 3-4, syntactic in 6-9, semantic in 10-12. For an L-layer model each range is
scaled by L / 12 (`claimed_layers`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tfbert.probe.probes import best_layer, expected_layer
from tfbert.probe.tasks import LEVELS, TASKS

__all__ = ["CLAIM_12", "claimed_layers", "markdown", "ordering", "task_entry"]

CLAIM_12 = {"lexical": (3, 4), "syntactic": (6, 9), "semantic": (10, 12)}


def claimed_layers(num_layers: int) -> dict[str, list[float]]:
    """The claim's layer range of each level, scaled to `num_layers`.

    Example:
    >>> claimed_layers(6)["syntactic"]
    [3.0, 4.5]
    """
    return {level: [round(a * num_layers / 12, 2), round(b * num_layers / 12, 2)]
            for level, (a, b) in CLAIM_12.items()}


def task_entry(task: str, metric: str, model: Sequence[float], random_init: Sequence[float],
               control: Sequence[float], **extra: Any) -> dict[str, Any]:
    """One task's probe.json entry: scores per layer (index 0 = embeddings), selectivity =
    model - control per layer, best_layer and expected_layer of the model's scores.

    Args:
        task: str. One of TASKS.
        metric: str. The score's name.
        model: scores of the pretrained model's layers.
        random_init: scores of the randomly initialised model's layers.
        control: scores of the control task on the pretrained model's layers.
        **extra: more keys (labels, sizes, majority baseline).
    """
    return {"level": LEVELS[task], "metric": metric, "model": list(model),
            "random_init": list(random_init), "control": list(control),
            "selectivity": [round(a - b, 6) for a, b in zip(model, control, strict=True)],
            "best_layer": best_layer(model), "expected_layer": expected_layer(model), **extra}


def ordering(tasks: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Whether lexical <= syntactic <= semantic by expected layer: segmentation <= pos <= each
    of entity and sentiment (the tasks present with an expected layer).

    Returns:
        {"holds": bool or None (fewer than two levels to compare), "sentence": str}.
    """
    at = {t: tasks[t]["expected_layer"] for t in TASKS
          if t in tasks and tasks[t]["expected_layer"] is not None}
    pairs = [(a, b) for a, b in (("segmentation", "pos"), ("pos", "entity"), ("pos", "sentiment"),
                                 ("segmentation", "entity"), ("segmentation", "sentiment"))
             if a in at and b in at]
    if "pos" in at:  # the chain through pos says it all
        pairs = [p for p in pairs if "pos" in p]
    listed = ", ".join(f"{t} {at[t]:.2f}" for t in at)
    missing = [t for t in TASKS if t in tasks and t not in at]
    note = (f" ({', '.join(missing)}: no expected layer, its last layer gains nothing over the "
            "embeddings)") if missing else ""
    if not pairs:
        return {"holds": None, "sentence": "Too few tasks have an expected layer to compare "
                f"the levels ({listed or 'none'}){note}."}
    broken = [f"{a} {at[a]:.2f} > {b} {at[b]:.2f}" for a, b in pairs if at[a] > at[b]]
    if broken:
        sentence = (f"By expected layer, lexical ≤ syntactic ≤ semantic does not hold: "
                    f"{'; '.join(broken)} ({listed}){note}.")
    else:
        sentence = f"By expected layer, lexical ≤ syntactic ≤ semantic holds ({listed}){note}."
    return {"holds": not broken, "sentence": sentence}


def _fmt(value: Any) -> str:
    return "–" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def markdown(result: Mapping[str, Any]) -> str:
    """probe.md: the summary table, the per-layer table, the ordering sentence and the
    attention heads' table.

    Args:
        result: the probe.json dict.
    """
    tasks = result["tasks"]
    claim = result["claimed_layers"]
    lines = [f"# Layer-wise probes of {result['model']}", "",
             f"{result['num_layers']} layers; index 0 is the embeddings' output. Scores are on "
             "probe-test (People's Daily NER test sentences, sentiment test reviews); "
             "selectivity = model − control task (Hewitt & Liang, 2019).", "",
             "| task | level | metric | best layer | expected layer | claim (scaled) | "
             "majority |", "|---|---|---|---|---|---|---|"]
    for t, e in tasks.items():
        low, high = claim[e["level"]]
        lines.append(f"| {t} | {e['level']} | {e['metric']} | {e['best_layer']} | "
                     f"{_fmt(e['expected_layer'])} | {low:g}–{high:g} | "
                     f"{_fmt(e.get('majority'))} |")
    lines += ["", result["ordering"]["sentence"], "",
              "Per layer: model / random init / selectivity.", "",
              "| layer | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    for layer in range(result["num_layers"] + 1):
        cells = [f"{e['model'][layer]:.3f} / {e['random_init'][layer]:.3f} / "
                 f"{e['selectivity'][layer]:+.3f}" for e in tasks.values()]
        name = "0 (embeddings)" if layer == 0 else str(layer)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    attention = result.get("attention", {}).get("heads")
    if attention:
        lines += ["", f"Attention per head over {result['attention']['sentences']} probe "
                  "sentences (Clark et al., 2019): mean share to [CLS], [SEP], the previous and "
                  "the next token; entropy in nats.", "",
                  "| layer | head | [CLS] | [SEP] | previous | next | entropy |",
                  "|---|---|---|---|---|---|---|"]
        for layer, row in enumerate(attention["cls"]):
            for head in range(len(row)):
                values = [attention[s][layer][head]
                          for s in ("cls", "sep", "previous", "next", "entropy")]
                lines.append(f"| {layer + 1} | {head + 1} | "
                             + " | ".join(f"{v:.3f}" for v in values) + " |")
    return "\n".join(lines) + "\n"
