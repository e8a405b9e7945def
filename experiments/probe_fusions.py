"""Which small-graph formulations Grappler's oneDNN remapper fuses on this TensorFlow: four
LayerNorm formulations and a residual add after MatMul + BiasAdd, each printed with the ops the
session actually ran (its optimized partition graph). (docs/performance.md, "LayerNorm form"
and "Matmul kernels at batch 1".)

    python -m experiments.probe_fusions
"""

from __future__ import annotations

import argparse

import numpy as np
import tensorflow as tf

H = 768


def layer_norms(x, gamma, beta) -> dict:
    """LayerNorm over the last axis of x [rows, H], written four ways."""
    def fused_batch_norm(x):  # tf.keras 2's form (what tfbert's BertLayerNorm emits)
        rows = tf.shape(x)[0]
        y = tf.raw_ops.FusedBatchNormV3(
            x=tf.reshape(x, tf.stack([1, rows, H, 1])), scale=tf.ones(tf.stack([rows])),
            offset=tf.zeros(tf.stack([rows])), mean=tf.constant([], tf.float32),
            variance=tf.constant([], tf.float32), epsilon=1e-12, data_format="NCHW",
            is_training=True)[0]
        return tf.reshape(y, tf.shape(x)) * gamma + beta

    def square_of_sub(x):  # the remapper's second pattern, one shared `x - mean`
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        sub = x - mean
        var = tf.reduce_mean(tf.square(sub), axis=-1, keepdims=True)
        return beta + sub * (tf.math.rsqrt(var + 1e-12) * gamma)

    def squared_difference(x):
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        var = tf.reduce_mean(tf.math.squared_difference(x, mean), axis=-1, keepdims=True)
        return beta + (x - mean) * (tf.math.rsqrt(var + 1e-12) * gamma)

    def moments(x):  # keras 3's LayerNormalization under TensorFlow
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        inv = tf.math.rsqrt(var + 1e-12) * gamma
        return x * inv + (beta - mean * inv)

    return {f.__name__: f(x) for f in (fused_batch_norm, square_of_sub, squared_difference,
                                       moments)}


def ops_run(build) -> list[str]:
    """Op types of the partition graph a session runs for `build(h, x, gamma, beta, bias)`, h =
    x @ kernel (x [rows, H] fed at run time)."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, H])
        rng = np.random.default_rng(0)
        gamma, beta, bias = (tf.Variable(rng.normal(size=H).astype("float32")) for _ in "gbb")
        kernel = tf.Variable(rng.normal(size=(H, H)).astype("float32"))
        y = tf.matmul(build(tf.matmul(x, kernel), x, gamma, beta, bias), kernel)
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            metadata = tf.compat.v1.RunMetadata()
            session.run(y, {x: np.ones((128, H), "float32")}, run_metadata=metadata,
                        options=tf.compat.v1.RunOptions(output_partition_graphs=True))
    skip = {"Const", "_Arg", "_Retval", "VarHandleOp", "ReadVariableOp", "Identity"}
    return sorted({n.op + (f"[{'+'.join(a.decode() for a in n.attr['fused_ops'].list.s)}]"
                           if "fused_ops" in n.attr else "")
                   for g in metadata.partition_graphs for n in g.node if n.op not in skip})


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    for name in ("fused_batch_norm", "square_of_sub", "squared_difference", "moments"):
        ops = ops_run(lambda h, x, g, b, bias, name=name: layer_norms(h, g, b)[name])
        print(f"LayerNorm as {name:20s} fused: {'_MklLayerNorm' in ops!s:5s} ops: {ops}")
    for name, build in {
        "bias_add(matmul) + residual": lambda h, x, g, b, bias: tf.nn.bias_add(h, bias) + x,
        "residual + bias_add(matmul)": lambda h, x, g, b, bias: x + tf.nn.bias_add(h, bias),
    }.items():
        print(f"{name:33s} ops: {ops_run(build)}")


if __name__ == "__main__":
    main()
