"""What summing a sparse gradient's repeated rows before the clip (`summed_rows`, adamw's
true-norm clip) costs a fine-tuning step: the built-in default model's classifier (seq 128,
batch 32, no XLA) under `create_optimizer`, its `_clip` as shipped against the same optimizer
passing the gradients through unchanged (the clip counting rows one by one), one step of each in
turn (bench.common.interleaved_times).

    python experiments/clip_rows_cost.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from bench.bench_pretrain import synthetic_batch  # noqa: E402
from bench.common import interleaved_times, isa_record, load_average, step_stats  # noqa: E402
from experiments.ab_pretrain_builtin import VOCAB  # noqa: E402


def step(rows_summed: bool):
    from tfbert import BertClassifier, BertConfig, BertEncoder
    from tfbert.training.optimization import create_optimizer
    from tfbert.training.pretrain import DEFAULT_MODEL

    model = BertClassifier(BertEncoder(BertConfig(vocab_size=VOCAB, **DEFAULT_MODEL)),
                           num_classes=2)
    optimizer = create_optimizer(1e-3, 3000, 300, clip_norm=1.0,
                                 variables=model.trainable_variables)
    if not rows_summed:
        optimizer._clip = lambda grads, variables, **_: list(grads)
    model.compile(optimizer=optimizer, jit_compile=False)
    batch = synthetic_batch(seq=128, batch=32, predictions=20, vocab=VOCAB)
    features = {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}
    labels = np.random.default_rng(0).integers(0, 2, 32).astype("int32")
    return lambda: model.train_on_batch(features, labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    calls = {"summed_rows (true norm)": step(True), "rows apart": step(False)}
    before = load_average()
    stats = step_stats(interleaved_times(calls, args.rounds))
    print({"step": stats, "ratio": round(stats["summed_rows (true norm)"]["step_ms"]
                                         / stats["rows apart"]["step_ms"], 3),
           "load_average": [before, load_average()], "cpu": isa_record()["model_name"]
           if "model_name" in isa_record() else None})


if __name__ == "__main__":
    main()
