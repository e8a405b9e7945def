"""The matmul rate TensorFlow reaches at batch 1 (M = 128 rows), next to PyTorch, on a chain of
the bert-base matmul shapes (per layer: four [128, 768] x [768, 768], then 768 -> 3072 -> 768;
four layers' worth, each output feeding the next, as in the model). (docs/performance.md,
"Matmul kernels at batch 1".)

    python -m experiments.probe_matmul [--intra_op N] [--inter_op N] [--rounds 30]
        [--variants biasadd,nobias,bias_after_reshape,constants,conv1x1,batch_matmul,
                    batch_matmul_nobias,split_halves,torch]

Variants (timed round-robin in one process, medians): `biasadd` MatMul + BiasAdd (what tfbert's
layers run; Grappler fuses them), `nobias` MatMul alone, `bias_after_reshape` MatMul, then the
bias as a separate add (unfused), `batch_matmul`/`batch_matmul_nobias` BatchMatMulV2 on
[1, M, K] (oneDNN's matmul primitive), `constants` the weights as graph constants (with
`TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1` in the environment oneDNN then prepacks them), `conv1x1`
each matmul as a 1x1 Conv2D, `split_halves` each matmul as two matmuls on pre-split column
halves (independent ops the inter-op pool can run side by side; try with `--intra_op 1
--inter_op 2`), `torch` PyTorch `addmm` with torch.set_num_threads(--intra_op or the core
count), timed in a child process (TensorFlow's spinning pool threads would take its cores).
`ONEDNN_VERBOSE=1` shows which oneDNN kernel each variant gets.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from bench.common import interleaved_medians, run_module

M, K = int(os.environ.get("PROBE_ROWS", 128)), 768  # PROBE_ROWS: rows (batch x tokens)
SHAPES = ([(768, 768)] * 4 + [(768, 3072), (3072, 768)]) * 4


def tf_chains(variants: list[str]) -> dict:
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    kernels = [(rng.normal(size=s) * 0.02).astype("float32") for s in SHAPES]
    biases = [np.zeros(s[1], "float32") for s in SHAPES]
    ws, bs = [tf.Variable(k) for k in kernels], [tf.Variable(b) for b in biases]
    x = tf.constant(rng.normal(size=(M, K)).astype("float32"))

    def chain(step):
        return tf.function(lambda h: _fold(step, h))

    def _fold(step, h):
        for i in range(len(SHAPES)):
            h = step(i, h)
        return h

    consts = [(tf.constant(k), tf.constant(b)) for k, b in zip(kernels, biases, strict=True)]
    halves = [[(tf.Variable(k[:, j * (k.shape[1] // 2):(j + 1) * (k.shape[1] // 2)]),
                tf.Variable(b[j * (k.shape[1] // 2):(j + 1) * (k.shape[1] // 2)]))
               for j in range(2)] for k, b in zip(kernels, biases, strict=True)]
    steps = {
        "biasadd": lambda i, h: tf.nn.bias_add(tf.matmul(h, ws[i]), bs[i]),
        "nobias": lambda i, h: tf.matmul(h, ws[i]),
        "constants": lambda i, h: tf.nn.bias_add(tf.matmul(h, consts[i][0]), consts[i][1]),
        "conv1x1": lambda i, h: tf.reshape(tf.nn.bias_add(tf.nn.conv2d(
            tf.reshape(h, (1, 1, M, -1)), tf.reshape(ws[i], (1, 1, *SHAPES[i])), 1, "VALID"),
            bs[i]), (M, -1)),
        # the bias added after a reshape to [1, M, N], which Grappler's remapper does not fold
        # into the matmul (a plain `+ bias`, even of a [1, N] row, it does): the matmul runs as
        # oneDNN's sgemm (`gemm_api`, as `nobias`) instead of the fused `inner_product`
        "bias_after_reshape": lambda i, h: tf.reshape(
            tf.reshape(tf.matmul(h, ws[i]), (1, M, -1)) + bs[i], (M, -1)),
        # BatchMatMulV2 on [1, M, K] x [K, N] (oneDNN's matmul primitive, not inner_product)
        "batch_matmul": lambda i, h: tf.reshape(tf.matmul(h[None], ws[i]) + bs[i], (M, -1)),
        "batch_matmul_nobias": lambda i, h: tf.reshape(tf.matmul(h[None], ws[i]), (M, -1)),
        "split_halves": lambda i, h: tf.concat(
            [tf.nn.bias_add(tf.matmul(h, w), b) for w, b in halves[i]], 1),
    }
    fns = {v: chain(steps[v]) for v in variants if v in steps}
    return {v: (lambda fn=fn: fn(x).numpy()) for v, fn in fns.items()}


def torch_chain(threads: int):
    import torch

    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    ws = [torch.randn(*s, generator=gen) * 0.02 for s in SHAPES]
    bs = [torch.zeros(s[1]) for s in SHAPES]
    x = torch.randn(M, K, generator=gen)

    def run():
        with torch.inference_mode():
            h = x
            for w, b in zip(ws, bs, strict=True):
                h = torch.addmm(b, h, w)
        return h

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intra_op", type=int, default=0, help="0: TensorFlow's default")
    parser.add_argument("--inter_op", type=int, default=0, help="0: TensorFlow's default")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--variants", default="biasadd,nobias,constants,conv1x1,split_halves,"
                                              "torch")
    args = parser.parse_args()
    variants = args.variants.split(",")
    flops = sum(2 * M * k * n for k, n in SHAPES)
    if variants == ["torch"]:
        seconds = interleaved_medians({"torch addmm": torch_chain(args.intra_op or
                                                                  os.cpu_count())}, args.rounds)
        _report(seconds, flops)
        return
    import tensorflow as tf

    if args.intra_op:
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op)
    if args.inter_op:
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op)
    start = time.perf_counter()
    medians = interleaved_medians(tf_chains(variants), args.rounds)
    print(f"chain of {len(SHAPES)} matmuls, {flops / 1e9:.2f} GFLOP, intra_op "
          f"{args.intra_op or 'default'}, inter_op {args.inter_op or 'default'}, "
          f"{time.perf_counter() - start:.0f} s")
    _report(medians, flops)
    if "torch" in variants:
        sys.stdout.flush()
        run_module("experiments.probe_matmul", ["--variants", "torch", "--rounds",
                                                  str(args.rounds), "--intra_op",
                                                  str(args.intra_op)], check=True)


def _report(medians: dict[str, float], flops: float) -> None:
    for name, seconds in medians.items():
        print(f"{name:14s} {1e3 * seconds:8.2f} ms  {flops / seconds / 1e9:6.1f} GFLOP/s")


if __name__ == "__main__":
    main()
