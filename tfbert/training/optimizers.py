"""BERT's optimizers as Keras optimizers: `AdamW`, `Lamb`, google-research/bert's
`AdamWeightDecay`, and `LossScaleOptimizer` for float16. What each does differently from the
Keras optimizers as they come, and why, is in `tfbert.training.optimization`.
"""

from __future__ import annotations

import re
import types
from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf
from keras import ops

from tfbert.training.gradients import (
    all_reduce_gradients,
    clip_by_global_norm,
    dense_gradients,
    row_squares,
    summed_rows,
)

# Variables that get no weight decay (and, for LAMB, no layer adaptation): LayerNorm parameters
# and biases, matched on the variable's path (e.g. ".../attention_output_layer_norm/gamma") as in
# Google's optimization.py (["LayerNorm", "layer_norm", "bias"]); Keras names LayerNorm's
# parameters gamma/beta.
EXCLUDE_FROM_WEIGHT_DECAY = (r"(?i)layer_?norm", r"(^|/)\w*bias$", r"(^|/)(gamma|beta)$")
# The same rule on Keras's short variable names, for `exclude_from_weight_decay(var_names=...)`.
EXCLUDED_NAMES = ("bias", "gamma", "beta", "LayerNorm", "layer_norm")


def is_excluded_from_weight_decay(
    variable: Any, patterns: Sequence[str] = EXCLUDE_FROM_WEIGHT_DECAY
) -> bool:
    """True if `variable` (its path, else its name) matches one of `patterns` (regexes)."""
    path = getattr(variable, "path", None) or variable.name
    return any(re.search(p, path) for p in patterns)


