"""Pretraining step: tfbert BertPretrainer vs keras-hub BertMaskedLM vs transformers (PyTorch).

Same config, batch, sequence length and masked positions; float32; each system set up as its
users run it: tfbert with `BertPretrainer.compile()`'s default jit_compile="auto" (on a
CPU-only TensorFlow XLA on for float32 and off for mixed precision; on with an accelerator) and
tfbert's AdamW (Keras AdamW's update in one fused pass, LayerNorm and biases excluded from
weight decay as in BERT); keras-hub on the TensorFlow backend with jit_compile=True and
keras.optimizers.AdamW; PyTorch eager on CPU with torch.optim.AdamW; all at learning rate 1e-4
with each library's default weight decay. keras-hub without XLA and tfbert with
jit_compile=False are reported too, so the effect of the XLA setting is visible
(docs/performance.md, "XLA on CPU"). Reports sequences/s, model FLOP/s (the full model's matmul
FLOPs, the same count for every system) and MFU (the FLOPs each system executes: tfbert's
pretrainer skips the last block's rows no head reads) against the machine's measured float32
matmul peak.

`--bfloat16` adds the same three systems in bfloat16 mixed precision, as their users turn it on
(tfbert and keras-hub: the `mixed_bfloat16` Keras policy; PyTorch: `torch.autocast("cpu",
torch.bfloat16)`), for CPUs with AMX/AVX512-BF16; their MFU is against the measured bfloat16
matmul peak, and they are compared with each other only.

The result records the host's instruction sets and the load average before and after the
timed rounds. `--emulate_avx2` runs the TensorFlow systems as on an AVX2-only host
(bench.common.emulate_avx2; not with --bfloat16).

    python -m bench.bench_pretrain [--quick] [--bfloat16] [--emulate_avx2] [--results FILE]
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402

from bench.common import (  # noqa: E402
    bert_forward_flops,
    isa_record,
    load_average,
    matmul_peak_flops,
    matmul_peak_probe,
    run_module,
)

SHAPE = dict(layers=4, hidden=512, heads=8, intermediate=2048, vocab=21128)
SEQ, BATCH, PREDICTIONS = 128, 16, 20


def synthetic_batch(seed: int = 0, seq: int = SEQ, batch: int = BATCH,
                    predictions: int = PREDICTIONS, vocab: int = SHAPE["vocab"]) -> dict:
    """A pretraining batch: full-length sequences, `predictions` masked positions each."""
    rng = np.random.default_rng(seed)
    positions = np.sort(np.stack([rng.choice(np.arange(1, seq - 1), predictions, replace=False)
                                  for _ in range(batch)]), axis=1).astype("int32")
    return {
        "input_ids": rng.integers(5, vocab, (batch, seq)).astype("int32"),
        "input_mask": np.ones((batch, seq), "int32"),
        "segment_ids": np.concatenate([np.zeros((batch, seq // 2), "int32"),
                                       np.ones((batch, seq - seq // 2), "int32")], axis=1),
        "masked_lm_positions": positions,
        "masked_lm_ids": rng.integers(5, vocab, (batch, predictions)).astype("int32"),
        "masked_lm_weights": np.ones((batch, predictions), "float32"),
        "next_sentence_labels": rng.integers(0, 2, (batch, 1)).astype("int32"),
    }


def tfbert_step(batch: dict, shape: dict = SHAPE, jit_compile: bool | str = "auto",
                dropout: float = 0.1, precision: str = "float32", keras_adamw: bool = False):
    """tfbert's pretraining step as its users run it: its own AdamW (keras AdamW's math, the
    update in one fused pass on TensorFlow); keras_adamw=True uses keras.optimizers.AdamW.
    `precision` is a `--mixed_precision` name ("float32", "bfloat16")."""
    import keras

    from tfbert import BertConfig, BertEncoder, BertPretrainer
    from tfbert.training.optimization import AdamW
    from tfbert.training.runtime import dtype_policy

    config = BertConfig(vocab_size=shape["vocab"], hidden_size=shape["hidden"],
                        num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
                        intermediate_size=shape["intermediate"], hidden_act="gelu_tanh",
                        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    with dtype_policy(precision):
        model = BertPretrainer(BertEncoder(config))
    optimizer = keras.optimizers.AdamW(1e-4) if keras_adamw else AdamW(learning_rate=1e-4)
    model.compile(optimizer=optimizer, jit_compile=jit_compile)
    return lambda: model.train_on_batch(batch)


def keras_hub_step(batch: dict, shape: dict = SHAPE, jit_compile: bool = True,
                   precision: str = "float32"):
    import keras
    import keras_hub

    from tfbert.training.runtime import dtype_policy

    with dtype_policy(precision):
        backbone = keras_hub.models.BertBackbone(
            vocabulary_size=shape["vocab"], num_layers=shape["layers"], num_heads=shape["heads"],
            hidden_dim=shape["hidden"], intermediate_dim=shape["intermediate"],
            max_sequence_length=512)
        model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
    model.compile(optimizer=keras.optimizers.AdamW(1e-4),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=["sparse_categorical_accuracy"], jit_compile=jit_compile)
    x = {"token_ids": batch["input_ids"], "segment_ids": batch["segment_ids"],
         "padding_mask": batch["input_mask"].astype(bool),
         "mask_positions": batch["masked_lm_positions"]}
    return lambda: model.train_on_batch(x, batch["masked_lm_ids"],
                                        sample_weight=batch["masked_lm_weights"])


def torch_step(batch: dict, shape: dict = SHAPE, bfloat16: bool = False):
    import contextlib

    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=shape["vocab"], hidden_size=shape["hidden"],
        num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
        intermediate_size=shape["intermediate"], hidden_act="gelu_new")
    model = transformers.BertForPreTraining(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    labels = np.full(batch["input_ids"].shape, -100, "int64")
    np.put_along_axis(labels, batch["masked_lm_positions"], batch["masked_lm_ids"], axis=1)
    inputs = {
        "input_ids": torch.from_numpy(batch["input_ids"].astype("int64")),
        "attention_mask": torch.from_numpy(batch["input_mask"].astype("int64")),
        "token_type_ids": torch.from_numpy(batch["segment_ids"].astype("int64")),
        "labels": torch.from_numpy(labels),
        "next_sentence_label":
            torch.from_numpy(batch["next_sentence_labels"][:, 0].astype("int64")),
    }

    def step():
        optimizer.zero_grad(set_to_none=True)
        with (torch.autocast("cpu", dtype=torch.bfloat16) if bfloat16
              else contextlib.nullcontext()):
            loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        return float(loss)

    return step


BF16 = " bfloat16"  # suffix of the mixed-precision systems


def run(quick: bool = False, peak_flops: float | None = None, bfloat16: bool = False) -> dict:
    """Times one training step of each system; returns rows and tfbert's ratio to each peer.

    The TensorFlow systems' steps are interleaved (round r times `inner` steps of every system
    in turn, plus one matmul-peak probe), so load from other processes hits every system
    alike; each figure is the median over rounds, the peak the best probe (or `peak_flops` if
    higher). PyTorch runs in its own process afterwards (same rounds): in one process its
    OpenMP workers, spinning after each step, slowed whichever TensorFlow step came next.
    """
    import statistics
    import time

    batch = synthetic_batch()
    shape = (SHAPE["hidden"], SHAPE["layers"], SHAPE["intermediate"], SHAPE["vocab"], SEQ,
             PREDICTIONS)
    flops_per_seq = 3 * bert_forward_flops(*shape)
    # tfbert's pretrainer runs its last block only at [CLS] and the masked positions: the same
    # outputs for fewer FLOPs. "model_tflops" counts the full model for every system (one
    # yardstick, the ratios of seq/s); "mfu" counts the FLOPs each system executes.
    executed = {"tfbert": 3 * bert_forward_flops(*shape, last_layer_rows=1 + PREDICTIONS)}
    rounds, inner = (3, 2) if quick else (5, 4)
    systems = {"tfbert": tfbert_step,
               "tfbert (no XLA)": lambda b: tfbert_step(b, jit_compile=False),
               "keras-hub": keras_hub_step,
               "keras-hub (no XLA)": lambda b: keras_hub_step(b, jit_compile=False)}
    if bfloat16:
        systems.update({
            "tfbert" + BF16: lambda b: tfbert_step(b, precision="bfloat16"),
            "keras-hub" + BF16: lambda b: keras_hub_step(b, precision="bfloat16"),
            "keras-hub (no XLA)" + BF16: lambda b: keras_hub_step(b, jit_compile=False,
                                                                  precision="bfloat16")})
    rows, steps = [], {}
    for name, make in systems.items():
        try:
            steps[name] = make(batch)
        except ImportError as e:  # a peer that is not installed is reported, not faked
            rows.append({"benchmark": "pretrain_step", "system": name, "error": str(e)})
            continue
        for _ in range(3):  # compile + warm-up
            steps[name]()
    probe = matmul_peak_probe()
    peaks = [peak_flops or matmul_peak_flops()]
    probes_bf16 = [matmul_peak_probe(dtype="bfloat16", jit_compile=jit)
                   for jit in (True, False)] if bfloat16 else []
    peaks_bf16 = []
    times: dict[str, list[float]] = {name: [] for name in steps}
    loads = [load_average()]
    for _ in range(rounds):
        peaks.append(probe())
        peaks_bf16.extend(p() for p in probes_bf16)
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(inner):
                step()
            times[name].append((time.perf_counter() - start) / inner)
    loads.append(load_average())
    times.update(_torch_times(rounds, inner, bfloat16, rows))
    peak, peak_bf16 = max(peaks), max(peaks_bf16, default=None)
    for name, t in times.items():
        seq_s = BATCH / statistics.median(t)
        rows.append({"benchmark": "pretrain_step", "system": name,
                     "step_ms": 1e3 * statistics.median(t), "sequences_per_s": seq_s,
                     "model_tflops": seq_s * flops_per_seq / 1e12,
                     "mfu": seq_s * executed.get(name.split(" ")[0], flops_per_seq)
                     / (peak_bf16 if name.endswith(BF16) else peak)})
    by = {r["system"]: r for r in rows if "sequences_per_s" in r}
    ratios = {}
    for ours in ("tfbert", "tfbert (no XLA)", "tfbert" + BF16):  # against same-precision peers
        for k, v in by.items():
            if (ours in by and not k.startswith("tfbert")
                    and k.endswith(BF16) == ours.endswith(BF16)):
                ratios[f"{ours}/{k}"] = by[ours]["sequences_per_s"] / v["sequences_per_s"]
    result = {"config": {**SHAPE, "seq": SEQ, "batch": BATCH, "predictions": PREDICTIONS,
                         "dtype": "float32" + (" and mixed bfloat16" if bfloat16 else "")},
              "isa": isa_record(), "load_average": loads,
              "matmul_peak_gflops": peak / 1e9, "rows": rows, "ratios": ratios}
    if peak_bf16:
        result["matmul_peak_gflops_bfloat16"] = peak_bf16 / 1e9
    return result


def _torch_times(rounds: int, inner: int, bfloat16: bool, rows: list) -> dict:
    """Step times of PyTorch (and PyTorch bfloat16) measured in a child process."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "torch.json")
        args = ["--torch_only", out, "--rounds", str(rounds), "--inner", str(inner)]
        proc = run_module("bench.bench_pretrain", args + (["--bfloat16"] if bfloat16 else []),
                          capture_output=True, text=True)
        if proc.returncode != 0:
            rows.append({"benchmark": "pretrain_step", "system": "pytorch",
                         "error": proc.stderr[-2000:]})
            return {}
        with open(out) as f:
            return json.load(f)


