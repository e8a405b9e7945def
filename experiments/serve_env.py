"""Batch-1 classifier forward (bert-base-chinese shape, seq 128, float32) under process-wide
settings that an in-process A/B cannot switch: oneDNN off, thread pools, XLA CPU flags, frozen
weights with oneDNN's weight prepacking. Each setting runs in its own child process; the
settings are timed in turn for --rounds rounds and each figure is the median over rounds of the
per-process medians. (docs/performance.md, "Process-wide CPU settings" and "Frozen weights".)

    python -m experiments.serve_env [--rounds 2] [--reps 15] [--tokens 128]
                              [--settings default,onednn_off,...]

--tokens: the request's length (a trimmed short request runs at its own length; 128 = SEQ).

Settings: `default`; `onednn_off` (TF_ENABLE_ONEDNN_OPTS=0); `intra1_inter2` (one intra-op
thread, two inter-op threads); `frozen` (the forward with its weights as graph constants, timed
interleaved in one process with the variables version, under TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1);
`spin` (TF_THREAD_PINNING_MODE=none,<cores - 1>,400: Intel's model-zoo inference setting,
thread-pool spin-waiting) and `spin_frozen` (that and TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 with the
weights as variables, as a SavedModel keeps them); `xla` (jit_compile=True) and `xla:<flag>`
for each XLA_FLAGS value in XLA_SETTINGS.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile

from bench.common import child_rounds, interleaved_medians

XLA_SETTINGS = {
    "xla:onednn": "--xla_cpu_use_onednn=true",
    "xla:onednn_custom_call": "--xla_cpu_experimental_onednn_custom_call=true",
    "xla:xnnpack": "--xla_cpu_use_xnnpack=true",
    "xla:xnn_dot": "--xla_cpu_experimental_xnn_fusion_type=+dot",
    "xla:ynn_dot": "--xla_cpu_experimental_ynn_fusion_type=+dot",
    "xla:xnn_graph": "--xla_cpu_experimental_xnn_graph_fusion_mode=XNN_GRAPH_FUSION_MODE_GREEDY",
    "xla:onednn_dot": "--xla_cpu_use_onednn=true --xla_cpu_experimental_onednn_fusion_type=dot",
}
SPIN = f"none,{max((os.cpu_count() or 2) - 1, 1)},400"
SETTINGS = {
    "default": ({}, []),
    "onednn_off": ({"TF_ENABLE_ONEDNN_OPTS": "0"}, []),
    "intra1_inter2": ({"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2"}, []),
    "frozen": ({"TF_ONEDNN_ASSUME_FROZEN_WEIGHTS": "1"}, ["--frozen"]),
    # Intel's TensorFlow model scripts' inference settings: no pinning, spin-wait (us) in the
    # thread pools on cores - 1 threads; then with the frozen-weights flag as well
    "spin": ({"TF_THREAD_PINNING_MODE": SPIN}, []),
    "spin_frozen": ({"TF_THREAD_PINNING_MODE": SPIN, "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS": "1"}, []),
    "xla": ({}, ["--jit"]),
    **{name: ({"XLA_FLAGS": flags}, ["--jit"]) for name, flags in XLA_SETTINGS.items()},
}


def child(model_dir: str, reps: int, jit: bool, frozen: bool,
          tokens: int) -> dict[str, float]:
    """Median ms per forward of this process's variants (one line of JSON on stdout)."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import tensorflow as tf

    import tfbert.checkpoints
    from bench.bench_inference import make_inputs

    model = tfbert.checkpoints.load_model(model_dir)
    spec = {k: tf.TensorSpec([None, tokens], tf.int32) for k in ("input_ids", "input_mask",
                                                                  "segment_ids")}
    fn = tf.function(lambda x: model(x, training=False), input_signature=[spec],
                     jit_compile=jit)
    x = {k: tf.constant(v) for k, v in make_inputs(1, seq=tokens).items()}
    calls = {"variables": lambda: fn(x).numpy()}
    if frozen:
        from tensorflow.python.framework.convert_to_constants import (
            convert_variables_to_constants_v2,
        )

        constants = convert_variables_to_constants_v2(fn.get_concrete_function())
        flat = [x[k] for k in sorted(x)]  # the concrete function's flat inputs, by key
        calls["constants"] = lambda: constants(*flat)[0].numpy()
    return {name: 1e3 * s for name, s in interleaved_medians(calls, reps).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # (internal) a model dir
    parser.add_argument("--jit", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--frozen", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.reps, args.jit, args.frozen, args.tokens)))
        return
    unknown = sorted(set(args.settings.split(",")) - set(SETTINGS))
    if unknown:
        parser.error(f"unknown settings {unknown}; choose from {sorted(SETTINGS)}")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    from bench.bench_inference import build_tfbert

    model_dir = build_tfbert(tempfile.mkdtemp())
    times: dict[str, list[float]] = {}
    child_args = ["--child", model_dir, "--reps", str(args.reps), "--tokens", str(args.tokens)]
    settings = [(name, *SETTINGS[name]) for name in args.settings.split(",")]
    for name, out in child_rounds("experiments.serve_env", child_args, settings, args.rounds):
        if isinstance(out, str):  # the child failed: its stderr
            times.setdefault(f"{name} (failed: {out.splitlines()[-1]})", [])
            continue
        for variant, ms in out.items():
            times.setdefault(name if variant == "variables" else f"{name}, {variant}",
                             []).append(ms)
    for name, values in times.items():
        median = f"{statistics.median(values):8.1f} ms" if values else "       -   "
        print(f"{name:32s} {median}  ({', '.join(f'{v:.1f}' for v in values)})")


if __name__ == "__main__":
    main()