class _BertOptimizer:
    """Mixin for Keras optimizers: global gradients across replicas, and accumulation.

    `apply()` first sums the gradients over replicas (so clipping sees the global norm and the
    accumulators stay identical on every replica). With `accumulation_steps` k > 1 it adds them
    to accumulators and, on every k-th call, applies their mean with the wrapped Keras
    optimizer (clipping, weight decay, update) and resets them. `iterations` counts updates.
    Set `reduce_gradients = False` when an outer optimizer already summed the gradients.

    What Keras's apply gets is `_clip(grads, variables)`: here the sparse gradients with their
    repeated rows summed, clipped to the global norm `clip_norm` (the `global_clipnorm` argument,
    kept from Keras, whose own clip would make every sparse gradient dense). A subclass that
    clips itself and counts sparse rows one by one (`AdamWeightDecay`) sets
    `counts_sparse_rows`: with accumulation the sum of those rows' squares is then accumulated
    too (`_row_squares`), so k micro-batches clip as one batch of k*b would.
    """

    reduce_gradients = True
    counts_sparse_rows = False

    def _init_accumulation(self, accumulation_steps: int) -> None:
        if accumulation_steps < 1:
            raise ValueError(f"gradient_accumulation_steps must be >= 1, got "
                             f"{accumulation_steps}")
        self.accumulation_steps = int(accumulation_steps)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        if self.accumulation_steps > 1:
            self._micro_steps = self.add_variable(
                (), initializer="zeros", dtype="int", aggregation="only_first_replica",
                name="micro_steps")
            self._accumulators = [self.add_variable_from_reference(v, name="accumulator")
                                  for v in var_list]
            if self.counts_sparse_rows:
                self._row_square_sum = self.add_variable(
                    (), initializer="zeros", dtype="float32",
                    aggregation="only_first_replica", name="row_square_sum")
            # id of each model variable -> its accumulator's index. Read-only: a plain dict
            # attribute would become a node of the checkpoint's object graph.
            self._accumulator_index = types.MappingProxyType(
                {id(v): i for i, v in enumerate(var_list)})

    def apply(self, grads, trainable_variables=None):
        if self.reduce_gradients:
            grads = all_reduce_gradients(grads)
        grads = list(grads)
        if self.accumulation_steps == 1:
            if trainable_variables is not None:
                trainable_variables = list(trainable_variables)
                if not self.built:
                    self.build(trainable_variables)
            return super().apply(self._clip(grads, trainable_variables), trainable_variables)
        if trainable_variables is None:
            raise ValueError("with accumulation_steps > 1, apply() needs trainable_variables "
                             "(Keras's fit passes them)")
        variables = list(trainable_variables)
        if not self.built:
            self.build(variables)
        if not _merge_call_needed():
            return self._accumulate_or_update(tf.distribute.get_strategy(), grads, variables)
        return tf.distribute.get_replica_context().merge_call(
            self._accumulate_or_update, args=(grads, variables))

    def _accumulate_or_update(self, strategy, grads, variables):
        """Adds `grads` to the accumulators, or applies their mean on every k-th call. Runs
        where the update may sit in a cond: cross-replica (or replica, without merge calls)."""
        cross_replica = tf.distribute.in_cross_replica_context()
        accumulators = [self._accumulators[self._accumulator_index[id(v)]] for v in variables]

        def add(acc, g):
            return acc.assign_add(tf.convert_to_tensor(g))

        def accumulate():
            for acc, g in zip(accumulators, grads, strict=True):
                if g is not None:
                    strategy.extended.update(acc.value, add, args=(g,), group=False)
            rows = [g for g, c in zip(grads, self._rows_counted(grads, variables), strict=True)
                    if c]
            if rows:
                strategy.extended.update(
                    self._row_square_sum.value, lambda a, *r: a.assign_add(row_squares(r)),
                    args=tuple(rows), group=False)
            return tf.constant(0)

        def mean_and_apply(grads, variables):
            k = float(self.accumulation_steps)
            mean = [None if g is None else (tf.convert_to_tensor(g) + acc.value) / k
                    for g, acc in zip(grads, accumulators, strict=True)]
            counted = self._rows_counted(grads, variables)
            if any(counted):
                # The big batch's rows are the k micro-batches' rows, each / k.
                rows = row_squares([g for g, c in zip(grads, counted, strict=True) if c])
                rows = (self._row_square_sum + rows) / (k * k)
                mean = self._clip(mean, variables, counted=counted, counted_squares=rows)
            else:
                mean = self._clip(mean, variables)
            super(_BertOptimizer, self).apply(mean, variables)

        def update():
            if cross_replica:
                strategy.extended.call_for_each_replica(mean_and_apply, args=(grads, variables))
            else:
                mean_and_apply(grads, variables)
            for acc in [*accumulators, *([self._row_square_sum]
                                         if self.counts_sparse_rows else [])]:
                strategy.extended.update(acc.value, lambda a: a.assign(tf.zeros_like(a)),
                                         group=False)
            return tf.constant(0)

        is_update = tf.equal((self._micro_steps + 1) % self.accumulation_steps, 0)
        tf.cond(is_update, update, accumulate)
        strategy.extended.update(self._micro_steps.value, lambda a: a.assign_add(1),
                                 group=False)

    def _clip(self, grads, variables, counted=None, counted_squares=None):
        """The gradients Keras's apply gets: here each sparse one with its repeated rows summed
        (`summed_rows`, still sparse), all clipped to the true global norm `clip_norm` (when
        set). `counted` (which gradients the norm counts row by row, their dense mean given)
        and `counted_squares` (those rows' sum of squares) serve subclasses with
        `counts_sparse_rows`."""
        grads = summed_rows(grads)
        return clip_by_global_norm(grads, self.clip_norm) if self.clip_norm else grads

    def _rows_counted(self, grads, variables) -> list[bool]:
        """Which of `grads` the clip's norm counts row by row: none here (the true norm)."""
        return [False] * len(grads)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return list(grads_and_vars)  # already summed in apply()

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["accumulation_steps"] = self.accumulation_steps
        config["global_clipnorm"] = self.clip_norm
        return config


def _slot_index(optimizer: keras.optimizers.Optimizer, variable: Any) -> int:
    """The index of `variable`'s slots (moments) in `optimizer`'s per-variable lists.

    `update_step` receives the backend variable, or under tf.distribute one replica's
    component, not the Keras variable the optimizer was built with; only Keras's own key maps
    those back. `_get_variable_index` is what Keras's guide to writing an optimizer calls in
    `update_step` (the `keras.optimizers.Optimizer` docstring example); there is no public
    method. Checked on keras 3.15.1, tensorflow 2.21.0.
    """
    return optimizer._get_variable_index(variable)


def _merge_call_needed() -> bool:
    """Whether the current strategy wants cross-replica work done in a `merge_call` (False
    without a strategy, and for Mirrored strategies under XLA on GPUs, where merge calls are not
    supported and replicas update in replica context).

    TensorFlow answers this only through `tf.__internal__` (Keras's optimizers ask the same);
    there is no public API. Checked on tensorflow 2.21.0, keras 3.15.1.
    """
    return not tf.__internal__.distribute.strategy_supports_no_merge_call()


