"""Scaling: tfbert pretraining step time against sequence length and depth.

Cost should grow linearly with layers and a little faster than linearly with sequence length
(attention's T^2 share grows with T). Reported next to the analytic FLOP count so a step that
grows faster than its FLOPs stands out.

    python -m bench.bench_scaling [--quick]
"""

from __future__ import annotations

import argparse
import json

from bench.bench_pretrain import SHAPE, synthetic_batch, tfbert_step
from bench.common import bert_forward_flops, matmul_peak_flops, timeit

BATCH = 8


def _measure(shape: dict, seq: int, reps: int, peak: float) -> dict:
    predictions = max(1, round(0.15 * seq))
    batch = synthetic_batch(0, seq, BATCH, predictions, shape["vocab"])
    t = timeit(tfbert_step(batch, shape), warmup=2, reps=reps)
    flops, executed = train_flops(shape, seq, predictions)
    attention = 3 * shape["layers"] * 4 * seq**2 * shape["hidden"]
    return {"step_ms": 1e3 * t["median_s"], "train_gflop_per_seq": flops / 1e9,
            "attention_flop_share": attention / flops,
            "mfu": BATCH * executed / t["median_s"] / peak}


def train_flops(shape: dict, seq: int, predictions: int) -> tuple[float, float]:
    """Training matmul FLOPs per sequence: the full model's, and what tfbert's pretrainer
    executes (its last block only at [CLS] and the masked positions); MFU counts the latter,
    as bench.bench_pretrain does."""
    dims = (shape["hidden"], shape["layers"], shape["intermediate"], shape["vocab"], seq,
            predictions)
    return (3 * bert_forward_flops(*dims),
            3 * bert_forward_flops(*dims, last_layer_rows=1 + predictions))


def run(quick: bool = False, peak_flops: float | None = None) -> dict:
    peak = peak_flops or matmul_peak_flops()
    reps = 2 if quick else 4
    rows = []
    for seq in (128, 256, 512):
        rows.append({"benchmark": "scaling", "system": f"tfbert seq={seq} L=4", "sweep": "seq",
                     "value": seq, **_measure(SHAPE, seq, reps, peak)})
    for layers in ((2, 4, 8) if quick else (2, 4, 8, 12)):
        shape = {**SHAPE, "layers": layers}
        rows.append({"benchmark": "scaling", "system": f"tfbert L={layers} seq=128",
                     "sweep": "layers", "value": layers, **_measure(shape, 128, reps, peak)})
    return {"config": {**SHAPE, "batch": BATCH}, "rows": rows}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    print(json.dumps(run(parser.parse_args().quick), indent=2))
