"""Training: optimizers and schedules, strategy selection, callbacks, and pretraining.

    from tfbert.training import PretrainConfig, run_pretraining
    results = run_pretraining(PretrainConfig(num_train_steps=100))

Names load on first use (each module imports TensorFlow).
"""

from __future__ import annotations

from tfbert._lazy import lazy_names

_LAZY = {
    "create_optimizer": "tfbert.training.optimization",
    "WarmupLinearDecay": "tfbert.training.schedules",
    "AdamW": "tfbert.training.optimizers",
    "Lamb": "tfbert.training.optimizers",
    "get_strategy": "tfbert.training.distribute",
    "PretrainConfig": "tfbert.training.pretrain_config",
    "run_pretraining": "tfbert.training.pretrain",
    "default_data": "tfbert.pretraining_data.builtin",
    "RunConfig": "tfbert.training.config",
    "run_grid": "tfbert.training.grid",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)
