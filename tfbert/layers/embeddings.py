"""BERT's input embeddings: word + segment (token type) + position, summed, LayerNorm, dropout.

Shape legend: B = batch, T = sequence length, H = hidden size, V = vocab size.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from tfbert.layers.dropout import BertDropout
from tfbert.layers.layer_norm import BertLayerNorm
from tfbert.layers.precision import float32_policy


@keras.saving.register_keras_serializable(package="tfbert")
class BertEmbeddings(keras.layers.Layer):
    """Sum of word, segment and position embeddings, then LayerNorm and dropout.

    Under mixed precision the tables, the sum and the LayerNorm stay float32 (a gather costs
    nothing to keep exact); the output is float32 and the next layer casts it.

    Args:
        vocab_size: int. Rows V of the word table (`word_embeddings`, [V, H]).
        hidden_size: int. Width H.
        max_position_embeddings: int. Rows of the position table; longest sequence T.
        type_vocab_size: int. Rows of the segment table (`token_type_embeddings`).
        dropout: float. Dropout rate after the LayerNorm (config.hidden_dropout_prob).
        layer_norm_eps: float. LayerNorm epsilon.
        initializer_range: float. Stddev of the truncated-normal table initializer.
        **kwargs: keras.layers.Layer arguments (name, dtype, ...).

    Example:
    >>> layer = BertEmbeddings(vocab_size=100, hidden_size=32, max_position_embeddings=64,
    ...                        type_vocab_size=2)
    >>> tuple(layer(ops.ones((2, 8), "int32"), ops.zeros((2, 8), "int32")).shape)
    (2, 8, 32)
    """

    def __init__(self, vocab_size: int, hidden_size: int, max_position_embeddings: int,
                 type_vocab_size: int, dropout: float = 0.1, layer_norm_eps: float = 1e-12,
                 initializer_range: float = 0.02, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # === Layers ===
        exact = float32_policy(self.dtype_policy)

        def table(rows: int, name: str) -> keras.layers.Embedding:
            return keras.layers.Embedding(
                rows, hidden_size, name=name, dtype=exact,
                embeddings_initializer=keras.initializers.TruncatedNormal(
                    stddev=initializer_range))

        self.word_embeddings = table(vocab_size, "word_embeddings")
        self.position_embeddings = table(max_position_embeddings, "position_embeddings")
        self.token_type_embeddings = table(type_vocab_size, "token_type_embeddings")
        self.layer_norm = BertLayerNorm(
            epsilon=layer_norm_eps, name="LayerNorm", dtype=exact)
        self.output_dropout = BertDropout(dropout, name="dropout", dtype=exact)
        # === Config ===
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.dropout_rate = dropout
        self.layer_norm_eps = layer_norm_eps
        self.initializer_range = initializer_range

    def build(self, input_ids_shape: tuple, segment_ids_shape: tuple | None = None) -> None:
        self.word_embeddings.build(input_ids_shape)
        self.position_embeddings.build((None,))
        self.token_type_embeddings.build(input_ids_shape)
        self.layer_norm.build((*input_ids_shape, self.hidden_size))
        self.built = True

    def call(self, input_ids, segment_ids, training: bool | None = None):
        """input_ids, segment_ids: int [B, T]. Returns float [B, T, H]."""
        seq_length = ops.shape(input_ids)[1]
        if isinstance(seq_length, int) and seq_length > self.max_position_embeddings:
            raise ValueError(
                f"sequence length {seq_length} exceeds max_position_embeddings "
                f"{self.max_position_embeddings}")
        x = self.word_embeddings(input_ids)  # [B, T, H]
        x = x + self.token_type_embeddings(segment_ids)  # [B, T, H]
        x = x + self.position_embeddings(ops.arange(seq_length, dtype="int32"))[None]  # [B, T, H]
        x = self.layer_norm(x)
        return self.output_dropout(x, training=training)

    def compute_output_shape(self, input_ids_shape: tuple,
                             segment_ids_shape: tuple | None = None) -> tuple:
        return (*input_ids_shape, self.hidden_size)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size,
            max_position_embeddings=self.max_position_embeddings,
            type_vocab_size=self.type_vocab_size, dropout=self.dropout_rate,
            layer_norm_eps=self.layer_norm_eps, initializer_range=self.initializer_range)
        return config
