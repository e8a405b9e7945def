"""Distiller: trains a small student task model to match a fine-tuned teacher, with plain `fit`.

Knowledge distillation (Hinton et al., 2015) with DistilBERT's and TinyBERT's (Jiao et al.,
2020) additions. The teacher is frozen and runs in inference mode; the student (same task
class, same labels: `tfbert.models.students`) trains on a weighted sum of four losses, each
off at weight 0:

  soft       the teacher's outputs at temperature T as targets, times T^2 so the gradients
             keep their size whatever T (Hinton):
             - one class per example (BertClassifier): KL(softmax(z_t/T) || softmax(z_s/T));
             - multi-label: binary cross-entropy of sigmoid(z_s/T) against sigmoid(z_t/T),
               averaged over the labels;
             - tokens (BertTokenClassifier): the per-token KL, averaged over the positions the
               task scores (`DISTILL_MASK`, else the sample weights > 0, else `input_mask`);
             - CRF head: the same per-token KL on the emission scores (the logits the CRF
               reads), while the student's CRF trains on the hard labels. Matching the
               teacher's CRF posteriors per token would need forward-backward marginals,
               which `tfbert.layers.crf.LinearChainCrf` does not compute; the emissions carry
               the teacher's per-token evidence, and the transitions are C^2 + 2C numbers that
               the labels fit well (and that `students.build_student` copies from the teacher);
             - spans (BertSpanLabeler): the KL of the start and of the end distribution over
               the real positions (padding masked out), averaged.
  hard       the student task's own loss on the gold labels (`hard_loss`: by default the
             model's `default_loss()`, and for a token classifier without CRF the
             cross-entropy averaged over the weighted positions, as run_ner.py trains). Rows
             whose sample weights are all 0 are unlabelled: a loss averaged over the batch is
             rescaled to the mean over the labelled rows.
  hidden     TinyBERT: mean squared error between the student's hidden states, through a
             learned Dense projection when the widths differ, and the teacher's, at the
             embedding output (computed without dropout) and at each mapped layer; averaged
             over the real positions and the width, then over the mapped states.
  attention  TinyBERT: squared error between the student's and the teacher's attention
             probabilities (per head when the head counts match, else of the heads' means),
             summed over the keys of each query row (a row is a distribution: its mean
             squared entry is about 1/T^2 and would vanish beside the other losses), averaged
             over the real query rows, the heads and the mapped layers.

The layer map pairs student layer j with teacher layer `layer_map[j]` (0-based); the default is
TinyBERT's uniform map, teacher layer (j + 1) * L_t / L_s - 1, which is the layer a student
made by `students.student_from_teacher_layers` was copied from. The projections train with the
student and are not part of it: after `fit`, `distiller.student` is a plain task model to save
(`tfbert.save_pretrained`) and export.

Batches are (x, y), (x, y, sample_weight), or x alone (unlabelled text: no hard loss). x holds
the encoder inputs, and optionally `TEACHER_LOGITS` (the teacher's outputs computed beforehand,
so the teacher does not run: `teacher_logits()`) and `DISTILL_MASK` (token tasks: float [B, T],
the positions the soft loss reads). With hidden or attention weight the teacher runs every step
(its hidden states are needed), and `TEACHER_LOGITS` is not used.

Shape legend: B = batch, T = sequence, C = classes, H = hidden, N = heads.

Example:
>>> from tfbert import BertClassifier, BertConfig, BertEncoder
>>> def classifier(layers, width):
...     return BertClassifier(BertEncoder(BertConfig(
...         vocab_size=100, hidden_size=width, num_hidden_layers=layers,
...         num_attention_heads=4, intermediate_size=2 * width)), num_classes=3)
>>> distiller = Distiller(classifier(4, 32), classifier(2, 16), temperature=2.0,
...                       hidden_weight=1.0)
>>> distiller.compile(optimizer="adam")
>>> x = {"input_ids": np.ones((8, 6), "int32"), "input_mask": np.ones((8, 6), "int32"),
...      "segment_ids": np.zeros((8, 6), "int32")}
>>> history = distiller.fit(x, np.zeros(8, "int32"), epochs=1, verbose=0)
>>> sorted(history.history)
['hard_loss', 'hidden_loss', 'loss', 'soft_loss']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfbert.errors import UserError
from tfbert.models.classifier import BertClassifier
from tfbert.models.encoder import ENCODER_INPUTS
from tfbert.models.span_labeler import BertSpanLabeler
from tfbert.models.token_classifier import BertTokenClassifier

TEACHER_LOGITS = "teacher_logits"
DISTILL_MASK = "distill_mask"
TASK_CLASSES = (BertClassifier, BertTokenClassifier, BertSpanLabeler)
LOSSES = ("soft", "hard", "hidden", "attention")


# --- the losses, on tensors (each pinned to a numpy reference in tests/test_distiller.py) -------


def _f32(x: Any) -> tf.Tensor:
    return tf.cast(x, tf.float32)


def kl_at_temperature(teacher_logits: Any, student_logits: Any, temperature: float) -> tf.Tensor:
    """KL(softmax(z_t/T) || softmax(z_s/T)) * T^2 over the last axis: [...] from [..., C]."""
    t = _f32(teacher_logits) / temperature
    s = _f32(student_logits) / temperature
    p = tf.nn.softmax(t, axis=-1)
    kl = tf.reduce_sum(p * (tf.nn.log_softmax(t, axis=-1) - tf.nn.log_softmax(s, axis=-1)), -1)
    return kl * temperature**2


def binary_at_temperature(teacher_logits: Any, student_logits: Any,
                          temperature: float) -> tf.Tensor:
    """Binary cross-entropy of sigmoid(z_s/T) against the target sigmoid(z_t/T), averaged over
    the labels, * T^2: [B] from [B, C]."""
    target = tf.sigmoid(_f32(teacher_logits) / temperature)
    s = _f32(student_logits) / temperature
    bce = tf.nn.sigmoid_cross_entropy_with_logits(labels=target, logits=s)  # [B, C]
    return tf.reduce_mean(bce, -1) * temperature**2


def masked_mean(values: Any, mask: Any) -> tf.Tensor:
    """sum(mask * values) / sum(mask) (0 for an empty mask)."""
    mask = _f32(mask)
    return tf.math.divide_no_nan(tf.reduce_sum(mask * _f32(values)), tf.reduce_sum(mask))


def token_soft_loss(teacher_logits: Any, student_logits: Any, mask: Any,
                    temperature: float) -> tf.Tensor:
    """The per-token KL at T (* T^2) averaged over the positions of `mask` [B, T]."""
    return masked_mean(kl_at_temperature(teacher_logits, student_logits, temperature), mask)


def span_soft_loss(teacher: dict[str, Any], student: dict[str, Any], input_mask: Any,
                   temperature: float) -> tf.Tensor:
    """The KL at T (* T^2) of the start and of the end distribution over the real positions
    (logits at padding set to -1e9 in both), averaged over the batch and the two."""
    real = tf.cast(input_mask, tf.bool)
    losses = []
    for name in ("start_logits", "end_logits"):
        t = tf.where(real, _f32(teacher[name]), -1e9)
        s = tf.where(real, _f32(student[name]), -1e9)
        losses.append(tf.reduce_mean(kl_at_temperature(t, s, temperature)))
    return (losses[0] + losses[1]) / 2.0


def hidden_loss(student_states: Sequence[Any], teacher_states: Sequence[Any],
                projections: Sequence[Any] | None, input_mask: Any) -> tf.Tensor:
    """TinyBERT's hidden-state loss: for each pair, the squared error of projection(student)
    against the teacher, averaged over the width and the real positions; then over the pairs.

    Args:
        student_states, teacher_states: float [B, T, H_s] and [B, T, H_t], paired in order.
        projections: callables H_s -> H_t per pair (Dense layers), or None (equal widths).
        input_mask: int [B, T].
    """
    losses = []
    for k, (s, t) in enumerate(zip(student_states, teacher_states, strict=True)):
        s = _f32(projections[k](s) if projections else s)
        se = tf.reduce_mean(tf.square(s - _f32(t)), -1)  # [B, T]
        losses.append(masked_mean(se, input_mask))
    return tf.add_n(losses) / float(len(losses))


def attention_loss(student_probs: Sequence[Any], teacher_probs: Sequence[Any],
                   input_mask: Any) -> tf.Tensor:
    """Attention transfer: per pair of maps [B, N, T, T], the squared error summed over the keys
    of each query row, averaged over the real query rows and the heads (the heads' means when
    the counts differ); then over the pairs."""
    losses = []
    for s, t in zip(student_probs, teacher_probs, strict=True):
        s, t = _f32(s), _f32(t)
        if s.shape[1] != t.shape[1]:
            s = tf.reduce_mean(s, 1, keepdims=True)
            t = tf.reduce_mean(t, 1, keepdims=True)
        se = tf.reduce_sum(tf.square(s - t), -1)  # [B, N, T]
        mask = tf.broadcast_to(_f32(input_mask)[:, None, :], tf.shape(se))
        losses.append(masked_mean(se, mask))
    return tf.add_n(losses) / float(len(losses))


def uniform_layer_map(student_layers: int, teacher_layers: int) -> list[int]:
    """TinyBERT's uniform map: student layer j learns from teacher layer (j+1)*L_t/L_s - 1.

    Example:
    >>> uniform_layer_map(2, 4), uniform_layer_map(4, 12), uniform_layer_map(3, 3)
    ([1, 3], [2, 5, 8, 11], [0, 1, 2])
    """
    return [(j + 1) * teacher_layers // student_layers - 1 for j in range(student_layers)]


# --- one forward pass with the hidden states ---------------------------------------------------


def head_logits(model: Any, outputs: dict[str, Any], training: bool | None) -> Any:
    """The task model's outputs computed from its encoder's outputs (`BertEncoder.forward`):
    its head's layers applied as its functional graph applies them (a test pins each class to
    the model's own call)."""
    if type(model) is BertClassifier:
        x = outputs["pooled_output"]  # [B, H]
        for layer in model.hidden_layers:
            x = layer(model.head_dropout(x, training=training))
        return model.output_dense(model.head_dropout(x, training=training))  # [B, C]
    if type(model) is BertTokenClassifier:
        return model.output_dense(model.head_dropout(outputs["sequence_output"],
                                                     training=training))  # [B, T, C]
    if type(model) is BertSpanLabeler:
        logits = model.output_dense(outputs["sequence_output"])  # [B, T, 2]
        return {"start_logits": logits[:, :, 0], "end_logits": logits[:, :, 1]}
    raise UserError(f"distillation takes {', '.join(c.__name__ for c in TASK_CLASSES)}; got "
                    f"{type(model).__name__}")


