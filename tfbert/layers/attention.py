"""BERT's multi-head self-attention (google-research/bert's `attention_layer`), as a Keras layer.

Shape legend: B = batch, Q = query rows (T, or the positions the last block reads), T = keys
(sequence length), H = hidden size, N = attention heads, D = H / N (head size).
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from tfbert.layers.dropout import BertDropout
from tfbert.layers.precision import float32_policy
from tfbert.ops import attention_context, attention_scores, merge_heads, project_heads


@keras.saving.register_keras_serializable(package="tfbert")
class BertSelfAttention(keras.layers.Layer):
    """Q/K/V projections, scaled dot-product scores, masked softmax, dropout, output projection.

    Sublayers (attribute = Keras name): `query_dense` ("query"), `key_dense` ("key"),
    `value_dense` ("value"): keras EinsumDense [H, N, D] + bias [N, D]; `output_dense`
    ("attention_output"): EinsumDense [N, D, H] + bias [H]. They are keras.layers
    .MultiHeadAttention's sublayers under the same names, so checkpoints written with it load,
    and LoRA (`enable_lora`) and quantization work on them as on any EinsumDense. Under mixed
    precision the scores, softmax and returned probabilities are float32, the matmuls in the
    compute dtype. The products and projections go through `tfbert.ops` (the switch that picks
    their form per backend and device).

    Args:
        num_heads: int. N.
        key_dim: int. D, the size of each head.
        dropout: float. Dropout rate on the attention probabilities.
        kernel_initializer: str or keras initializer. Kernel initializer (each projection gets
            its own copy, so they start different).
        seed: int or None. Seed of the probability dropout.
        **kwargs: keras.layers.Layer arguments (name, dtype, ...).

    Example:
    >>> layer = BertSelfAttention(num_heads=4, key_dim=8)
    >>> x = keras.ops.ones((2, 6, 32))
    >>> out, probs = layer(x, x, return_attention_scores=True)
    >>> tuple(out.shape), tuple(probs.shape)
    ((2, 6, 32), (2, 4, 6, 6))
    """

    def __init__(self, num_heads: int, key_dim: int, dropout: float = 0.0,
                 kernel_initializer: Any = "glorot_uniform", seed: int | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        # === Layers === (private attributes behind public properties, as MultiHeadAttention's:
        # tf.train.Checkpoint keys are the attribute names, `.weights.h5` paths the properties')
        heads = (None, num_heads, key_dim)
        self._query_dense = self._projection("abc,cde->abde", heads, "de", "query")
        self._key_dense = self._projection("abc,cde->abde", heads, "de", "key")
        self._value_dense = self._projection("abc,cde->abde", heads, "de", "value")
        self._dropout_layer = BertDropout(dropout, seed=seed, dtype=self.dtype_policy)
        self._output_dense = None  # built in build(): its output width is the query's width
        # === Config ===
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.dropout = dropout
        self.seed = seed
        self.scale = 1.0 / math.sqrt(key_dim)  # on the scores
        # float32 under mixed and half policies (bfloat16 probabilities lose the small weights)
        self.softmax_dtype = keras.dtype_policies.get(
            float32_policy(self.dtype_policy)).compute_dtype

    def _projection(self, equation: str, output_shape: tuple, bias_axes: str,
                    name: str) -> keras.layers.EinsumDense:
        """An EinsumDense with its own copy of the kernel initializer."""
        initializer = self.kernel_initializer
        return keras.layers.EinsumDense(
            equation, output_shape=output_shape, bias_axes=bias_axes, name=name,
            kernel_initializer=initializer.__class__.from_config(initializer.get_config()),
            dtype=self.dtype_policy)

    @property
    def query_dense(self) -> keras.layers.EinsumDense:
        return self._query_dense

    @property
    def key_dense(self) -> keras.layers.EinsumDense:
        return self._key_dense

    @property
    def value_dense(self) -> keras.layers.EinsumDense:
        return self._value_dense

    @property
    def output_dense(self) -> keras.layers.EinsumDense:
        return self._output_dense

    def build(self, query_shape: tuple, value_shape: tuple | None = None) -> None:
        value_shape = query_shape if value_shape is None else value_shape
        self._query_dense.build(query_shape)
        self._key_dense.build(value_shape)
        self._value_dense.build(value_shape)
        self._output_dense = self._projection(
            "abcd,cde->abe", (None, query_shape[-1]), "e", "attention_output")
        self._output_dense.build((*query_shape[:-1], self.num_heads, self.key_dim))
        self.built = True

    def call(self, query, value, attention_mask=None, return_attention_scores: bool = False,
             training: bool | None = None):
        """Attention of `query` rows over `value` rows.

        Args:
            query: float [B, Q, H]. The rows that attend (the block's input, or some of its
                positions).
            value: float [B, T, H]. The rows attended to (keys and values).
            attention_mask: bool [B, 1, T] (key padding) or [B, Q, T]; True = attend.
            return_attention_scores: bool. Also return the probabilities.
            training: bool. Probability dropout on when True.

        Returns:
            float [B, Q, H] in the compute dtype, or with return_attention_scores a pair of that
            and the float32 probabilities [B, N, Q, T] (before dropout).
        """
        q = project_heads(self._query_dense, query)  # [B, Q, N, D]
        k = project_heads(self._key_dense, value)  # [B, T, N, D]
        v = project_heads(self._value_dense, value)  # [B, T, N, D]
        scores = attention_scores(q, k, self.scale)  # [B, N, Q, T]
        scores = ops.cast(scores, self.softmax_dtype)
        if attention_mask is not None:  # [B, 1 or Q, T] -> additive [B, 1, 1 or Q, T]
            mask = ops.expand_dims(ops.cast(attention_mask, "bool"), 1)
            scores = scores + ops.where(mask, ops.zeros((), scores.dtype),
                                        ops.full((), -1e9, scores.dtype))
        probs = ops.softmax(scores, axis=-1)  # [B, N, Q, T]
        dropped = self._dropout_layer(probs, training=training)
        context = attention_context(ops.cast(dropped, v.dtype), v)  # [B, Q, N, D]
        output = merge_heads(self._output_dense, context)  # [B, Q, H]
        return (output, probs) if return_attention_scores else output

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(num_heads=self.num_heads, key_dim=self.key_dim, dropout=self.dropout,
                      kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
                      seed=self.seed)
        return config
