"""Interleaved A/B of two tfbert checkouts' exports of one model: the serving cost of a change.

One random-init classifier of the bert-base-chinese shape (seq 128; bench.bench_inference's
`build_tfbert`) is exported by each checkout, in a child process that imports that checkout's
tfbert (PYTHONPATH), with the same `--target_cpu`; both SavedModels are then loaded into this
process and timed in turn, round by round (bench.common.interleaved_times): `serve_ids` at
batch 1 and 32 (full length) and `serving_default` on one short raw text. Prints (and with
`--results` writes) each system's median latency and the after / before ratio.

    git worktree add /tmp/tfbert-before <commit>
    python -m bench.probes.ab_versions --before /tmp/tfbert-before [--after .] [--rounds 20]
        [--results FILE]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from bench.bench_inference import build_tfbert, make_inputs  # noqa: E402
from bench.common import interleaved_times, isa_record, load_average, report, step_stats  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the checkout before the change")
    parser.add_argument("--after", default=".", help="the checkout with the change")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--target_cpu", default="auto")
    parser.add_argument("--results")
    args = parser.parse_args()

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