def forward_with_states(model: Any, inputs: dict[str, Any], training: bool | None,
                        attention: bool) -> dict[str, Any]:
    """One pass of a task model: {"logits", "states" (the embedding output without dropout,
    then every layer's output), "attention" (every layer's probabilities, when asked)}."""
    encoder = model.encoder
    x = {name: inputs[name] for name in ENCODER_INPUTS}
    outputs = encoder.forward(x, training=training, output_attention_probs=attention)
    embedded = encoder.embeddings(x["input_ids"], x["segment_ids"], training=False)  # [B, T, H]
    return {"logits": head_logits(model, outputs, training),
            "states": [embedded, *outputs["encoder_outputs"]],
            "attention": outputs.get("attention_probs", [])}


# --- the model -----------------------------------------------------------------------------------


@keras.saving.register_keras_serializable(package="tfbert")
class Distiller(keras.Model):
    """A frozen teacher and a student of its task class, trained by `fit` on the module
    docstring's losses. Logs `loss` and `<name>_loss` for each loss that is on.

    Args:
        teacher: a fine-tuned BertClassifier, BertTokenClassifier or BertSpanLabeler; frozen
            (its `trainable` is set False) and run in inference mode.
        student: a model of the same class with the same head (classes, multi_label, CRF) and
            vocab size (`tfbert.models.students`).
        temperature: float. T of the soft loss.
        soft_weight, hard_weight, hidden_weight, attention_weight: float. Weights of the four
            losses (0 turns one off).
        layer_map: sequence of int or None. The teacher layer (0-based) of each student layer
            for hidden and attention transfer; None: `uniform_layer_map`.
        hard_loss: a Keras loss (or a dict of them for QA's two outputs) or None for the
            module docstring's default.
        **kwargs: keras.Model arguments (name).

    Raises:
        UserError: the student is not of the teacher's class, head or vocab size; a bad weight,
            temperature or layer map.
    """

    def __init__(self, teacher: Any, student: Any, temperature: float = 2.0,
                 soft_weight: float = 1.0, hard_weight: float = 1.0, hidden_weight: float = 0.0,
                 attention_weight: float = 0.0, layer_map: Sequence[int] | None = None,
                 hard_loss: Any = None, **kwargs: Any) -> None:
        _check_pair(teacher, student)
        weights = {"soft": soft_weight, "hard": hard_weight, "hidden": hidden_weight,
                   "attention": attention_weight}
        for name, value in weights.items():
            if not (isinstance(value, int | float) and np.isfinite(value) and value >= 0):
                raise UserError(f"{name}_weight must be a finite number >= 0, got {value!r}")
        if not any(weights.values()):
            raise UserError("every loss weight is 0: nothing to train")
        if not (isinstance(temperature, int | float) and np.isfinite(temperature)
                and temperature > 0):
            raise UserError(f"temperature must be a number > 0, got {temperature!r}")
        super().__init__(**kwargs)
        # === Layers ===
        self.teacher = teacher
        self.teacher.trainable = False
        self.student = student
        t_config, s_config = teacher.encoder.config, student.encoder.config
        self.layer_map = _layer_map(layer_map, s_config.num_hidden_layers,
                                    t_config.num_hidden_layers)
        self.projections = []
        if hidden_weight and s_config.hidden_size != t_config.hidden_size:
            init = keras.initializers.TruncatedNormal(stddev=s_config.initializer_range)
            self.projections = [
                keras.layers.Dense(t_config.hidden_size, kernel_initializer=init,
                                   name=f"hidden_projection_{k}", dtype="float32")
                for k in range(s_config.num_hidden_layers + 1)]
            for layer in self.projections:
                layer.build((None, None, s_config.hidden_size))
        self.trackers = {name: keras.metrics.Mean(name=f"{name}_loss")
                         for name, value in weights.items() if value}
        # === Config ===
        self.temperature = float(temperature)
        self.loss_weights = {name: float(value) for name, value in weights.items()}
        self.hard_loss = hard_loss if hard_loss is not None else default_hard_loss(student)
        self.multi_label = bool(getattr(student, "multi_label", False))
        self.built = True

    @property
    def intermediate(self) -> bool:
        """Whether hidden or attention transfer is on (the teacher then runs every step)."""
        return bool(self.loss_weights["hidden"] or self.loss_weights["attention"])

    def call(self, inputs: dict[str, Any], training: bool | None = None) -> dict[str, Any]:
        """{"student": its logits, "teacher": the teacher's (given or computed; left out when
        no loss reads it)} and, with intermediate transfer, both models' "…_states" and
        "…_attention"."""
        if not self.intermediate:
            out = {"student": self.student(inputs, training=training)}
            if self.loss_weights["soft"]:  # (labels alone need no teacher)
                teacher = (inputs[TEACHER_LOGITS] if TEACHER_LOGITS in inputs
                           else self.teacher(inputs, training=False))
                out["teacher"] = tf.nest.map_structure(tf.stop_gradient, teacher)
            return out
        attention = bool(self.loss_weights["attention"])
        s = forward_with_states(self.student, inputs, training, attention)
        t = tf.nest.map_structure(tf.stop_gradient,
                                  forward_with_states(self.teacher, inputs, False, attention))
        return {"student": s["logits"], "teacher": t["logits"],
                "student_states": s["states"], "teacher_states": t["states"],
                "student_attention": s["attention"], "teacher_attention": t["attention"]}

    def compute_loss(self, x: Any = None, y: Any = None, y_pred: Any = None,
                     sample_weight: Any = None, training: bool = True) -> tf.Tensor:
        losses = self.losses_of(x, y, y_pred, sample_weight)
        total = tf.add_n([self.loss_weights[name] * value for name, value in losses.items()])
        for name, value in losses.items():
            self.trackers[name].update_state(value)
        # Keras averages the replicas' gradients by summing them: each replica's share is
        # 1 / replicas of its mean loss (as ContrastiveTrainer does).
        return total / float(tf.distribute.get_strategy().num_replicas_in_sync)

    def losses_of(self, x: dict[str, Any], y: Any, y_pred: dict[str, Any],
                  sample_weight: Any = None) -> dict[str, tf.Tensor]:
        """Each loss that is on, unweighted: {"soft", "hard", "hidden", "attention"}."""
        weights, out = self.loss_weights, {}
        if weights["soft"]:
            out["soft"] = self._soft(x, y_pred["teacher"], y_pred["student"], sample_weight)
        if weights["hard"]:
            out["hard"] = (self._hard(y, y_pred["student"], sample_weight) if y is not None
                           else tf.constant(0.0))
        if weights["hidden"]:
            states = (y_pred["student_states"],
                      [y_pred["teacher_states"][0]]
                      + [y_pred["teacher_states"][i + 1] for i in self.layer_map])
            out["hidden"] = hidden_loss(*states, self.projections or None, x["input_mask"])
        if weights["attention"]:
            teacher = [y_pred["teacher_attention"][i] for i in self.layer_map]
            out["attention"] = attention_loss(y_pred["student_attention"], teacher,
                                              x["input_mask"])
        return out

    def _soft(self, x: dict[str, Any], teacher: Any, student: Any,
              sample_weight: Any) -> tf.Tensor:
        t = self.temperature
        if isinstance(self.student, BertSpanLabeler):
            return span_soft_loss(teacher, student, x["input_mask"], t)
        if isinstance(self.student, BertTokenClassifier):
            if DISTILL_MASK in x:
                mask = x[DISTILL_MASK]
            elif sample_weight is not None:
                mask = tf.cast(_f32(sample_weight) > 0, tf.float32)
            else:
                mask = x["input_mask"]
            return token_soft_loss(teacher, student, mask, t)
        if self.multi_label:
            return tf.reduce_mean(binary_at_temperature(teacher, student, t))
        return tf.reduce_mean(kl_at_temperature(teacher, student, t))

    def _hard(self, y: Any, y_pred: Any, sample_weight: Any) -> tf.Tensor:
        if isinstance(self.hard_loss, dict):
            return tf.add_n([_labelled_mean(loss, y[k], y_pred[k], sample_weight)
                             for k, loss in self.hard_loss.items()])
        return _labelled_mean(self.hard_loss, y, y_pred, sample_weight)

    def get_config(self) -> dict[str, Any]:
        return {"teacher": keras.layers.serialize(self.teacher),
                "student": keras.layers.serialize(self.student),
                "temperature": self.temperature,
                **{f"{name}_weight": value for name, value in self.loss_weights.items()},
                "layer_map": list(self.layer_map), "name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Distiller:
        config = dict(config)
        for name in ("teacher", "student"):
            config[name] = keras.layers.deserialize(config[name])
        return cls(**config)


def default_hard_loss(model: Any) -> Any:
    """The student task's loss: `model.default_loss()`, except a token classifier without CRF,
    whose cross-entropy is averaged over the weighted positions (as run_ner.py trains it:
    padding and unscored pieces neither count nor dilute it)."""
    if type(model) is BertTokenClassifier and model.crf is None:
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                          reduction="mean_with_sample_weight")
    return model.default_loss()


