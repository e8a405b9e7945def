"""Inference of a bert-base-chinese-shaped classifier (seq 128), batch 1 and batch 32.

tfbert's exported SavedModel (`serve_ids` signature; float32, and the `--dtype bfloat16` export)
and its TFLite float32/int8 files against keras-hub (BertTextClassifier, XLA), PyTorch
(transformers BertForSequenceClassification, eager, no_grad; float32 and the model cast to
bfloat16) and ONNX Runtime (the same PyTorch weights exported to ONNX, ORT's default session;
float32 and `quantize_dynamic` int8). Every system gets the same token ids; latency is the median
of timed repetitions after warm-up. Rows are compared at the same precision: float32 with
float32, bfloat16 with bfloat16, int8 with int8. Each family (tfbert, keras-hub, PyTorch, ONNX
Runtime) is timed in its own process, as its users run it: in one process the libraries'
thread pools (TensorFlow's, OpenMP's, ORT's spinning workers) compete for the cores (on 2
cores, TensorFlow's batch-1 latency about 2x; docs/performance.md, "Measuring").

Cases: batch 1 and batch 32 with all 128 positions real tokens (the headline: every system does
the full work), and batch 1 with 32 real tokens padded to 128 (what a short request to a
max_seq_length-128 model looks like): tfbert's SavedModel runs it to the batch's last attended
position (rounded up to 16; ExportSpec.trim_padding), the other systems as their users run
them, over all 128 positions. The family `tfbert-frozen-weights` times the same float32
SavedModel in a process with TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 (oneDNN then reorders each
weight once and keeps it; docs/serving.md: it pays for fixed-shape serving only). The family
`tfbert-streams` times the exports with `cpu_streams` = STREAMS (each block cut into streams,
tfbert/export/streams.py; float32 and bfloat16) in a process with one intra-op thread and
STREAMS inter-op threads, the serving set-up those exports are made for (docs/serving.md). The
family `tfbert-onednn` times the float32 export in a process with TF_ENABLE_ONEDNN_OPTS=1
(TensorFlow's oneDNN rewrites, on by default only on CPUs with AVX512_VNNI, AVX512_BF16 or AMX).

Every export is made for this host's CPU kind (`--target_cpu`, tfbert/export/target_cpu.py; on
a host that is not an AMX one, the `--target_cpu=amx` export is timed beside it). The result
records the host's instruction sets ("isa") and the load average around each round.
`--float32` leaves out the bfloat16 and int8 systems and the TFLite files; `--emulate_avx2`
runs TensorFlow as on an AVX2-only host (bench.common.emulate_avx2; no bfloat16 systems).

The ceiling: each round also times a 2048 x 2048 float32 product with every library's own GEMM
(bench.common.gemm_rate: TensorFlow's graph kernels, XLA, NumPy, PyTorch, ONNX Runtime), each
in its own process; under `--emulate_avx2` only TensorFlow's graph kernels, the GEMM the
emulation reaches. At full length every float32 row gets the rate it ran at (`gflops_per_s`:
the matmul FLOPs it executes, bench.common.classifier_forward_flops, over its latency; tfbert's
last block runs at [CLS] only, the peers' at every position) and that rate's share of the
fastest GEMM the host delivered in the run (`of_gemm_peak`). `--rates FILE` prints the rates
of a results file (`--peak_gflops` for a file written before the run measured its ceiling).

    python -m bench.bench_inference [--quick] [--rounds 2] [--families tfbert,onnxruntime,...]
        [--float32] [--emulate_avx2] [--results FILE]
    python -m bench.bench_inference --rates FILE [--peak_gflops G]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402

from bench.common import GEMM_LIBRARIES, run_module, timeit  # noqa: E402

SEQ, NUM_CLASSES, PRESET = 128, 2, "bert-base-chinese"
# (label, batch, real tokens of SEQ)
CASES = (("b=1", 1, SEQ), ("b=32", 32, SEQ), ("b=1, 32 of 128 tokens", 1, 32))
# cpu_streams of the streams family: the most of this machine's cores that divide 12 heads
STREAMS = max(n for n in range(1, (os.cpu_count() or 1) + 1) if 12 % n == 0)


def make_inputs(batch: int, seq: int = SEQ, vocab: int = 21128, seed: int = 0,
                real: int | None = None) -> dict:
    """Random ids [CLS] ... [SEP] in the first `real` positions (default all), then padding."""
    real = seq if real is None else real
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab, (batch, seq)).astype("int32")
    ids[:, 0], ids[:, real - 1], ids[:, real:] = 101, 102, 0
    mask = (np.arange(seq) < real)[None].repeat(batch, 0).astype("int32")
    return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros((batch, seq), "int32")}


def build_tfbert(workdir: str, config=None) -> str:
    """A random-init tfbert classifier saved in tfbert's format; returns the model dir."""
    import tfbert

    config = config or tfbert.BertConfig.from_preset(PRESET)
    model = tfbert.BertClassifier(tfbert.BertEncoder(config), num_classes=NUM_CLASSES)
    vocab = os.path.join(workdir, "vocab.txt")
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    n = config.vocab_size - len(specials)  # CJK characters, then their ## forms
    chars = [chr(0x4E00 + i) for i in range(min(n, 20992))]
    pieces = ["##" + chr(0x4E00 + i) for i in range(n - len(chars))]
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("\n".join(specials + chars + pieces) + "\n")
    model_dir = os.path.join(workdir, "model")
    tfbert.save_pretrained(model, model_dir, vocab_file=vocab,
                           metadata={"task": "classification", "labels": ["neg", "pos"],
                                     "max_seq_length": SEQ})
    return model_dir


