"""Training a sentence encoder on text pairs: `ContrastiveTrainer` and its losses, as
sentence-transformers defines them.

The trainer wraps a model that maps the encoder's input dict to embeddings [B, D] (a
`tfbert.models.sentence_encoder.BertSentenceEncoder`, or any such Keras model) and computes one
of these losses in `compute_loss`, so it trains with plain `model.fit`:

    mnrl            multiple-negatives ranking (MultipleNegativesRankingLoss):
                    x = {"anchor", "positive"[, "negative"]}, no y. Row i's positive is the right
                    answer among every positive (and hard negative) of the batch:
                    -log softmax(scale * cos(a_i, [p; n]))_i, averaged.
    mnrl_symmetric  the same plus the positives choosing among the anchors, halved
                    (MultipleNegativesSymmetricRankingLoss).
    cosent          CoSENT (CoSENTLoss): x = {"anchor", "positive"}, y = a score per pair;
                    log(1 + sum over pairs (i, j) with y_i < y_j of exp(s_i - s_j)),
                    s = scale * cos(a, p).
    cosine          squared error between cos(a, p) and y (CosineSimilarityLoss; y in [-1, 1]).

Each of "anchor", "positive", "negative" is an input dict (`input_ids`, `input_mask`,
`segment_ids`) of the same sequence length; the three are encoded in one forward pass.

Under `tf.distribute` the batch is split over replicas; the in-batch candidates (and CoSENT's
pairs) are gathered across replicas (`ReplicaContext.all_gather`, whose gradient flows back to
the replica that computed each embedding), so the loss and its gradients are those of the
global batch, as one device would compute them (tests/test_contrastive.py runs 2 replicas
against 1).

Example:
>>> import numpy as np
>>> a, p = np.eye(3, dtype="float32"), np.eye(3, dtype="float32")
>>> round(float(np.mean(mnrl_loss(a, p, scale=20.0))), 6)  # each anchor picks its positive
0.0
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

LOSSES = ("mnrl", "mnrl_symmetric", "cosent", "cosine")
PAIRED = ("cosent", "cosine")  # the losses that take a score per pair as y


def _normalize(x: tf.Tensor) -> tf.Tensor:
    """Rows scaled to unit length, as torch.nn.functional.normalize (eps 1e-12)."""
    return x / tf.maximum(tf.norm(x, axis=-1, keepdims=True), 1e-12)


def _gather(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(x of every replica concatenated along the batch, this replica's first row in it)."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return x, tf.constant(0)
    gathered = context.all_gather(x, axis=0)
    return gathered, context.replica_id_in_sync_group * tf.shape(x)[0]


def mnrl_loss(anchors: Any, positives: Any, negatives: Any = None, scale: float = 20.0,
              symmetric: bool = False) -> tf.Tensor:
    """Multiple-negatives ranking loss per anchor [B] (module docstring), with the candidates
    gathered across replicas."""
    anchors = _normalize(tf.cast(anchors, tf.float32))
    positives = _normalize(tf.cast(positives, tf.float32))
    all_positives, offset = _gather(positives)
    candidates = [all_positives]
    if negatives is not None:
        candidates.append(_gather(_normalize(tf.cast(negatives, tf.float32)))[0])
    labels = offset + tf.range(tf.shape(anchors)[0])
    scores = scale * tf.matmul(anchors, tf.concat(candidates, 0), transpose_b=True)
    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, scores)  # [B]
    if symmetric:
        all_anchors, _ = _gather(anchors)
        backward = scale * tf.matmul(positives, all_anchors, transpose_b=True)  # [B, B_global]
        loss = (loss + tf.nn.sparse_softmax_cross_entropy_with_logits(labels, backward)) / 2.0
    return loss


def cosent_loss(anchors: Any, positives: Any, scores: Any, scale: float = 20.0) -> tf.Tensor:
    """CoSENT over the global batch (a scalar, module docstring)."""
    cos = tf.reduce_sum(_normalize(tf.cast(anchors, tf.float32))
                        * _normalize(tf.cast(positives, tf.float32)), -1)
    s, _ = _gather(scale * cos)
    y, _ = _gather(tf.reshape(tf.cast(scores, tf.float32), [-1]))
    diff = s[:, None] - s[None, :]  # s_i - s_j
    diff = tf.where(y[:, None] < y[None, :], diff, tf.fill(tf.shape(diff), -float("inf")))
    return tf.reduce_logsumexp(tf.concat([tf.zeros([1]), tf.reshape(diff, [-1])], 0))


def cosine_loss(anchors: Any, positives: Any, scores: Any) -> tf.Tensor:
    """Squared error between cos(a, p) (torch.cosine_similarity, eps 1e-8) and the score [B]."""
    a, p = tf.cast(anchors, tf.float32), tf.cast(positives, tf.float32)
    cos = tf.reduce_sum(a * p, -1) / tf.maximum(tf.norm(a, axis=-1) * tf.norm(p, axis=-1), 1e-8)
    return tf.square(cos - tf.reshape(tf.cast(scores, tf.float32), [-1]))


@keras.saving.register_keras_serializable(package="tfbert")
class ContrastiveTrainer(keras.Model):
    """Trains `embedder` on text pairs with one of `LOSSES` (module docstring).

    Args:
        embedder: keras.Model. Input dict -> embeddings [B, D] (e.g. BertSentenceEncoder); its
            weights are the ones trained.
        loss: str. One of LOSSES.
        scale: float. Multiplies the cosine similarities of mnrl and cosent (1 / temperature;
            sentence-transformers' default 20).
        **kwargs: keras.Model arguments (name).
    """

    def __init__(self, embedder: keras.Model, loss: str = "mnrl", scale: float = 20.0,
                 **kwargs: Any) -> None:
        if loss not in LOSSES:
            raise ValueError(f"ContrastiveTrainer: loss must be one of {LOSSES}, got {loss!r}")
        super().__init__(**kwargs)
        self.embedder, self.loss_name, self.scale = embedder, loss, float(scale)

    def call(self, inputs: dict[str, Any], training: bool | None = None) -> dict[str, Any]:
        names = [n for n in ("anchor", "positive", "negative") if n in inputs]
        if names[:2] != ["anchor", "positive"]:
            raise ValueError(f"ContrastiveTrainer takes anchor and positive (and negative) "
                             f"input dicts, got {sorted(inputs)}")
        sizes = [tf.shape(inputs[n]["input_ids"])[0] for n in names]
        keys = sorted(inputs["anchor"])
        joined = {k: tf.concat([inputs[n][k] for n in names], 0) for k in keys}
        embeddings = tf.split(self.embedder(joined, training=training), sizes, axis=0)
        return dict(zip(names, embeddings, strict=True))

    def compute_loss(self, x: Any = None, y: Any = None, y_pred: Any = None,
                     sample_weight: Any = None, training: bool = True) -> tf.Tensor:
        a, p = y_pred["anchor"], y_pred["positive"]
        if self.loss_name in PAIRED and y is None:
            raise ValueError(f"loss {self.loss_name!r} needs a score per pair as y")
        if self.loss_name == "cosent":
            # Every replica computes the global batch's loss; a replica's share is 1 / replicas
            # of it, as Keras scales a mean loss.
            per_replica = cosent_loss(a, p, y, self.scale)
        elif self.loss_name == "cosine":
            per_replica = tf.reduce_mean(cosine_loss(a, p, y))
        else:
            per_replica = tf.reduce_mean(mnrl_loss(
                a, p, y_pred.get("negative"), self.scale,
                symmetric=self.loss_name == "mnrl_symmetric"))
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        return per_replica / float(replicas)

    def get_config(self) -> dict[str, Any]:
        return {"embedder": keras.layers.serialize(self.embedder), "loss": self.loss_name,
                "scale": self.scale, "name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ContrastiveTrainer:
        config = dict(config)
        config["embedder"] = keras.layers.deserialize(config["embedder"])
        return cls(**config)
