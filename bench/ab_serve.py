"""Interleaved A/B of the classifier forward pass at batch 1 (bert-base-chinese shape, seq 128):
a tf.function with jit_compile=True (XLA) vs False (TF graph + oneDNN), as a serving signature
would call it, (--stock_projections) the XLA-off forward traced with keras
MultiHeadAttention's own EinsumDense projections instead of tfbert's 2-D matmuls, and (--onnx)
ONNX Runtime on the same weights. Decides the serving function's settings (see bench/NOTES.md).

    python bench/ab_serve.py [--rounds 10] [--batch 1] [--stock_projections] [--onnx]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from bench_inference import SEQ, build_tfbert, make_inputs, torch_systems  # noqa: E402
from common import interleaved_medians  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--stock_projections", action="store_true",
                        help="add the forward with keras MultiHeadAttention's projections")
    parser.add_argument("--onnx", action="store_true", help="add ONNX Runtime (same weights)")
    args = parser.parse_args()
    import tempfile

    import tensorflow as tf

    import tfbert

    workdir = tempfile.mkdtemp()
    model_dir = build_tfbert(workdir)
    model = tfbert.checkpoints.load_model(model_dir)
    spec = {k: tf.TensorSpec([None, SEQ], tf.int32) for k in ("input_ids", "input_mask",
                                                               "segment_ids")}
    fns = {f"jit_compile={jit}": tf.function(lambda x: model(x, training=False),
                                             input_signature=[spec], jit_compile=jit)
           for jit in (True, False)}
    x = {k: tf.constant(v) for k, v in make_inputs(args.batch).items()}
    if args.stock_projections:
        import keras

        from tfbert.layers.transformer import BertSelfAttention

        stock = tf.function(lambda x: model(x, training=False), input_signature=[spec])
        ours, BertSelfAttention.call = BertSelfAttention.call, keras.layers.MultiHeadAttention.call
        try:
            stock.get_concrete_function()  # traced now, with the stock projections
        finally:
            BertSelfAttention.call = ours
        diff = float(tf.reduce_max(tf.abs(stock(x) - fns["jit_compile=False"](x))))
        print(f"stock projections vs tfbert's: max abs diff {diff:.2e}")
        fns["jit_compile=False, stock projections"] = stock
    calls = {name: (lambda fn=fn: fn(x).numpy()) for name, fn in fns.items()}
    if args.onnx:
        ort = torch_systems(model_dir, workdir, "onnxruntime")["onnxruntime (default session)"]
        if isinstance(ort, Exception):
            raise ort
        x_np = make_inputs(args.batch)
        calls["onnxruntime"] = lambda: ort(x_np)
    medians = interleaved_medians(calls, args.rounds)
    print(json.dumps({name: {"latency_ms": 1e3 * t} for name, t in medians.items()}, indent=2))


if __name__ == "__main__":
    main()
