"""Shared benchmark helpers: timing, child processes, the machine's measured matmul peak, BERT
FLOP counts, profiler op times, the host's instruction sets and the AVX2-host emulation.

Every figure is the median of several timed repetitions after warm-up, measured in the same
run as the peers it is compared with. Importing this module imports no TensorFlow
(bench/gpu_pretrain.py runs where there is none).
"""

from __future__ import annotations

import collections
import glob
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_module(module: str, args: Sequence[str] = (), env: dict[str, str] | None = None,
               **kwargs) -> subprocess.CompletedProcess:
    """`python -m module args` in a child process started in the repository root (so `bench`
    and `tfbert` import there as here), `env` added to this process's environment; other
    keyword arguments go to subprocess.run (capture_output, text, timeout, check, ...)."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT,
                          env={**os.environ, **(env or {})}, **kwargs)


def timeit(fn: Callable[[], object], warmup: int = 2, reps: int = 5, inner: int = 1) -> dict:
    """Runs fn `warmup` times, then `reps` timed repetitions of `inner` calls each.

    Returns seconds per call: median, min and every repetition.
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - start) / inner)
    return {"median_s": statistics.median(times), "min_s": min(times), "all_s": times}


def interleaved_times(calls: dict[str, Callable[[], object]], rounds: int,
                      warmup: int = 3) -> dict[str, list[float]]:
    """Seconds of every timed call of each callable, timed round-robin (one call of each per
    round) after `warmup` calls each, so machine load hits every system alike (the A/B
    scripts)."""
    for call in calls.values():
        for _ in range(warmup):
            call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return times


def interleaved_medians(calls: dict[str, Callable[[], object]], rounds: int,
                        warmup: int = 3) -> dict[str, float]:
    """Median seconds per call of each callable (`interleaved_times`)."""
    return {name: statistics.median(t)
            for name, t in interleaved_times(calls, rounds, warmup).items()}


def step_stats(times: dict[str, list[float]]) -> dict[str, dict]:
    """Each system's median and quartiles in ms ({"step_ms", "quartiles_ms"}), from its step
    times in seconds."""
    return {name: {"step_ms": round(1e3 * statistics.median(t), 2),
                   "quartiles_ms": [round(1e3 * q, 2) for q in statistics.quantiles(t, n=4)]}
            for name, t in times.items()}


def report(result: dict, path: str | None) -> None:
    """Prints a probe's result as JSON and, with a path, writes it there too (atomically)."""
    text = json.dumps(result, indent=2)
    print(text)
    if path:
        from tfbert.fileio import write_text

        write_text(path, text + "\n")


def child_rounds(module: str, args: Sequence[str],
                 settings: Sequence[tuple[str, dict[str, str], list[str]]],
                 rounds: int) -> Iterator[tuple[str, dict | str]]:
    """Runs `python -m module args` once per (name, environment, extra arguments) setting, the
    settings in turn for `rounds` rounds, each in a child process with that environment added:
    the probes' way of comparing process-wide settings (thread pools, oneDNN and XLA flags).
    Yields (name, the JSON object the child printed on its last stdout line), or (name, its
    stderr) when it failed."""
    for _ in range(rounds):
        for name, env, extra in settings:
            out = run_module(module, [*args, *extra], env=env, capture_output=True, text=True)
            if out.returncode:
                yield name, out.stderr.strip()
            else:
                yield name, json.loads(out.stdout.strip().splitlines()[-1])


def without_forms(method: Callable, **off: bool) -> Callable:
    """`method` run (and traced) with the named tfbert.ops forms switched off (e.g.
    heads_first=False): keras's own computation in their place, the A side of the A/B
    scripts' form variants."""
    def stock(self, *args, **kwargs):
        import dataclasses

        from tfbert.ops import forms, use_forms

        with use_forms(dataclasses.replace(forms(), **off)):
            return method(self, *args, **kwargs)
    return stock


def matmul_peak_probe(n: int = 2048, dtype: str = "float32",
                      jit_compile: bool = True) -> Callable[[], float]:
    """A compiled chain of 4 n x n matmuls; the returned callable times one run and returns
    its FLOP/s. Benchmarks call it between their systems' steps, so the peak is measured under
    the same load as they are. (bfloat16: XLA's CPU dot does not use AMX, oneDNN's does, so
    probe both ways and take the faster.)"""
    import tensorflow as tf

    a = tf.random.normal((n, n), dtype=dtype)
    b = tf.random.normal((n, n), dtype=dtype)

    @tf.function(jit_compile=jit_compile)
    def chain(x):
        for _ in range(4):
            x = tf.matmul(x, b) * 0.01
        return x

    chain(a).numpy()

    def probe() -> float:
        start = time.perf_counter()
        chain(a).numpy()
        return 4 * 2 * n**3 / (time.perf_counter() - start)

    return probe


