"""Two-stream ("tensor-parallel") encoder forward on CPU: does splitting every block's work into
independent halves that TensorFlow's inter-op threads run side by side, each on one intra-op
thread, beat the default graph whose oneDNN matmuls split each GEMM over the intra-op pool?

The split is Megatron's: per block, stream s owns heads [s*N/S, (s+1)*N/S) and feed-forward
columns [s*I/S, (s+1)*I/S); it computes its heads' Q/K/V (one [H, 3H/S] matmul), their
attention, and its partial output projection [T, H/S] x [H/S, H]; the partials are summed
(+ bias + residual) before each LayerNorm, the two joins per block. (docs/performance.md,
"cpu_streams for batch-1 serving".)

    python -m experiments.probe_streams [--rounds 2] [--reps 15] [--batch 1] [--tokens 128]
                                  [--streams 2] [--settings default,intra1_inter2,...]

Each setting runs in its own child process (thread pools are process-wide); within a child the
variants are timed round-robin. The 12-layer bert-base-chinese encoder stack, float32,
all layers at every position. `model`: tfbert's layers as a tf.function (the library's graph);
`streams=1`: the hand-written forward below unsplit (the control: the same math as `model`);
`streams=S`: split in S; `library streams=S`: tfbert's streamed form of the blocks
(tfbert/export/streams.py: separate Q, K and V kernels per stream, where `streams=S` packs them
into one). Outputs are checked against `model` (max abs difference printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

from bench.common import child_rounds, interleaved_medians

SETTINGS = {
    "default": {},
    "intra1_inter2": {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2"},
    # the same with oneDNN's weight prepacking (one shape per process here, where it is safe)
    "intra1_inter2_frozen": {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2",
                             "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS": "1"},
}


def split_weights(layer, streams: int) -> list[dict]:
    """One block's weights cut into `streams` parts: per stream the packed Q|K|V kernel
    [H, 3H/S] and bias, its rows of the output projection [H/S, H], its feed-forward columns
    [H, I/S] and bias, and its rows of the feed-forward output [I/S, H]. Variables, as a
    SavedModel holds them."""
    import numpy as np
    import tensorflow as tf

    att = layer.attention
    width, heads, size = att.query_dense.kernel.shape
    per = heads // streams
    inter = layer.intermediate_dense.kernel.shape[1] // streams
    q, k, v = (np.asarray(d.kernel) for d in (att.query_dense, att.key_dense, att.value_dense))
    qb, kb, vb = (np.asarray(d.bias) for d in (att.query_dense, att.key_dense, att.value_dense))
    wo = np.asarray(att.output_dense.kernel).reshape(heads * size, width)
    wi, bi = np.asarray(layer.intermediate_dense.kernel), np.asarray(layer.intermediate_dense.bias)
    w2 = np.asarray(layer.output_dense.kernel)
    parts = []
    for s in range(streams):
        h = slice(s * per, (s + 1) * per)
        c = slice(s * inter, (s + 1) * inter)
        parts.append({
            "qkv": tf.Variable(np.concatenate([t[:, h].reshape(width, -1) for t in (q, k, v)], 1)),
            "qkv_bias": tf.Variable(np.concatenate([t[h].reshape(-1) for t in (qb, kb, vb)])),
            "out": tf.Variable(wo[s * per * size:(s + 1) * per * size]),
            "inter": tf.Variable(wi[:, c]), "inter_bias": tf.Variable(bi[c]),
            "ffn_out": tf.Variable(w2[c]),
        })
    return parts


def stream_forward(layers, streams: int):
    """A tf.function x [B, T, H], mask bias [B, 1, 1, T] -> [B, T, H] through `layers` with
    each block split in `streams` (module docstring)."""
    import tensorflow as tf

    from tfbert.ops import swap_axes_1_2

    weights = [split_weights(layer, streams) for layer in layers]
    heads = layers[0].attention.num_heads // streams
    size = layers[0].attention._key_dim

    def block(layer, parts, x, bias):  # x [B*T, H]
        batch, length = tf.shape(bias)[0], tf.shape(bias)[3]
        partials = []
        for p in parts:
            qkv = tf.nn.bias_add(tf.matmul(x, p["qkv"]), p["qkv_bias"])  # [B*T, 3hD]
            q, k, v = (swap_axes_1_2(tf.reshape(t, (batch, length, heads, size)))
                       for t in tf.split(qkv, 3, axis=1))  # [B, h, T, D]
            scores = tf.matmul(q, k, transpose_b=True) * (size ** -0.5) + bias
            context = swap_axes_1_2(tf.matmul(tf.nn.softmax(scores), v))  # [B, T, h, D]
            partials.append(tf.matmul(tf.reshape(context, (-1, heads * size)), p["out"]))
        x = layer.attention_layer_norm(
            tf.nn.bias_add(tf.add_n(partials), layer.attention.output_dense.bias) + x)
        partials = []
        for p in parts:
            h = layer.intermediate_dense.activation(
                tf.nn.bias_add(tf.matmul(x, p["inter"]), p["inter_bias"]))
            partials.append(tf.matmul(h, p["ffn_out"]))
        return layer.output_layer_norm(
            tf.nn.bias_add(tf.add_n(partials), layer.output_dense.bias) + x)

    @tf.function
    def forward(x, bias):
        shape = tf.shape(x)
        h = tf.reshape(x, (-1, x.shape[-1]))
        for layer, parts in zip(layers, weights, strict=True):
            h = block(layer, parts, h, bias)
        return tf.reshape(h, shape)

    return forward


def child(model_dir: str, reps: int, batch: int, tokens: int,
          variants: list[str]) -> dict[str, float]:
    """Median ms per forward of each variant in this process; max abs difference to `model`."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import numpy as np
    import tensorflow as tf

    import tfbert.checkpoints

    model = tfbert.checkpoints.load_model(model_dir)
    layers = model.encoder.transformer_layers
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(batch, tokens, layers[0].hidden_size)).astype("float32"))
    bias = tf.zeros((batch, 1, 1, tokens))
    mask = tf.ones((batch, 1, tokens), tf.bool)

    @tf.function
    def library(x):
        for layer in layers:
            x = layer(x, attention_mask=mask, training=False)
        return x

    fns = {"model": lambda: library(x)}
    for name in variants:
        if name.startswith("streams="):
            fn = stream_forward(layers, int(name.split("=")[1]))
            fns[name] = lambda fn=fn: fn(x, bias)
        if name.startswith("library streams="):  # tfbert/export/streams.py, as exported
            from tfbert.export.streams import split_streams, streamed

            blocks = split_streams(model, int(name.split("=")[1]))
            fn = tf.function(lambda x: library.python_function(x))
            with streamed(blocks):
                fn.get_concrete_function(x)  # traced with the streamed blocks
            fns[name] = lambda fn=fn: fn(x)
    reference = fns["model"]().numpy()
    out = {f"{name} max|diff|": float(np.abs(fn().numpy() - reference).max())
           for name, fn in fns.items() if name != "model"}
    calls = {name: (lambda fn=fn: fn().numpy()) for name, fn in fns.items()}
    out.update({name: 1e3 * s for name, s in interleaved_medians(calls, reps).items()})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--streams", default="2", help="comma-separated stream counts")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--child", help=argparse.SUPPRESS)  # (internal) a model dir
    parser.add_argument("--variants", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.reps, args.batch, args.tokens,
                               args.variants.split(","))))
        return
    unknown = sorted(set(args.settings.split(",")) - set(SETTINGS))
    if unknown:
        parser.error(f"unknown settings {unknown}; choose from {sorted(SETTINGS)}")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    from bench.bench_inference import build_tfbert

    model_dir = build_tfbert(tempfile.mkdtemp())
    variants = ",".join([f"streams={s}" for s in ["1", *args.streams.split(",")]]
                        + [f"library streams={s}" for s in args.streams.split(",")])
    times: dict[str, list[float]] = {}
    child_args = ["--child", model_dir, "--reps", str(args.reps), "--batch", str(args.batch),
                  "--tokens", str(args.tokens), "--variants", variants]
    settings = [(name, SETTINGS[name], []) for name in args.settings.split(",")]
    for setting, out in child_rounds("experiments.probe_streams", child_args, settings,
                                     args.rounds):
        if isinstance(out, str):  # the child failed: its stderr
            sys.exit(f"{setting}: {out[-2000:]}")
        for name, value in out.items():
            times.setdefault(f"{setting}: {name}", []).append(value)
    for name, values in times.items():
        unit = "" if "diff" in name else " ms"
        print(f"{name:40s} {statistics.median(values):10.4g}{unit}  "
              f"({', '.join(f'{v:.4g}' for v in values)})")


if __name__ == "__main__":
    main()
