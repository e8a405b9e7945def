"""Interleaved A/B of the classifier forward pass at batch 1 (bert-base-chinese shape, seq 128):
a tf.function with jit_compile=True (XLA) vs False (TF graph + oneDNN), as a serving signature
would call it, (--stock_projections) the XLA-off forward traced with keras
MultiHeadAttention's own EinsumDense projections instead of tfbert's 2-D matmuls,
(--stock_feed_forward) with keras Dense's own feed-forward path (no fused bias + GELU),
(--stock_layer_norm) with keras LayerNormalization's ops instead of the fused form, and (--onnx)
ONNX Runtime on the same weights. Decides the serving function's settings (see bench/NOTES.md).

    python bench/ab_serve.py [--rounds 10] [--batch 1] [--stock_projections]
        [--stock_feed_forward] [--stock_layer_norm] [--onnx]
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


def traced_with(model, spec, cls, attr: str, replacement, jit_compile: bool = False):
    """The classifier forward as a tf.function traced while cls.attr is `replacement`."""
    import tensorflow as tf

    fn = tf.function(lambda x: model(x, training=False), input_signature=[spec],
                     jit_compile=jit_compile)
    ours = getattr(cls, attr)
    setattr(cls, attr, replacement)
    try:
        fn.get_concrete_function()  # traced now, with the replacement
    finally:
        setattr(cls, attr, ours)
    return fn


def _fused_qkv(self, query, key, value):
    """Q, K and V of self-attention as one [B*T, H] x [H, 3*N*D] matmul on kernels concatenated
    in the call (an experiment: the concat copies 3*H*N*D floats per call)."""
    from keras import ops

    from tfbert.layers.transformer import _linear_2d, _project_heads

    denses = (self._query_dense, self._key_dense, self._value_dense)
    if not (query is key is value):  # cross rows (the classifier's [CLS]-only last block)
        return tuple(_project_heads(d, x) for d, x in zip(denses, (query, key, value), strict=True))
    width, heads, head_size = denses[0].kernel.shape
    kernel = ops.concatenate([ops.reshape(d.kernel, (width, heads * head_size))
                              for d in denses], axis=1)
    bias = ops.concatenate([ops.reshape(d.bias, (heads * head_size,)) for d in denses])
    batch_shape = ops.shape(query)[:-1]
    y = _linear_2d(ops.reshape(query, (-1, width)), kernel, bias)
    return tuple(ops.reshape(part, (*batch_shape, heads, head_size))
                 for part in ops.split(y, 3, axis=-1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--stock_projections", action="store_true",
                        help="add the forward with keras MultiHeadAttention's projections")
    parser.add_argument("--stock_feed_forward", action="store_true",
                        help="add the forward with keras Dense's own FFN path (no fused GELU)")
    parser.add_argument("--full_last_layer", action="store_true",
                        help="add the forward with the last block at every position")
    parser.add_argument("--fused_qkv", action="store_true",
                        help="add the forward with Q/K/V as one matmul on concatenated kernels")
    parser.add_argument("--stock_layer_norm", action="store_true",
                        help="add the forward with keras LayerNormalization's own ops")
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
    plain = fns["jit_compile=False"]
    if args.stock_projections:
        import keras

        from tfbert.layers.transformer import BertSelfAttention

        fns["jit_compile=False, stock projections"] = traced_with(
            model, spec, BertSelfAttention, "call", keras.layers.MultiHeadAttention.call)
    if args.stock_feed_forward:
        from tfbert.layers.transformer import BertTransformerLayer

        fns["jit_compile=False, stock feed-forward"] = traced_with(
            model, spec, BertTransformerLayer, "_feed_forward",
            lambda self, h: self.output_dense(self.intermediate_dense(h)))
    if args.full_last_layer:
        from tfbert.models.classifier import BertClassifier
        from tfbert.models.task import BertTask

        fns["jit_compile=False, full last layer"] = traced_with(
            model, spec, BertClassifier, "call", BertTask.call)
    if args.fused_qkv:
        from tfbert.layers.transformer import BertSelfAttention

        fns["jit_compile=False, fused QKV"] = traced_with(
            model, spec, BertSelfAttention, "_project_qkv", _fused_qkv)
    if args.stock_layer_norm:
        import keras

        from tfbert.layers.layer_norm import BertLayerNorm

        def stock(self, inputs, training=None):
            return keras.layers.LayerNormalization.call(self, inputs)

        for jit in (False, True):
            fns[f"jit_compile={jit}, stock LayerNorm"] = traced_with(
                model, spec, BertLayerNorm, "call", stock, jit_compile=jit)
    for name, fn in fns.items():
        if "," in name:
            diff = float(tf.reduce_max(tf.abs(fn(x) - plain(x))))
            print(f"{name} vs tfbert's: max abs diff {diff:.2e}")
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
