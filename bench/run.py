"""Runs every tfbert benchmark side by side with its peers, prints a table, writes JSON + a plot.

    python -m bench.run [--quick] [--bfloat16] [--rounds N] [--emulate_avx2]
                        [--only pretrain,inference,tokenizer,pipeline,scaling,finetune]
                        [--torch_python PY]

Run from the repository root. Writes bench/results/<machine>-<date>.json and .png (a run keeps
that day's figures of the benchmarks it does not re-run); the file records the host's
instruction sets ("isa": /proc/cpuinfo's model name and AVX2/AVX-512/AMX flags, the CPU kind).
`--emulate_avx2` runs tfbert and keras-hub as on an AVX2-only host (bench.common.emulate_avx2:
oneDNN and XLA capped at AVX2, TensorFlow's oneDNN rewrites off, no bfloat16 systems), and the
file says so. Each figure is the median of several
timed repetitions after warm-up; every peer is measured in this same run on this same machine.
docs/performance.md explains the figures.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import logging
import os
import traceback

from bench.common import emulate_avx2, isa_record, machine_name, matmul_peak_flops

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
BENCHMARKS = {  # name -> module exposing run(quick, ...) -> dict with "rows" (and "ratios")
    "pretrain": "bench.bench_pretrain",
    "inference": "bench.bench_inference",
    "tokenizer": "bench.bench_tokenizer",
    "pipeline": "bench.bench_pipeline",
    "scaling": "bench.bench_scaling",
    "finetune": "bench.bench_finetune",
}
NEEDS_PEAK = {"pretrain", "scaling"}


def format_table(results: dict) -> str:
    lines = [f"{'benchmark':<14} {'system':<28} {'figure':>14}  unit"]
    for name, result in results["benchmarks"].items():
        if "error" in result:
            lines.append(f"{name:<14} {'(failed)':<28} {'':>14}  {result['error'][:60]}")
            continue
        for row in result.get("rows", []):
            key = next((k for k in ("sequences_per_s", "latency_ms", "lines_per_s",
                                    "examples_per_s", "train_examples_per_s", "step_ms")
                        if k in row), None)
            value = f"{row[key]:.4g}" if key else row.get("error", "")[:40]
            lines.append(f"{name:<14} {row.get('system', ''):<28} {value:>14}  {key or ''}"
                         + (f"  MFU {row['mfu']:.0%}" if row.get("mfu") else ""))
        for ratio, value in result.get("ratios", {}).items():
            lines.append(f"{name:<14} {ratio:<28} {value:>13.2f}x")
    return "\n".join(lines)


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = {f"{b}: {k}": v for b, r in results["benchmarks"].items()
              for k, v in r.get("ratios", {}).items()}
    scaling = results["benchmarks"].get("scaling", {}).get("rows", [])
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    if ratios:
        names = list(ratios)
        axes[0].barh(names, [ratios[n] for n in names], color="tab:blue")
        axes[0].axvline(1.0, color="k", lw=0.8)
        axes[0].set_xlabel("tfbert speed-up (x; >1 = tfbert faster)")
        axes[0].set_title("tfbert vs peers (same run, same machine)")
    for sweep, marker in (("seq", "o"), ("layers", "s")):
        pts = [(r["value"], r["step_ms"]) for r in scaling if r.get("sweep") == sweep]
        if pts:
            xs, ys = zip(*sorted(pts), strict=True)
            axes[1].plot(xs, ys, marker=marker, label=f"step time vs {sweep}")
    axes[1].set_xscale("log", base=2)
    axes[1].set_yscale("log")
    axes[1].set_title("tfbert pretraining step scaling")
    axes[1].set_ylabel("ms / step")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, smaller sweeps")
    parser.add_argument("--only", default=",".join(BENCHMARKS))
    parser.add_argument("--out_dir", default=RESULTS)
    parser.add_argument("--bfloat16", action="store_true",
                        help="pretrain: add the mixed-bfloat16 systems (AMX/AVX512-BF16 CPUs)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="inference: time every family this many times in turn (medians)")
    parser.add_argument("--torch_python", default=None,
                        help="finetune: the interpreter with torch, transformers and accelerate "
                             "for the transformers systems (default: this one)")
    parser.add_argument("--emulate_avx2", action="store_true",
                        help="run TensorFlow as on an AVX2-only host (ONEDNN_MAX_CPU_ISA=AVX2, "
                             "XLA_FLAGS=--xla_cpu_max_isa=AVX2, TF_ENABLE_ONEDNN_OPTS=0, no "
                             "bfloat16 systems)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.emulate_avx2:
        if args.bfloat16:
            parser.error("--bfloat16 needs AMX/AVX512-BF16; an emulated AVX2 host has neither")
        logging.info("emulating an AVX2-only host: %s", emulate_avx2())

    peak = matmul_peak_flops()
    logging.info("float32 matmul peak: %.1f GFLOP/s", peak / 1e9)
    results = {"machine": machine_name(), "date": datetime.date.today().isoformat(),
               "isa": isa_record(), "quick": args.quick, "matmul_peak_gflops": peak / 1e9,
               "benchmarks": {}}
    for name in args.only.split(","):
        logging.info("== %s", name)
        try:
            module = importlib.import_module(BENCHMARKS[name])
            kwargs = {"peak_flops": peak} if name in NEEDS_PEAK else {}
            if name == "pretrain" and args.bfloat16:
                kwargs["bfloat16"] = True
            if name == "inference":
                kwargs["rounds"] = args.rounds
            if name == "finetune":
                kwargs["torch_python"] = args.torch_python
            results["benchmarks"][name] = module.run(args.quick, **kwargs)
        except Exception as e:  # one failed benchmark must not hide the others' figures
            traceback.print_exc()
            results["benchmarks"][name] = {"error": f"{type(e).__name__}: {e}"}

    os.makedirs(args.out_dir, exist_ok=True)
    stem = os.path.join(args.out_dir, f"{results['machine']}-{results['date']}")
    if os.path.exists(stem + ".json"):  # keep the same day's figures of benchmarks not re-run
        with open(stem + ".json") as f:
            same_day = json.load(f)
        kept = {k: v for k, v in same_day.get("benchmarks", {}).items()
                if k not in results["benchmarks"]}
        if kept:
            logging.info("keeping %s from %s's results file", sorted(kept), results["date"])
            results["benchmarks"] = {**kept, **results["benchmarks"]}
    with open(stem + ".json", "w") as f:
        json.dump(results, f, indent=2)
    plot(results, stem + ".png")
    print(format_table(results))
    print(f"\nwrote {stem}.json and {stem}.png")


if __name__ == "__main__":
    main()
