"""Does pretraining help? The fine-tuning quality table (docs/results.md), baselines included,
by one command, each figure the mean over seeds.

Each setup fine-tunes on the built-in data (the clean splits of `tfbert.data.splits`: no
dev/test text in a training split or in the pretraining corpus) from random init and from each
pretrained checkpoint, next to a baseline trained to its own best on the same examples:

  sentiment       all 13,885 training reviews, seq 64, 2 epochs; accuracy on the 1,726 test
                  reviews. Baseline: character n-gram TF-IDF + logistic regression
                  (`tfbert.evaluation.baselines.tfidf_baseline`: n-gram range and C picked
                  on dev; deterministic, so one run stands for every seed).
  sentiment_1000  the first 1,000 training reviews, seq 64, 4 epochs; the same test reviews.
  ner             the first 3,000 People's Daily training sentences, seq 128, 3 epochs, the
                  linear (softmax) head; entity F1 on the first 1,000 dev and test sentences.
                  Baseline: a character BiLSTM + CRF in plain Keras (`tfbert.evaluation.
                  baselines`) on the same sentences, trained to convergence: up to 40 epochs,
                  stopped when dev F1 has not improved for 4, the best dev epoch kept.
  ner_crf         the same with a linear-chain CRF head on the BERT rows too (run_ner --crf).

The BERT runs are run_classification's and run_ner's defaults (among them the learning rate each
picks for the model, `tfbert.training.finetune.default_learning_rate`) with the setup's data
size, sequence length and epochs: what a user gets without flags. The runs of a setup share the
model shape (the first checkpoint's config.json), vocab and settings; only the initial weights
differ. Every BERT row and the BiLSTM run once per seed (--seeds); a row's dev and test are the
means, each seed's value is kept under "by_seed". The "seconds" column is the mean wall time of
a run (training, scoring dev after every epoch, scoring test), on the machine it ran on.

    python -m bench.quality --pretrained=tfbert-chinese   # the table (docs/pretraining.md)
    python -m bench.quality --setups sentiment_1000 --only pretrained --seeds 12345 \\
        --learning_rate 1e-4,3e-4,1e-3   # each start runs every rate and keeps its best on dev

Writes OUTPUT_DIR/quality.json (every row with its settings, dev and test metrics, per seed)
and OUTPUT_DIR/quality.md (the table).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import statistics
import time
from typing import Any

from tfbert.fileio import write_json, write_text

logger = logging.getLogger("quality")


@dataclasses.dataclass(frozen=True)
class Setup:
    """One block of the table: a task, how much of its data, and how long to train."""

    task: str  # "sentiment" or "ner"
    max_seq_length: int
    epochs: int
    max_train_examples: int | None = None
    max_eval_examples: int | None = None
    batch_size: int = 32
    crf: bool = False  # NER: a linear-chain CRF head on the BERT rows (run_ner --crf)
    baseline_crf: bool = True  # NER: the BiLSTM's CRF
    baseline_epochs: int = 40  # NER: the BiLSTM's most epochs (it stops early on dev)
    baseline_patience: int = 4  # NER: epochs without a better dev F1 before the BiLSTM stops

    @property
    def metric(self) -> str:
        return "f1" if self.task == "ner" else "accuracy"


SETUPS = {
    "sentiment": Setup("sentiment", max_seq_length=64, epochs=2),
    "sentiment_1000": Setup("sentiment", max_seq_length=64, epochs=4, max_train_examples=1000),
    "ner": Setup("ner", max_seq_length=128, epochs=3, max_train_examples=3000,
                 max_eval_examples=1000),
    "ner_crf": Setup("ner", max_seq_length=128, epochs=3, max_train_examples=3000,
                     max_eval_examples=1000, crf=True),
}
STARTS = ("baseline", "random_init", "pretrained")


def pretraining_steps(checkpoint: str) -> int | None:
    """The global step a tfbert checkpoint folder was saved at (its tfbert.json), or None."""
    try:
        with open(os.path.join(checkpoint, "tfbert.json"), encoding="utf-8") as f:
            return int(json.load(f)["global_step"])
    except (OSError, KeyError, TypeError, ValueError):
        return None


def baseline_row(name: str, setup: Setup, seed: int) -> dict[str, Any]:
    """The setup's baseline, trained and scored on the setup's examples."""
    # TensorFlow and scikit-learn load when a row is trained: bench.report renders the table
    from tfbert.evaluation.baselines import ner_baseline, tfidf_baseline

    t0 = time.time()
    if setup.task == "sentiment":
        result = tfidf_baseline(max_train_examples=setup.max_train_examples,
                                max_eval_examples=setup.max_eval_examples)
        n = result["config"]["ngram_range"][1]
        model = f"character 1-{n}-gram TF-IDF + logistic regression (C={result['config']['C']:g})"
    else:
        result = ner_baseline(setup.max_train_examples, setup.max_eval_examples,
                              epochs=setup.baseline_epochs, patience=setup.baseline_patience,
                              batch_size=setup.batch_size, max_seq_length=setup.max_seq_length,
                              seed=seed, crf=setup.baseline_crf)
        head = "CRF" if setup.baseline_crf else "softmax"
        model = (f"character BiLSTM + {head}, to convergence (early stopping on dev, "
                 f"patience {setup.baseline_patience}; Adam 2e-3)")
    return {"setup": name, "start": "baseline", "model": model, "num_train": result["num_train"],
            "seconds": round(time.time() - t0), "dev": result["dev"], "test": result["test"],
            "details": {k: v for k, v in result.items() if k not in ("dev", "test")}}


def mean_row(runs: list[dict[str, Any]], seeds: list[int], metric: str) -> dict[str, Any]:
    """One row from a start's runs, one per seed: dev and test (every numeric metric) are the
    means, seconds the mean wall time, "by_seed" each seed's dev and test `metric`."""
    def mean(key: str) -> dict[str, Any]:
        numbers = [k for k, v in runs[0][key].items() if isinstance(v, (int, float))]
        return {k: sum(r[key][k] for r in runs) / len(runs) for k in numbers}

    row = dict(runs[0])
    row.update(dev=mean("dev"), test=mean("test"),
               seconds=round(sum(r["seconds"] for r in runs) / len(runs)),
               by_seed=[{"seed": s, "dev": r["dev"][metric], "test": r["test"][metric]}
                        for s, r in zip(seeds, runs, strict=True)])
    return row


