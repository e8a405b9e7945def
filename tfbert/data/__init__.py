"""Data: the built-in corpora, pretraining records and the pretraining input pipeline.

`tfbert.data.corpora` is plain Python; `pretraining_dataset` (TensorFlow) is loaded on first use,
so `from tfbert.data import corpora` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from tfbert.data import corpora

_LAZY = {
    "pretraining_dataset": "tfbert.data.pretraining",
    "PretrainingTransform": "tfbert.data.pretraining",
    "DynamicMasker": "tfbert.data.masking",
}

__all__ = ["corpora", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'tfbert.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY))
