"""BERT's post-LN transformer block: self-attention, residual, LayerNorm, feed-forward, residual,
LayerNorm.

Shape legend: B = batch, T = sequence length, Q = query rows (T, or query_positions), H = hidden
size, N = attention heads, D = H / N (head size), I = intermediate (feed-forward) size.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from tfbert.layers.activations import get_activation
from tfbert.layers.attention import BertSelfAttention
from tfbert.layers.dropout import BertDropout
from tfbert.layers.heads import gather_positions
from tfbert.layers.layer_norm import BertLayerNorm
from tfbert.layers.precision import float32_policy
from tfbert.ops import dense


@keras.saving.register_keras_serializable(package="tfbert")
class BertTransformerLayer(keras.layers.Layer):
    """One post-LN BERT block: self-attention + residual + LayerNorm, FFN + residual + LayerNorm.

    Sublayers (attribute = Keras name): `attention` (BertSelfAttention with `query_dense`,
    `key_dense`, `value_dense`, `output_dense`), `attention_output_dropout`,
    `attention_layer_norm` ("attention_LayerNorm"), `intermediate_dense` ("intermediate"),
    `output_dense` ("output"), `output_dropout`, `output_layer_norm` ("output_LayerNorm").
    Under mixed precision the residual stream and both LayerNorms are float32 and the matmuls
    run in the compute dtype.

    Args:
        hidden_size: int. Width H; must be a multiple of num_attention_heads.
        num_attention_heads: int. Heads N.
        intermediate_size: int. Width I of the feed-forward layer.
        hidden_act: str. Feed-forward activation: "gelu" (exact), "gelu_tanh", "relu", ...
        hidden_dropout: float. Dropout rate on the attention output and the FFN output
            (config.hidden_dropout_prob).
        attention_dropout: float. Dropout rate on the attention probabilities
            (config.attention_probs_dropout_prob).
        layer_norm_eps: float. LayerNorm epsilon.
        initializer_range: float. Stddev of the truncated-normal kernel initializer.
        **kwargs: keras.layers.Layer arguments (name, dtype, ...).

    Example:
    >>> block = BertTransformerLayer(hidden_size=32, num_attention_heads=4, intermediate_size=64)
    >>> tuple(block(ops.ones((2, 8, 32))).shape)
    (2, 8, 32)
    """

    def __init__(self, hidden_size: int, num_attention_heads: int, intermediate_size: int,
                 hidden_act: str = "gelu", hidden_dropout: float = 0.1,
                 attention_dropout: float = 0.1, layer_norm_eps: float = 1e-12,
                 initializer_range: float = 0.02, **kwargs: Any) -> None:
        if hidden_size % num_attention_heads:
            raise ValueError(
                f"hidden_size {hidden_size} is not a multiple of "
                f"num_attention_heads {num_attention_heads}")
        super().__init__(**kwargs)
        # === Layers ===
        exact = float32_policy(self.dtype_policy)
        init = lambda: keras.initializers.TruncatedNormal(stddev=initializer_range)
        self.attention = BertSelfAttention(
            num_heads=num_attention_heads, key_dim=hidden_size // num_attention_heads,
            dropout=attention_dropout, kernel_initializer=init(), name="attention",
            dtype=self.dtype_policy)
        self.attention_output_dropout = BertDropout(
            hidden_dropout, name="attention_output_dropout", dtype=self.dtype_policy)
        self.attention_layer_norm = BertLayerNorm(
            epsilon=layer_norm_eps, name="attention_LayerNorm", dtype=exact)
        self.intermediate_dense = keras.layers.Dense(
            intermediate_size, activation=get_activation(hidden_act), kernel_initializer=init(),
            name="intermediate", dtype=self.dtype_policy)
        self.output_dense = keras.layers.Dense(
            hidden_size, kernel_initializer=init(), name="output", dtype=self.dtype_policy)
        self.output_dropout = BertDropout(
            hidden_dropout, name="output_dropout", dtype=self.dtype_policy)
        self.output_layer_norm = BertLayerNorm(
            epsilon=layer_norm_eps, name="output_LayerNorm", dtype=exact)
        # === Config ===
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_rate = hidden_dropout
        self.attention_dropout_rate = attention_dropout
        self.layer_norm_eps = layer_norm_eps
        self.initializer_range = initializer_range

    def build(self, input_shape: tuple) -> None:
        if input_shape[-1] != self.hidden_size:
            raise ValueError(f"BertTransformerLayer {self.name}: input width {input_shape[-1]} "
                             f"!= hidden_size {self.hidden_size}")
        self.attention.build(input_shape, input_shape)
        self.attention_layer_norm.build(input_shape)
        self.intermediate_dense.build(input_shape)
        self.output_dense.build((*input_shape[:-1], self.intermediate_size))
        self.output_layer_norm.build(input_shape)
        self.built = True

    def call(self, x, attention_mask=None, training: bool | None = None,
             return_attention_probs: bool = False, query_positions=None):
        """Runs the block.

        Args:
            x: float [B, T, H]. The previous block's output.
            attention_mask: bool [B, 1, T] (key padding); [B, T, T] only without
                query_positions. True = attend.
            training: bool. Dropout on when True.
            return_attention_probs: bool. Also return the float32 [B, N, Q, T] probabilities.
            query_positions: int [B, Q] or None. Compute the block's output only at these
                positions (keys and values still come from all T): the rows are exactly those
                of the full output, at a fraction of the cost when Q << T. The pretrainer's
                last block needs only [CLS] and the masked positions.

        Returns:
            [B, Q, H] (Q = T without query_positions), or with return_attention_probs a pair of
            that and [B, N, Q, T].
        """
        if (query_positions is not None and attention_mask is not None
                and attention_mask.shape[1] not in (1, None)):
            raise ValueError(f"{self.name}: query_positions needs a [B, 1, T] key-padding mask, "
                             f"got attention_mask of shape {tuple(attention_mask.shape)}")
        query = x if query_positions is None else gather_positions(x, query_positions)
        attention_output = self.attention(
            query, x, attention_mask=attention_mask, training=training,
            return_attention_scores=return_attention_probs)
        if return_attention_probs:
            attention_output, probs = attention_output  # probs: [B, N, Q, T]
        attention_output = self.attention_output_dropout(attention_output, training=training)
        x = self.attention_layer_norm(query + ops.cast(attention_output, x.dtype))  # [B, Q, H]
        h = self._feed_forward(x)  # [B, Q, H]
        h = self.output_dropout(h, training=training)
        x = self.output_layer_norm(x + ops.cast(h, x.dtype))  # [B, Q, H]
        return (x, probs) if return_attention_probs else x

    def _feed_forward(self, x):
        """intermediate_dense (with the activation), then output_dense: [B, Q, H] -> [B, Q, H]."""
        h = dense(self.intermediate_dense, x)  # [B, Q, I]
        return dense(self.output_dense, h)  # [B, Q, H]

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            hidden_size=self.hidden_size, num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size, hidden_act=self.hidden_act,
            hidden_dropout=self.hidden_dropout_rate,
            attention_dropout=self.attention_dropout_rate,
            layer_norm_eps=self.layer_norm_eps, initializer_range=self.initializer_range)
        return config