def _labelled_mean(loss: Any, y: Any, y_pred: Any, sample_weight: Any) -> tf.Tensor:
    """`loss` over the labelled rows: a mean over the batch rescaled by B / (rows with a
    weight > 0); a loss that already averages over its weights is left as it is."""
    value = loss(y, y_pred, sample_weight=sample_weight)
    if sample_weight is None or getattr(loss, "reduction", None) == "mean_with_sample_weight":
        return value
    w = _f32(sample_weight)
    rows = tf.reshape(w, [tf.shape(w)[0], -1])  # [B, ...] -> [B, K]
    labelled = tf.reduce_sum(tf.cast(tf.reduce_any(rows > 0, axis=1), tf.float32))
    return value * tf.cast(tf.shape(w)[0], tf.float32) / tf.maximum(labelled, 1.0)


def _layer_map(layer_map: Sequence[int] | None, student_layers: int,
               teacher_layers: int) -> list[int]:
    if layer_map is None:
        return uniform_layer_map(student_layers, teacher_layers)
    layer_map = [int(i) for i in layer_map]
    if len(layer_map) != student_layers or not all(0 <= i < teacher_layers for i in layer_map):
        raise UserError(f"layer_map {layer_map} must give one teacher layer in [0, "
                        f"{teacher_layers}) for each of the student's {student_layers} layers")
    return layer_map


