"""Interleaved A/B of the classifier forward pass (bert-base-chinese shape, seq 128, batch 1 by
default) as a serving signature calls it: a tf.function with jit_compile=True (XLA) and False
(TF graph + oneDNN), plus the XLA-off forward traced with one piece of tfbert's put back to the
stock Keras form or changed experimentally. The serving A/Bs of docs/performance.md.

- --stock_projections: the attention's EinsumDense layers' own projections (not 2-D matmuls);
- --stock_feed_forward: keras Dense's own feed-forward path (no fused bias + GELU);
- --stock_layer_norm: keras LayerNormalization's ops (not the fused form), with and without XLA;
- --stock_attention_core: the scores and context as keras's einsums (not heads-first batch
  matmuls behind integer-bitcast swaps), with and without XLA;
- --full_last_layer: the last block at every position (not [CLS] only);
- --packed_qkv_heads_first: Q/K/V from one kernel packed before tracing, the attention in the
  [B, N, T, D] layout (experiment);
- --forms NAME,...: the whole forward traced under each `tfbert.ops` form set (FORM_SETS name,
  or "avx2": the set `--target_cpu avx2` exports), with and without XLA;
- --onnx: ONNX Runtime on the same weights.

    python -m experiments.ab_serve [--rounds 10] [--batch 1] [--stock_projections]
        [--stock_feed_forward] [--stock_layer_norm] [--stock_attention_core]
        [--full_last_layer] [--packed_qkv_heads_first] [--forms plain,stock] [--onnx]
        [--results FILE]

`--results` also writes the medians with the host's instruction sets and the load average
before and after the timed rounds.
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from bench.bench_inference import SEQ, build_tfbert, make_inputs, torch_systems  # noqa: E402
from bench.common import (  # noqa: E402
    interleaved_medians,
    isa_record,
    load_average,
    without_forms,
)


def traced_with(model, spec, cls, attr: str, replacement, jit_compile: bool = False,
                patches=()):
    """The classifier forward as a tf.function traced while cls.attr is `replacement` (and each
    (owner, attr, replacement) of `patches` too)."""
    import tensorflow as tf

    fn = tf.function(lambda x: model(x, training=False), input_signature=[spec],
                     jit_compile=jit_compile)
    patches = [(cls, attr, replacement), *patches]
    ours = [getattr(owner, name) for owner, name, _ in patches]
    for owner, name, new in patches:
        setattr(owner, name, new)
    try:
        fn.get_concrete_function()  # traced now, with the replacements
    finally:
        for (owner, name, _), old in zip(patches, ours, strict=True):
            setattr(owner, name, old)
    return fn


def traced_under(model, spec, form_set: str, jit_compile: bool = False):
    """The classifier forward as a tf.function traced under the `tfbert.ops` form set
    `form_set`: a FORM_SETS name, or a target CPU kind ("avx2", ...: the set its export
    traces under, tfbert/export/target_cpu.py)."""
    import tensorflow as tf

    from tfbert.export.target_cpu import CPU_KINDS, export_defaults
    from tfbert.ops import use_forms

    chosen = export_defaults(form_set).forms if form_set in CPU_KINDS else form_set
    fn = tf.function(lambda x: model(x, training=False), input_signature=[spec],
                     jit_compile=jit_compile)
    with use_forms(chosen):
        fn.get_concrete_function()  # traced now, under that set
    return fn


_PACKED: dict[int, tuple] = {}  # id(attention layer) -> (Q|K|V kernel [H, 3ND], bias [3ND])


def _pack_qkv(model) -> None:
    """Concatenates every self-attention layer's Q/K/V kernels once, outside the forward (an
    experiment: what an export-time packed kernel would buy)."""
    import tensorflow as tf

    from tfbert.layers import BertSelfAttention

    for layer in model._flatten_layers():
        if isinstance(layer, BertSelfAttention):
            denses = (layer.query_dense, layer.key_dense, layer.value_dense)
            width = denses[0].kernel.shape[0]
            _PACKED[id(layer)] = (
                tf.constant(tf.concat([tf.reshape(d.kernel, (width, -1)) for d in denses], 1)),
                tf.constant(tf.concat([tf.reshape(d.bias, (-1,)) for d in denses], 0)))


def _heads_first_call(self, query, value, attention_mask=None, training=None, **unused):
    """Self-attention with Q/K/V from one packed matmul, split in the [3, B, N, T, D] layout
    (one transpose) and the scores/context einsums in that layout (one transpose back)."""
    import tensorflow as tf
    from keras import ops

    from tfbert.ops import linear_2d, project_heads

    denses = (self.query_dense, self.key_dense, self.value_dense)
    width, heads, head_size = denses[0].kernel.shape
    mask = attention_mask
    if query is value:
        kernel, bias = _PACKED[id(self)]
        batch, length = tf.shape(query)[0], tf.shape(query)[1]
        y = linear_2d(tf.reshape(query, (-1, width)), kernel, bias)  # [B*T, 3ND]
        y = tf.transpose(tf.reshape(y, (batch, length, 3, heads, head_size)), (2, 0, 3, 1, 4))
        q, k, v = tf.split(y, 3, axis=0)
        q, k, v = q[0], k[0], v[0]  # [B, N, T, D]
    else:
        q, k, v = (tf.transpose(project_heads(d, x), (0, 2, 1, 3))
                   for d, x in zip(denses, (query, value, value), strict=True))
    q = q * tf.cast(self.scale, q.dtype)
    scores = tf.einsum("bntd,bnsd->bnts", q, k)
    if mask is not None:
        mask = ops.expand_dims(mask, 1)
        scores = scores + tf.where(tf.cast(mask, tf.bool), 0.0, -1e9)
    probs = tf.nn.softmax(scores, axis=-1)
    context = tf.transpose(tf.einsum("bnts,bnsd->bntd", probs, v), (0, 2, 1, 3))  # [B,T,N,D]
    out_dense = self.output_dense
    batch_shape = tf.shape(context)[:-2]
    out = linear_2d(tf.reshape(context, (-1, heads * head_size)),
                     tf.reshape(out_dense.kernel, (heads * head_size, width)), out_dense.bias)
    return tf.reshape(out, tf.concat([batch_shape, [width]], 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--stock_projections", action="store_true",
                        help="add the forward with the EinsumDense layers' own projections")
    parser.add_argument("--stock_feed_forward", action="store_true",
                        help="add the forward with keras Dense's own FFN path (no fused GELU)")
    parser.add_argument("--full_last_layer", action="store_true",
                        help="add the forward with the last block at every position")
    parser.add_argument("--stock_layer_norm", action="store_true",
                        help="add the forward with keras LayerNormalization's own ops")
    parser.add_argument("--stock_attention_core", action="store_true",
                        help="add the forward with keras's score and context einsums")
    parser.add_argument("--packed_qkv_heads_first", action="store_true",
                        help="add the forward with Q/K/V from one kernel packed outside the "
                             "forward, attention in the [B, N, T, D] layout")
    parser.add_argument("--forms", default="",
                        help="comma-separated tfbert.ops form sets (FORM_SETS names, or a "
                             "--target_cpu kind: its export's set): add the forward traced "
                             "under each, with and without XLA")
    parser.add_argument("--onnx", action="store_true", help="add ONNX Runtime (same weights)")
    parser.add_argument("--results", help="also write the medians, ISA and load to this file")
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
        import tfbert.layers.attention as attention

        own = lambda layer, x: layer(x)  # noqa: E731
        fns["jit_compile=False, stock projections"] = traced_with(
            model, spec, attention, "project_heads", own, patches=[(attention, "merge_heads", own)])
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
    if args.stock_layer_norm:
        import keras

        from tfbert.layers.layer_norm import BertLayerNorm

        def stock(self, inputs, training=None):
            return keras.layers.LayerNormalization.call(self, inputs)

        for jit in (False, True):
            fns[f"jit_compile={jit}, stock LayerNorm"] = traced_with(
                model, spec, BertLayerNorm, "call", stock, jit_compile=jit)
    if args.stock_attention_core:
        from tfbert.layers import BertSelfAttention

        stock_core = without_forms(BertSelfAttention.call, heads_first=False)
        for jit in (False, True):
            fns[f"jit_compile={jit}, stock attention core"] = traced_with(
                model, spec, BertSelfAttention, "call", stock_core, jit_compile=jit)
    if args.packed_qkv_heads_first:
        from tfbert.layers import BertSelfAttention

        _pack_qkv(model)
        fns["jit_compile=False, packed QKV heads-first"] = traced_with(
            model, spec, BertSelfAttention, "call", _heads_first_call)
    for form_set in filter(None, args.forms.split(",")):
        for jit in (False, True):
            fns[f"jit_compile={jit}, forms {form_set}"] = traced_under(
                model, spec, form_set, jit_compile=jit)
    for name, fn in fns.items():
        if "," in name:
            diff = float(tf.reduce_max(tf.abs(fn(x) - plain(x))))
            print(f"{name} vs tfbert's: max abs diff {diff:.2e}")
    calls = {name: (lambda fn=fn: fn(x).numpy()) for name, fn in fns.items()}
    if args.onnx:
        ort = torch_systems(model_dir, workdir, "onnxruntime",
                            float32=True)["onnxruntime (default session)"]
        if isinstance(ort, Exception):
            raise ort
        x_np = make_inputs(args.batch)
        calls["onnxruntime"] = lambda: ort(x_np)
    loads = [load_average()]
    medians = interleaved_medians(calls, args.rounds)
    loads.append(load_average())
    latencies = {name: {"latency_ms": 1e3 * t} for name, t in medians.items()}
    print(json.dumps(latencies, indent=2))
    if args.results:
        from tfbert.fileio import write_json

        write_json(args.results, {"args": vars(args), "isa": isa_record(),
                                  "load_average": loads, "latency": latencies})


if __name__ == "__main__":
    main()
