"""BERT pretraining step on one GPU: tfbert under Keras's JAX backend against PyTorch transformers.

The GPU machines here have JAX and PyTorch but no TensorFlow, so this runs tfbert's model code
(Keras layers + keras.ops only) under KERAS_BACKEND=jax on synthetic batches: bfloat16 mixed
precision, XLA-compiled train step (Keras's JAX trainer: one jitted step, state donated). The peer
in the same run is `transformers.BertForPreTraining` on the same GPU, as its users run it: bfloat16
autocast, fused AdamW, PyTorch's SDPA attention; eager, and `torch.compile`d.

Each run happens in its own subprocess (its own GPU memory, and a failure stays that run's); the
results are written after every run to `--out`/gpu_pretrain.json, and a table is printed last.
Reported: step time (median of `--steps` timed steps after 3 warm-up steps), sequences/s, model
TFLOP/s (the full model's matmul FLOPs, comparable across systems) and MFU against the dense bf16
matmul rate measured at the start of the same run (random operands, median of 10 products). MFU
counts the FLOPs each system executes: tfbert's pretrainer runs the last block only at [CLS] and
the masked positions; transformers runs it, and the vocabulary projection, at every position.

Reference point: NVIDIA's published TF2 BERT-large figure (A100 80GB, seq 128, mixed precision)
is about 486 sequences/s per GPU; the table gives the MFU that implies against the A100's
312 TFLOP/s dense bf16 datasheet rate.

    python bench/gpu_pretrain.py --out results/           # the GPU run (defaults below)
    python bench/gpu_pretrain.py --tiny                   # a CPU check of the same code paths

It imports `bench.common` and `bench.bench_pretrain`'s batch maker (standard library and numpy)
and tfbert's model code from the repository it sits in (tfbert need not be installed);
`python -m bench.gpu_pretrain` from the repository root runs the same.

On a machine without Keras (e.g. a JAX-only GPU box), bring the keras wheel and its small pure
dependencies (keras, namex, optree; ml_dtypes, h5py, rich, absl-py where missing) as wheels,
install them with `pip install --no-index --no-deps --target /tmp/site WHEELS` and set
PYTHONPATH=/tmp/site. tfbert's model code needs nothing else: `tfbert.config`, `tfbert.layers`
and `tfbert.models` import only keras.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

# `python bench/gpu_pretrain.py` puts bench/ first on the path: the repository root imports
# `bench` and `tfbert` as `python -m bench.gpu_pretrain` does
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import bert_forward_flops, run_module  # noqa: E402  (TensorFlow-free)

NVIDIA_A100_BERT_LARGE_SEQ_S = 486.0  # TF2, seq 128, AMP, per GPU (NVIDIA's published table)
A100_BF16_TFLOPS = 312.0  # datasheet dense bf16
DEFAULT_RUNS = ("tfbert:bert-base-uncased:256,pytorch:bert-base-uncased:256,"
                "tfbert:bert-large-uncased:128,pytorch:bert-large-uncased:128,"
                "pytorch-compile:bert-base-uncased:256")
TINY_RUNS = "tfbert:tiny:8,pytorch:tiny:8"


def bf16_matmul_peak(n: int = 8192, reps: int = 10) -> float:
    """Dense bf16 matmul FLOP/s of the default JAX device: median of `reps` products of random
    operands after warm-up (zeros or ones run faster than real data on some GPUs)."""
    import statistics

    import jax
    import jax.numpy as jnp

    ka, kb = jax.random.split(jax.random.PRNGKey(0))
    a = jax.random.normal(ka, (n, n), jnp.bfloat16)
    b = jax.random.normal(kb, (n, n), jnp.bfloat16)
    f = jax.jit(lambda x, y: x @ y)
    for _ in range(3):
        f(a, b).block_until_ready()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        f(a, b).block_until_ready()
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times)


def shape_of(preset: str) -> dict:
    """The model shape of a BertConfig preset (or the tiny CPU check's shape)."""
    if preset == "tiny":
        return dict(hidden=64, layers=2, heads=2, intermediate=128, vocab=1000)
    from tfbert.config import BertConfig

    c = BertConfig.from_preset(preset)
    return dict(hidden=c.hidden_size, layers=c.num_hidden_layers,
                heads=c.num_attention_heads, intermediate=c.intermediate_size,
                vocab=c.vocab_size)


def time_tfbert(shape: dict, batch: dict, steps: int) -> tuple[list[float], float, dict]:
    """Seconds per step of tfbert's BertPretrainer (Keras JAX backend, mixed_bfloat16)."""
    os.environ["KERAS_BACKEND"] = "jax"
    import jax
    import keras

    from tfbert.config import BertConfig
    from tfbert.models.encoder import BertEncoder
    from tfbert.models.pretrainer import BertPretrainer

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    config = BertConfig(vocab_size=shape["vocab"], hidden_size=shape["hidden"],
                        num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
                        intermediate_size=shape["intermediate"], hidden_act="gelu")
    model = BertPretrainer(BertEncoder(config))
    model.compile(optimizer=keras.optimizers.AdamW(1e-4, epsilon=1e-6, global_clipnorm=1.0),
                  jit_compile=True)
    batch = jax.device_put(batch)  # on the device once, as a prefetching input pipeline would
    start = time.perf_counter()
    logs = model.train_on_batch(batch, return_dict=True)
    compile_s = time.perf_counter() - start
    for _ in range(2):
        logs = model.train_on_batch(batch, return_dict=True)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        logs = model.train_on_batch(batch, return_dict=True)  # returns host floats: synced
        times.append(time.perf_counter() - start)
    return times, float(logs["loss"]), {"compile_s": compile_s,
                                        "device": str(jax.devices()[0])}


def time_pytorch(shape: dict, batch: dict, steps: int, compile: bool
                 ) -> tuple[list[float], float, dict]:
    """Seconds per step of transformers' BertForPreTraining: bf16 autocast, fused AdamW."""
    import numpy as np
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=shape["vocab"], hidden_size=shape["hidden"],
        num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
        intermediate_size=shape["intermediate"], hidden_act="gelu")
    model = transformers.BertForPreTraining(config).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, fused=cuda)
    labels = np.full(batch["input_ids"].shape, -100, "int64")
    np.put_along_axis(labels, batch["masked_lm_positions"], batch["masked_lm_ids"], axis=1)
    inputs = {
        "input_ids": batch["input_ids"].astype("int64"),
        "attention_mask": batch["input_mask"].astype("int64"),
        "token_type_ids": batch["segment_ids"].astype("int64"),
        "labels": labels,
        "next_sentence_label": batch["next_sentence_labels"][:, 0].astype("int64"),
    }
    inputs = {k: torch.from_numpy(v).to(device) for k, v in inputs.items()}
    forward = torch.compile(model) if compile else model

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = forward(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return float(loss)  # a host read: synced

    start = time.perf_counter()
    loss = step()
    compile_s = time.perf_counter() - start
    for _ in range(2):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - start)
    return times, loss, {"compile_s": compile_s, "attention": model.config._attn_implementation,
                         "device": torch.cuda.get_device_name() if cuda else "cpu"}