def bert_rows(name: str, setup: Setup, starts: dict[str, dict[str, Any]], output_dir: str,
              learning_rates: list[float | None], seeds: list[int]) -> list[dict[str, Any]]:
    """The setup fine-tuned from each start (keyword arguments of the task config), once per
    seed (`mean_row`).

    With several learning rates each start runs them all and keeps the one with the best mean
    dev score (the starts need not share a best rate); every rate's mean dev score is kept
    under "dev_by_learning_rate". None: the task's default.
    """
    from tfbert.tasks.classification import ClassificationConfig, run_classification
    from tfbert.tasks.ner import NerConfig, run_ner

    run, config_cls, task_args = {
        "sentiment": (run_classification, ClassificationConfig, {"task_name": "sentiment"}),
        "ner": (run_ner, NerConfig, {"task_name": "people_daily", "crf": setup.crf})}[setup.task]
    common = dict(max_seq_length=setup.max_seq_length, train_batch_size=setup.batch_size,
                  num_train_epochs=setup.epochs, max_train_examples=setup.max_train_examples,
                  max_eval_examples=setup.max_eval_examples, verbose=2)
    rows = []
    for start, start_args in starts.items():
        runs = []
        for lr in learning_rates:
            by_seed = []
            for seed in seeds:
                suffix = ("" if len(learning_rates) == 1 else f"_lr{lr:g}") + f"_seed{seed}"
                t0 = time.time()
                result = run(config_cls(
                    output_dir=os.path.join(output_dir, f"{name}_{start}{suffix}"),
                    learning_rate=lr, seed=seed, **task_args, **start_args, **common))
                by_seed.append({"learning_rate": result["train"]["learning_rate"],
                                "seconds": round(time.time() - t0), "dev": result["dev"],
                                "test": result["test"],
                                "num_train": result["train"]["num_examples"]})
                logger.info("%s %s seed %d: dev %s %.4f, test %.4f", name, start, seed,
                            setup.metric, result["dev"][setup.metric],
                            result["test"][setup.metric])
            runs.append(mean_row(by_seed, seeds, setup.metric))
        best = max(runs, key=lambda r: r["dev"][setup.metric])
        checkpoint = start_args.get("init_checkpoint")
        best["command"] = command_line(setup, start_args, seeds[0],
                                       None if learning_rates == [None] else
                                       best["learning_rate"])
        rows.append({"setup": name, "start": start, "checkpoint": checkpoint,
                     "pretraining_steps": pretraining_steps(checkpoint) if checkpoint else 0,
                     **best, "dev_by_learning_rate": {
                         f"{r['learning_rate']:g}": r["dev"][setup.metric] for r in runs}})
    return rows


