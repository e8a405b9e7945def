"""At a fixed compute budget, which model shape pretrains best on the built-in corpus?

Each (shape, budget) is one `run_pretraining.py` command on the clean built-in corpus with
tfbert-chinese's recipe (make tfbert-chinese: no dropout, sinusoidal positions, AdamW 5e-4,
warmup over a tenth of the steps then linear decay, 90% of the steps at 32 tokens, the rest at
128, batch 32); only the shape and the number of steps change. The steps are the budget divided
by the shape's training FLOPs per step (`train_flops_per_step`), so every shape of a budget
spends the same arithmetic. Budgets are fractions of the tfbert-chinese run's compute
(12,000 steps of the 6-layer hidden-256 shape).

Each run is scored twice:
- held-out masked-LM loss and accuracy at 128 tokens (the run's last evaluation on the
  held-out documents, pretrain_history.json);
- dev accuracy of sentiment fine-tuned from it on 1,000 training reviews (run_classifier's
  defaults with bench.quality's sentiment_1000 setup: 64 tokens, 4 epochs, seed 12345; the
  test split is not scored).

    python -m experiments.shape_study --output_dir=output/shape_study

Writes OUTPUT_DIR/shape_study.json (per run: shape, budget, steps, FLOPs, wall seconds, the
held-out scores and the dev accuracy; the host's CPU) and OUTPUT_DIR/shape_study.md (the table).
A run whose folder already holds its results is not run again.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from typing import Any

from tfbert.fileio import write_json, write_text

logger = logging.getLogger("shape_study")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (layers, hidden, heads, intermediate); every head is 64 wide
SHAPES: dict[str, tuple[int, int, int, int]] = {
    "6L-H128": (6, 128, 2, 512),
    "6L-H256": (6, 256, 4, 1024),  # tfbert-chinese's shape
    "12L-H192": (12, 192, 3, 768),
}
REFERENCE = ("6L-H256", 12000)  # tfbert-chinese: its shape and steps
BUDGETS = {"1/32": 1 / 32, "1/16": 1 / 16}  # of the reference run's training FLOPs
VOCAB = 8000
BATCH = 32
PHASES = ((0.9, 32, 5), (0.1, 128, 20))  # (share of steps, tokens, masked predictions)
RECIPE = ["--position_embedding_init=sinusoidal", "--learning_rate=5e-4",
          "--keep_checkpoint_max=1", "--verbose=2"]


def train_flops_per_step(shape: tuple[int, int, int, int]) -> float:
    """Training FLOPs of one step averaged over the two phases: 3 x the forward pass (forward
    plus a backward twice its size), the forward 2 FLOPs per weight per token for the encoder's
    matmuls, 4 x sequence x hidden per token per layer for the attention scores and their
    weighted sum, and the masked-LM head (a dense layer and the tied vocabulary projection) on
    the masked positions only. Embedding lookups, layer norms and softmaxes are left out."""
    layers, hidden, _, intermediate = shape
    per_layer = 4 * hidden * hidden + 2 * hidden * intermediate
    total = 0.0
    for share, tokens, predictions in PHASES:
        encoder = tokens * (2 * layers * per_layer + 4 * layers * tokens * hidden)
        head = predictions * 2 * (hidden * hidden + hidden * VOCAB)
        total += share * 3 * BATCH * (encoder + head)
    return total


def steps_for(shape_name: str, fraction: float) -> int:
    reference = train_flops_per_step(SHAPES[REFERENCE[0]]) * REFERENCE[1]
    return int(round(fraction * reference / train_flops_per_step(SHAPES[shape_name]) / 10)) * 10


def run_name(shape: str, budget: str) -> str:
    return f"{shape}_{budget.replace('/', 'of')}"


def bert_config(out: str, shape_name: str) -> str:
    layers, hidden, heads, intermediate = SHAPES[shape_name]
    with open(os.path.join(REPO, "data_tools", "tfbert_chinese", "bert_config.json"),
              encoding="utf-8") as f:
        config = json.load(f)
    config.update(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                  intermediate_size=intermediate)
    path = os.path.join(out, f"bert_config_{shape_name}.json")
    write_json(path, config)
    return path


def pretrain(out: str, shape: str, budget: str) -> dict[str, Any]:
    name = run_name(shape, budget)
    run_dir = os.path.join(out, name)
    done = os.path.join(out, f"{name}.pretrain.json")
    if os.path.exists(done):
        with open(done, encoding="utf-8") as f:
            return json.load(f)
    steps = steps_for(shape, BUDGETS[budget])
    flags = [*RECIPE, f"--bert_config_file={bert_config(out, shape)}",
             f"--num_train_steps={steps}", f"--num_warmup_steps={steps // 10}",
             f"--save_checkpoints_steps={max(10, steps // 4)}", f"--output_dir={run_dir}"]
    logger.info("pretraining %s: %d steps", name, steps)
    began = time.time()
    with open(os.path.join(out, f"{name}.log"), "w", encoding="utf-8") as log:
        subprocess.run([sys.executable, os.path.join(REPO, "run_pretraining.py"), *flags],
                       cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=True)
    wall = time.time() - began
    with open(os.path.join(run_dir, "pretrain_history.json"), encoding="utf-8") as f:
        history = json.load(f)
    last = [e for e in history if "val_mlm_loss" in e][-1]
    result = {"shape": shape, "layers_hidden_heads_intermediate": SHAPES[shape],
              "budget": budget, "steps": steps,
              "train_flops": train_flops_per_step(SHAPES[shape]) * steps,
              "wall_seconds": round(wall), "command": "python run_pretraining.py "
              + " ".join(flags),
              "held_out": {"seq_length": last.get("seq_length"), "step": last["step"],
                           "mlm_loss": last["val_mlm_loss"],
                           "masked_lm_accuracy": last["val_masked_lm_accuracy"]},
              "curve": [{k: e[k] for k in ("step", "seq_length", "val_mlm_loss",
                                           "val_masked_lm_accuracy") if k in e}
                        for e in history if "val_mlm_loss" in e]}
    write_json(done, result)
    return result


def dev_score(out: str, shape: str, budget: str) -> dict[str, Any]:
    from tfbert.tasks.classification import ClassificationConfig, run_classification

    name = run_name(shape, budget)
    done = os.path.join(out, f"{name}.finetune.json")
    if os.path.exists(done):
        with open(done, encoding="utf-8") as f:
            return json.load(f)
    began = time.time()
    result = run_classification(ClassificationConfig(
        task_name="sentiment", init_checkpoint=os.path.join(out, name, "model"),
        output_dir=os.path.join(out, f"{name}_sentiment_1000"), max_seq_length=64,
        num_train_epochs=4, max_train_examples=1000, seed=12345, do_predict=False, verbose=2))
    score = {"dev_accuracy": result["dev"]["accuracy"],
             "learning_rate": result["train"]["learning_rate"],
             "seconds": round(time.time() - began)}
    write_json(done, score)
    return score


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| budget (of tfbert-chinese's compute) | shape | steps | train TFLOPs | wall s | "
             "held-out MLM loss | MLM accuracy | sentiment_1000 dev accuracy |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['budget']} | {r['shape']} | {r['steps']:,} | "
                     f"{r['train_flops'] / 1e12:,.0f} | {r['wall_seconds']:,} | "
                     f"{r['held_out']['mlm_loss']:.3f} | "
                     f"{100 * r['held_out']['masked_lm_accuracy']:.1f}% | "
                     f"{100 * r['dev_accuracy']:.1f}% |")
    return "\n".join(lines) + "\n"


def host() -> str:
    from tfbert import cpuinfo

    cpu = cpuinfo.host_cpu()
    return f"{cpu.model_name} ({cpu.kind}, {os.cpu_count()} cores)"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="output/shape_study")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated subset")
    parser.add_argument("--budgets", default=",".join(BUDGETS), help="comma-separated subset")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    shapes = [s for s in args.shapes.split(",") if s]
    budgets = [b for b in args.budgets.split(",") if b]
    if set(shapes) - set(SHAPES) or set(budgets) - set(BUDGETS):
        parser.error(f"known shapes {list(SHAPES)}, budgets {list(BUDGETS)}")
    os.makedirs(args.output_dir, exist_ok=True)
    rows = []
    for budget in budgets:
        for shape in shapes:
            row = {**pretrain(args.output_dir, shape, budget),
                   **dev_score(args.output_dir, shape, budget)}
            rows.append(row)
            logger.info("%s %s: held-out MLM %.3f, dev %.4f", budget, shape,
                        row["held_out"]["mlm_loss"], row["dev_accuracy"])
            results = {"host": host(), "reference": {"shape": REFERENCE[0],
                                                     "steps": REFERENCE[1]}, "runs": rows}
            write_json(os.path.join(args.output_dir, "shape_study.json"), results)
            write_text(os.path.join(args.output_dir, "shape_study.md"), markdown(rows))
    print(markdown(rows))
    return results


if __name__ == "__main__":
    main()
