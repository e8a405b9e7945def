"""BERT's learning-rate schedules: linear warmup from 0, then a decay to 0 at the last step.

    polynomial  `WarmupPolynomialDecay`: peak * (1 - s / total), as google-research/bert and
                tensorflow/models decay (the default)
    linear      `WarmupLinearDecay`: peak * (total - s) / (total - warmup), as transformers'
                `get_linear_schedule_with_warmup` decays

`tfbert.training.optimization.create_optimizer` builds the one `lr_schedule` names.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

LR_SCHEDULES = ("polynomial", "linear")
DEFAULT_LR_SCHEDULE = "polynomial"  # google-research/bert's and tensorflow/models' decay
LR_SCHEDULE_HELP = (
    "The learning rate: linear warmup peak * s / warmup, then polynomial: peak * (1 - s / "
    "total), as google-research/bert and tensorflow/models (the only one for adamw_google); "
    "linear: peak * (total - s) / (total - warmup), as transformers' "
    "get_linear_schedule_with_warmup")


@keras.saving.register_keras_serializable(package="tfbert")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak_learning_rate`, then linear decay to 0 at `num_train_steps`.

    lr(s) = peak * s / warmup for s < warmup, else peak * (total - s) / (total - warmup), and 0
    from `num_train_steps` on; `s` is the optimizer's update count (`optimizer.iterations`).

    Args:
        peak_learning_rate: float. The rate reached at the end of warmup.
        num_train_steps: int. Optimizer updates after which the rate is 0.
        num_warmup_steps: int. Updates of linear warmup (0 for none).

    Example:
    >>> schedule = WarmupLinearDecay(1e-3, num_train_steps=100, num_warmup_steps=10)
    >>> round(float(schedule(5)), 6), round(float(schedule(55)), 6)
    (0.0005, 0.0005)
    """

    def __init__(self, peak_learning_rate: float, num_train_steps: int,
                 num_warmup_steps: int = 0) -> None:
        if num_train_steps <= 0:
            raise ValueError(f"num_train_steps must be positive, got {num_train_steps}")
        if not 0 <= num_warmup_steps <= num_train_steps:
            raise ValueError(f"num_warmup_steps {num_warmup_steps} must be in "
                             f"[0, num_train_steps={num_train_steps}]")
        self.peak_learning_rate = float(peak_learning_rate)
        self.num_train_steps = int(num_train_steps)
        self.num_warmup_steps = int(num_warmup_steps)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        peak = self.peak_learning_rate
        warmup = float(self.num_warmup_steps)
        total = float(self.num_train_steps)
        warm = peak * step / max(warmup, 1.0)
        decay = peak * ops.maximum(total - step, 0.0) / max(total - warmup, 1.0)
        return ops.where(step < warmup, warm, decay)

    def get_config(self) -> dict[str, Any]:
        return {"peak_learning_rate": self.peak_learning_rate,
                "num_train_steps": self.num_train_steps,
                "num_warmup_steps": self.num_warmup_steps}


@keras.saving.register_keras_serializable(package="tfbert")
class WarmupPolynomialDecay(WarmupLinearDecay):
    """google-research/bert's schedule: linear decay to 0 over all `num_train_steps`, wrapped by
    linear warmup (its `create_optimizer`: `polynomial_decay` with power 1.0, then warmup).

    lr(s) = peak * (s / warmup) for s < warmup, else peak * (1 - min(s, total) / total); `s` is
    the optimizer's update count (`optimizer.iterations`), the step being taken. After warmup
    this is (total - warmup) / total of `WarmupLinearDecay`'s rate; tensorflow/models'
    `PolynomialWarmUp` is the same form.

    Args:
        peak_learning_rate: float. The rate warmup rises to (google-research/bert's init_lr).
        num_train_steps: int. Optimizer updates after which the rate is 0.
        num_warmup_steps: int. Updates of linear warmup (0 for none).

    Example:
    >>> schedule = WarmupPolynomialDecay(1e-3, num_train_steps=100, num_warmup_steps=10)
    >>> [round(float(schedule(s)), 6) for s in (5, 10, 55)]
    [0.0005, 0.0009, 0.00045]
    """

    def __call__(self, step):
        # The operations of google-research/bert's graph, in its order and in float32.
        step = ops.cast(step, "float32")
        peak = ops.cast(self.peak_learning_rate, "float32")
        total = float(self.num_train_steps)
        decay = peak * (1.0 - ops.minimum(step, total) / total)
        if not self.num_warmup_steps:
            return decay
        warmup = float(self.num_warmup_steps)
        warm = peak * (step / warmup)
        return ops.where(step < warmup, warm, decay)
