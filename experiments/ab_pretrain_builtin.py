"""Interleaved A/B of the built-in default pretraining step (run_pretraining.py with no flags):
its model (tfbert.training.pretrain.DEFAULT_MODEL over the built-in 8,000-piece vocab), batch 32,
at each phase's length (32 tokens with 5 masked positions, 128 with 20), XLA on and off, float32;
and the fine-tuning step of run_ner.py on that model (BertTokenClassifier, 7 tags, 128 tokens).
With --bfloat16, also the pretraining steps in mixed bfloat16, without XLA (what
`--mixed_precision bfloat16` and `BertPretrainer.compile`'s jit_compile="auto" run on a CPU)
and with it.
With --one_device, also the 32-token steps built under a OneDeviceStrategy on the CPU, as
`run_pretraining` builds its model on a one-device host. With --optimizers, also the 32-token
no-XLA step under run_pretraining's optimizer, with and without its global-norm clip
(`optimizer_variants`).

One step of each system in turn for several rounds, so that machine load hits every system
alike; prints (and with --results writes) each system's median step time, the ratio XLA / no
XLA per length, the host's ISA record and load averages.

    python -m experiments.ab_pretrain_builtin [--rounds 30] [--bfloat16] [--one_device]
        [--optimizers] [--results FILE]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from bench.bench_pretrain import synthetic_batch  # noqa: E402
from bench.common import (  # noqa: E402
    interleaved_times,
    isa_record,
    load_average,
    report,
    step_stats,
)

VOCAB = 8000  # the built-in vocab's size (tfbert.pretraining_data.builtin.write_vocab)
PHASES = {32: 5, 128: 20}  # sequence length: masked positions per sequence (the defaults')


def builtin_step(batch: dict, jit_compile: bool, precision: str = "float32", optimizer=None):
    """The default run's train step: its model, tfbert's AdamW (or `optimizer(model)`), in
    `precision` (a `--mixed_precision` name)."""
    from tfbert import BertConfig, BertEncoder, BertPretrainer
    from tfbert.training.optimization import AdamW
    from tfbert.training.pretrain import DEFAULT_MODEL
    from tfbert.training.runtime import dtype_policy

    with dtype_policy(precision):
        model = BertPretrainer(BertEncoder(BertConfig(vocab_size=VOCAB, **DEFAULT_MODEL)))
    model.compile(optimizer=optimizer(model) if optimizer else AdamW(learning_rate=1e-3),
                  jit_compile=jit_compile)
    return lambda: model.train_on_batch(batch)


def ner_step(batch: dict, jit_compile: bool):
    """run_ner's train step on the default model: 7 tags, loss over the weighted positions."""
    import numpy as np

    from tfbert import BertConfig, BertEncoder, BertTokenClassifier
    from tfbert.training.optimization import AdamW
    from tfbert.training.pretrain import DEFAULT_MODEL

    model = BertTokenClassifier(BertEncoder(BertConfig(vocab_size=VOCAB, **DEFAULT_MODEL)),
                                num_classes=7)
    model.compile(optimizer=AdamW(learning_rate=1e-3), jit_compile=jit_compile)
    features = {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}
    labels = np.random.default_rng(0).integers(0, 7, batch["input_ids"].shape).astype("int32")
    weights = batch["input_mask"].astype("float32")
    return lambda: model.train_on_batch(features, labels, sample_weight=weights)


def optimizer_variants() -> dict:
    """--optimizers: the run's optimizer (`create_optimizer` with run_pretraining's default
    schedule: BERT's weight-decay exclusions, warmup and decay, global-norm clip 1.0), the same
    without the clip, and the probe's plain AdamW with the clip."""
    from tfbert.training.optimization import AdamW, create_optimizer

    def run(clip_norm):
        return lambda model: create_optimizer(1e-3, 3000, 300, clip_norm=clip_norm,
                                              variables=model.trainable_variables)
    return {"create_optimizer": run(1.0), "create_optimizer-no_clip": run(None),
            "adamw-clip": lambda model: AdamW(learning_rate=1e-3, global_clipnorm=1.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--bfloat16", action="store_true",
                        help="add the mixed-bfloat16 pretraining steps (XLA off and on)")
    parser.add_argument("--one_device", action="store_true",
                        help="add the 32-token steps built under a OneDeviceStrategy")
    parser.add_argument("--optimizers", action="store_true",
                        help="add the 32-token no-XLA step with run_pretraining's optimizer, "
                             "with and without its gradient clip")
    parser.add_argument("--results", default=None, help="write the figures (JSON) here")
    args = parser.parse_args()
    steps = {}
    for seq, predictions in PHASES.items():
        batch = synthetic_batch(seq=seq, batch=args.batch, predictions=predictions, vocab=VOCAB)
        for jit in (True, False):
            steps[f"seq{seq}-{'xla' if jit else 'no-xla'}"] = builtin_step(batch, jit)
        if args.bfloat16:
            steps[f"seq{seq}-bfloat16"] = builtin_step(batch, False, "bfloat16")
            steps[f"seq{seq}-bfloat16-xla"] = builtin_step(batch, True, "bfloat16")
        if args.one_device and seq == 32:
            import tensorflow as tf

            with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
                for jit in (True, False):
                    steps[f"seq{seq}-{'xla' if jit else 'no-xla'}-one_device"] = builtin_step(
                        batch, jit)
        if args.optimizers and seq == 32:
            for name, optimizer in optimizer_variants().items():
                steps[f"seq{seq}-no-xla-{name}"] = builtin_step(batch, False, optimizer=optimizer)
    ner_batch = synthetic_batch(seq=128, batch=args.batch, predictions=20, vocab=VOCAB)
    for jit in (True, False):
        steps[f"ner-seq128-{'xla' if jit else 'no-xla'}"] = ner_step(ner_batch, jit)
    load_before = load_average()
    times = interleaved_times(steps, args.rounds, args.warmup)
    result: dict = step_stats(times)
    for prefix in [f"seq{seq}" for seq in PHASES] + ["ner-seq128"]:
        result[f"{prefix} no-xla/xla"] = round(result[f"{prefix}-no-xla"]["step_ms"]
                                               / result[f"{prefix}-xla"]["step_ms"], 3)
    for seq in PHASES if args.bfloat16 else ():
        fastest = min(result[f"seq{seq}-xla"]["step_ms"], result[f"seq{seq}-no-xla"]["step_ms"])
        result[f"seq{seq} float32 (faster)/bfloat16"] = round(
            fastest / result[f"seq{seq}-bfloat16"]["step_ms"], 3)
    result.update(rounds=args.rounds, batch=args.batch, isa=isa_record(),
                  load_average={"before": load_before, "after": load_average()})
    report(result, args.results)


if __name__ == "__main__":
    main()
