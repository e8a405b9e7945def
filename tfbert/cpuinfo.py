"""This host's CPU as /proc/cpuinfo describes it: its model name, its ISA flags and its kind.

    amx     AMX bfloat16 tiles (`amx_bf16`): Xeons from Sapphire Rapids on
    avx512  AVX-512 (`avx512f`) without AMX
    avx2    neither: AVX2-only x86 (AMD EPYC up to Zen 3, client CPUs) and every other CPU

Training reads the flags to choose bfloat16 on CPUs that run it fast
(`tfbert.training.runtime.resolve_precision`); an export reads the kind to choose its forms
(`tfbert.export.target_cpu`). Nothing here imports TensorFlow.

Example:
>>> cpu = parse_cpuinfo("model name\\t: AMD EPYC\\nflags\\t\\t: fpu sse2 avx avx2 fma\\n")
>>> cpu.model_name, cpu.kind
('AMD EPYC', 'avx2')
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

CPU_KINDS = ("avx2", "avx512", "amx")
# The /proc/cpuinfo flags that decide oneDNN's kernels and TensorFlow's oneDNN default
ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8",
             "amx_tile")


@dataclasses.dataclass(frozen=True)
class CpuInfo:
    """A CPU as /proc/cpuinfo describes it.

    Args:
        model_name: str. The "model name" line ("" when absent).
        flags: frozenset of str. The "flags" line's words (empty when absent, e.g. off Linux).
    """

    model_name: str
    flags: frozenset[str]

    @property
    def kind(self) -> str:
        """"amx" with amx_bf16, else "avx512" with avx512f, else "avx2"."""
        if "amx_bf16" in self.flags:
            return "amx"
        return "avx512" if "avx512f" in self.flags else "avx2"

    def record(self) -> dict[str, Any]:
        """{"model_name", "kind", "flags": {each of ISA_FLAGS: present}} for results files."""
        return {"model_name": self.model_name, "kind": self.kind,
                "flags": {flag: flag in self.flags for flag in ISA_FLAGS}}


def parse_cpuinfo(text: str) -> CpuInfo:
    """The first processor's model name and flags in a /proc/cpuinfo text.

    Args:
        text: str. /proc/cpuinfo's contents ("key<TAB>: value" lines).

    Returns:
        CpuInfo.
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key in ("model name", "flags") and key not in fields:
            fields[key] = value.strip()
    return CpuInfo(fields.get("model name", ""), frozenset(fields.get("flags", "").split()))


@functools.cache
def host_cpu(path: str = "/proc/cpuinfo") -> CpuInfo:
    """This host's CpuInfo (no model name and no flags where `path` cannot be read).

    Args:
        path: str. The cpuinfo file.

    Returns:
        CpuInfo.
    """
    try:
        with open(path, encoding="utf-8") as f:
            return parse_cpuinfo(f.read())
    except OSError:  # not Linux: no flags, the "avx2" kind
        return CpuInfo("", frozenset())
