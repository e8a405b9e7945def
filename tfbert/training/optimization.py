"""BERT's optimizers: AdamW, LAMB or google-research/bert's own, warmup then linear decay,
global-norm clipping.

The recipe of Devlin et al. (2018): weight decay 0.01 on every weight except LayerNorm
parameters and biases, epsilon 1e-6, gradients clipped to a global norm of 1.0, and a learning
rate that rises linearly from 0 over `num_warmup_steps` and falls linearly to 0 at
`num_train_steps`. Each name of `create_optimizer` is one update:

- "adamw": `AdamW`, Adam with bias correction and decoupled weight decay (what transformers,
  tensorflow/models and keras-hub use).
- "lamb": `Lamb`, the reference LAMB.
- "adamw_google": `AdamWeightDecay`, google-research/bert's `AdamWeightDecayOptimizer` (no bias
  correction, the decay inside the update) and its clip: the global norm as
  `tf.clip_by_global_norm` computes it on google-research/bert's gradients. Under it a run
  follows google-research/bert's.

and each schedule (`LR_SCHEDULES`) one form of the decay after warmup:

- "polynomial" (the default, the only one for "adamw_google"): `WarmupPolynomialDecay`,
  peak * (1 - s / total), as google-research/bert and tensorflow/models decay.
- "linear": `WarmupLinearDecay`, peak * (total - s) / (total - warmup), as transformers'
  `get_linear_schedule_with_warmup` decays (and pretraining runs started without the choice).

Four things differ from the Keras optimizers as they come, each deliberately:

- Under `tf.distribute` Keras clips each replica's gradients before summing them, so the clip
  sees a per-replica norm. Here gradients are summed across replicas first and the clip sees the
  global norm, as on one device.
- Keras's `gradient_accumulation_steps` puts the update (which synchronises replicas) inside a
  `cond`, which tf.distribute refuses except under XLA on GPUs, and it advances learning-rate
  schedules on every micro-batch. Accumulation here (`_BertOptimizer`) takes the branch in a
  cross-replica context, works under every strategy, and counts `iterations` in updates, so k
  micro-batches of size b follow exactly the updates of one batch of k*b (Keras averages the k
  gradients; so does this).
- Keras's `Lamb` applies weight decay outside the trust ratio. `Lamb` here is the reference
  algorithm (You et al., 2019, Algorithm 2; NVIDIA's and TF-Addons' LAMB used for BERT): the
  decay term joins the update before the layer-wise trust ratio, and excluded variables
  (LayerNorm, biases) get neither decay nor layer adaptation.
- Keras's (and TensorFlow's) global norm counts each row of a sparse gradient (an
  `IndexedSlices`, e.g. the token-type table's: one row per position over 2 ids) separately, so
  rows that hit the same id are not summed first. "adamw" and "lamb" sum a sparse gradient's
  rows of the same id before the clip (`summed_rows`; it stays sparse), so they clip by the
  true global norm.

The optimizers (`tfbert.training.optimizers`; the schedules in `tfbert.training.schedules`, the
gradient sums in `tfbert.training.gradients`) run under Keras's TensorFlow backend (they use
tf.distribute). They use Keras's and TensorFlow's public APIs, but for two uses isolated in one
function each, where there is none: `_slot_index` (a variable's slots, as Keras's guide to writing
optimizers does it) and `_merge_call_needed` (whether the strategy wants a merge call).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import keras

from tfbert.errors import UserError
from tfbert.training.optimizers import (
    EXCLUDED_NAMES,
    AdamW,
    AdamWeightDecay,
    Lamb,
    LossScaleOptimizer,
    is_excluded_from_weight_decay,
)
from tfbert.training.schedules import (
    DEFAULT_LR_SCHEDULE,
    LR_SCHEDULES,
    WarmupLinearDecay,
    WarmupPolynomialDecay,
)

OPTIMIZERS = ("adamw", "lamb", "adamw_google")
# What each name runs, for --help and the docs.
OPTIMIZER_HELP = (
    "adamw: Adam with bias correction and decoupled weight decay (as transformers, "
    "tensorflow/models and keras-hub); lamb: LAMB (very large batches); adamw_google: "
    "google-research/bert's AdamWeightDecayOptimizer (no bias correction, decay inside the "
    "update) and its clip; all: weight decay except LayerNorm and biases, epsilon 1e-6, "
    "gradients clipped to global norm 1.0 (adamw, lamb: the true norm; adamw_google: the norm "
    "google-research/bert computes); the rate: see lr_schedule")


def create_optimizer(
    learning_rate: float,
    num_train_steps: int,
    num_warmup_steps: int = 0,
    optimizer: str = "adamw",
    weight_decay: float = 0.01,
    epsilon: float = 1e-6,
    clip_norm: float | None = 1.0,
    gradient_accumulation_steps: int = 1,
    loss_scale: bool = False,
    variables: Iterable[Any] | None = None,
    lr_schedule: str = DEFAULT_LR_SCHEDULE,
) -> keras.optimizers.Optimizer:
    """BERT's optimizer with its schedule, ready for `model.compile(optimizer=...)`.

    Args:
        learning_rate: float. Peak learning rate (reached at the end of warmup).
        num_train_steps: int. Optimizer updates in the whole run (the rate is 0 there).
        num_warmup_steps: int. Updates of linear warmup.
        optimizer: str. "adamw" (`AdamW`), "lamb" (`Lamb`) or "adamw_google"
            (google-research/bert's `AdamWeightDecay` and its clip).
        weight_decay: float. Decay rate for weights that are not LayerNorm parameters or biases.
        epsilon: float. Adam/LAMB epsilon.
        clip_norm: float or None. Global gradient-norm clip (None for no clipping): the true
            norm for "adamw" and "lamb", google-research/bert's for "adamw_google".
        gradient_accumulation_steps: int. Micro-batches per update (1 = none); their gradients
            are averaged, so k micro-batches of b make the update of one batch of k*b.
        loss_scale: bool. Wrap in dynamic loss scaling (for float16 mixed precision).
        variables: iterable of variables or None. When given, the weight-decay exclusions are
            also resolved on these variables' paths (e.g. the model's trainable variables);
            they are always matched on the variables' names.
        lr_schedule: str. "polynomial" (`WarmupPolynomialDecay`, google-research/bert's and
            tensorflow/models' decay) or "linear" (`WarmupLinearDecay`, transformers' decay);
            "adamw_google" takes "polynomial" only.

    Returns:
        A Keras optimizer (a LossScaleOptimizer around it when `loss_scale`).

    Example:
    >>> opt = create_optimizer(1e-4, num_train_steps=1000, num_warmup_steps=100)
    >>> round(float(opt.learning_rate), 6)  # step 0 of warmup
    0.0
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    if lr_schedule not in LR_SCHEDULES:
        raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, got {lr_schedule!r}")
    check_schedule(optimizer, lr_schedule)
    if gradient_accumulation_steps < 1:
        raise ValueError(
            f"gradient_accumulation_steps must be >= 1, got {gradient_accumulation_steps}")
    schedule = (WarmupPolynomialDecay if lr_schedule == "polynomial" else WarmupLinearDecay)(
        learning_rate, num_train_steps, num_warmup_steps)
    if optimizer == "adamw_google":
        opt = AdamWeightDecay(
            schedule, weight_decay_rate=weight_decay, epsilon=epsilon,
            clip_norm=clip_norm or None, accumulation_steps=gradient_accumulation_steps)
        return LossScaleOptimizer(opt) if loss_scale else opt
    common = dict(learning_rate=schedule, beta_1=0.9, beta_2=0.999, epsilon=epsilon,
                  global_clipnorm=clip_norm if clip_norm else None,
                  accumulation_steps=gradient_accumulation_steps)
    if optimizer == "adamw":
        opt = AdamW(weight_decay=weight_decay, **common)
        if variables is not None:
            opt.exclude_from_weight_decay(
                var_list=[v for v in variables if is_excluded_from_weight_decay(v)],
                var_names=list(EXCLUDED_NAMES))
    else:
        opt = Lamb(decay_rate=weight_decay, **common)
    if loss_scale:
        opt = LossScaleOptimizer(opt)
    return opt


def check_schedule(optimizer: str, lr_schedule: str | None) -> None:
    """Raises UserError (a ValueError) for a schedule the optimizer does not take:
    "adamw_google" is google-research/bert's update with its schedule, "polynomial"."""
    if optimizer == "adamw_google" and lr_schedule not in (None, "polynomial"):
        raise UserError(f"optimizer adamw_google runs google-research/bert's schedule "
                         f"(lr_schedule polynomial), not lr_schedule {lr_schedule}")
