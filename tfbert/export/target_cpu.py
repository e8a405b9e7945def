"""Which CPU an export is made for (`--target_cpu`), and what the export chooses for each kind.

    auto    this host's kind, read from /proc/cpuinfo's flags
    amx     AMX bfloat16 tiles (`amx_bf16`): Xeons from Sapphire Rapids on
    avx512  AVX-512 (`avx512f`) without AMX
    avx2    neither: AVX2-only x86 (AMD EPYC up to Zen 3, client CPUs) and every other CPU

TensorFlow's Linux x86 wheels turn their oneDNN graph rewrites on by default only where the CPU
has AVX512_VNNI, AVX512_BF16 or AMX, and tfbert's inference forms (`tfbert.ops`) are written for
those rewrites; on an AVX2-only host the same graph runs on Eigen kernels, where other choices
are faster. `export_defaults(kind)` holds each kind's choice (the form set the signatures are
traced under, XLA on or off, streams); every choice is backed by a figure in
docs/performance.md ("AVX2-only hosts", "XLA on CPU"). The kind is a property of the serving
machine, so export for the machine that serves, or name it with `--target_cpu`.

Nothing here imports TensorFlow; the host's CPU is read by `tfbert.cpuinfo`.

Example:
>>> cpu = parse_cpuinfo("model name\\t: AMD EPYC\\nflags\\t\\t: fpu sse2 avx avx2 fma\\n")
>>> cpu.model_name, cpu.kind
('AMD EPYC', 'avx2')
>>> resolve_target_cpu("auto", cpu), resolve_target_cpu("amx", cpu)
('avx2', 'amx')
"""

from __future__ import annotations

import dataclasses

from tfbert.cpuinfo import CPU_KINDS, ISA_FLAGS, CpuInfo, host_cpu, parse_cpuinfo
from tfbert.errors import UserError

__all__ = ["CPU_KINDS", "ISA_FLAGS", "TARGET_CPUS", "CpuInfo", "TargetDefaults",
           "export_defaults", "export_forms", "export_settings", "host_cpu", "parse_cpuinfo",
           "resolve_target_cpu"]

TARGET_CPUS = ("auto", *CPU_KINDS)


def resolve_target_cpu(target_cpu: str, cpu: CpuInfo | None = None) -> str:
    """The CPU kind an export is made for.

    Args:
        target_cpu: str. One of TARGET_CPUS; "auto" is `cpu`'s kind.
        cpu: CpuInfo or None. The host (None: `host_cpu()`).

    Returns:
        One of CPU_KINDS.

    Raises:
        UserError: target_cpu is not one of TARGET_CPUS.
    """
    if target_cpu not in TARGET_CPUS:
        raise UserError(f"target_cpu {target_cpu!r} is not one of {', '.join(TARGET_CPUS)}")
    if target_cpu == "auto":
        return (cpu or host_cpu()).kind
    return target_cpu


@dataclasses.dataclass(frozen=True)
class TargetDefaults:
    """What an export for one CPU kind chooses where the caller does not.

    Args:
        forms: str. The `tfbert.ops` form set (FORM_SETS name) the signatures are traced under.
        jit_compile: bool. XLA-compile the model's forward (ExportSpec.jit_compile). Off for
            every kind by default: the export must serve on a stock TF Serving CPU server.
        cpu_streams: int. Streams per block (ExportSpec.cpu_streams); 1: the plain graph.
    """

    forms: str
    jit_compile: bool
    cpu_streams: int


_DEFAULTS = {
    # Measured on the AMX Xeon (docs/performance.md, "XLA on CPU" and the form sections):
    # every form, TensorFlow's graph with oneDNN's fused kernels, no XLA.
    "amx": TargetDefaults(forms="tensorflow_cpu", jit_compile=False, cpu_streams=1),
    # Measured on two AMD EPYCs with AVX-512 and no AMX (docs/performance.md, "AVX-512 hosts
    # without AMX"): TensorFlow's oneDNN rewrites are on there, XLA is level at batch 1 on the
    # Zen 5 one and slower at batch 32 on both, so the AMX host's choice.
    "avx512": TargetDefaults(forms="tensorflow_cpu", jit_compile=False, cpu_streams=1),
    # Measured on a 2-core AMD EPYC (docs/performance.md, "AVX2-only hosts"): TensorFlow's
    # oneDNN rewrites are off there by default, and without them the fused LayerNorm and the
    # heads-first attention core cost time. XLA is faster at batch 1 but stays opt-in: a stock
    # TF Serving CPU server refuses XLA-compiled functions (--xla_cpu_compilation_enabled).
    "avx2": TargetDefaults(forms="stock", jit_compile=False, cpu_streams=1),
}


def export_defaults(kind: str) -> TargetDefaults:
    """The export's choices for a CPU kind.

    Args:
        kind: str. One of CPU_KINDS (resolve "auto" with `resolve_target_cpu` first).

    Returns:
        TargetDefaults.

    Example:
    >>> export_defaults("amx").forms
    'tensorflow_cpu'
    """
    if kind not in _DEFAULTS:
        raise UserError(f"target_cpu {kind!r} is not one of {', '.join(CPU_KINDS)}")
    return _DEFAULTS[kind]


def export_forms(kind: str) -> str:
    """The `tfbert.ops` form set an export for `kind` is traced under: the kind's set where this
    process runs TensorFlow's CPU set ("tensorflow_cpu"), else this process's own set (a GPU
    host's, which the kinds do not concern).

    Args:
        kind: str. One of CPU_KINDS.

    Returns:
        str. A FORM_SETS name.
    """
    # The model's forms (Keras, TensorFlow) load only when an export picks them; the CPU
    # kinds and `--target_cpu` checks stay import-cheap for the command line.
    from tfbert.ops import default_forms

    own = default_forms().name
    return export_defaults(kind).forms if own == "tensorflow_cpu" else own


def export_settings(target_cpu: str = "auto", jit_compile: bool | None = None,
                    cpu_streams: int | None = None,
                    cpu: CpuInfo | None = None) -> tuple[str, TargetDefaults]:
    """The kind an export is made for and the settings it uses: the caller's where given, the
    kind's choice for the rest (jit_compile off when cpu_streams > 1 is given, cpu_streams 1
    when jit_compile is given true: the two do not combine).

    Args:
        target_cpu: str. One of TARGET_CPUS.
        jit_compile: bool or None. The caller's choice (None: the kind's).
        cpu_streams: int or None. The caller's choice (None: the kind's).
        cpu: CpuInfo or None. The host, for "auto" (None: `host_cpu()`).

    Returns:
        (kind, TargetDefaults with the values the export uses).

    Example:
    >>> export_settings("amx", cpu_streams=2)[1].cpu_streams
    2
    """
    kind = resolve_target_cpu(target_cpu, cpu)
    chosen = export_defaults(kind)
    if jit_compile is None:
        jit_compile = chosen.jit_compile and cpu_streams in (None, 1)
    if cpu_streams is None:
        cpu_streams = 1 if jit_compile else chosen.cpu_streams
    return kind, dataclasses.replace(chosen, jit_compile=jit_compile, cpu_streams=cpu_streams)
