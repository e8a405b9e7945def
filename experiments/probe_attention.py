"""Self-attention at batch 1 written four ways, timed interleaved on a 12-layer chain of
bert-base-shaped attention sublayers (projections, scores, softmax, context, output projection;
seq 128): where do the [B, T, N, D] <-> [B, N, T, D] transposes go, and what do they cost?
(docs/performance.md, "Attention core".)

- `einsum`: Q/K/V as [T, N*D] matmuls reshaped to [B, T, N, D], the score and context as
  tf.einsum (one `_MklEinsum` op each).
- `heads_first`: tfbert's form (tfbert/ops/attention.py): the same projections, then
  `swap_axes_1_2` (integer-bitcast transposes) into [B, N, T, D] and batch matmuls, the key
  transposed inside the matmul.
- `transposed`: every projection computed transposed, W^T x^T = [N*D, T], which is [N, D, T]
  (heads first) by a free reshape at batch 1: scores = Q^T' K^T (adjoint_a), context^T =
  V^T P^T (adjoint_b), output = (context^T)' W_o (transpose_a). No transposes at batch 1.
- `transposed_x`: as `transposed`, but x is transposed once per layer and the projections are
  plain matmuls with transpose_a on the kernel.

    python -m experiments.probe_attention [--rounds 30] [--batch 1] [--profile] [--swaps]

--swaps first times the transposes alone: 48 swaps of a [B, 128, 12, 64] tensor in one
tf.function (with an elementwise op between them, as in the model), as float32 transposes
(oneDNN's `_MklTranspose`), as transposes of the bits as int32 (TensorFlow's own kernel), for
the swap of axes 1 and 2 and for the key's [0, 2, 3, 1]; the chain without transposes is the
baseline subtracted.
"""

from __future__ import annotations

import argparse

import numpy as np
import tensorflow as tf

from bench.common import interleaved_medians, op_times
from tfbert.ops import swap_axes_1_2

H, N, T, LAYERS = 768, 12, 128, 12
D = H // N
BATCH = 1  # set from --batch