def command_line(setup: Setup, start: dict[str, Any], seed: int,
                 learning_rate: float | None = None) -> str:
    """The run_classifier.py / run_ner.py command line that trains a BERT row of `setup` from
    `start` (the task config's start arguments: init_checkpoint, or bert_config_file and
    vocab_file for random init)."""
    script, task = (("run_ner.py", "people_daily") if setup.task == "ner"
                    else ("run_classifier.py", "sentiment"))
    from tfbert.training.finetune import TaskConfig  # (TensorFlow: not for bench.report)

    flags = [f"--task_name={task}"]
    defaults = TaskConfig(output_dir="o")
    for flag, value, default in (
            ("max_seq_length", setup.max_seq_length, defaults.max_seq_length),
            ("num_train_epochs", setup.epochs, defaults.num_train_epochs),
            ("train_batch_size", setup.batch_size, defaults.train_batch_size),
            ("max_train_examples", setup.max_train_examples, None),
            ("max_eval_examples", setup.max_eval_examples, None),
            ("seed", seed, defaults.seed)):
        if value is not None and value != default:
            flags.append(f"--{flag}={value}")
    if setup.crf:
        flags.append("--crf")
    if learning_rate is not None:
        flags.append(f"--learning_rate={learning_rate:g}")
    flags += [f"--{name}={value}" for name, value in start.items()]
    return f"python {script} {' '.join(flags)} --output_dir=OUT"


