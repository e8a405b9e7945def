"""A linear-chain CRF over per-position tag scores: its loss (forward algorithm) and Viterbi.

Shape legend: B = batch, T = positions, C = tags.

The chain runs over the positions a mask selects and skips the others: the transition from one
selected position goes to the next selected one, whatever lies between (a word's "##" pieces,
[CLS], [SEP], padding). With the first word piece of each word selected, the CRF scores a
sentence's word tags even though the encoder sees pieces. The score of tags y_1..y_n on the
selected positions is

    start[y_1] + sum_i emission_i[y_i] + sum_i transitions[y_{i-1}, y_i] + end[y_n]

and the loss is its negative log-likelihood, -score + log Z, with log Z from the forward
algorithm. A row with no selected position scores 0 (loss 0) and decodes to all -1.

Both recursions are TensorFlow loops over T (`tf.scan` for the loss, a `tf.while_loop` without
TensorArrays for Viterbi), so they run eagerly, inside tf.function, in an exported SavedModel,
and Viterbi also through the TFLite converter (builtin WHILE).

    >>> crf = LinearChainCrf(3)
    >>> scores = keras.ops.convert_to_tensor([[[0.0, 2.0, 0.0], [1.0, 0.0, 0.0]]])
    >>> crf(scores, keras.ops.convert_to_tensor([[True, True]])).numpy().tolist()
    [[1, 0]]
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf
from keras import ops

IGNORE_INDEX = -100  # labels of unscored positions (tfbert.data.ner.IGNORE_INDEX)


@keras.saving.register_keras_serializable(package="tfbert")
class LinearChainCrf(keras.layers.Layer):
    """Transition scores between tags, the CRF log-likelihood, and Viterbi decoding.

    Weights (float32, zero-initialised, so an untrained CRF decodes as the per-position
    argmax): `transitions` [C, C] (from tag i to tag j), `start_transitions` [C] and
    `end_transitions` [C] (a first / last tag; they let the CRF learn that I-X does not begin
    a sentence).

    `call(emissions, mask)` is Viterbi decoding: int32 tag ids [B, T], -1 where mask is False.

    Args:
        num_tags: int. C.
        **kwargs: keras.layers.Layer arguments (name, ...). The dtype is always float32.

    Example:
    >>> crf = LinearChainCrf(5)
    >>> emissions = keras.random.normal((2, 7, 5), seed=1)
    >>> mask = keras.ops.convert_to_tensor([[True] * 7, [True] * 4 + [False] * 3])
    >>> tags = crf(emissions, mask)  # [2, 7] int32, -1 past row 1's 4 positions
    >>> loss = -crf.log_likelihood(emissions, keras.ops.maximum(tags, 0), mask)  # [2]
    """

    def __init__(self, num_tags: int, **kwargs: Any) -> None:
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        if isinstance(num_tags, bool) or not isinstance(num_tags, int) or num_tags < 1:
            raise ValueError(f"LinearChainCrf: num_tags must be a positive int, got {num_tags!r}")
        self.num_tags = num_tags
        self.transitions = self.add_weight(shape=(num_tags, num_tags), initializer="zeros",
                                           name="transitions")
        self.start_transitions = self.add_weight(shape=(num_tags,), initializer="zeros",
                                                 name="start_transitions")
        self.end_transitions = self.add_weight(shape=(num_tags,), initializer="zeros",
                                               name="end_transitions")
        self.built = True

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.pop("dtype", None)
        return {**config, "num_tags": self.num_tags}

    def compute_output_spec(self, emissions: Any, mask: Any = None) -> Any:
        return keras.KerasTensor(emissions.shape[:2], dtype="int32")

    def _inputs(self, emissions: Any, mask: Any) -> tuple[Any, Any]:
        emissions = ops.cast(emissions, "float32")  # [B, T, C]
        if mask is None:
            mask = ops.ones(ops.shape(emissions)[:2], "bool")
        return emissions, ops.cast(mask, "bool")  # [B, T]

    def log_likelihood(self, emissions: Any, tags: Any, mask: Any = None) -> Any:
        """log p(tags | emissions) of each row over its masked positions: float32 [B].

        Args:
            emissions: float [B, T, C]. Per-position tag scores (the tagger's logits).
            tags: int [B, T]. Gold tag ids (any value where mask is False).
            mask: bool [B, T] or None (all positions).
        """
        emissions, mask = self._inputs(emissions, mask)
        tags = ops.cast(tags, "int32")
        trans, start, end = self.transitions, self.start_transitions, self.end_transitions
        c = self.num_tags
        batch = ops.shape(emissions)[0]

        def step(carry, x):
            alpha, score, prev, started = carry  # [B, C], [B], [B], [B]
            emit, m, tag = x  # [B, C], [B], [B]
            gold_emit = ops.take_along_axis(emit, tag[:, None], axis=1)[:, 0]
            gold_trans = ops.take(ops.reshape(trans, [-1]), prev * c + tag)
            gold = ops.where(started, gold_trans, ops.take(start, tag)) + gold_emit
            alpha_next = ops.where(
                started[:, None],
                ops.logsumexp(alpha[:, :, None] + trans[None], axis=1),  # [B, C]
                start[None, :]) + emit
            return (ops.where(m[:, None], alpha_next, alpha), score + ops.where(m, gold, 0.0),
                    ops.where(m, tag, prev), started | m)

        init = (ops.zeros((batch, c)), ops.zeros((batch,)), ops.zeros((batch,), "int32"),
                ops.zeros((batch,), "bool"))
        xs = (ops.transpose(emissions, (1, 0, 2)), ops.transpose(mask), ops.transpose(tags))
        alpha, score, last, started = (x[-1] for x in tf.scan(step, xs, init))
        log_z = ops.logsumexp(alpha + end[None, :], axis=1)  # [B]
        return ops.where(started, score + ops.take(end, last) - log_z, 0.0)

    def call(self, emissions: Any, mask: Any = None) -> Any:
        """Viterbi decoding: the best tag ids [B, T] (int32) over the masked positions, -1
        elsewhere. Ties go to the lower tag id."""
        emissions, mask = self._inputs(emissions, mask)
        weights = (self.transitions, self.start_transitions, self.end_transitions)
        # Eagerly, the loop runs as one traced graph (an eager loop costs ~T x 20 op calls).
        viterbi = _viterbi_graph if tf.executing_eagerly() else _viterbi
        return viterbi(emissions, mask, *(tf.convert_to_tensor(w) for w in weights))


def _viterbi(emissions: tf.Tensor, mask: tf.Tensor, trans: tf.Tensor, start: tf.Tensor,
             end: tf.Tensor) -> tf.Tensor:
    """LinearChainCrf.call's Viterbi on float32 emissions [B, T, C] and a bool mask [B, T]."""
    c = tf.shape(trans)[0]
    batch = ops.shape(emissions)[0]
    identity = ops.broadcast_to(ops.arange(c, dtype="int32")[None, :], (batch, c))

    # Forward: the best score of a path ending in each tag, and per position the tag
    # before it on that path (the identity at unselected positions and the first one, so
    # the backward pass carries a tag through them unchanged).
    emissions_t = ops.transpose(emissions, (1, 0, 2))  # [T, B, C]
    mask_t = ops.transpose(mask)  # [T, B]
    steps = ops.shape(emissions_t)[0]

    def forward(t, delta, started, backpointers):
        emit, m = emissions_t[t], mask_t[t]  # [B, C], [B]
        candidates = delta[:, :, None] + trans[None]  # [B, C (from), C (to)]
        best = ops.where(started[:, None], ops.max(candidates, axis=1), start[None, :])
        backpointer = ops.where((m & started)[:, None],
                                tf.argmax(candidates, axis=1, output_type=tf.int32), identity)
        return (t + 1, ops.where(m[:, None], best + emit, delta), started | m,
                ops.concatenate([backpointers, backpointer[None]], axis=0))

    # A while loop whose stored backpointers grow by concatenation (no TensorArray: the
    # TFLite converter lowers those only with a static batch size).
    delta0, started0 = ops.zeros((batch, c)), ops.zeros((batch,), "bool")
    backpointers0 = ops.zeros((0, batch, c), "int32")
    _, delta, _, backpointers = tf.while_loop(
        lambda t, *_: t < steps, forward, (tf.constant(0), delta0, started0, backpointers0),
        shape_invariants=(tf.TensorShape([]), delta0.shape, started0.shape,
                          tf.TensorShape([None, *backpointers0.shape[1:]])))
    last = tf.argmax(delta + end[None, :], axis=1, output_type=tf.int32)  # [B]

    def backward(t, tag, tags):  # tag: the tag at position t
        previous = ops.take_along_axis(backpointers[t], tag[:, None], axis=1)[:, 0]
        return t - 1, previous, ops.concatenate([tag[None], tags], axis=0)

    tags0 = ops.zeros((0, batch), "int32")
    _, _, tags = tf.while_loop(
        lambda t, *_: t >= 0, backward, (steps - 1, last, tags0),
        shape_invariants=(tf.TensorShape([]), last.shape,
                          tf.TensorShape([None, *tags0.shape[1:]])))  # [T, B]
    return ops.where(mask, ops.transpose(tags), -1)


_viterbi_graph = tf.function(_viterbi, reduce_retracing=True)


def _keras_mask(x: Any) -> Any:
    """The padding mask Keras attached to `x` ([B, T], from Embedding(mask_zero=True) and the
    layers that pass it on), or None. Keras 3 has no public getter: this is the attribute
    keras.src.backend.get_keras_mask reads (checked on Keras 3.10-3.15)."""
    return getattr(x, "_keras_mask", None)


@keras.saving.register_keras_serializable(package="tfbert")
class CrfLoss(keras.losses.Loss):
    """The CRF's negative log-likelihood of the gold tags, one value per sequence.

    y_true: int [B, T] tag ids; positions holding `ignore_class` (and, when fit passes a
    sample weight [B, T], positions of weight 0, and those a Keras padding mask on y_pred
    excludes) are left out of the chain. y_pred: the
    emissions [B, T, C] (a BertTokenClassifier's logits). The default reduction averages over
    the sequences of the batch.

    Args:
        crf: LinearChainCrf. The layer whose transitions the loss trains (a model's `crf`).
        ignore_class: int. Label of unscored positions (-100, as tfbert.data.ner writes).
        reduction, name: keras.losses.Loss arguments.

    Example:
    >>> crf = LinearChainCrf(3)
    >>> loss = CrfLoss(crf)
    >>> round(float(loss(keras.ops.convert_to_tensor([[0, -100]]), keras.ops.zeros((1, 2, 3)))), 4)
    1.0986
    """

    def __init__(self, crf: LinearChainCrf, ignore_class: int = IGNORE_INDEX,
                 reduction: str = "sum_over_batch_size", name: str = "crf_loss") -> None:
        super().__init__(reduction=reduction, name=name)
        if not isinstance(crf, LinearChainCrf):
            raise TypeError(f"CrfLoss needs the model's LinearChainCrf, got {type(crf).__name__}")
        self.crf = crf
        self.ignore_class = ignore_class

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        if sample_weight is not None:  # a [B, T] weight: 0 leaves the position out
            y_true = ops.where(ops.cast(sample_weight, "float32") > 0,
                               ops.cast(y_true, "int32"), self.ignore_class)
        mask = _keras_mask(y_pred)
        if mask is not None:
            # Keras's padding mask [B, T] (an Embedding(mask_zero=True) upstream) leaves its
            # positions out of the chain. Keras's Loss would multiply the per-sequence loss [B]
            # by it; `where` gives a tensor without the mask (the padded emissions are unused).
            mask = ops.cast(mask, "bool")
            y_true = ops.where(mask, ops.cast(y_true, "int32"), self.ignore_class)
            y_pred = ops.where(mask[..., None], y_pred, ops.zeros_like(y_pred))
        return super().__call__(y_true, y_pred)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        y_true = ops.cast(y_true, "int32")
        mask = ops.not_equal(y_true, self.ignore_class)
        return -self.crf.log_likelihood(y_pred, ops.where(mask, y_true, 0), mask)

    def get_config(self) -> dict[str, Any]:
        # The layer is the model's: a loss rebuilt from config takes it from the model
        # (BertTokenClassifier.default_loss()).
        return {"ignore_class": self.ignore_class, "reduction": self.reduction,
                "name": self.name}