def weights(seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    layers = []
    for _ in range(LAYERS):
        layer = {}
        for name in ("q", "k", "v", "o"):
            layer[name] = tf.Variable(rng.normal(0, 0.02, (H, H)).astype("float32"))
            layer["b" + name] = tf.Variable(rng.normal(0, 0.02, (H,)).astype("float32"))
        layers.append(layer)
    return layers


def einsum(x, mask_bias, w, heads_first=False):
    """x [B*T, H]; mask_bias [B, 1, 1, T]."""
    b = tf.shape(x)[0] // T
    def heads(name):
        y = tf.nn.bias_add(tf.matmul(x, w[name]), w["b" + name])
        return tf.reshape(y, tf.stack([b, T, N, D]))
    q, k, v = heads("q"), heads("k"), heads("v")
    if heads_first:
        q, k, v = (swap_axes_1_2(t) for t in (q, k, v))
        scores = tf.matmul(q, k, transpose_b=True) * (D ** -0.5) + mask_bias
        context = swap_axes_1_2(tf.matmul(tf.nn.softmax(scores, axis=-1), v))
    else:
        scores = tf.einsum("aecd,abcd->acbe", k, q * (D ** -0.5)) + mask_bias  # [B, N, T, S]
        context = tf.einsum("acbe,aecd->abcd", tf.nn.softmax(scores, axis=-1), v)
    return tf.nn.bias_add(tf.matmul(tf.reshape(context, (-1, H)), w["o"]), w["bo"])


def transposed(x, mask_bias, w, x_transposed=False):
    """The same attention with every projection transposed: no transposes at batch 1."""
    b = tf.shape(x)[0] // T
    xt = tf.transpose(x) if x_transposed else None
    def heads_t(name):  # [N*D, B*T] -> [B, N, D, T]
        if x_transposed:
            y = tf.matmul(w[name], xt, transpose_a=True)
        else:
            y = tf.matmul(w[name], x, transpose_a=True, transpose_b=True)
        y = y + w["b" + name][:, None]
        y = tf.reshape(y, tf.stack([N, D, b, T]))
        return _heads_first(y, b)
    qt, kt, vt = heads_t("q") * (D ** -0.5), heads_t("k"), heads_t("v")
    scores = tf.matmul(qt, kt, adjoint_a=True) + mask_bias  # [B, N, T, S]
    probs = tf.nn.softmax(scores, axis=-1)
    context_t = tf.matmul(vt, probs, adjoint_b=True)  # [B, N, D, T]
    context_t = tf.reshape(_batch_last(context_t, b), (H, -1))  # [N*D, B*T]
    return tf.nn.bias_add(tf.matmul(context_t, w["o"], transpose_a=True), w["bo"])


def _heads_first(y, b):
    """[N, D, B, T] -> [B, N, D, T]: a reshape at batch 1 (BATCH, fixed per run)."""
    return tf.reshape(y, (1, N, D, T)) if BATCH == 1 else tf.transpose(y, (2, 0, 1, 3))


def _batch_last(y, b):
    """[B, N, D, T] -> [N, D, B, T]."""
    return tf.reshape(y, (N, D, 1, T)) if BATCH == 1 else tf.transpose(y, (1, 2, 0, 3))


def time_swaps(batch: int, rounds: int) -> None:
    """ms per transpose, by form (see --swaps)."""
    x = tf.constant(np.random.default_rng(2).random((batch, T, N, D)).astype("float32"))

    def as_int32(transpose):
        return lambda t: tf.bitcast(transpose(tf.bitcast(t, tf.int32)), tf.float32)

    swap = lambda t: tf.transpose(t, (0, 2, 1, 3))  # noqa: E731
    key = lambda t: tf.transpose(t, (0, 2, 3, 1))  # noqa: E731
    forms = {"none": lambda t: t, "float32 swap": swap, "int32 swap": as_int32(swap),
             "float32 key": key, "int32 key": as_int32(key)}

    def chain(form):
        @tf.function
        def f(t):
            for i in range(48):
                t = tf.reshape(form(t + 1.0 if i % 2 == 0 else t * 1.0001), (batch, T, N, D))
            return t
        return f

    fns = {name: chain(form) for name, form in forms.items()}
    medians = interleaved_medians({n: (lambda f=f: f(x).numpy()) for n, f in fns.items()},
                                  rounds)
    for name, seconds in medians.items():
        if name != "none":
            print(f"{name:<14} {(seconds - medians['none']) / 48 * 1e3:.3f} ms per transpose")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--profile", action="store_true",
                        help="also print each variant's op time by op type (profiler trace)")
    parser.add_argument("--swaps", action="store_true", help="first time the transposes alone")
    args = parser.parse_args()
    if args.swaps:
        time_swaps(args.batch, args.rounds)
    global BATCH
    BATCH = args.batch
    w = weights(0)
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(0, 1, (args.batch * T, H)).astype("float32"))
    mask = np.ones((args.batch, 1, 1, T), "float32")
    mask[:, :, :, T - 20:] = 0
    mask_bias = tf.constant((1 - mask) * -1e9)
    spec = [tf.TensorSpec([None, H], tf.float32), tf.TensorSpec([None, 1, 1, T], tf.float32)]

    def chain(attention):
        @tf.function(input_signature=spec)
        def f(x, mask_bias):
            for layer in w:
                x = x + attention(x, mask_bias, layer)
            return x
        return f

    fns = {"einsum": chain(einsum),
           "heads_first": chain(lambda x, m, w: einsum(x, m, w, heads_first=True)),
           "transposed": chain(transposed),
           "transposed_x": chain(lambda x, m, w: transposed(x, m, w, x_transposed=True))}
    ref = fns["einsum"](x, mask_bias).numpy()
    for name, f in fns.items():
        err = np.abs(f(x, mask_bias).numpy() - ref).max()
        print(f"{name:<14} max |diff| vs einsum {err:.2e}")
    calls = {name: (lambda f=f: f(x, mask_bias).numpy()) for name, f in fns.items()}
    for name, t in interleaved_medians(calls, args.rounds).items():
        print(f"{name:<14} {t * 1e3:8.2f} ms (median of {args.rounds}, batch {args.batch})")
    if args.profile:
        for name, call in calls.items():
            logdir = f"/tmp/tfbert_probe_attention/{name}"
            tf.profiler.experimental.start(logdir)
            for _ in range(5):
                call()
            tf.profiler.experimental.stop()
            top = op_times(logdir).most_common(8)
            print(name, ", ".join(f"{op} {us / 5e3:.1f}" for op, us in top), "(ms/call)")


if __name__ == "__main__":
    main()