def markdown(rows: list[dict[str, Any]], setups: dict[str, Setup]) -> str:
    """The rows as a markdown table, with each pretrained row's gain over random init."""
    lines = ["| setup | training examples | model | learning rate | seconds | dev | test |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for name, setup in setups.items():
        metric = setup.metric
        label = f"{name} ({'entity F1' if metric == 'f1' else metric})"
        block = [r for r in rows if r["setup"] == name]
        random_init = next((r for r in block if r["start"] == "random_init"), None)
        for r in block:
            if r["start"] == "baseline":
                model = r["model"]
            elif r["start"] == "random_init":
                model = "BERT, random init"
            else:
                steps = r["pretraining_steps"]
                model = (f"BERT, pretrained {steps:,} steps" if steps is not None
                         else f"BERT from {r['checkpoint']}")
                if steps is not None and sum(b.get("pretraining_steps") == steps
                                             for b in block) > 1:
                    model += f" ({r['checkpoint']})"
            if setup.crf and r["start"] != "baseline":
                model += " + CRF"
            rate = f"{r['learning_rate']:g}" if "learning_rate" in r else ""
            test = f"{r['test'][metric]:.2%}"
            if len(r.get("by_seed", ())) > 1:
                values = [100 * b["test"] for b in r["by_seed"]]
                test += f" ± {statistics.stdev(values):.1f}"
            if r["start"] == "pretrained" and random_init:
                gain = 100 * (r["test"][metric] - random_init["test"][metric])
                test += f" ({gain:+.1f})"
            lines.append(f"| {label} | {r['num_train']:,} | {model} | {rate} | {r['seconds']} | "
                         f"{r['dev'][metric]:.2%} | {test} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], setups: dict[str, Setup], path: str) -> None:
    """Each setup's test score against the checkpoint's pretraining steps (random init at 0),
    the baseline as a horizontal line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(2, len(setups))
    grid = -(-len(setups) // columns)
    fig, axes = plt.subplots(grid, columns, figsize=(5.5 * columns, 3.8 * grid), squeeze=False)
    for ax in axes.flat[len(setups):]:
        ax.set_visible(False)
    for ax, (name, setup) in zip(axes.flat, setups.items(), strict=False):
        block = [r for r in rows if r["setup"] == name]
        points = sorted((r["pretraining_steps"], r["test"][setup.metric]) for r in block
                        if r["start"] != "baseline" and r["pretraining_steps"] is not None)
        if points:
            ax.plot(*zip(*points, strict=True), "o-", label="BERT")
        for r in block:
            if r["start"] == "baseline":
                ax.axhline(r["test"][setup.metric], color="grey", linestyle="--",
                           label=r["model"].split(",")[0].split(" (")[0])
        ax.set_xlabel("pretraining steps (0: random init)")
        ax.set_ylabel(f"test {'entity F1' if setup.metric == 'f1' else setup.metric}")
        ax.set_title(f"{name}: {block[0]['num_train']:,} training examples" if block else name)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from tfbert.training.finetune import TaskConfig  # (TensorFlow: not for bench.report)

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pretrained", default="output/pretrain_default/model",
                        help="checkpoint folder(s) written by run_pretraining.py, comma-"
                             "separated (its default run writes output/pretrain_default/model)")
    parser.add_argument("--output_dir", default="output/quality")
    parser.add_argument("--setups", default=",".join(SETUPS),
                        help=f"comma-separated subset of {', '.join(SETUPS)}")
    parser.add_argument("--only", default=",".join(STARTS),
                        help=f"comma-separated subset of {', '.join(STARTS)}")
    parser.add_argument("--learning_rate", default=None,
                        help="a rate, or comma-separated rates (each start keeps its best on "
                             "dev); default: the rate run_classification / run_ner pick")
    for name in ("max_seq_length", "epochs", "max_train_examples", "max_eval_examples",
                 "batch_size"):
        parser.add_argument(f"--{name}", type=int, default=None,
                            help="overrides the setups' value")
    parser.add_argument("--seeds", default=f"{TaskConfig.seed},42,7",
                        help="comma-separated seeds; every BERT row and the BiLSTM run once "
                             "per seed (default: the run_* scripts' own seed, 42 and 7)")
    parser.add_argument("--plot", default=None, help="write the score-against-pretraining-steps "
                                                     "figure (PNG) here")
    parser.add_argument("--replot", action="store_true",
                        help="train nothing: redraw the table (and --plot) from "
                             "OUTPUT_DIR/quality.json")
    args = parser.parse_args(argv)
    if args.replot:
        with open(os.path.join(args.output_dir, "quality.json"), encoding="utf-8") as f:
            saved = json.load(f)
        order = [n for n in SETUPS if n in saved["setups"]]  # (the file's keys are sorted)
        order += [n for n in saved["setups"] if n not in order]
        setups = {n: Setup(**saved["setups"][n]) for n in order}
        if args.plot:
            plot(saved["rows"], setups, args.plot)
        print(markdown(saved["rows"], setups))
        return saved
    names = [x.strip() for x in args.setups.split(",") if x.strip()]
    try:
        seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--seeds: not an integer list: {args.seeds!r}")
    if not seeds:
        parser.error("--seeds: give at least one seed")
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    from tfbert.checkpoints import resolve_source

    pretrained = [resolve_source(x.strip()) for x in args.pretrained.split(",") if x.strip()]
    if not names or set(names) - set(SETUPS):
        parser.error(f"--setups: unknown {sorted(set(names) - set(SETUPS))}; known {list(SETUPS)}")
    if not only or only - set(STARTS):
        parser.error(f"--only: unknown {sorted(only - set(STARTS))}; known {list(STARTS)}")
    rates: list[float | None] = [None]
    if args.learning_rate:
        try:
            rates = [float(x) for x in args.learning_rate.split(",") if x.strip()]
        except ValueError:
            parser.error(f"--learning_rate: not a number list: {args.learning_rate!r}")
        if not rates or min(rates) <= 0:
            parser.error(f"--learning_rate needs positive rates, got {args.learning_rate}")
    if only - {"baseline"}:
        for path in pretrained:
            if not os.path.isfile(os.path.join(path, "config.json")):
                parser.error(f"--pretrained {path} has no config.json: run `python "
                             "run_pretraining.py` first (or use --only baseline)")
    overrides = {k: v for k in ("max_seq_length", "epochs", "max_train_examples",
                                "max_eval_examples", "batch_size")
                 if (v := getattr(args, k)) is not None}
    setups = {name: dataclasses.replace(SETUPS[name], **overrides) for name in names}
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    starts: dict[str, dict[str, Any]] = {}
    if pretrained:
        if "random_init" in only:
            starts["random_init"] = {"bert_config_file": os.path.join(pretrained[0], "config.json"),
                                     "vocab_file": os.path.join(pretrained[0], "vocab.txt")}
        if "pretrained" in only:  # in order of pretraining steps (unknown last)
            for i, path in sorted(enumerate(pretrained), key=lambda p: (
                    pretraining_steps(p[1]) is None, pretraining_steps(p[1]) or 0, p[0])):
                steps = pretraining_steps(path)
                key = f"pretrained_{steps}" if steps is not None else f"pretrained_{i}"
                starts[key if key not in starts else f"{key}_{i}"] = {"init_checkpoint": path}
    rows: list[dict[str, Any]] = []
    for name, setup in setups.items():
        if "baseline" in only:  # TF-IDF is deterministic: one run stands for every seed
            runs = [baseline_row(name, setup, seed)
                    for seed in (seeds if setup.task == "ner" else seeds[:1])]
            rows.append(mean_row(runs, seeds[:len(runs)], setup.metric))
            logger.info("%s baseline: test %s %.4f", name, setup.metric,
                        rows[-1]["test"][setup.metric])
        rows += [dict(r, start="pretrained" if r["start"].startswith("pretrained") else r["start"])
                 for r in bert_rows(name, setup, starts, args.output_dir, rates, seeds)]
    results = {"rows": rows, "setups": {n: dataclasses.asdict(s) for n, s in setups.items()},
               "settings": vars(args)}
    os.makedirs(args.output_dir, exist_ok=True)
    table = markdown(rows, setups)
    commands = []
    for r in rows:
        if "command" in r:
            steps = f" {r['pretraining_steps']} steps" if r["start"] == "pretrained" else ""
            commands.append(f"- {r['setup']}, {r['start'].replace('_', ' ')}{steps}: "
                            f"`{r['command']}`")
    if commands:
        table += "\nEach BERT row is this command line (the script's defaults otherwise):\n\n"
        table += "\n".join(commands) + "\n"
    write_json(os.path.join(args.output_dir, "quality.json"), results)
    write_text(os.path.join(args.output_dir, "quality.md"), table)
    if args.plot:
        plot(rows, setups, args.plot)
    print(table)
    return results


if __name__ == "__main__":
    main()