@keras.saving.register_keras_serializable(package="tfbert")
class AdamW(_BertOptimizer, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` (decoupled weight decay, bias-corrected moments) with global
    gradients across replicas and distribution-safe accumulation (`_BertOptimizer`).

    Args:
        accumulation_steps: int. Micro-batches whose mean gradient makes one update.
        **kwargs: arguments of `keras.optimizers.AdamW` (not `gradient_accumulation_steps`).
    """

    def __init__(self, accumulation_steps: int = 1, **kwargs) -> None:
        # Keras's global_clipnorm is kept as clip_norm: `_clip` applies it, Keras does not.
        clip_norm = kwargs.pop("global_clipnorm", None)
        super().__init__(**kwargs)
        self.clip_norm = clip_norm or None
        self._init_accumulation(accumulation_steps)
        # By name, so a deserialized optimizer (Keras does not save the exclusions) keeps them.
        self.exclude_from_weight_decay(var_names=list(EXCLUDED_NAMES))

    def update_step(self, gradient, variable, learning_rate):
        """Keras Adam's update in one pass on TensorFlow.

        Keras writes the update as about a dozen elementwise ops, each a full pass over the
        variable and its two moments; over BERT's parameters (a dense gradient for the whole
        word table, which the MLM head shares) that is most of the optimizer's time on a CPU.
        TensorFlow's `ResourceApplyAdam` kernel computes the same formula in that order (m +=
        (g - m)(1 - b1); v += (g^2 - v)(1 - b2); w -= lr_t m / (sqrt(v) + eps), lr_t = lr
        sqrt(1 - b2^t) / (1 - b1^t)) in one pass. A sparse gradient (the word table's) is made
        dense first, as Keras's ops make it: every row's moments decay at every step, as in
        google-research/bert. Other backends, amsgrad and distributed (mirrored) variables take
        the Keras path. Weight decay is applied before, by Keras, as always.
        """
        handles = self._fused_handles(variable)
        if handles is None:
            return super().update_step(gradient, variable, learning_rate)
        var, m, v = handles
        dtype = variable.dtype
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=var, m=m, v=v, beta1_power=tf.pow(beta_1, step),
            beta2_power=tf.pow(beta_2, step), lr=tf.cast(learning_rate, dtype), beta1=beta_1,
            beta2=beta_2, epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(tf.convert_to_tensor(gradient), dtype), use_locking=False)

    def _fused_handles(self, variable):
        """(variable, m, v) resource handles when the fused kernel applies, else None."""
        if keras.backend.backend() != "tensorflow" or self.amsgrad:
            return None
        index = _slot_index(self, variable)
        # Keras's Adam keeps its moments in these two lists (no public accessor; keras 3.15.1).
        slots = [variable, self._momentums[index], self._velocities[index]]
        slots = [getattr(s, "value", s) if isinstance(s, keras.Variable) else s for s in slots]
        # Every TF2 tf.Variable is a resource variable; a distributed one has no single handle.
        if not all(isinstance(s, tf.Variable)
                   and not isinstance(s, tf.distribute.DistributedValues) for s in slots):
            return None  # e.g. MirroredVariable: Keras's per-replica update handles those
        return tuple(s.handle for s in slots)


@keras.saving.register_keras_serializable(package="tfbert")
class AdamWeightDecay(_BertOptimizer, keras.optimizers.Optimizer):
    """google-research/bert's `AdamWeightDecayOptimizer` with its global-norm clip.

    Clip: all gradients times clip_norm / max(norm, clip_norm), the norm as
    `tf.clip_by_global_norm` computes it on google-research/bert's gradients: a sparse
    gradient's rows each on its own (its word table, looked up by `tf.gather`), but the tables it
    looks up by a one-hot matmul (its token types: `one_hot_lookups`) have dense gradients there,
    so their rows are summed first. Then for each variable w with gradient g at any step:
    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
    w -= lr * (m / (sqrt(v) + eps) + decay * w)  (decay 0 if w is excluded).
    No bias correction (Keras's and tfbert's `AdamW` divide m and v by 1 - b^t), and the decay is
    part of the update, times the same lr.

    Args:
        learning_rate: float or LearningRateSchedule. lr (google-research/bert's
            `WarmupPolynomialDecay`).
        weight_decay_rate: float. Decay of weights not excluded (BERT: 0.01).
        beta_1: float. Decay of the first moment.
        beta_2: float. Decay of the second moment.
        epsilon: float. Added to sqrt(v) (BERT: 1e-6).
        exclude_from_weight_decay: sequence of regexes on the variable path: variables without
            decay (google-research/bert's ["LayerNorm", "layer_norm", "bias"], on tfbert's
            paths).
        one_hot_lookups: sequence of regexes on the variable path: embedding tables whose
            sparse gradients the clip sums per row (google-research/bert's one-hot lookups).
        clip_norm: float or None. The global norm clipped to (None: no clip).
        accumulation_steps: int. Micro-batches whose mean gradient makes one update; the clip
            counts their rows as one batch of all of them would.
        **kwargs: base optimizer arguments (name, ...); not Keras's clipping or weight decay.

    Example:
    >>> from tfbert.training.schedules import WarmupPolynomialDecay
    >>> opt = AdamWeightDecay(WarmupPolynomialDecay(2e-5, 100, 10), weight_decay_rate=0.01)
    >>> opt.epsilon, opt.clip_norm
    (1e-06, 1.0)
    """

    counts_sparse_rows = True

    def __init__(self, learning_rate=0.001, weight_decay_rate: float = 0.0,
                 beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-6,
                 exclude_from_weight_decay: Sequence[str] = EXCLUDE_FROM_WEIGHT_DECAY,
                 one_hot_lookups: Sequence[str] = (r"token_type_embeddings",),
                 clip_norm: float | None = 1.0, accumulation_steps: int = 1,
                 name: str = "adam_weight_decay", **kwargs) -> None:
        for key in ("weight_decay", "clipnorm", "global_clipnorm", "clipvalue"):
            if kwargs.get(key):
                raise ValueError(f"AdamWeightDecay takes weight_decay_rate and clip_norm "
                                 f"(google-research/bert's), not Keras's {key}")
            kwargs.pop(key, None)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self._init_accumulation(accumulation_steps)
        self.weight_decay_rate = weight_decay_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.exclude_patterns = tuple(exclude_from_weight_decay)
        self.one_hot_patterns = tuple(one_hot_lookups)
        self.clip_norm = clip_norm

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)  # also the accumulators (_BertOptimizer.build)
        self._momentums, self._velocities = self.add_optimizer_variables(
            var_list, ["adam_m", "adam_v"])
        # Decided once on the Keras variables' paths (update_step may see backend variables).
        self._decayed = [not is_excluded_from_weight_decay(v, self.exclude_patterns)
                         for v in var_list]
        self._one_hot = [is_excluded_from_weight_decay(v, self.one_hot_patterns)
                         for v in var_list]

    def _rows_counted(self, grads, variables) -> list[bool]:
        one_hot = (self._one_hot if variables is None else
                   [self._one_hot[_slot_index(self, v)] for v in variables])
        # In a merge call the gradients are per-replica values: their type is a replica's.
        local = tf.distribute.get_strategy().experimental_local_results
        return [g is not None and isinstance(local(g)[0], tf.IndexedSlices) and not o
                for g, o in zip(grads, one_hot, strict=True)]

    def _clip(self, grads, variables, counted=None, counted_squares=None):
        """google-research/bert's `tf.clip_by_global_norm(grads, clip_norm)` (see the class);
        returns dense gradients. With accumulation, `counted` marks the gradients whose rows
        were counted one by one (`counted_squares`, their sum of squares)."""
        if not self.clip_norm:
            return dense_gradients(grads)
        if counted is None:
            counted = self._rows_counted(grads, variables)
            counted_squares = row_squares([g for g, c in zip(grads, counted, strict=True) if c])
        dense = dense_gradients(grads)
        rest = [g for g, c in zip(dense, counted, strict=True) if not c and g is not None]
        return clip_by_global_norm(dense, self.clip_norm,
                                   norm=tf.sqrt(row_squares(rest) + counted_squares))

    def update_step(self, gradient, variable, learning_rate):
        """google-research/bert's update, in its order of operations."""
        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype)
        grad = ops.cast(gradient, dtype)
        index = _slot_index(self, variable)
        m, v = self._momentums[index], self._velocities[index]
        next_m = ops.add(ops.multiply(self.beta_1, m), ops.multiply(1.0 - self.beta_1, grad))
        next_v = ops.add(ops.multiply(self.beta_2, v),
                         ops.multiply(1.0 - self.beta_2, ops.square(grad)))
        update = ops.divide(next_m, ops.add(ops.sqrt(next_v), self.epsilon))
        if self.weight_decay_rate and self._decayed[index]:
            update = ops.add(update, ops.multiply(self.weight_decay_rate, variable))
        self.assign(variable, ops.subtract(variable, ops.multiply(lr, update)))
        self.assign(m, next_m)
        self.assign(v, next_v)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        for key in ("weight_decay", "clipnorm", "global_clipnorm", "clipvalue"):
            config.pop(key, None)
        config.update(weight_decay_rate=self.weight_decay_rate, beta_1=self.beta_1,
                      beta_2=self.beta_2, epsilon=self.epsilon,
                      exclude_from_weight_decay=list(self.exclude_patterns),
                      one_hot_lookups=list(self.one_hot_patterns), clip_norm=self.clip_norm)
        return config


@keras.saving.register_keras_serializable(package="tfbert")
class Lamb(_BertOptimizer, keras.optimizers.Optimizer):
    """LAMB as in the reference (You et al., 2019): decay inside the layer-wise trust ratio.

    For each variable w with gradient g at update t:
    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
    r = m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + decay * w  (decay 0 if w is excluded);
    ratio = |w| / |r| (1 if either norm is 0, or if w is excluded);  w -= lr * ratio * r.

    Args:
        learning_rate: float or LearningRateSchedule. The base rate lr.
        beta_1: float. Decay of the first moment.
        beta_2: float. Decay of the second moment.
        epsilon: float. Added to the root of the second moment.
        decay_rate: float. Weight decay coefficient inside the trust ratio (BERT: 0.01).
        exclude_from_weight_decay: sequence of regexes on the variable path. Matching variables
            get neither weight decay nor layer adaptation.
        accumulation_steps: int. Micro-batches whose mean gradient makes one update.
        **kwargs: base optimizer arguments (global_clipnorm, ...).
    """

    def __init__(self, learning_rate=0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-6, decay_rate: float = 0.0,
                 exclude_from_weight_decay: Sequence[str] = EXCLUDE_FROM_WEIGHT_DECAY,
                 accumulation_steps: int = 1, name: str = "lamb", **kwargs) -> None:
        if kwargs.get("weight_decay"):
            raise ValueError("Lamb takes decay_rate (applied inside the trust ratio), not "
                             "weight_decay (Keras's decoupled decay)")
        kwargs.pop("weight_decay", None)
        clip_norm = kwargs.pop("global_clipnorm", None)  # applied by `_clip` (see AdamW)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.clip_norm = clip_norm or None
        self._init_accumulation(accumulation_steps)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.decay_rate = decay_rate
        self.exclude_patterns = tuple(exclude_from_weight_decay)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)  # also the accumulators (_BertOptimizer.build)
        self._momentums, self._velocities = self.add_optimizer_variables(
            var_list, ["momentum", "velocity"])
        # Decided once on the Keras variables' paths (update_step may see backend variables).
        self._excluded = [is_excluded_from_weight_decay(v, self.exclude_patterns)
                          for v in var_list]

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype)
        gradient = ops.cast(gradient, dtype)
        step = ops.cast(self.iterations + 1, dtype)
        index = _slot_index(self, variable)
        m, v = self._momentums[index], self._velocities[index]
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1.0 - self.beta_1))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1.0 - self.beta_2))
        m_hat = ops.divide(m, 1.0 - ops.power(ops.cast(self.beta_1, dtype), step))
        v_hat = ops.divide(v, 1.0 - ops.power(ops.cast(self.beta_2, dtype), step))
        update = ops.divide(m_hat, ops.add(ops.sqrt(v_hat), self.epsilon))
        if self._excluded[index]:
            self.assign_sub(variable, ops.multiply(lr, update))
            return
        if self.decay_rate:
            update = ops.add(update, ops.multiply(ops.cast(self.decay_rate, dtype), variable))
        w_norm = ops.sqrt(ops.sum(ops.square(variable)))
        u_norm = ops.sqrt(ops.sum(ops.square(update)))
        ratio = ops.where(ops.logical_and(w_norm > 0, u_norm > 0),
                          ops.divide(w_norm, ops.maximum(u_norm, 1e-30)), 1.0)
        self.assign_sub(variable, ops.multiply(ops.multiply(lr, ratio), update))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.pop("weight_decay", None)
        config.update(beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon,
                      decay_rate=self.decay_rate,
                      exclude_from_weight_decay=list(self.exclude_patterns))
        return config


@keras.saving.register_keras_serializable(package="tfbert")
class LossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """Dynamic loss scaling for float16 that sums gradients across replicas before checking
    them for Inf/NaN, so every replica agrees on skipping a step. Arguments are those of
    `keras.optimizers.LossScaleOptimizer`."""

    def __init__(self, inner_optimizer, **kwargs) -> None:
        super().__init__(inner_optimizer, **kwargs)
        if isinstance(inner_optimizer, _BertOptimizer):
            inner_optimizer.reduce_gradients = False

    def apply(self, grads, trainable_variables=None):
        return super().apply(all_reduce_gradients(grads), trainable_variables)