# The SavedModels the tfbert families time: directory name -> export_model arguments besides
# target_cpu (each made once per run, by the first family that needs it). "target_amx" is the
# AMX host's choice of forms (every fused form, no XLA), for a host of another kind.
EXPORTS = {"bench": {}, "bench_xla": {"jit_compile": True}, "bench_target_amx": {},
           "bench_bf16": {"dtype": "bfloat16"}, "bench_streams": {"cpu_streams": STREAMS},
           "bench_streams_bf16": {"cpu_streams": STREAMS, "dtype": "bfloat16"}}


def host_kind() -> str:
    """The CPU kind the exports are made for: this host's (`tfbert.export.target_cpu`), or
    "avx2" under `--emulate_avx2`."""
    from bench.common import emulated
    from tfbert.export.target_cpu import host_cpu

    return emulated() or host_cpu().kind


def _export(model_dir: str, workdir: str, name: str, **kwargs) -> str:
    """The version folder of export `name` (EXPORTS), made now if this run has not yet."""
    from tfbert.export import export_model

    path = os.path.join(workdir, "saved_models", name, "1")
    if not os.path.exists(path):  # (written atomically: a folder there is a whole export)
        target = "amx" if name == "bench_target_amx" else host_kind()
        export_model(model_dir, path, target_cpu=target, check=False, overwrite=True,
                     **EXPORTS[name], **kwargs)
    return path


def tfbert_systems(model_dir: str, workdir: str, variant: str = "tfbert",
                   float32: bool = False) -> dict:
    """serve_ids of the exported SavedModels, and the TFLite files (ids in); for the variant
    "tfbert-frozen-weights" only the float32 serve_ids, under TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1,
    for "tfbert-streams" only the cpu_streams export's, for "tfbert-onednn" the float32
    default export (and the AMX host's form choice) under TF_ENABLE_ONEDNN_OPTS=1 (the caller
    sets this process's environment: FAMILY_ENV; docs/serving.md and docs/performance.md
    discuss them). Every export is made for this host's CPU kind (`host_kind`). `float32`
    (or an emulated AVX2 host) leaves out the bfloat16 exports and the TFLite files."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer op the SavedModels hold)

    from bench.common import emulated

    float32 = float32 or bool(emulated())
    other_kind = host_kind() != "amx"
    saved_models = {
        "tfbert-frozen-weights": ((FROZEN, "bench"),),
        "tfbert-streams": ((STREAMED, "bench_streams"), (STREAMED_BF16, "bench_streams_bf16")),
        "tfbert-onednn": ((ONEDNN, "bench"),
                          *(((ONEDNN_AMX, "bench_target_amx"),) if other_kind else ())),
    }.get(variant, ((OURS, "bench"), (OURS + " bfloat16", "bench_bf16"), (XLA, "bench_xla"),
                    *(((AMX_FORMS, "bench_target_amx"),) if other_kind else ())))
    systems = {}
    for name, export in saved_models:
        if float32 and "bf16" in export:
            continue
        path = _export(model_dir, workdir, export)
        serve_ids = tf.saved_model.load(path).signatures["serve_ids"]
        systems[name] = lambda x, f=serve_ids: f(**{k: tf.constant(v) for k, v in x.items()})
    if variant != "tfbert" or float32:
        return systems
    tflite_info = os.path.join(workdir, "tflite.json")
    if not os.path.exists(tflite_info):  # converted once, reused by later rounds
        from tfbert.export import load_for_export
        from tfbert.export.tflite import export_tflite

        model, vocab_file, spec, _ = load_for_export(model_dir)
        info = export_tflite(model, spec, vocab_file, os.path.join(workdir, "tflite"),
                             ("float32", "int8"), kinds=("ids",), overwrite=True)
        with open(tflite_info, "w") as f:
            json.dump(info, f)
    with open(tflite_info) as f:
        for entry in json.load(f).values():
            if entry.get("inputs") == "ids":
                systems[f"tfbert TFLite {entry['quantization']}"] = _tflite_runner(entry["path"])
    return systems


def _tflite_runner(path: str):
    """Runs an ids-in TFLite file through its signature runner (any batch size), on all cores
    as the other systems run (TFLite's own default is one thread)."""
    from tfbert.export.tflite import make_interpreter, run_tflite

    interpreter = make_interpreter(path, text_ops=False, num_threads=os.cpu_count())
    return lambda x: run_tflite(interpreter, x)


def keras_hub_system(config):
    import keras_hub

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads, hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size, max_sequence_length=512)
    model = keras_hub.models.BertTextClassifier(backbone, NUM_CLASSES, preprocessor=None)
    model.compile(jit_compile=True)

    def run(x: dict):
        return model.predict_on_batch({"token_ids": x["input_ids"],
                                       "segment_ids": x["segment_ids"],
                                       "padding_mask": x["input_mask"].astype(bool)})

    return run


