"""Interleaved A/B of two tfbert checkouts' exports of one model: the serving cost of a change.

One random-init classifier of the bert-base-chinese shape (seq 128; bench.bench_inference's
`build_tfbert`) is exported by each checkout, in a child process that imports that checkout's
tfbert (PYTHONPATH), with the same `--target_cpu`; both SavedModels are then loaded into this
process and timed in turn, round by round (bench.common.interleaved_times): `serve_ids` at
batch 1 and 32 (full length) and `serving_default` on one short raw text.

With `--train`, the training steps instead: the built-in default model's pretraining step
(seq 128, batch 32, 20 masked positions, no XLA) and a classifier fine-tuning step on that
model (seq 128, batch 32), each under `create_optimizer` as the commands build it (warmup,
decay, clip 1.0). Two checkouts cannot share a process, so each round runs one child per
checkout in turn (the source of `train_steps`, run in the checkout), each timing `--steps`
steps after 3 warm-up steps; the figure is the median over rounds of each child's median.

Prints (and with `--results` writes) each system's median and the after / before ratio.

    git worktree add /tmp/tfbert-before <commit>
    python -m experiments.ab_versions --before /tmp/tfbert-before [--after .] [--rounds 20]
        [--train [--steps 10]] [--results FILE]
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from bench.bench_inference import build_tfbert, make_inputs  # noqa: E402
from bench.common import (  # noqa: E402
    interleaved_times,
    isa_record,
    load_average,
    report,
    step_stats,
)

_EXPORT = ("import sys, tfbert.export as e; "
           "e.export_model(sys.argv[1], sys.argv[2], check=False, target_cpu=sys.argv[3]); "
           "print(e.__file__)")


def export_with(checkout: str, model_dir: str, out: str, target_cpu: str) -> str:
    """Exports model_dir to out with `checkout`'s tfbert; returns the tfbert file it used."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(checkout), TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-c", _EXPORT, model_dir, out, target_cpu],
                          cwd=checkout, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"export with {checkout} failed:\n{done.stderr[-3000:]}")
    used = done.stdout.strip().splitlines()[-1]
    if not used.startswith(os.path.abspath(checkout)):
        raise SystemExit(f"the child imported {used}, not {checkout}'s tfbert")
    return used


def train_steps(steps: int) -> dict:
    """(child) Median ms of the default model's pretraining and fine-tuning steps under
    `create_optimizer` (the commands' optimizer), in this process's tfbert."""
    import numpy as np

    from bench.bench_pretrain import synthetic_batch
    from experiments.ab_pretrain_builtin import VOCAB, builtin_step
    from tfbert import BertClassifier, BertConfig, BertEncoder
    from tfbert.training.optimization import create_optimizer
    from tfbert.training.pretrain import DEFAULT_MODEL

    def optimizer(model):
        return create_optimizer(1e-3, 3000, 300, clip_norm=1.0,
                                variables=model.trainable_variables)

    batch = synthetic_batch(seq=128, batch=32, predictions=20, vocab=VOCAB)
    classifier = BertClassifier(BertEncoder(BertConfig(vocab_size=VOCAB, **DEFAULT_MODEL)),
                                num_classes=2)
    classifier.compile(optimizer=optimizer(classifier), jit_compile=False)
    features = {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}
    labels = np.random.default_rng(0).integers(0, 2, 32).astype("int32")
    calls = {"pretrain seq128": builtin_step(batch, False, optimizer=optimizer),
             "finetune seq128": lambda: classifier.train_on_batch(features, labels)}
    result = {}
    for name, call in calls.items():
        for _ in range(3):
            call()
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        result[name] = 1e3 * statistics.median(times)
    return result


def compare_training(args: argparse.Namespace) -> dict:
    """--train: each checkout's training steps (`train_steps`, its source run by `python -c`
    in the checkout, so that tfbert and bench import from there), one child each per round."""
    program = (inspect.getsource(train_steps) + "import json, statistics, time, tfbert\n"
               f"print(json.dumps({{**train_steps({args.steps}), 'tfbert': tfbert.__file__}}))")
    medians: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    for _ in range(args.rounds):
        for name, checkout in (("before", args.before), ("after", args.after)):
            env = dict(os.environ, PYTHONPATH=os.path.abspath(checkout), TF_CPP_MIN_LOG_LEVEL="2")
            done = subprocess.run([sys.executable, "-c", program], cwd=checkout, env=env,
                                  capture_output=True, text=True, check=False)
            if done.returncode:
                raise SystemExit(f"{name}: {done.stderr[-3000:]}")
            out = json.loads(done.stdout.strip().splitlines()[-1])
            if not out.pop("tfbert").startswith(os.path.abspath(checkout)):
                raise SystemExit(f"{name}: the child did not import {checkout}'s tfbert")
            for case, ms in out.items():
                medians[name].setdefault(case, []).append(ms)
    stats = {f"{name} {case}": round(statistics.median(v), 2)
             for name, cases in medians.items() for case, v in cases.items()}
    ratios = {case: round(stats[f"after {case}"] / stats[f"before {case}"], 3)
              for case in medians["before"]}
    return {"step_ms": stats, "rounds_ms": medians, "after_over_before": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the checkout before the change")
    parser.add_argument("--after", default=".", help="the checkout with the change")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--target_cpu", default="auto")
    parser.add_argument("--train", action="store_true",
                        help="time the training steps instead of the exports")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per child (--train)")
    parser.add_argument("--results")
    args = parser.parse_args()
    if args.train:
        load_before = load_average()
        result = compare_training(args)
        report({"probe": "ab_versions --train", "rounds": args.rounds, "steps": args.steps,
                "checkouts": {"before": args.before, "after": args.after}, "isa": isa_record(),
                "load_average": [load_before, load_average()], **result}, args.results)
        return

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the tokenizer op of serving_default)

    workdir = tempfile.mkdtemp(prefix="ab_versions-")
    model_dir = build_tfbert(workdir)
    calls, used = {}, {}
    for name, checkout in (("before", args.before), ("after", args.after)):
        out = os.path.join(workdir, "saved_models", name, "1")
        used[name] = export_with(checkout, model_dir, out, args.target_cpu)
        signatures = tf.saved_model.load(out).signatures
        for batch in (1, 32):
            ids = {k: tf.constant(v) for k, v in make_inputs(batch).items()}
            calls[f"{name} serve_ids b={batch}"] = (
                lambda f=signatures["serve_ids"], x=ids: f(**x))
        text = tf.constant(["这本书很好看，值得一读"])
        calls[f"{name} serving_default b=1 text"] = (
            lambda f=signatures["serving_default"], x=text: f(text=x))
    load_before = load_average()
    stats = step_stats(interleaved_times(calls, args.rounds))
    ratios = {case: round(stats[f"after {case}"]["step_ms"] / stats[f"before {case}"]["step_ms"], 3)
              for case in ("serve_ids b=1", "serve_ids b=32", "serving_default b=1 text")}
    report({"probe": "ab_versions", "rounds": args.rounds, "tfbert": used, "isa": isa_record(),
            "load_average": [load_before, load_average()], "latency": stats,
            "after_over_before": ratios}, args.results)


if __name__ == "__main__":
    main()
