"""Which short pretraining recipe gets furthest in minutes on two CPU cores?

Each recipe is a `run_pretraining.py` command line on the built-in data (the same corpus,
vocab, held-out documents and seed; one `--cache_dir`). The study runs them (`--parallel` at a
time), reads each run's pretrain_history.json (eval masked-LM loss and accuracy every loop, at
the sequence length the run is at), and measures the step time of each (sequence length,
batch) alone on this host, so the curves can be drawn against quiet-host minutes even when the
runs shared the cores:

    python -m experiments.pretrain_recipe --output_dir=output/pretrain_recipe --parallel=3
    python -m experiments.pretrain_recipe --only=seq32,seq32_b16 --plot_only

Writes OUTPUT_DIR/pretrain_recipe.json (per recipe: its flags, history, wall time; the step
times; the host's CPU) and OUTPUT_DIR/pretrain_recipe.png (eval masked-LM loss against steps
and against quiet-host minutes). A recipe whose run folder already holds its
pretrain_results.json is not run again.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import time
from typing import Any

from tfbert.fileio import write_text

logger = logging.getLogger("pretrain_recipe")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The model (2 layers, hidden 128, 2 heads, no dropout), optimizer (AdamW 1e-3, linear warmup
# over a tenth of the steps, linear decay to 0) and data are the built-in default's unless a
# recipe says otherwise; the single-length recipes turn the default's first phase and
# sinusoidal positions off. "stop_at" ends a run early (its curve up to there is the full
# schedule's).
SINGLE = ["--phase1_seq_length=0", "--position_embedding_init=random"]
SEQ32 = [*SINGLE, "--max_seq_length=32", "--max_predictions_per_seq=5", "--num_train_steps=4000",
         "--num_warmup_steps=400"]
RECIPES: dict[str, dict[str, Any]] = {
    "seq128 (previous default schedule)": {
        "flags": [*SINGLE, "--num_train_steps=10000", "--num_warmup_steps=1000",
                  "--save_checkpoints_steps=500"],
        "stop_at": 2000},
    "seq64": {"flags": [*SINGLE, "--max_seq_length=64", "--max_predictions_per_seq=10",
                        "--num_train_steps=3000", "--num_warmup_steps=300"]},
    "seq32": {"flags": SEQ32},
    "seq32 sinusoidal": {"flags": [*SEQ32, "--position_embedding_init=sinusoidal"]},
    "seq32 4 heads": {"flags": SEQ32, "model": {"num_attention_heads": 4}},
    "seq32 batch 16": {"flags": [*SEQ32, "--train_batch_size=16", "--num_train_steps=8000",
                                 "--num_warmup_steps=800", "--save_checkpoints_steps=500"]},
    "default (2700 steps at 32 then 300 at 128)": {
        "flags": ["--save_checkpoints_steps=500"]},
}
COMMON = ["--save_checkpoints_steps=250", "--keep_checkpoint_max=1", "--verbose=2"]


def folder(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def flag_value(flags: list[str], name: str, default: Any) -> str:
    for f in reversed(flags):
        if f.startswith(f"--{name}="):
            return f.split("=", 1)[1]
    return str(default)


def model_config_file(out: str, changes: dict[str, Any]) -> str:
    """A bert_config.json of the built-in default model with `changes`."""
    from tfbert.pretraining_data.builtin import default_data
    from tfbert.text.vocab import load_vocab
    from tfbert.training.pretrain import DEFAULT_MODEL

    vocab = default_data(os.path.join(out, "cache")).vocab_file
    path = os.path.join(out, f"bert_config_{folder(json.dumps(changes))}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({**DEFAULT_MODEL, "vocab_size": len(load_vocab(vocab)), "lower_case": True,
                   **changes}, f, indent=2)
    return path


def command(name: str, recipe: dict[str, Any], out: str) -> list[str]:
    flags = [*COMMON, *recipe["flags"], f"--output_dir={os.path.join(out, folder(name))}",
             f"--cache_dir={os.path.join(out, 'cache')}"]
    if recipe.get("model"):
        flags.append(f"--bert_config_file={model_config_file(out, recipe['model'])}")
    return [sys.executable, os.path.join(REPO, "run_pretraining.py"), *flags]


def history(out: str, name: str) -> list[dict[str, Any]]:
    path = os.path.join(out, folder(name), "pretrain_history.json")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def run_all(names: list[str], out: str, parallel: int) -> dict[str, float]:
    """Runs the recipes, `parallel` at a time; returns each one's wall seconds."""
    pending = [n for n in names
               if not os.path.exists(os.path.join(out, folder(n), "pretrain_results.json"))
               and not (RECIPES[n].get("stop_at") and history(out, n)
                        and history(out, n)[-1]["step"] >= RECIPES[n]["stop_at"])]
    running: dict[str, tuple[subprocess.Popen, float, Any]] = {}
    walls: dict[str, float] = {}
    while pending or running:
        while pending and len(running) < parallel:
            name = pending.pop(0)
            log = open(os.path.join(out, f"{folder(name)}.log"), "w", encoding="utf-8")
            logger.info("running %s", name)
            running[name] = (subprocess.Popen(command(name, RECIPES[name], out), cwd=REPO,
                                              stdout=log, stderr=subprocess.STDOUT),
                             time.time(), log)
        time.sleep(5)
        for name, (proc, began, log) in list(running.items()):
            stop_at = RECIPES[name].get("stop_at")
            done = proc.poll() is not None
            if not done and stop_at and history(out, name) \
                    and history(out, name)[-1]["step"] >= stop_at:
                proc.terminate()
                proc.wait()
                done = True
            if done:
                log.close()
                walls[name] = time.time() - began
                if proc.returncode not in (0, -15):
                    raise RuntimeError(f"{name} failed (exit {proc.returncode}); see "
                                       f"{log.name}")
                del running[name]
    return walls