def torch_systems(model_dir: str, workdir: str, which: str = "pytorch",
                  float32: bool = False) -> dict:
    """which: "pytorch" (transformers eager, float32 and bfloat16) or "onnxruntime" (the same
    weights exported to ONNX; float32 and dynamic int8); `float32`: the float32 systems only."""
    import torch
    import transformers

    model = transformers.BertForSequenceClassification.from_pretrained(
        model_dir, num_labels=NUM_CLASSES).eval()

    def to_torch(x):
        return {"input_ids": torch.from_numpy(x["input_ids"].astype("int64")),
                "attention_mask": torch.from_numpy(x["input_mask"].astype("int64")),
                "token_type_ids": torch.from_numpy(x["segment_ids"].astype("int64"))}

    def run_torch(x):
        with torch.no_grad():
            return model(**to_torch(x)).logits

    def run_torch_bf16(x):
        with torch.no_grad():
            return model_bf16(**to_torch(x)).logits

    systems = {"pytorch (transformers, eager)": run_torch}
    if which == "onnxruntime":
        return _ort_systems(model, to_torch, workdir, float32)
    if float32:
        return systems
    try:
        model_bf16 = transformers.BertForSequenceClassification.from_pretrained(
            model_dir, num_labels=NUM_CLASSES).to(torch.bfloat16).eval()
        systems["pytorch (transformers, eager) bfloat16"] = run_torch_bf16
    except Exception as e:  # reported as its own row
        systems["pytorch (transformers, eager) bfloat16"] = e
    return systems


def _ort_systems(model, to_torch, workdir: str, float32: bool = False) -> dict:
    import torch

    systems: dict = {}
    try:
        import onnxruntime as ort

        path = os.path.join(workdir, "model.onnx")
        example = to_torch(make_inputs(1))
        torch.onnx.export(model, (example["input_ids"], example["attention_mask"],
                                  example["token_type_ids"]), path,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["logits"],
                          dynamic_axes={k: {0: "batch"} for k in
                                        ("input_ids", "attention_mask", "token_type_ids",
                                         "logits")},
                          dynamo=False)
        files = {"onnxruntime (default session)": path}
        int8 = "onnxruntime (default session) int8"
        try:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            if not float32:
                files[int8] = os.path.join(workdir, "model.int8.onnx")
                quantize_dynamic(path, files[int8], weight_type=QuantType.QInt8)
        except Exception as e:  # the int8 row reports its own failure
            systems[int8] = e
            files.pop(int8, None)
        for name, file in files.items():
            session = ort.InferenceSession(file, providers=["CPUExecutionProvider"])

            def run_ort(x, session=session):
                return session.run(None, {"input_ids": x["input_ids"].astype("int64"),
                                          "attention_mask": x["input_mask"].astype("int64"),
                                          "token_type_ids": x["segment_ids"].astype("int64")})

            systems[name] = run_ort
    except Exception as e:  # reported in the table as a missing peer, not faked
        systems["onnxruntime (default session)"] = e
    return systems


