"""What TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 does to an exported SavedModel's `serve_ids` when
requests change length: each length in --order is timed in turn (median of --reps after two
warm-up calls) in one process, in a child process without the flag and one with it.
(docs/performance.md, "Frozen weights"; docs/serving.md.)

    python -m experiments.probe_frozen_weights [--order 32,128,32,64] [--reps 8]

Requests are batch 1, `real` tokens padded to 128; the export trims padding (rounded up to 16),
so each length is a different matmul shape.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from bench.bench_inference import build_tfbert, make_inputs  # noqa: E402
from bench.common import run_module  # noqa: E402


def child(export_dir: str, order: list[int], reps: int) -> str:
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer op)

    serve_ids = tf.saved_model.load(export_dir).signatures["serve_ids"]
    results = []
    for real in order:
        x = {k: tf.constant(v) for k, v in make_inputs(1, real=real).items()}
        for _ in range(2):
            serve_ids(**x)
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            serve_ids(**x)["logits"].numpy()
            times.append(time.perf_counter() - start)
        results.append(f"{real} tokens {1e3 * statistics.median(times):.1f} ms")
    return ", ".join(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--order", default="32,128,32,64")
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # (internal) an export dir
    args = parser.parse_args()
    order = [int(n) for n in args.order.split(",")]
    if args.child:
        print(child(args.child, order, args.reps))
        return
    from tfbert.export import export_model

    workdir = tempfile.mkdtemp()
    export_dir = os.path.join(workdir, "saved_models", "bench", "1")
    export_model(build_tfbert(workdir), export_dir, check=False)
    for flag in ("0", "1"):
        out = run_module("experiments.probe_frozen_weights",
                         ["--child", export_dir, "--order", args.order, "--reps", str(args.reps)],
                         env={"TF_ONEDNN_ASSUME_FROZEN_WEIGHTS": flag}, capture_output=True,
                         text=True)
        line = out.stdout.strip().splitlines()[-1] if out.returncode == 0 else out.stderr[-500:]
        print(f"TF_ONEDNN_ASSUME_FROZEN_WEIGHTS={flag}: {line}")


if __name__ == "__main__":
    main()
