"""What a fine-tuning step costs at each bucket length, and the ratio that cost allows.

The benchmark's tfbert classifier (`bench.bench_finetune`: the built-in shape, or bert-base's
with `--shape bert-base`; tfbert's AdamW with its schedule and clip, no XLA) trains on synthetic
batches of 32 at every bucket length of
max_seq_length 128, through `model.fit` as the fine-tuning commands run it. Two models: one
that only ever sees 128 (its train function traced for that one shape, as with
`--length_buckets=false`) and one that has seen every bucket length (its train function traced
for any length, as with buckets). Rounds interleave the lengths; the figure per length is the
median over rounds of a round's median step.

From those: the least-squares line step = a + b * L over the bucketed model's lengths (a: the
per-step cost that does not shrink with the batch), and the ratio a pipeline with no cost of
its own would reach on the benchmark's training reviews: the fixed-length step over the mean of
the bucketed steps weighted by the epoch's batches per bucket.

    nice .venv/bin/python -m experiments.finetune_step_cost [--rounds 5] [--steps 20]
        [--warm 3] [--shape builtin|bert-base] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402

from bench.common import isa_record, load_average, new_results_file  # noqa: E402
from tfbert.fileio import write_json  # noqa: E402

SEQ, BATCH = 128, 32


def synthetic_batch(length: int, seed: int) -> tuple[dict, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 8000, (BATCH, length)).astype(np.int32)
    return ({"input_ids": ids, "input_mask": np.ones_like(ids),
             "segment_ids": np.zeros_like(ids)}, rng.integers(0, 2, BATCH).astype(np.int32))


def measure(rounds: int, steps: int, warm: int, shape: str) -> dict:
    import keras
    import tensorflow as tf

    from bench import bench_finetune as bf
    from tfbert.data import length_buckets as lb
    from tfbert.text.preprocessor import BertPreprocessor

    workdir = tempfile.mkdtemp(prefix="finetune_step_cost_")
    spec = bf.prepare(workdir, False, ["builtin", shape])
    lengths = lb.bucket_lengths(SEQ)

    def model() -> keras.Model:
        system = bf.tfbert_classifier(spec, shape, True, False)
        bf.compile_tfbert(system["model"], system["config"], 10_000,
                          keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return system["model"]

    data = {n: tf.data.Dataset.from_tensors(synthetic_batch(n, n)).repeat() for n in lengths}
    fixed, bucketed = model(), model()
    fixed.fit(data[SEQ], steps_per_epoch=warm, epochs=1, verbose=0)
    for n in lengths:  # every length seen: the train function is traced for any length
        bucketed.fit(data[n], steps_per_epoch=warm, epochs=1, verbose=0)

    class Clock(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.times = [time.perf_counter()]

        def on_train_batch_end(self, batch, logs=None):
            self.times.append(time.perf_counter())

    clock = Clock()

    def step_ms(m: keras.Model, n: int) -> float:
        m.fit(data[n], steps_per_epoch=steps + 1, epochs=1, verbose=0, callbacks=[clock])
        return 1e3 * float(np.median(np.diff(clock.times)[1:]))  # the first: fit's start

    runs: dict[str, list[float]] = {"fixed 128": []} | {f"bucketed {n}": [] for n in lengths}
    for _ in range(rounds):
        runs["fixed 128"].append(step_ms(fixed, SEQ))
        for n in lengths:
            runs[f"bucketed {n}"].append(step_ms(bucketed, n))
    median = {name: statistics.median(v) for name, v in runs.items()}
    bucketed_ms = np.array([median[f"bucketed {n}"] for n in lengths])
    slope, intercept = np.polyfit(np.array(lengths, float), bucketed_ms, 1)

    preprocessor = BertPreprocessor(spec["vocab_file"], SEQ, lower_case=True)
    mask = preprocessor(tf.constant(spec["train"]["texts"]))["input_mask"].numpy()
    counts = np.bincount(lb.bucket_ids(mask.sum(axis=1), SEQ), minlength=len(lengths))
    batches = np.ceil(counts / BATCH)
    epoch_bucketed = float((batches * bucketed_ms).sum() / len(mask))  # ms per example
    epoch_fixed = float(np.ceil(len(mask) / BATCH) * median["fixed 128"] / len(mask))
    return {"median_step_ms": median, "rounds_ms": runs,
            "line": {"intercept_ms": float(intercept), "ms_per_position": float(slope)},
            "training_examples": len(mask), "batches_per_bucket": dict(
                zip(map(str, lengths), batches.astype(int).tolist(), strict=True)),
            "pipeline_free_ratio": epoch_fixed / epoch_bucketed}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warm", type=int, default=3, help="untimed steps per length first")
    parser.add_argument("--shape", choices=["builtin", "bert-base"], default="builtin")
    parser.add_argument("--output", help="the record (default bench/results/...; never "
                                         "replaced)")
    args = parser.parse_args(argv)
    output = new_results_file(f"finetune_step_cost-{args.shape}", args.output)
    before = load_average()
    result = {"probe": "finetune_step_cost", "shape": args.shape, "rounds": args.rounds,
              "steps": args.steps, "warm": args.warm, "seq": SEQ, "batch": BATCH,
              "isa": isa_record(), **measure(args.rounds, args.steps, args.warm, args.shape)}
    result["load_average"] = [before, load_average()]
    print(json.dumps(result, indent=2))
    write_json(output, result)
    print(f"wrote {output}", file=sys.stderr)


if __name__ == "__main__":
    main()