def matmul_peak_flops(n: int = 2048, dtype: str = "float32", reps: int = 5,
                      jit_compile: bool = True) -> float:
    """The machine's float32 matmul rate (FLOP/s) with TensorFlow: the ceiling MFU is measured
    against. Best of `reps` timed runs of `matmul_peak_probe`."""
    probe = matmul_peak_probe(n, dtype, jit_compile)
    return max(probe() for _ in range(reps))


def bert_forward_flops(hidden: int, layers: int, intermediate: int, vocab: int, seq: int,
                       predictions: int, nsp: bool = True,
                       last_layer_rows: int | None = None) -> float:
    """Matmul FLOPs of one sequence's forward pass through encoder + MLM head (+ NSP).

    Per layer: Q, K, V, output projections 4*2*T*H^2; scores and context 2*2*T^2*H; FFN 2*2*T*H*I.
    MLM head on `predictions` gathered positions: transform 2*H^2 and vocab projection 2*H*V each.
    Embedding lookups and elementwise work are not counted (as in MFU conventions).
    `last_layer_rows` = R: the last layer computes its output only at R rows (tfbert's
    pretrainer: [CLS] and the masked positions): K, V on T rows, Q, output, attention and FFN
    on R.
    """
    def layer(rows: int) -> int:
        return (4 * seq * hidden**2 + 4 * rows * hidden**2 + 4 * rows * seq * hidden
                + 4 * rows * hidden * intermediate)

    last = layer(seq if last_layer_rows is None else last_layer_rows)
    head = predictions * (2 * hidden**2 + 2 * hidden * vocab)
    pooler_nsp = (2 * hidden**2 + 4 * hidden) if nsp else 0
    return (layers - 1) * layer(seq) + last + head + pooler_nsp


def classifier_forward_flops(hidden: int, layers: int, intermediate: int, seq: int,
                             classes: int, last_layer_rows: int | None = None) -> float:
    """Matmul FLOPs of one sequence's forward pass through a sequence classifier: the encoder
    (`bert_forward_flops`' layers), the pooler (2*H^2) and the classifier (2*H*classes);
    elementwise work not counted. `last_layer_rows=1` is tfbert's BertClassifier, whose last
    block runs only at [CLS] (docs/performance.md, "Last block only where the heads read it");
    None, the full last block the peers run."""
    encoder = bert_forward_flops(hidden, layers, intermediate, vocab=0, seq=seq, predictions=0,
                                 nsp=False, last_layer_rows=last_layer_rows)
    return encoder + 2 * hidden**2 + 2 * hidden * classes


# The libraries `gemm_rate` measures, each with its own GEMM kernels: TensorFlow's graph
# kernels (oneDNN or Eigen), XLA's CPU dot, NumPy's BLAS, PyTorch's, and ONNX Runtime's MLAS.
GEMM_LIBRARIES = ("tensorflow-xla", "tensorflow", "numpy", "pytorch", "onnxruntime")