def run_one(spec: str, seq: int, predictions: int, steps: int, peak: float) -> dict:
    """One `system:preset:batch` run, in this process."""
    from bench.bench_pretrain import synthetic_batch  # numpy only

    system, preset, batch_size = spec.split(":")
    batch_size = int(batch_size)
    shape = shape_of(preset)
    batch = synthetic_batch(0, seq, batch_size, predictions, shape["vocab"])
    if system == "tfbert":
        times, loss, extra = time_tfbert(shape, batch, steps)
    elif system in ("pytorch", "pytorch-compile"):
        times, loss, extra = time_pytorch(shape, batch, steps, system == "pytorch-compile")
    else:
        raise ValueError(f"unknown system {system!r} in run {spec!r}")
    times.sort()
    step = times[len(times) // 2]
    dims = (shape["hidden"], shape["layers"], shape["intermediate"], shape["vocab"], seq)
    full = 3 * bert_forward_flops(*dims, predictions)  # the model's count, for every system
    if system == "tfbert":  # last block only at [CLS] and the masked positions
        executed = 3 * bert_forward_flops(*dims, predictions, last_layer_rows=1 + predictions)
    else:  # transformers projects every position onto the vocabulary
        executed = 3 * bert_forward_flops(*dims, seq)
    seq_s = batch_size / step
    return {"system": system, "preset": preset, "batch": batch_size, "seq": seq,
            "predictions": predictions, "precision": "bfloat16 mixed", "step_ms": 1e3 * step,
            "step_ms_min": 1e3 * times[0], "step_ms_max": 1e3 * times[-1],
            "sequences_per_s": seq_s, "model_tflops": seq_s * full / 1e12,
            "mfu": seq_s * executed / peak, "loss": loss, **extra}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default=None,
                        help="comma-separated system:preset:batch (systems: tfbert, pytorch, "
                             f"pytorch-compile); default {DEFAULT_RUNS}")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--predictions", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", default=None, help="folder for gpu_pretrain.json")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per run")
    parser.add_argument("--tiny", action="store_true",
                        help="tiny model on CPU: checks the code paths")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # (internal) a run, JSON to stdout
    parser.add_argument("--peak", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tiny:
        args.runs, args.seq, args.predictions, args.steps = args.runs or TINY_RUNS, 32, 5, 3
    args.runs = args.runs or DEFAULT_RUNS
    if args.one:
        result = run_one(args.one, args.seq, args.predictions, args.steps, args.peak)
        print("RESULT " + json.dumps(result), flush=True)
        return

    os.environ["KERAS_BACKEND"] = "jax"
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # runs are subprocesses; free at exit
    import jax

    peak = bf16_matmul_peak(256, 3) if args.tiny else bf16_matmul_peak()
    results = {"device": str(jax.devices()[0]), "jax": jax.__version__,
               "bf16_matmul_peak_tflops": peak / 1e12, "runs": []}
    print(f"bf16 matmul: {peak / 1e12:.1f} TFLOP/s on {results['device']}", flush=True)
    for spec in args.runs.split(","):
        one = ["--one", spec, "--peak", str(peak), "--seq", str(args.seq),
               "--predictions", str(args.predictions), "--steps", str(args.steps)]
        start = time.perf_counter()
        try:
            done = run_module("bench.gpu_pretrain", one, capture_output=True, text=True,
                              timeout=args.timeout)
            lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
            if lines:
                result = json.loads(lines[-1][len("RESULT "):])
            else:
                result = {"run": spec, "error": (done.stderr or done.stdout)[-3000:]}
        except subprocess.TimeoutExpired:
            result = {"run": spec, "error": f"timed out after {args.timeout:.0f} s"}
        result["wall_s"] = time.perf_counter() - start
        results["runs"].append(result)
        print(json.dumps(result), flush=True)
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "gpu_pretrain.json"), "w") as f:
                json.dump(results, f, indent=2)
    print_table(results, args.seq, args.predictions)


