"""What a run leaves for people to read: results JSON, a markdown table, a plot of the history.

    write_results(output_dir, {"dev": {...}, "test": {...}})     # results.json of a task
    print(results_markdown("output/pretrain_default"))           # a pretraining run's table
    plot_history(entries, "pretrain_history.png")                # needs matplotlib
"""

from __future__ import annotations

import json
import logging
import math
import os
from typing import Any

from tfbert.training import callbacks as cb

logger = logging.getLogger(__name__)

# A pretraining run's files in its output_dir, and the metrics they hold.
RESULTS_FILE = "pretrain_results.json"
HISTORY_FILE = "pretrain_history.json"
METRICS = ("loss", "mlm_loss", "nsp_loss", "masked_lm_accuracy", "next_sentence_accuracy")


def write_results(output_dir: str, results: dict[str, Any], name: str = "results.json") -> str:
    """Writes results (e.g. {"dev": {...}, "test": {...}}) as indented JSON, atomically;
    returns the path."""
    path = os.path.join(output_dir, name)
    cb.write_json(path, results)
    logger.info("wrote %s", path)
    return path


def pretrain_results(train_logs: dict[str, float], eval_scores: dict[str, float] | None,
                     progress: cb.TrainingProgress) -> dict[str, Any]:
    """A pretraining run's results: METRICS from the eval set (else the last training loop),
    the training-loop values as train_*, the step and the throughput."""
    speed = progress.examples_per_second
    results: dict[str, Any] = {"global_step": progress.step,
                               "examples_per_second": speed if math.isfinite(speed) else None,
                               "examples_trained": progress.examples}
    results.update({f"train_{n}": train_logs[n] for n in METRICS if n in train_logs})
    main = eval_scores if eval_scores is not None else train_logs
    results.update({n: float(main[n]) for n in METRICS if n in main})
    results["metrics_from"] = "eval" if eval_scores is not None else "train"
    return results


def results_markdown(output_dir: str) -> str:
    """A markdown table of a finished pretraining run: eval (else training) metrics per loop,
    and the final results with throughput. `print(results_markdown("output/..."))`."""
    with open(os.path.join(output_dir, HISTORY_FILE), encoding="utf-8") as f:
        entries = json.load(f)
    with open(os.path.join(output_dir, RESULTS_FILE), encoding="utf-8") as f:
        results = json.load(f)
    prefix = "val_" if any("val_loss" in e for e in entries) else ""
    where = "held-out eval set" if prefix else "training batches of the loop"
    lines = [f"Metrics on the {where}, per loop:", "",
             "| step | MLM accuracy | NSP accuracy | MLM loss | NSP loss |",
             "|---:|---:|---:|---:|---:|"]
    for e in entries:
        lines.append("| {} | {:.3f} | {:.3f} | {:.3f} | {:.3f} |".format(
            e["step"], *(_number(e, prefix + name) for name in (
                "masked_lm_accuracy", "next_sentence_accuracy", "mlm_loss", "nsp_loss"))))
    speed = results.get("examples_per_second")
    lines.append("")
    lines.append(f"Final (step {results['global_step']}, {results['metrics_from']}): MLM accuracy "
                 f"{_number(results, 'masked_lm_accuracy'):.3f}, NSP accuracy "
                 f"{_number(results, 'next_sentence_accuracy'):.3f}, loss "
                 f"{_number(results, 'loss'):.3f}; "
                 + (f"{speed:.1f} examples/s." if speed else "throughput not measured."))
    return "\n".join(lines)


def _number(values: dict[str, Any], name: str) -> float:
    """values[name] as a float; NaN where it is missing or null (JSON's NaN, `write_json`)."""
    value = values.get(name)
    return float("nan") if value is None else float(value)


def plot_history(entries: list[dict[str, float]], path: str) -> bool:
    """Plots MLM/NSP accuracy and loss against the step into a PNG (needs matplotlib).

    Returns:
        False (with a log line) when matplotlib is not installed.
    """
    try:  # here, not at the top: matplotlib is optional and slow to import
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.info("matplotlib is not installed; no plot written (pip install matplotlib)")
        return False
    steps = [e["step"] for e in entries]
    fig, (acc, loss) = plt.subplots(1, 2, figsize=(11, 4))
    for axis, names in ((acc, (("masked_lm_accuracy", "MLM accuracy"),
                               ("next_sentence_accuracy", "NSP accuracy"))),
                        (loss, (("mlm_loss", "mlm_loss"), ("nsp_loss", "nsp_loss")))):
        for name, label in names:
            for prefix, style in (("", "--"), ("val_", "-")):
                values = [e.get(prefix + name) for e in entries]
                if any(v is not None for v in values):
                    axis.plot(steps, values, style, marker=".",
                              label=f"{label} ({'eval' if prefix else 'train'})")
    acc.set(xlabel="step", ylabel="accuracy", title="Accuracy", ylim=(0, 1))
    loss.set(xlabel="step", ylabel="loss", title="Loss")
    for ax in (acc, loss):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
