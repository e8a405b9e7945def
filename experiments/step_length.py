"""Training step time against sequence length: what length buckets can save per step.

The built-in shape's classifier (2 layers, hidden 128, vocab 8,000, no dropout), compiled as
run_classifier.py compiles it (`runtime.compile_for_training`: tfbert's AdamW, clip 1.0), XLA
off, batch 32 of random ids at each length, every position attended. A repetition is one `fit`
over --steps batches of one length; the figure per length is the fastest of --rounds
repetitions (this 2-core VM's steps fall into a fast and a slow mode, about 130 ms, at any
length: the fastest repetition is the machine's step). Then the time of an epoch of the
built-in sentiment data at --seq with and without length buckets follows from the step times
and the epoch's batches per bucket length (`tfbert.data.length_buckets` on the training
reviews), which is the most bucketing can give at that step cost.

    python -m experiments.step_length [--lengths 16,32,...,128] [--output FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import sys
import tempfile
import time
from collections.abc import Sequence

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from bench.common import isa_record, load_average, machine_name  # noqa: E402
from tfbert.fileio import write_json  # noqa: E402


def step_times(lengths: Sequence[int], steps: int, rounds: int, batch: int) -> dict[int, list]:
    """Seconds per step of every repetition, per length."""
    import keras
    import tensorflow as tf

    import tfbert
    from tfbert.tasks.classification import ClassificationConfig
    from tfbert.training import finetune as ft
    from tfbert.training import runtime
    from tfbert.training.builtin_data import split_documents, write_vocab
    from tfbert.training.pretrain_config import DEFAULT_MODEL

    work = tempfile.mkdtemp(prefix="step_length_")
    vocab = os.path.join(work, "vocab.txt")
    vocab_size = write_vocab(vocab, split_documents()[0])
    config_file = os.path.join(work, "bert_config.json")
    tfbert.BertConfig(**{**DEFAULT_MODEL, "vocab_size": vocab_size}).to_json_file(config_file)
    config = ClassificationConfig(task_name="sentiment", output_dir=work, vocab_file=vocab,
                                  bert_config_file=config_file, max_seq_length=max(lengths),
                                  verbose=0)
    model, _, _ = ft.build_model(tfbert.BertClassifier, config, num_classes=2,
                                 dropout=config.dropout)
    fc = dataclasses.replace(config.finetune_config("accuracy"), log_dir=None)
    with model.distribute_strategy.scope():
        runtime.compile_for_training(
            model, fc, 10_000, 1_000, loss_scale=False, clip_norm=fc.clip_norm,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    out = {}
    for length in lengths:
        x = {"input_ids": rng.integers(5, vocab_size, (batch, length)).astype("int32"),
             "input_mask": np.ones((batch, length), "int32"),
             "segment_ids": np.zeros((batch, length), "int32")}
        y = rng.integers(0, 2, (batch,)).astype("int32")
        data = tf.data.Dataset.from_tensors((x, y)).repeat(steps)
        model.fit(data.take(2), verbose=0)  # trace this length
        out[length] = []
        for _ in range(rounds):
            start = time.perf_counter()
            model.fit(data, verbose=0)
            out[length].append((time.perf_counter() - start) / steps)
        print(length, [round(1000 * t, 1) for t in out[length]], flush=True)
    return out


def epoch_batches(seq: int, batch: int) -> dict[str, dict[int, int]]:
    """Batches per padded length in one epoch of the built-in sentiment training reviews:
    every batch at `seq` (fixed), and by length bucket (full and partial batches alike)."""
    from tfbert.data import classification as data
    from tfbert.data.length_buckets import bucket_ids, bucket_lengths
    from tfbert.text.preprocessor import BertPreprocessor
    from tfbert.training.builtin_data import split_documents, write_vocab

    work = tempfile.mkdtemp(prefix="step_length_vocab_")
    vocab = os.path.join(work, "vocab.txt")
    write_vocab(vocab, split_documents()[0])
    examples = data.builtin_examples("sentiment", "train")
    lengths = BertPreprocessor(vocab, seq)(np.array([e.text for e in examples]))[
        "input_mask"].numpy().sum(1)
    cuts = bucket_lengths(seq)
    per_bucket = np.bincount(bucket_ids(lengths, seq), minlength=len(cuts))
    return {"fixed": {seq: -(-len(examples) // batch)},
            "buckets": {int(c): int(-(-n // batch)) for c, n in zip(cuts, per_bucket,
                                                                    strict=True) if n}}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="16,32,48,64,80,96,112,128")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    date = datetime.date.today().isoformat()
    output = args.output or os.path.join("bench", "results",
                                         f"step_length-{machine_name()}-{date}.json")
    if os.path.exists(output):
        raise SystemExit(f"step_length: {output} exists; give another --output")
    load = [load_average()]
    times = step_times(lengths, args.steps, args.rounds, args.batch)
    load.append(load_average())
    fastest = {length: min(t) for length, t in times.items()}
    batches = epoch_batches(max(lengths), args.batch)
    epoch = {kind: sum(n * fastest[length] for length, n in counts.items())
             for kind, counts in batches.items()}
    command = " ".join(["python -m experiments.step_length",
                        *(sys.argv[1:] if argv is None else argv)])
    record = {"machine": machine_name(), "date": date, "command": command,
              "isa": isa_record(), "load_average_start_end": load,
              "step_ms": [{"length": length, "fastest_ms": 1000 * fastest[length],
                           "median_ms": 1000 * float(np.median(t))}
                          for length, t in times.items()],
              "epoch_batches": {k: {str(n): c for n, c in v.items()}
                                for k, v in batches.items()},
              "epoch_seconds_from_fastest_steps": epoch,
              "buckets_over_fixed": epoch["fixed"] / epoch["buckets"]}
    write_json(output, record)
    print({k: record[k] for k in ("epoch_seconds_from_fastest_steps", "buckets_over_fixed")})
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