def print_table(results: dict, seq: int, predictions: int) -> None:
    print(f"\n{results['device']}: bf16 matmul {results['bf16_matmul_peak_tflops']:.0f} TFLOP/s"
          f" (measured); seq {seq}, {predictions} masked positions, bfloat16 mixed precision")
    print(f"{'system':<16} {'preset':<20} {'batch':>5} {'step ms':>8} {'seq/s':>8} "
          f"{'TFLOP/s':>8} {'MFU':>6} {'compile s':>9}")
    for r in results["runs"]:
        if "error" in r:
            print(f"{r['run']:<44} ERROR {r['error'].splitlines()[-1] if r['error'] else ''}")
            continue
        print(f"{r['system']:<16} {r['preset']:<20} {r['batch']:>5} {r['step_ms']:>8.1f} "
              f"{r['sequences_per_s']:>8.0f} {r['model_tflops']:>8.0f} {r['mfu']:>6.1%} "
              f"{r['compile_s']:>9.0f}")
    large = shape_of("bert-large-uncased")
    flops = 3 * bert_forward_flops(large["hidden"], large["layers"], large["intermediate"],
                                   large["vocab"], 128, 20)
    print(f"reference: NVIDIA TF2 BERT-large, A100 80GB: {NVIDIA_A100_BERT_LARGE_SEQ_S:.0f} seq/s"
          f" = {NVIDIA_A100_BERT_LARGE_SEQ_S * flops / 1e12:.0f} model TFLOP/s, "
          f"{NVIDIA_A100_BERT_LARGE_SEQ_S * flops / (A100_BF16_TFLOPS * 1e12):.0%} of the A100's "
          f"{A100_BF16_TFLOPS:.0f} TFLOP/s datasheet bf16 rate")


if __name__ == "__main__":
    main()