def _time_torch(out: str, rounds: int, inner: int, bfloat16: bool) -> None:
    import time

    batch = synthetic_batch()
    steps = {"pytorch": torch_step(batch)}
    if bfloat16:
        steps["pytorch" + BF16] = torch_step(batch, bfloat16=True)
    for step in steps.values():
        for _ in range(3):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(inner):
                step()
            times[name].append((time.perf_counter() - start) / inner)
    with open(out, "w") as f:
        json.dump(times, f)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--bfloat16", action="store_true",
                        help="add the mixed-bfloat16 systems (CPUs with AMX/AVX512-BF16)")
    parser.add_argument("--torch_only", metavar="OUT", help="(internal) time PyTorch only")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--inner", type=int, default=2)
    parser.add_argument("--emulate_avx2", action="store_true",
                        help="run TensorFlow as on an AVX2-only host (bench.common.emulate_avx2)")
    parser.add_argument("--results", help="also write the result JSON to this file")
    args = parser.parse_args()
    if args.emulate_avx2:
        if args.bfloat16:
            parser.error("--bfloat16 needs AMX/AVX512-BF16; an emulated AVX2 host has neither")
        from bench.common import emulate_avx2

        emulate_avx2()  # before TensorFlow loads
    if args.torch_only:
        _time_torch(args.torch_only, args.rounds, args.inner, args.bfloat16)
    else:
        text = json.dumps(run(args.quick, bfloat16=args.bfloat16), indent=2)
        if args.results:
            from tfbert.fileio import write_text

            write_text(args.results, text + "\n")
        print(text)