FAMILIES = ("tfbert", "tfbert-streams", "tfbert-frozen-weights", "tfbert-onednn", "keras-hub",
            "pytorch", "onnxruntime")
# Process environments per family: the thread pools a cpu_streams export is served with, the
# frozen-weights setting docs/serving.md discusses (it helps fixed-shape serving and hurts
# when shapes vary), and TensorFlow's oneDNN rewrites forced on (its default only on CPUs with
# AVX512_VNNI, AVX512_BF16 or AMX)
FAMILY_ENV = {"tfbert-streams": {"TF_NUM_INTRAOP_THREADS": "1",
                                 "TF_NUM_INTEROP_THREADS": str(STREAMS)},
              "tfbert-frozen-weights": {"TF_ONEDNN_ASSUME_FROZEN_WEIGHTS": "1"},
              "tfbert-onednn": {"TF_ENABLE_ONEDNN_OPTS": "1"}}
OURS = "tfbert SavedModel serve_ids"
XLA = "tfbert SavedModel serve_ids (XLA export)"
AMX_FORMS = "tfbert SavedModel serve_ids (target_cpu=amx export)"
ONEDNN = "tfbert SavedModel serve_ids, TF_ENABLE_ONEDNN_OPTS=1"
ONEDNN_AMX = "tfbert SavedModel serve_ids (target_cpu=amx export), TF_ENABLE_ONEDNN_OPTS=1"
FROZEN = "tfbert SavedModel serve_ids, TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1"
STREAMED = (f"tfbert SavedModel serve_ids, cpu_streams={STREAMS} (intra-op 1, "
            f"inter-op {STREAMS})")
STREAMED_BF16 = STREAMED.replace("serve_ids,", "serve_ids bfloat16,")


def time_family(family: str, model_dir: str, workdir: str, quick: bool,
                float32: bool = False) -> list[dict]:
    """Builds one family's systems and times each at batch 1 and 32 (in this process);
    `float32` (or an emulated AVX2 host): the float32 systems only."""
    import tfbert
    from bench.common import emulated

    float32 = float32 or bool(emulated())
    reps = {1: 5 if quick else 10, 32: 2 if quick else 4}
    try:
        if family.startswith("tfbert"):
            systems = tfbert_systems(model_dir, workdir, variant=family, float32=float32)
        elif family == "keras-hub":
            config = tfbert.BertConfig.from_json_file(os.path.join(model_dir, "config.json"))
            systems = {"keras-hub (XLA)": keras_hub_system(config)}
        else:
            systems = torch_systems(model_dir, workdir, family, float32)
    except Exception as e:  # reported in the table as a missing peer, not faked
        systems = {family: e}
    rows = []
    for name, fn in systems.items():
        for case, batch, real in CASES:
            row = {"benchmark": "inference", "system": f"{name} {case}", "case": case,
                   "batch": batch, "real_tokens": real}
            if isinstance(fn, Exception):
                rows.append({**row, "error": f"{type(fn).__name__}: {fn}"})
                continue
            x = make_inputs(batch, real=real)
            t = timeit(lambda fn=fn, x=x: fn(x), warmup=2, reps=reps[batch])
            rows.append({**row, "latency_ms": 1e3 * t["median_s"]})
    return rows


def system_name(row: dict) -> str:
    """A row's system without its case ("onnxruntime (default session)" of "... b=32")."""
    return row["system"][:-len(row["case"]) - 1]


def precision_of(system: str) -> str:
    """The precision a system's name says: "bfloat16", "int8", else "float32"."""
    return next((p for p in ("bfloat16", "int8") if system.endswith(p)), "float32")


def executed_flops(system: str, batch: int, config) -> float:
    """The matmul FLOPs `system` (a row's system name) executes for `batch` full-length
    requests of a classifier with BertConfig `config`: tfbert's SavedModels and TFLite files
    run the last block at [CLS] only, the peers at every position."""
    from bench.common import classifier_forward_flops

    return batch * classifier_forward_flops(
        config.hidden_size, config.num_hidden_layers, config.intermediate_size, SEQ,
        NUM_CLASSES, last_layer_rows=1 if system.startswith("tfbert") else None)


