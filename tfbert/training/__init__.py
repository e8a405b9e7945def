"""Training: optimizers and schedules, strategy selection, callbacks, and pretraining.

    from tfbert.training import PretrainConfig, run_pretraining
    results = run_pretraining(PretrainConfig(num_train_steps=100))

Names load on first use (each module imports TensorFlow).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "create_optimizer": "tfbert.training.optimization",
    "WarmupLinearDecay": "tfbert.training.optimization",
    "AdamW": "tfbert.training.optimization",
    "Lamb": "tfbert.training.optimization",
    "get_strategy": "tfbert.training.distribute",
    "PretrainConfig": "tfbert.training.pretrain",
    "run_pretraining": "tfbert.training.pretrain",
    "default_data": "tfbert.training.pretrain",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'tfbert.training' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY))
