"""BERT pretraining step on one GPU under Keras's JAX backend (no TensorFlow needed).

The GPU machines here have JAX and PyTorch but no TensorFlow, so this runs tfbert's model code
(Keras layers + keras.ops only) under KERAS_BACKEND=jax on synthetic batches: bfloat16 mixed
precision, XLA-compiled train step. Reports sequences/s and MFU against the GPU's measured dense
bf16 matmul rate (measured in the same run).

Reference point: NVIDIA's published TF2 BERT-large figure (A100 80GB, seq 128, mixed precision)
is about 486 sequences/s per GPU.

    python bench/gpu_pretrain.py --preset bert-base-uncased --batch 256
    python bench/gpu_pretrain.py --tiny          # a CPU sanity run of the same code path

On a machine without Keras (e.g. a JAX-only GPU box), bring the keras wheel and its small pure
dependencies (keras, namex, optree, ml_dtypes, h5py, rich, absl-py) as wheels, install them with
`pip install --no-index --no-deps --target /tmp/site WHEELS` and set PYTHONPATH=/tmp/site.
tfbert's model code needs nothing else: `tfbert.config`, `tfbert.layers` and `tfbert.models`
import only keras.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ["KERAS_BACKEND"] = "jax"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def bf16_matmul_peak(n: int = 8192, reps: int = 10) -> float:
    """Dense bf16 matmul FLOP/s of the default JAX device (best of `reps`)."""
    import jax
    import jax.numpy as jnp

    a = jnp.ones((n, n), jnp.bfloat16)
    b = jnp.ones((n, n), jnp.bfloat16)
    f = jax.jit(lambda x, y: x @ y)
    f(a, b).block_until_ready()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        f(a, b).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="bert-base-uncased")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--predictions", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tiny", action="store_true",
                        help="tiny model on CPU: checks the code path")
    args = parser.parse_args()

    import jax
    import keras
    from bench_pretrain import synthetic_batch
    from common import bert_forward_flops

    from tfbert.config import BertConfig
    from tfbert.models.encoder import BertEncoder
    from tfbert.models.pretrainer import BertPretrainer

    if args.tiny:
        config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                            num_attention_heads=2, intermediate_size=128, hidden_act="gelu_tanh")
        args.batch, args.seq, args.predictions, args.steps = 8, 32, 5, 3
        peak = bf16_matmul_peak(n=256, reps=3)
    else:
        config = BertConfig.from_preset(args.preset)
        peak = bf16_matmul_peak()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    precision = "mixed_bfloat16"

    model = BertPretrainer(BertEncoder(config))
    model.compile(optimizer=keras.optimizers.AdamW(1e-4, epsilon=1e-6, global_clipnorm=1.0),
                  jit_compile=True)
    batch = synthetic_batch(0, args.seq, args.batch, args.predictions, config.vocab_size)
    for _ in range(3):  # compile + warm-up
        logs = model.train_on_batch(batch, return_dict=True)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        logs = model.train_on_batch(batch, return_dict=True)  # returns host floats: synced
        times.append(time.perf_counter() - start)
    times.sort()
    step = times[len(times) // 2]
    shape = (config.hidden_size, config.num_hidden_layers, config.intermediate_size,
             config.vocab_size, args.seq, args.predictions)
    flops = 3 * bert_forward_flops(*shape)  # the full model: comparable with other BERTs
    # MFU counts what runs: the pretrainer's last block only at [CLS] and the masked positions.
    executed = 3 * bert_forward_flops(*shape, last_layer_rows=1 + args.predictions)
    seq_s = args.batch / step
    result = {"device": str(jax.devices()[0]), "preset": "tiny" if args.tiny else args.preset,
              "precision": precision, "batch": args.batch, "seq": args.seq,
              "step_ms": 1e3 * step, "sequences_per_s": seq_s,
              "model_tflops": seq_s * flops / 1e12,
              "bf16_matmul_peak_tflops": peak / 1e12, "mfu": seq_s * executed / peak,
              "loss": float(logs["loss"])}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