def add_rates(result: dict, peak_gflops: float | None = None) -> list[dict]:
    """Gives each float32 full-length row of a results file its `gflops_per_s` and, against
    the run's fastest GEMM (or `peak_gflops`), `of_gemm_peak`; returns those rows."""
    import tfbert

    peak = peak_gflops or max(result.get("gemm_peak_gflops", {}).values(), default=None)
    config = tfbert.BertConfig.from_preset(result.get("config", {}).get("preset", PRESET))
    rated = []
    for row in result["rows"]:
        if ("latency_ms" not in row or row.get("real_tokens") != SEQ
                or precision_of(system_name(row)) != "float32"):
            continue
        rate = (executed_flops(system_name(row), row["batch"], config)
                / (row["latency_ms"] / 1e3) / 1e9)
        row["gflops_per_s"] = round(rate, 1)
        if peak:
            row["of_gemm_peak"] = round(rate / peak, 3)
        rated.append(row)
    return rated


def gemm_peaks(rounds_of: list[dict[str, float]]) -> dict[str, float]:
    """Each GEMM library's best rate (GFLOP/s) over the run's rounds."""
    best: dict[str, float] = {}
    for found in rounds_of:
        for library, gflops in found.items():
            best[library] = max(best.get(library, 0.0), gflops)
    return {library: round(gflops, 1) for library, gflops in best.items()}


def measure_gemms(errors: list[dict]) -> dict[str, float]:
    """One round of the ceiling: every GEMM library's rate (GFLOP/s), each in its own process
    after the families' (a library that fails is reported in `errors`, not guessed). Under
    `--emulate_avx2` only TensorFlow's graph GEMM, the one the emulation reaches: XLA's dots and
    the other libraries keep the host's full ISA (bench.common.EMULATION_LIMITS)."""
    from bench.common import emulated

    found = {}
    for library in ("tensorflow",) if emulated() else GEMM_LIBRARIES:
        proc = run_module("bench.bench_inference", ["--gemm", library], capture_output=True,
                          text=True)
        if proc.returncode:
            errors.append({"benchmark": "gemm", "system": library, "error": proc.stderr[-2000:]})
        else:
            found[library] = json.loads(proc.stdout.strip().splitlines()[-1])["gflops"]
    return found


def run(quick: bool = False, rounds: int = 1, families: tuple[str, ...] = FAMILIES,
        float32: bool = False) -> dict:
    """Times every family in its own process, `rounds` times in turn (the exports are made
    once); each system's figure is the median over rounds of its per-round medians, so a slow
    spell of a shared machine hits every family alike. `float32`: no bfloat16 exports and no
    TFLite files (as under `--emulate_avx2`). The result records the host's instruction sets
    (bench.common.isa_record), the kind the exports were made for, `uptime`'s load before
    and after each round, each GEMM library's best rate over the rounds and each float32
    full-length row's rate against the fastest (`add_rates`)."""
    import statistics

    import tfbert
    from bench.common import isa_record, load_average

    per_round: dict[tuple, list[dict]] = {}
    errors = []
    loads: list[list[float]] = []
    gemms: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as workdir:
        model_dir = build_tfbert(workdir, tfbert.BertConfig.from_preset(PRESET))
        for _ in range(rounds):
            loads.append(load_average())
            for family in families:
                out = os.path.join(workdir, f"{family}.json")
                args = ["--family", family, "--model_dir", model_dir, "--workdir", workdir,
                        "--out", out] + (["--quick"] if quick else []) + (
                            ["--float32"] if float32 else [])
                proc = run_module("bench.bench_inference", args, env=FAMILY_ENV.get(family),
                                  capture_output=True, text=True)
                if proc.returncode != 0 or not os.path.exists(out):
                    errors.append({"benchmark": "inference", "system": family,
                                   "error": proc.stderr[-2000:]})
                    continue
                with open(out) as f:
                    for row in json.load(f):
                        per_round.setdefault((row["system"], row["case"]), []).append(row)
                os.remove(out)
            gemms.append(measure_gemms(errors))
        loads.append(load_average())
    rows = errors
    for found in per_round.values():
        row = dict(found[0])
        times = [r["latency_ms"] for r in found if "latency_ms" in r]
        if times:
            row["latency_ms"] = statistics.median(times)
            row["rounds_ms"] = times
        rows.append(row)
    # Peer latency / tfbert latency at the same precision (> 1: tfbert is faster).
    ours_at = {"float32": OURS, "bfloat16": OURS + " bfloat16", "int8": "tfbert TFLite int8"}
    # the other exports and the same exports under their process settings (FAMILY_ENV),
    # against every peer
    variants = {"float32": (XLA, AMX_FORMS, STREAMED, FROZEN, ONEDNN, ONEDNN_AMX),
                "bfloat16": (STREAMED_BF16,), "int8": ()}
    ratios = {}
    for case, _, _ in CASES:
        by = {system_name(r): r["latency_ms"] for r in rows
              if r.get("case") == case and "latency_ms" in r}
        for name, ms in by.items():
            if name.startswith("tfbert"):
                continue
            precision = precision_of(name)
            ours = by.get(ours_at[precision])
            if ours:
                ratios[f"{case} {name}/{ours_at[precision]} latency"] = ms / ours
            for variant in variants[precision]:
                if by.get(variant):
                    ratios[f"{case} {name}/{variant} latency"] = ms / by[variant]
    result = {"config": {"preset": PRESET, "seq": SEQ, "classes": NUM_CLASSES, "rounds": rounds,
                         "target_cpu": host_kind()},
              "isa": isa_record(), "load_average": loads, "gemm_peak_gflops": gemm_peaks(gemms),
              "rows": rows, "ratios": ratios}
    add_rates(result)
    return result


