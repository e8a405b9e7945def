"""BertSentenceEncoder: one vector per text, as sentence-transformers computes it.

A sentence-transformers model is a pipeline of modules; the BERT ones are
Transformer -> Pooling -> (Dense) -> (Normalize). This model is that pipeline on
`sequence_output`, written from sentence-transformers' definitions (its `Pooling`, `Dense` and
`Normalize` modules), with the attention mask `input_mask` as the token mask:

    mean           sum_t(x_t * m_t) / max(sum_t m_t, 1e-9)
    cls            x_0, the first token ([CLS]; tfbert's inputs are right-padded)
    max            max_t over x_t where m_t = 1, padding set to -1e9 first
    mean_sqrt_len  sum_t(x_t * m_t) / sqrt(max(sum_t m_t, 1e-9))
    projection     activation(x W + b), W [H, D] (sentence-transformers' `Dense`, Tanh default)
    normalize      x / max(||x||_2, 1e-12) (torch.nn.functional.normalize)

Pooling runs in float32 whatever the dtype policy. sentence-transformers 6 fills padding with
-inf before the max, earlier releases with -1e9: the two give the same vector for every row that
has a real token, and -1e9 keeps a row of padding finite. Checkpoints: the pooling, projection
and normalisation of a sentence-transformers directory (modules.json) are read and written by
`tfbert.checkpoints.sentence_transformers`. Shape legend: B = batch, T = sequence, H = hidden,
D = embedding size (H, or projection_size).
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from tfbert.layers.precision import float32_policy
from tfbert.models.encoder import BertEncoder
from tfbert.models.task import BertTask

POOLING_MODES = ("mean", "cls", "max", "mean_sqrt_len")
PROJECTION_ACTIVATIONS = ("tanh", "identity")
_PADDING_FILL = -1e9  # the max pooling's value at padded positions
_NORM_EPS = 1e-12  # torch.nn.functional.normalize's eps
_COUNT_MIN = 1e-9  # sentence-transformers' clamp on the token count


def pool(sequence_output: Any, input_mask: Any, mode: str) -> Any:
    """sentence-transformers' `Pooling` of one mode, in float32.

    Args:
        sequence_output: float [B, T, H].
        input_mask: int or float [B, T]. 1 at real tokens, 0 at padding.
        mode: str. One of `POOLING_MODES`.

    Returns:
        float32 [B, H].
    """
    x = ops.cast(sequence_output, "float32")  # [B, T, H]
    mask = ops.expand_dims(ops.cast(input_mask, "float32"), -1)  # [B, T, 1]
    if mode == "cls":
        return x[:, 0, :]
    if mode == "max":
        return ops.max(ops.where(mask > 0, x, _PADDING_FILL), axis=1)
    total = ops.sum(x * mask, axis=1)  # [B, H]
    count = ops.maximum(ops.sum(mask, axis=1), _COUNT_MIN)  # [B, 1]
    return total / (count if mode == "mean" else ops.sqrt(count))


def l2_normalize(x: Any) -> Any:
    """x / max(||x||_2, 1e-12) over the last axis, as torch.nn.functional.normalize."""
    norm = ops.sqrt(ops.sum(ops.square(x), axis=-1, keepdims=True))
    return x / ops.maximum(norm, _NORM_EPS)


@keras.saving.register_keras_serializable(package="tfbert")
class BertSentenceEncoder(BertTask):
    """Pooling + optional dense projection + optional L2 normalisation on `sequence_output`.

    Inputs: the encoder's dict (`input_ids`, `input_mask`, `segment_ids`). Output: float32
    `embeddings` [B, D], one vector per text (a single tensor). A sentence-transformers directory
    loads with its pooling, projection and normalisation (`tfbert.from_pretrained(path)`);
    `BertSentenceEncoder.from_pretrained(path, pooling="cls", normalize=False)` puts any of
    them on any checkpoint tfbert reads. `tfbert.save_pretrained(model, dir,
    format="sentence-transformers")` writes a directory sentence-transformers loads.

    `compile()` defaults to mean squared error against target embeddings [B, D] (what
    sentence-transformers' MSELoss trains: a student regressing a teacher's vectors, e.g. to
    distil or to carry a model to a new language) and the mean cosine similarity to the
    targets; ds then yields (features, target vectors). Training on pairs or triplets
    (contrastive losses) needs a loss over the batch's pairs: pass it to `compile(loss=...)`.

    Args:
        encoder: tfbert.BertEncoder. The backbone (pretrained or fresh).
        pooling: str. "mean" (masked mean), "cls" (first token), "max" (masked max) or
            "mean_sqrt_len" (masked sum / sqrt(number of tokens)).
        projection_size: int or None. D of a dense projection after pooling (sentence-
            transformers' `Dense`); None for none.
        projection_activation: str. "tanh" (sentence-transformers' default) or "identity".
        normalize: bool. L2-normalise the vectors (sentence-transformers' `Normalize`).
        **kwargs: keras.Model arguments (name).

    Example:
    >>> from tfbert import BertConfig, BertEncoder
    >>> encoder = BertEncoder(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
    ...                                  num_attention_heads=4, intermediate_size=64))
    >>> model = BertSentenceEncoder(encoder, pooling="mean", projection_size=16)
    >>> ones = keras.ops.ones((2, 8), "int32")
    >>> vectors = model({"input_ids": ones, "input_mask": ones, "segment_ids": ones * 0})
    >>> tuple(vectors.shape), round(float(keras.ops.norm(vectors[0])), 4)
    ((2, 16), 1.0)
    """

    def __init__(self, encoder: BertEncoder, pooling: str = "mean",
                 projection_size: int | None = None, projection_activation: str = "tanh",
                 normalize: bool = True, **kwargs: Any) -> None:
        encoder = self._check_encoder(encoder, "BertSentenceEncoder")
        if pooling not in POOLING_MODES:
            raise ValueError(f"BertSentenceEncoder: pooling must be one of {POOLING_MODES}, "
                             f"got {pooling!r}")
        if projection_size is not None and (isinstance(projection_size, bool)
                                            or not isinstance(projection_size, int)
                                            or projection_size < 1):
            raise ValueError(f"BertSentenceEncoder: projection_size must be a positive int or "
                             f"None, got {projection_size!r}")
        if projection_activation not in PROJECTION_ACTIVATIONS:
            raise ValueError(f"BertSentenceEncoder: projection_activation must be one of "
                             f"{PROJECTION_ACTIVATIONS}, got {projection_activation!r}")
        hidden = encoder.config.hidden_size
        # === Layers ===
        self.encoder = encoder
        self.projection = None
        if projection_size is not None:
            # torch.nn.Linear's initial values (sentence-transformers' Dense starts from them):
            # kernel and bias uniform in +-1/sqrt(H).
            bound = 1.0 / math.sqrt(hidden)
            self.projection = keras.layers.Dense(
                projection_size, activation="tanh" if projection_activation == "tanh" else None,
                kernel_initializer=keras.initializers.VarianceScaling(1 / 3, "fan_in", "uniform"),
                bias_initializer=keras.initializers.RandomUniform(-bound, bound),
                name="projection", dtype=float32_policy(encoder.dtype_policy))
        self.output_layer = keras.layers.Identity(name="embeddings", dtype="float32")
        # === Functional Model ===
        inputs = dict(encoder.input)
        x = encoder(inputs)["sequence_output"]  # [B, T, H]
        x = pool(x, inputs["input_mask"], pooling)  # [B, H] float32
        if self.projection is not None:
            x = self.projection(x)  # [B, D]
        if normalize:
            x = l2_normalize(x)
        embeddings = self.output_layer(x)  # [B, D]
        super().__init__(inputs=inputs, outputs=embeddings, **kwargs)
        # === Config ===
        self.pooling = pooling
        self.projection_size = projection_size
        self.projection_activation = projection_activation
        self.normalize = bool(normalize)

    @property
    def embedding_size(self) -> int:
        """D: the length of each vector."""
        return self.projection_size or self.encoder.config.hidden_size

    def _head_config(self) -> dict[str, Any]:
        return {"pooling": self.pooling, "projection_size": self.projection_size,
                "projection_activation": self.projection_activation,
                "normalize": self.normalize}

    def default_loss(self) -> Any:
        """Loss of `compile(loss="auto")`: mean squared error to target vectors [B, D]
        (sentence-transformers' MSELoss)."""
        return keras.losses.MeanSquaredError()

    def default_metrics(self) -> Any:
        """Weighted metrics of `compile(weighted_metrics="auto")`: the mean cosine similarity
        between the vectors and their targets."""
        return [keras.metrics.CosineSimilarity(name="cosine_similarity", axis=-1)]
