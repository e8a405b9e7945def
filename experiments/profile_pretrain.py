"""Profiles tfbert's pretraining step (bench.bench_pretrain's config) with the TensorFlow profiler
and prints the ops that take the most time: where the step's time goes on this machine.

    python -m experiments.profile_pretrain [--steps 2] [--jit_compile auto|true|false] [--top 25]

Writes the trace under /tmp/tfbert_profile (open it in TensorBoard's profile tab) and reads the
same trace back (XSpace protobuf) to sum event durations by TF op type on the host threads.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from bench.bench_pretrain import synthetic_batch, tfbert_step  # noqa: E402
from bench.common import op_times  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--jit_compile", default="auto")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--logdir", default="/tmp/tfbert_profile")
    args = parser.parse_args()
    import tensorflow as tf

    jit = {"true": True, "false": False}.get(args.jit_compile.lower(), "auto")
    step = tfbert_step(synthetic_batch(), jit_compile=jit)
    for _ in range(2):
        step()
    tf.profiler.experimental.start(args.logdir)
    for _ in range(args.steps):
        step()
    tf.profiler.experimental.stop()
    totals = op_times(args.logdir)
    whole = sum(totals.values())
    print(f"{'op type':<40} {'ms/step':>9} {'share':>6}")
    for name, us in totals.most_common(args.top):
        print(f"{name:<40} {us / 1e3 / args.steps:>9.1f} {us / whole:>6.1%}")


if __name__ == "__main__":
    main()