def print_rates(path: str, peak_gflops: float | None = None) -> None:
    """The `--rates` table: each float32 full-length row's latency, rate and share of the
    ceiling, from a results file (ValueError naming the file when it cannot be read or has no
    ceiling and none is given)."""
    try:
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read results file {path}: {e}") from None
    peaks = result.get("gemm_peak_gflops", {})
    if not (peak_gflops or peaks):
        raise ValueError(f"{path} has no gemm_peak_gflops (written before the run measured "
                         "its ceiling): give --peak_gflops")
    source = "given" if peak_gflops else "the file's fastest"
    print(f"ceiling: {peak_gflops or max(peaks.values()):.1f} GFLOP/s ({source}; the file's "
          f"GEMM rates: {peaks or 'none'})")
    for row in add_rates(result, peak_gflops):
        print(f"{row['system']:<75} {row['latency_ms']:>9.1f} ms {row['gflops_per_s']:>7.1f} "
              f"GFLOP/s {100 * row['of_gemm_peak']:>5.1f}%")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=1,
                        help="time every family this many times in turn; report medians")
    parser.add_argument("--families", default=",".join(FAMILIES),
                        help=f"comma-separated subset of {','.join(FAMILIES)}")
    parser.add_argument("--float32", action="store_true",
                        help="float32 systems only (no bfloat16 or int8 system, no TFLite)")
    parser.add_argument("--emulate_avx2", action="store_true",
                        help="run TensorFlow as on an AVX2-only host (bench.common.emulate_avx2)")
    parser.add_argument("--results", help="also write the result JSON to this file")
    parser.add_argument("--rates", metavar="FILE",
                        help="print the float32 rows' GFLOP/s and share of the ceiling in a "
                             "results file, and exit")
    parser.add_argument("--peak_gflops", type=float,
                        help="with --rates: the ceiling to use (for a file without "
                             "gemm_peak_gflops)")
    parser.add_argument("--gemm", choices=GEMM_LIBRARIES,
                        help="(internal) time one GEMM library")
    parser.add_argument("--family", choices=FAMILIES, help="(internal) time one family")
    parser.add_argument("--model_dir")
    parser.add_argument("--workdir")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.emulate_avx2:
        from bench.common import emulate_avx2

        emulate_avx2()  # before TensorFlow loads; the family processes inherit it
    if args.rates:
        try:
            print_rates(args.rates, args.peak_gflops)
        except ValueError as e:  # a file that is not a results file: one line, exit code 2
            parser.error(str(e))
    elif args.gemm:
        from bench.common import gemm_rate

        print(json.dumps({"gflops": gemm_rate(args.gemm) / 1e9}))
    elif args.family:
        with open(args.out, "w") as f:
            json.dump(time_family(args.family, args.model_dir, args.workdir, args.quick,
                                  args.float32), f)
    else:
        families = tuple(args.families.split(","))
        unknown = sorted(set(families) - set(FAMILIES))
        if unknown:
            parser.error(f"unknown families {unknown}; choose from {FAMILIES}")
        text = json.dumps(run(args.quick, args.rounds, families, args.float32), indent=2)
        if args.results:
            from tfbert.fileio import write_text

            write_text(args.results, text + "\n")
        print(text)
