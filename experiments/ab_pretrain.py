"""Interleaved A/B of pretraining steps: tfbert vs keras-hub (and optional variants) in one process.

Alternates one step of each system for several rounds so that machine load hits every system
equally, then prints each system's median step time and tfbert's ratio to keras-hub. The
`tfbert-stock-*` variants trace tfbert's step with one stock Keras piece put back, the A side of
the pretraining A/Bs in docs/performance.md.

    python -m experiments.ab_pretrain [--rounds 8] [--systems tfbert,keras-hub,pytorch]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from bench.bench_pretrain import (  # noqa: E402
    BATCH,
    keras_hub_step,
    synthetic_batch,
    tfbert_step,
    torch_step,
)
from bench.common import interleaved_medians, without_forms  # noqa: E402


def _traced_with_stock(piece: str, make):
    """A maker whose model traces its train step with a stock Keras method put back in place of
    tfbert's (the A side of an A/B): "dropout" keras.layers.Dropout's own draw (tfbert.ops'
    dropout_16bit off), "last-layer" the pretrainer's full functional graph (its last block on
    every position), "feed-forward" keras Dense's own FFN path (no BiasAdd, so no fused MatMul +
    bias + GELU), "attention-core" the attention traced with tfbert.ops' heads_first off (the
    scores and context as keras einsums, not the heads-first batch matmuls behind
    integer-bitcast swaps)."""
    def maker(batch):
        from tfbert.layers import BertDropout, BertSelfAttention, BertTransformerLayer
        from tfbert.models.encoder import FeatureDictModel
        from tfbert.models.pretrainer import BertPretrainer

        owner, name, stock = {
            "dropout": (BertDropout, "call",
                        without_forms(BertDropout.call, dropout_16bit=False)),
            "last-layer": (BertPretrainer, "call", FeatureDictModel.call),
            "feed-forward": (BertTransformerLayer, "_feed_forward",
                             lambda self, x: self.output_dense(self.intermediate_dense(x))),
            "attention-core": (BertSelfAttention, "call",
                               without_forms(BertSelfAttention.call, heads_first=False)),
        }[piece]
        ours = getattr(owner, name)
        setattr(owner, name, stock)
        try:
            step = make(batch)
            step()  # traces (and compiles) the train step with the stock piece
        finally:
            setattr(owner, name, ours)
        return step
    return maker


MAKERS = {"tfbert": tfbert_step, "keras-hub": keras_hub_step, "pytorch": torch_step,
          # Diagnostic variants: XLA forced off/on; no dropout (measures its RNG cost only).
          "tfbert-nojit": lambda b: tfbert_step(b, jit_compile=False),
          "tfbert-nodropout": lambda b: tfbert_step(b, dropout=0.0),
          "tfbert-nojit-nodropout": lambda b: tfbert_step(b, jit_compile=False, dropout=0.0),
          "tfbert-jit": lambda b: tfbert_step(b, jit_compile=True),
          "keras-hub-nojit": lambda b: keras_hub_step(b, jit_compile=False),
          "tfbert-stock-dropout": _traced_with_stock("dropout", tfbert_step),
          "tfbert-keras-adamw": lambda b: tfbert_step(b, keras_adamw=True),
          "tfbert-stock-dropout-keras-adamw": _traced_with_stock(
              "dropout", lambda b: tfbert_step(b, keras_adamw=True)),
          "tfbert-jit-stock-dropout": _traced_with_stock(
              "dropout", lambda b: tfbert_step(b, jit_compile=True)),
          "tfbert-nojit-stock-dropout": _traced_with_stock(
              "dropout", lambda b: tfbert_step(b, jit_compile=False)),
          "tfbert-nojit-keras-adamw": lambda b: tfbert_step(b, jit_compile=False,
                                                            keras_adamw=True),
          "tfbert-nojit-stock-dropout-keras-adamw": _traced_with_stock(
              "dropout", lambda b: tfbert_step(b, jit_compile=False, keras_adamw=True)),
          "tfbert-full-last-layer": _traced_with_stock("last-layer", tfbert_step),
          "tfbert-nojit-full-last-layer": _traced_with_stock(
              "last-layer", lambda b: tfbert_step(b, jit_compile=False)),
          "tfbert-stock-attention-core": _traced_with_stock("attention-core", tfbert_step),
          "tfbert-nojit-stock-attention-core": _traced_with_stock(
              "attention-core", lambda b: tfbert_step(b, jit_compile=False)),
          "tfbert-stock-ffn": _traced_with_stock("feed-forward", tfbert_step),
          "tfbert-nojit-stock-ffn": _traced_with_stock(
              "feed-forward", lambda b: tfbert_step(b, jit_compile=False))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--systems", default="tfbert,keras-hub",
                        help=f"comma-separated, from: {', '.join(MAKERS)}")
    args = parser.parse_args()
    unknown = sorted(set(args.systems.split(",")) - set(MAKERS))
    if unknown:
        parser.error(f"unknown systems {unknown}")
    batch = synthetic_batch()
    steps = {}
    for name in args.systems.split(","):
        start = time.perf_counter()
        steps[name] = MAKERS[name](batch)
        for _ in range(args.warmup):
            steps[name]()
        print(f"{name}: built + {args.warmup} warm-up steps in "
              f"{time.perf_counter() - start:.1f} s", flush=True)
    medians = interleaved_medians(steps, args.rounds, warmup=0)  # warmed up above
    result = {name: {"step_ms": 1e3 * t, "sequences_per_s": BATCH / t}
              for name, t in medians.items()}
    if "tfbert" in result and "keras-hub" in result:
        result["tfbert/keras-hub"] = (result["tfbert"]["sequences_per_s"]
                                      / result["keras-hub"]["sequences_per_s"])
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
