"""Pretraining heads: masked-LM prediction tied to the word embeddings.

Shape legend: B = batch, T = sequence length, P = masked positions per sequence, H = hidden
size, V = vocab size.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from tfbert.layers.activations import get_activation
from tfbert.layers.layer_norm import BertLayerNorm
from tfbert.layers.precision import float32_policy


def gather_positions(sequence, positions):
    """Rows of `sequence` at `positions`: [B, T, H] x int [B, P] -> [B, P, H]."""
    positions = ops.cast(positions, "int32")
    return ops.take_along_axis(sequence, ops.expand_dims(positions, -1), axis=1)


@keras.saving.register_keras_serializable(package="tfbert")
class MaskedLMHead(keras.layers.Layer):
    """BERT's masked-LM head (`cls/predictions`), evaluated only at the masked positions.

    Gathers the [B, P] positions first, then dense + activation + LayerNorm
    (`cls/predictions/transform`), then logits against the transposed word-embedding table plus
    `output_bias`. Gathering before the transform keeps the cost at P rows, not T.

    Args:
        vocab_size: int. V; must equal the rows of `token_embedding`.
        hidden_size: int. H.
        hidden_act: str. Transform activation ("gelu", "gelu_tanh", ...).
        layer_norm_eps: float. Transform LayerNorm epsilon.
        initializer_range: float. Stddev of the truncated-normal kernel initializer.
        token_embedding: keras.layers.Embedding. The encoder's word embeddings (output
            projection tied to them), or its serialized config.
        **kwargs: keras.layers.Layer arguments (name, dtype, ...).

    Example:
    >>> table = keras.layers.Embedding(100, 32)
    >>> head = MaskedLMHead(100, 32, token_embedding=table)
    >>> tuple(head(ops.ones((2, 8, 32)), ops.zeros((2, 3), "int32")).shape)
    (2, 3, 100)
    """

    def __init__(self, vocab_size: int, hidden_size: int, hidden_act: str = "gelu",
                 layer_norm_eps: float = 1e-12, initializer_range: float = 0.02,
                 token_embedding: keras.layers.Embedding | dict | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(token_embedding, dict):
            token_embedding = keras.layers.deserialize(token_embedding)
        if not isinstance(token_embedding, keras.layers.Embedding):
            raise ValueError(f"MaskedLMHead needs token_embedding=keras.layers.Embedding to tie "
                             f"its output projection, got {type(token_embedding).__name__}")
        if token_embedding.input_dim != vocab_size or token_embedding.output_dim != hidden_size:
            raise ValueError(
                f"MaskedLMHead: token_embedding is [{token_embedding.input_dim}, "
                f"{token_embedding.output_dim}], expected [vocab_size {vocab_size}, "
                f"hidden_size {hidden_size}]")
        # === Layers ===
        self.token_embedding = token_embedding
        self.transform_dense = keras.layers.Dense(
            hidden_size, activation=get_activation(hidden_act), name="transform_dense",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
            dtype=self.dtype_policy)
        self.transform_layer_norm = BertLayerNorm(
            epsilon=layer_norm_eps, name="transform_LayerNorm",
            dtype=float32_policy(self.dtype_policy))
        # === Config ===
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.hidden_act = hidden_act
        self.layer_norm_eps = layer_norm_eps
        self.initializer_range = initializer_range

    def build(self, sequence_output_shape: tuple,
              masked_lm_positions_shape: tuple | None = None) -> None:
        if not self.token_embedding.built:  # a standalone head restored from its config
            self.token_embedding.build()
        self.transform_dense.build((None, None, self.hidden_size))
        self.transform_layer_norm.build((None, None, self.hidden_size))
        self.output_bias = self.add_weight(
            shape=(self.vocab_size,), initializer="zeros", name="output_bias")
        self.built = True

    def call(self, sequence_output, masked_lm_positions=None):
        """sequence_output [B, T, H], masked_lm_positions int [B, P] -> float32 logits [B, P, V].

        masked_lm_positions=None: `sequence_output` holds the masked rows already ([B, P, H]).
        """
        x = sequence_output
        if masked_lm_positions is not None:
            x = gather_positions(x, masked_lm_positions)  # [B, P, H]
        x = self.transform_dense(x)  # [B, P, H]
        x = self.transform_layer_norm(x)  # [B, P, H]
        table = ops.cast(self.token_embedding.embeddings, self.compute_dtype)  # [V, H]
        logits = ops.matmul(ops.cast(x, self.compute_dtype), ops.transpose(table))  # [B, P, V]
        logits = logits + ops.cast(self.output_bias, self.compute_dtype)
        return ops.cast(logits, "float32")

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, hidden_act=self.hidden_act,
            layer_norm_eps=self.layer_norm_eps, initializer_range=self.initializer_range,
            token_embedding=keras.layers.serialize(self.token_embedding))
        return config
