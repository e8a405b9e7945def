"""BERT's post-LN transformer block, on keras.layers.MultiHeadAttention.

Shape legend: B = batch, T = sequence length, H = hidden size, N = attention heads,
D = H / N (head size), I = intermediate (feed-forward) size.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from tfbert.layers.activations import get_activation
from tfbert.layers.dropout import BertDropout
from tfbert.layers.graph_forms import swap_axes_1_2, tensorflow_forms
from tfbert.layers.heads import gather_positions
from tfbert.layers.layer_norm import BertLayerNorm
from tfbert.layers.precision import float32_policy
from tfbert.layers.streams import active_block


@keras.saving.register_keras_serializable(package="tfbert")
class BertSelfAttention(keras.layers.MultiHeadAttention):
    """keras.layers.MultiHeadAttention whose softmax runs in float32 under mixed precision.

    The Q/K/V/output EinsumDense sublayers (their variables, names and shapes) and the
    [B, 1, T] or [B, T, T] boolean mask are the Keras layer's; see its docstring for the
    arguments. Three things are computed differently, with the same results:

    - Without returned probabilities, the mask is an additive [B, 1, 1, T] bias (0 or -1e9)
      before a plain softmax, not the stock `where` before and after it (docs/performance.md,
      "Attention mask as an additive bias").
    - Each projection is one 2-D matmul, [B*T, H] x [H, N*D] on the reshaped kernel, not
      EinsumDense's broadcasting BatchMatMulV2 ("Projections as 2-D matmuls").
    - Under TensorFlow the scores and context are batch matmuls in the heads-first
      [B, N, T, D] layout, entered and left by `swap_axes_1_2` (graph_forms.py), the key
      transposed inside the matmul and the 1/sqrt(D) scale on the scores ("Attention core").
    """

    def call(self, query, value, key=None, query_mask=None, value_mask=None, key_mask=None,
             attention_mask=None, return_attention_scores=False, training=None,
             use_causal_mask=False):
        denses = (self._query_dense, self._key_dense, self._value_dense, self._output_dense)
        keras_masks = (getattr(t, "_keras_mask", None) for t in (query, value, key))
        if (return_attention_scores or use_causal_mask or self._use_gate
                or any(m is not None for m in (query_mask, value_mask, key_mask))
                or any(m is not None for m in keras_masks)  # Keras masks: the stock path
                or any(getattr(d, "lora_enabled", False) or getattr(d, "quantization_mode", None)
                       for d in denses)):
            return super().call(
                query, value, key=key, query_mask=query_mask, value_mask=value_mask,
                key_mask=key_mask, attention_mask=attention_mask,
                return_attention_scores=return_attention_scores, training=training,
                use_causal_mask=use_causal_mask)
        key = value if key is None else key
        attention_mask = self._compute_attention_mask(query, value,
                                                      attention_mask=attention_mask)
        query, key, value = self._project_qkv(query, key, value)
        context, _ = self._compute_attention(query, key, value, attention_mask, training)
        dense = self._output_dense  # kernel [N, D, H]
        heads, head_size, width = dense.kernel.shape
        batch_shape = ops.shape(context)[:-2]
        out = _linear_2d(ops.reshape(context, (-1, heads * head_size)),
                         ops.reshape(dense.kernel, (heads * head_size, width)),
                         dense.bias)  # [B*T, H]
        return ops.reshape(out, (*batch_shape, width))  # [B, T, H]

    def _project_qkv(self, query, key, value):
        """[B, T, H], [B, S, H], [B, S, H] -> [B, T, N, D], [B, S, N, D], [B, S, N, D]."""
        return (_project_heads(self._query_dense, query), _project_heads(self._key_dense, key),
                _project_heads(self._value_dense, value))

    def _compute_attention(self, query, key, value, attention_mask=None, training=None,
                           return_attention_scores=False, use_causal_mask=False):
        if (return_attention_scores or use_causal_mask or self._flash_attention
                or len(query.shape) != 4 or tuple(self._attention_axes) != (1,)):
            # (custom attention_axes: keras's softmax over several axes)
            return super()._compute_attention(
                query, key, value, attention_mask=attention_mask, training=training,
                return_attention_scores=return_attention_scores,
                use_causal_mask=use_causal_mask)
        heads_first = tensorflow_forms()
        if heads_first:  # see the class docstring
            import tensorflow as tf

            query, key, value = (swap_axes_1_2(t) for t in (query, key, value))  # [B, N, *, D]
            scores = tf.matmul(query, key, transpose_b=True)  # [B, N, T, S]
            scores = scores * ops.cast(self._inverse_sqrt_key_dim, scores.dtype)
        else:
            query = ops.multiply(query, ops.cast(self._inverse_sqrt_key_dim, query.dtype))
            scores = ops.einsum(self._dot_product_equation, key, query)  # [B, N, T, S]
        scores = ops.cast(scores, self._softmax.compute_dtype)
        if attention_mask is not None:
            if len(attention_mask.shape) == 3:  # [B, 1 or T, S] -> [B, 1, 1 or T, S]
                attention_mask = ops.expand_dims(attention_mask, 1)
            large = -3e4 if scores.dtype == "float16" else -1e9  # finite in the score dtype
            bias = ops.where(ops.cast(attention_mask, "bool"),
                             ops.zeros((), scores.dtype), ops.full((), large, scores.dtype))
            scores = scores + bias  # bias: [B, 1, 1, S] or [B, 1, T, S]
        probs = ops.softmax(scores, axis=-1)  # [B, N, T, S]
        if self._dropout > 0.0:
            probs = self._dropout_layer(probs, training=training)
        probs = ops.cast(probs, value.dtype)
        if heads_first:
            return swap_axes_1_2(ops.matmul(probs, value)), None  # [B, T, N, D]
        return ops.einsum(self._combine_equation, probs, value), None  # [B, T, N, D]

    def _build_attention(self, rank: int) -> None:
        super()._build_attention(rank)
        # The stock softmax runs in the compute dtype; attention probabilities in bfloat16 lose
        # the small weights, so compute them in float32 (as the fused path already does).
        self._softmax = keras.layers.Softmax(
            axis=self._softmax.axis, dtype=float32_policy(self.dtype_policy))
        self._dropout_layer = BertDropout(rate=self._dropout, dtype=self.dtype_policy,
                                          seed=self.seed)


def _project_heads(dense: keras.layers.EinsumDense, x):
    """EinsumDense "abc,cde->abde" ([B, T, H] x [H, N, D] + [N, D]) as one 2-D matmul."""
    width, heads, head_size = dense.kernel.shape
    batch_shape = ops.shape(x)[:-1]
    bias = None if dense.bias is None else ops.reshape(dense.bias, (heads * head_size,))
    y = _linear_2d(ops.reshape(x, (-1, width)),
                   ops.reshape(dense.kernel, (width, heads * head_size)), bias)
    return ops.reshape(y, (*batch_shape, heads, head_size))  # [B, T, N, D]


def _dense_2d(dense: keras.layers.Dense, x):
    """keras Dense on [..., in] as one 2-D matmul + bias + activation (same result).

    Under TensorFlow the bias goes in through tf.nn.bias_add: Grappler's oneDNN remapper fuses
    MatMul + BiasAdd + GELU (exact or tanh) into one _FusedMatMul, but only when the bias is a
    BiasAdd op on a 2-D matmul. Dense's own `x + bias` (AddV2, after the 3-D matmul's reshape)
    leaves the bias and the GELU's five elementwise ops as separate passes over [B*T, I].
    Measured: -9% at batch 1 (docs/performance.md, "Feed-forward: fused MatMul + bias + GELU").
    """
    x = ops.cast(x, dense.compute_dtype)
    batch_shape = ops.shape(x)[:-1]
    y = _linear_2d(ops.reshape(x, (-1, x.shape[-1])), dense.kernel, dense.bias)
    if dense.activation is not None:
        y = dense.activation(y)
    return ops.reshape(y, (*batch_shape, dense.units))


def _linear_2d(x, kernel, bias):
    """x [R, K] @ kernel [K, C] (+ bias [C]) in x's dtype: the one matmul + bias behind the
    projections and the feed-forward. Under TensorFlow the bias is a BiasAdd op (see _dense_2d)."""
    y = ops.matmul(x, ops.cast(kernel, x.dtype))
    if bias is None:
        return y
    bias = ops.cast(bias, y.dtype)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.nn.bias_add(y, bias)
    return y + bias


@keras.saving.register_keras_serializable(package="tfbert")
class BertTransformerLayer(keras.layers.Layer):
    """One post-LN BERT block: self-attention + residual + LayerNorm, FFN + residual + LayerNorm.

    Sublayers (attribute = Keras name): `attention` (BertSelfAttention with `query_dense`,
    `key_dense`, `value_dense`, `output_dense`), `attention_layer_norm`, `intermediate_dense`,
    `output_dense`, `output_layer_norm`. Under mixed precision the residual stream and both
    LayerNorms are float32 and the matmuls run in the compute dtype.

    Args:
        hidden_size: int. Width H; must be a multiple of num_attention_heads.
        num_attention_heads: int. Heads N.
        intermediate_size: int. Width I of the feed-forward layer.
        hidden_act: str. Feed-forward activation: "gelu" (exact), "gelu_tanh", "relu", ...
        hidden_dropout: float. Dropout on the attention output and the FFN output.
        attention_dropout: float. Dropout on the attention probabilities.
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
        self.attention_dropout = BertDropout(
            hidden_dropout, name="attention_dropout", dtype=self.dtype_policy)
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
        self.hidden_dropout = hidden_dropout
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
        streams = active_block(self)  # the SavedModel export's cpu_streams (streams.py)
        if streams is not None and not training and not return_attention_probs:
            return streams(x, attention_mask, query_positions)
        query = x if query_positions is None else gather_positions(x, query_positions)
        attention_output = self.attention(
            query, x, attention_mask=attention_mask, training=training,
            return_attention_scores=return_attention_probs)
        if return_attention_probs:
            attention_output, probs = attention_output  # probs: [B, N, Q, T]
        attention_output = self.attention_dropout(attention_output, training=training)
        x = self.attention_layer_norm(query + ops.cast(attention_output, x.dtype))  # [B, Q, H]
        h = self._feed_forward(x)  # [B, Q, H]
        h = self.output_dropout(h, training=training)
        x = self.output_layer_norm(x + ops.cast(h, x.dtype))  # [B, Q, H]
        return (x, probs) if return_attention_probs else x

    def _feed_forward(self, x):
        """intermediate_dense (with the activation), then output_dense: [B, Q, H] -> [B, Q, H]."""
        if any(getattr(d, "lora_enabled", False) or getattr(d, "quantization_mode", None)
               for d in (self.intermediate_dense, self.output_dense)):
            return self.output_dense(self.intermediate_dense(x))  # the layers' own paths
        return _dense_2d(self.output_dense, _dense_2d(self.intermediate_dense, x))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            hidden_size=self.hidden_size, num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size, hidden_act=self.hidden_act,
            hidden_dropout=self.hidden_dropout, attention_dropout=self.attention_dropout_rate,
            layer_norm_eps=self.layer_norm_eps, initializer_range=self.initializer_range)
        return config
