"""The built-in default run's phase-1 step time inside `run_pretraining`, against the bare
`train_on_batch` step of `experiments.ab_pretrain_builtin`: what the fit loop, its callbacks
and the live input pipeline add.

Runs `run_pretraining` (the built-in data at 32 tokens, 600 steps in two loops of 300, into a
temporary folder) once per variant and XLA setting, each in its own child process, and reports
the median wall time between consecutive steps of the second loop (a callback's timestamps;
tfbert's own callbacks already end every step with a host sync, so the timing callback adds
none) and the loop's wall time with its evaluation and checkpoint. Variants:

- live: as `run_pretraining.py` runs (tokenize, pack and mask on the fly, beside the steps);
- cached: the same stream's first 64 batches cached and repeated (no input work while training);
- onethread: the live stream with a one-thread private tf.data pool;
- default_strategy: the live stream, the run under TensorFlow's default strategy instead of
  the OneDeviceStrategy `--distribution_strategy=auto` makes on a one-device host.

    python -m experiments.fit_loop [--variants live,cached,onethread,default_strategy]
        [--xla both|on|off] [--results FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

VARIANTS = ("live", "cached", "onethread", "default_strategy")


def _child(variant: str, jit: bool, cache_dir: str) -> dict:
    import keras
    import tensorflow as tf

    from tfbert.training import pretrain

    class Stamps(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.steps: list[list[float]] = []
            self.loops: list[list[float]] = []

        def on_epoch_begin(self, epoch, logs=None):
            self.steps.append([])
            self.loops.append([time.perf_counter()])

        def on_train_batch_end(self, batch, logs=None):
            self.steps[-1].append(time.perf_counter())

        def on_epoch_end(self, epoch, logs=None):
            self.loops[-1].append(time.perf_counter())

    stream = pretrain.train_dataset
    if variant == "cached":
        pretrain.train_dataset = lambda *a, **k: stream(*a, **k).take(64).cache().repeat()
    elif variant == "onethread":
        options = tf.data.Options()
        options.threading.private_threadpool_size = 1
        pretrain.train_dataset = lambda *a, **k: stream(*a, **k).with_options(options)
    elif variant == "default_strategy":
        pretrain.get_strategy = lambda *a, **k: tf.distribute.get_strategy()
    stamps = Stamps()
    with tempfile.TemporaryDirectory() as out:
        pretrain.run_pretraining(pretrain.PretrainConfig(
            output_dir=os.path.join(out, "run"), num_train_steps=600, num_warmup_steps=60,
            phase1_fraction=0.99, save_checkpoints_steps=300, jit_compile=jit,
            mixed_precision="float32", cache_dir=cache_dir, verbose=0), callbacks=[stamps])
    times = stamps.steps[1]
    gaps = [b - a for a, b in zip(times[:-1], times[1:], strict=True)]
    return {"variant": variant, "xla": jit, "steps": len(times),
            "step_ms": round(1e3 * statistics.median(gaps), 2),
            "loop_s": round(stamps.loops[1][1] - stamps.loops[1][0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--xla", choices=("both", "on", "off"), default="both")
    parser.add_argument("--cache_dir", default="cache", help="the built-in data's cache")
    parser.add_argument("--results", help="also write the figures (JSON) here")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # (internal) variant:xla
    args = parser.parse_args()
    if args.child:
        variant, jit = args.child.split(":")
        print(json.dumps(_child(variant, jit == "on", args.cache_dir)))
        return
    from bench.common import isa_record, load_average

    runs = []
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            parser.error(f"unknown variant {variant!r}; one of {', '.join(VARIANTS)}")
        for jit in {"both": ("off", "on"), "on": ("on",), "off": ("off",)}[args.xla]:
            before = load_average()
            out = subprocess.run([sys.executable, "-m", "experiments.fit_loop", "--child",
                                  f"{variant}:{jit}", "--cache_dir", args.cache_dir],
                                 check=True, capture_output=True, text=True).stdout
            runs.append({**json.loads(out.strip().splitlines()[-1]),
                         "load_average": [before, load_average()]})
            print(json.dumps(runs[-1]), flush=True)
    if args.results:
        from tfbert.fileio import write_json

        write_json(args.results, {"runs": runs, "isa": isa_record()})


if __name__ == "__main__":
    main()
