"""Interleaved A/B of the classifier forward pass at batch 1 (bert-base-chinese shape, seq 128):
a tf.function with jit_compile=True (XLA) vs False (TF graph + oneDNN), as a serving signature
would call it. Decides the serving function's jit setting (see bench/NOTES.md).

    python bench/ab_serve.py [--rounds 10] [--batch 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from bench_inference import PRESET, SEQ, make_inputs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    import tensorflow as tf

    import tfbert

    model = tfbert.BertClassifier(tfbert.BertEncoder(tfbert.BertConfig.from_preset(PRESET)), 2)
    spec = {k: tf.TensorSpec([None, SEQ], tf.int32) for k in ("input_ids", "input_mask",
                                                               "segment_ids")}
    fns = {f"jit_compile={jit}": tf.function(lambda x: model(x, training=False),
                                             input_signature=[spec], jit_compile=jit)
           for jit in (True, False)}
    x = {k: tf.constant(v) for k, v in make_inputs(args.batch).items()}
    for fn in fns.values():
        for _ in range(3):
            fn(x)
    times = {name: [] for name in fns}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn(x).numpy()
            times[name].append(time.perf_counter() - start)
    print(json.dumps({name: {"latency_ms": 1e3 * statistics.median(t)}
                      for name, t in times.items()}, indent=2))


if __name__ == "__main__":
    main()