def _check_pair(teacher: Any, student: Any) -> None:
    """UserError unless teacher and student are task models of one class, head and vocab."""
    if type(teacher) not in TASK_CLASSES:
        raise UserError(f"the teacher must be one of "
                        f"{', '.join(c.__name__ for c in TASK_CLASSES)} (a fine-tuned task "
                        f"model); got {type(teacher).__name__}")
    if type(student) is not type(teacher):
        raise UserError(f"the student is a {type(student).__name__}, the teacher a "
                        f"{type(teacher).__name__}: they must be of one task class")
    for name in ("num_classes", "multi_label", "use_crf"):
        mine, theirs = getattr(student, name, None), getattr(teacher, name, None)
        if mine != theirs:
            raise UserError(f"the student's {name} is {mine!r}, the teacher's {theirs!r}: the "
                            "student keeps the teacher's head")
    mine, theirs = student.encoder.config.vocab_size, teacher.encoder.config.vocab_size
    if mine != theirs:
        raise UserError(f"the student's vocab_size is {mine}, the teacher's {theirs}: a "
                        "student reads the teacher's token ids, so it needs the teacher's vocab")


def teacher_logits(teacher: Any, inputs: dict[str, np.ndarray], batch_size: int = 64) -> Any:
    """The teacher's outputs on `inputs` (numpy dict of [N, T]), in inference mode: what
    `TEACHER_LOGITS` holds (float32 numpy; a dict for a BertSpanLabeler)."""
    x = {name: inputs[name] for name in ENCODER_INPUTS}
    out = teacher.predict(x, batch_size=batch_size, verbose=0)
    return tf.nest.map_structure(lambda a: np.asarray(a, np.float32), out)