def step_times(out: str, shapes: set[tuple[int, int]], steps: int = 90) -> dict[str, float]:
    """Keras's ms per step in the last of three loops of `steps / 3` steps (the first holds the
    compilation), each (sequence length, batch) run alone: call it on a quiet host."""
    times = {}
    for seq, batch in sorted(shapes):
        run_dir = os.path.join(out, "step_time", f"seq{seq}_b{batch}")
        flags = [*SINGLE, f"--max_seq_length={seq}", f"--train_batch_size={batch}",
                 f"--max_predictions_per_seq={max(1, round(20 * seq / 128))}",
                 f"--num_train_steps={steps}", "--num_warmup_steps=10",
                 f"--save_checkpoints_steps={steps // 3}", "--verbose=2",
                 f"--output_dir={run_dir}", f"--cache_dir={os.path.join(out, 'cache')}"]
        done = subprocess.run([sys.executable, os.path.join(REPO, "run_pretraining.py"),
                               *flags], cwd=REPO, capture_output=True, text=True, check=True)
        per_loop = re.findall(r"(\d+)ms/step", done.stdout + done.stderr)
        times[f"{seq}x{batch}"] = float(per_loop[-1])
        logger.info("seq %d, batch %d: %s ms/step", seq, batch, per_loop[-1])
    return times


def plot(results: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, r in results["recipes"].items():
        points = [(e["step"], e["minutes"], e["val_mlm_loss"]) for e in r["curve"]]
        if not points:
            continue
        steps, minutes, loss = zip(*points, strict=True)
        line, = by_step.plot(steps, loss, marker=".", label=name)
        if None not in minutes:  # a (length, batch) whose step time was not measured: steps only
            by_time.plot(minutes, loss, marker=".", label=name, color=line.get_color())
    for ax, label in ((by_step, "step"), (by_time, "minutes (quiet host, step times measured)")):
        ax.axhline(5.4, color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel(label)
        ax.set_ylabel("eval masked-LM loss (nats)")
        ax.grid(alpha=0.3)
    by_time.axvline(8, color="grey", linestyle=":", linewidth=1)
    by_step.legend(fontsize=7)
    fig.suptitle(f"built-in pretraining recipes, {results['host']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def host() -> str:
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="output/pretrain_recipe")
    parser.add_argument("--only", default=",".join(RECIPES),
                        help="comma-separated recipe names (default: all): "
                             + ", ".join(RECIPES))
    parser.add_argument("--parallel", type=int, default=1, help="runs at a time")
    parser.add_argument("--plot_only", action="store_true",
                        help="do not run; tabulate and plot what the folders hold")
    parser.add_argument("--no_step_times", action="store_true",
                        help="skip the alone-on-the-host step time measurement")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in RECIPES]
    if unknown:
        parser.error(f"unknown recipe(s) {unknown}; known: {list(RECIPES)}")
    out = args.output_dir
    os.makedirs(out, exist_ok=True)
    json_path = os.path.join(out, "pretrain_recipe.json")
    previous: dict[str, Any] = {}
    if os.path.exists(json_path):
        with open(json_path, encoding="utf-8") as f:
            previous = json.load(f)
    walls = {} if args.plot_only else run_all(names, out, args.parallel)
    shapes = set()
    for n in names:
        flags, batch = RECIPES[n]["flags"], int(flag_value(RECIPES[n]["flags"],
                                                            "train_batch_size", 32))
        shapes.add((int(flag_value(flags, "max_seq_length", 128)), batch))
        if flag_value(flags, "phase1_seq_length", ""):
            shapes.add((int(flag_value(flags, "phase1_seq_length", "")), batch))
    times = dict(previous.get("step_ms", {}))
    if not args.no_step_times and not args.plot_only:
        times.update(step_times(out, {s for s in shapes if f"{s[0]}x{s[1]}" not in times}))
    results: dict[str, Any] = {"host": host(), "step_ms": times, "recipes": {}}
    for name in names:
        flags = RECIPES[name]["flags"]
        batch = flag_value(flags, "train_batch_size", 32)
        default_length = flag_value(flags, "max_seq_length", 128)
        curve, minutes, last_step = [], 0.0, 0
        for e in history(out, name):
            shape = f"{e.get('seq_length', default_length)}x{batch}"
            minutes = (minutes + (e["step"] - last_step) * times[shape] / 60e3
                       if shape in times and minutes is not None else None)
            last_step = e["step"]
            if "val_mlm_loss" in e:
                curve.append({"step": e["step"], "val_mlm_loss": e["val_mlm_loss"],
                              "val_masked_lm_accuracy": e["val_masked_lm_accuracy"],
                              "val_next_sentence_accuracy": e.get("val_next_sentence_accuracy"),
                              "seq_length": e.get("seq_length"), "minutes": minutes})
        old = previous.get("recipes", {}).get(name, {})
        results["recipes"][name] = {"flags": [*COMMON, *flags], "model": RECIPES[name].get(
            "model"), "wall_seconds": walls.get(name, old.get("wall_seconds")), "curve": curve}
        if curve:
            last = curve[-1]
            logger.info("%-32s step %5d: eval MLM loss %.3f, accuracy %.1f%%", name,
                        last["step"], last["val_mlm_loss"],
                        100 * last["val_masked_lm_accuracy"])
    write_text(json_path, json.dumps(results, indent=1))
    if any(r["curve"] for r in results["recipes"].values()):
        plot(results, os.path.join(out, "pretrain_recipe.png"))
    return results


if __name__ == "__main__":
    main()