def gemm_rate(library: str, n: int = 2048, reps: int = 5) -> float:
    """The best FLOP/s of `reps` timed n x n float32 products by one of GEMM_LIBRARIES, on all
    the process's threads as that library sets them. The best over libraries, each in its own
    process, is the fastest float32 GEMM this host has delivered: a ceiling for a float32
    forward pass, whose FLOPs are almost all matmuls (`bench.bench_inference` reports each
    system's rate against it)."""
    import numpy as np

    if library.startswith("tensorflow"):
        return matmul_peak_flops(n, reps=reps, jit_compile=library == "tensorflow-xla")
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    if library == "numpy":
        product = lambda: a @ b  # noqa: E731
    elif library == "pytorch":
        import torch

        ta, tb = torch.from_numpy(a), torch.from_numpy(b)

        def product():
            with torch.no_grad():
                return torch.matmul(ta, tb)
    elif library == "onnxruntime":
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper

        graph = helper.make_graph(
            [helper.make_node("MatMul", ["a", "b"], ["c"])], "gemm",
            [helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n])],
            [helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])],
            initializer=[numpy_helper.from_array(b, "b")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        product = lambda: session.run(None, {"a": a})  # noqa: E731
    else:
        raise ValueError(f"unknown GEMM library {library!r}; choose from {GEMM_LIBRARIES}")
    return 2 * n**3 / timeit(product, warmup=2, reps=reps)["min_s"]


def op_times(logdir: str) -> collections.Counter:
    """Total microseconds per TF op type (the event name's part after the last ':') on the host
    threads of the newest TensorFlow profiler trace (XSpace protobuf) under `logdir`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    path = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))[-1]
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    totals: collections.Counter = collections.Counter()
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            if "tf_Compute" not in line.name and "tf_inter" not in line.name.lower() \
                    and "Executor" not in line.name:
                continue
            for event in line.events:
                name = names.get(event.metadata_id, "?")
                op_type = name.rsplit(":", 1)[-1]
                if ":" in name and op_type != "Process":  # "Process" encloses the ops
                    totals[op_type] += event.duration_ps / 1e6
    return totals


def machine_name() -> str:
    return f"{platform.node() or 'host'}-{os.cpu_count()}cpu"


# What `--emulate_avx2` sets, in this process and (through os.environ) every child: oneDNN's
# kernels capped at AVX2, XLA's CPU code generation capped at AVX2, and TensorFlow's oneDNN
# graph rewrites off, as TensorFlow's own default leaves them on a CPU without AVX512_VNNI,
# AVX512_BF16 or AMX (a setting already in the environment is kept). The bfloat16 systems are
# left out under it.
EMULATE_AVX2_ENV = {"ONEDNN_MAX_CPU_ISA": "AVX2", "TF_ENABLE_ONEDNN_OPTS": "0"}
XLA_AVX2_FLAG = "--xla_cpu_max_isa=AVX2"
EMULATED_ENV = "TFBERT_BENCH_EMULATE"  # set to "avx2" while emulating (children inherit it)
EMULATION_LIMITS = ("XLA-compiled systems (keras-hub's, the --jit_compile export, jit_compile "
                    "steps, the matmul peak probe) run their dots at the host's full ISA: "
                    "--xla_cpu_max_isa does not restrict them; PyTorch and ONNX Runtime are "
                    "not emulated")


def emulate_avx2() -> dict[str, str]:
    """Makes this process (before TensorFlow is imported) and its children run as on an
    AVX2-only host, as far as environment settings can (EMULATE_AVX2_ENV, XLA_AVX2_FLAG): the
    CPU's wider units stay visible to everything else (PyTorch, ONNX Runtime, NumPy), so peers
    are not emulated, and XLA's dots ignore the ISA limit (EMULATION_LIMITS): only TensorFlow's
    graph kernels run as on an AVX2 host. Returns the settings now in force."""
    for key, value in EMULATE_AVX2_ENV.items():
        os.environ.setdefault(key, value)
    flags = os.environ.get("XLA_FLAGS", "")
    if "--xla_cpu_max_isa" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {XLA_AVX2_FLAG}".strip()
    os.environ[EMULATED_ENV] = "avx2"
    return {key: os.environ[key] for key in (*EMULATE_AVX2_ENV, "XLA_FLAGS", EMULATED_ENV)}


def new_results_file(study: str, output: str | None) -> str:
    """Where a study writes its record: `output`, or bench/results/<study>-<machine>-<date>.json;
    SystemExit if that file exists (a record is never replaced)."""
    import datetime

    output = output or os.path.join(
        "bench", "results", f"{study}-{machine_name()}-{datetime.date.today().isoformat()}.json")
    if os.path.exists(output):
        raise SystemExit(f"{study}: {output} exists; give another --output")
    return output


def load_average() -> list[float]:
    """`uptime`'s 1, 5 and 15 minute load averages (os.getloadavg), for results files."""
    return [round(x, 2) for x in os.getloadavg()]


def emulated() -> str | None:
    """"avx2" while `emulate_avx2` is in force (here or in a parent process), else None."""
    return os.environ.get(EMULATED_ENV) or None


def isa_record(cpuinfo: str | None = None) -> dict:
    """The host's instruction sets for a results file: /proc/cpuinfo's model name, its ISA
    flags (tfbert.export.target_cpu.ISA_FLAGS: present or not), the CPU kind they make, and
    under `--emulate_avx2` the emulated kind and the settings that emulate it.

    Args:
        cpuinfo: str or None. A /proc/cpuinfo text (None: this host's).
    """
    from tfbert.export.target_cpu import host_cpu, parse_cpuinfo

    cpu = host_cpu() if cpuinfo is None else parse_cpuinfo(cpuinfo)
    record = {**cpu.record(), "emulated": emulated()}
    record["effective_kind"] = record["emulated"] or record["kind"]
    if record["emulated"]:
        record["emulation"] = {key: os.environ.get(key, "") for key in
                               (*EMULATE_AVX2_ENV, "XLA_FLAGS")}
        # Compared with a real AVX2 EPYC's figures on an AVX-512 EPYC (docs/performance.md,
        # "Emulating an AVX2 host"): TensorFlow's graph is emulated, XLA's dots are not.
        record["emulation_limits"] = EMULATION_LIMITS
    record["onednn_opts_env"] = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    return record
