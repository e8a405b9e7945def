"""Stream-parallel inference form of `BertTransformerLayer` for CPU serving (TensorFlow only):
the SavedModel export's `cpu_streams`.

Each block's work is cut into S independent streams that TensorFlow's inter-op threads run
side by side, one intra-op thread each (Megatron-LM's tensor parallelism, inside one process),
instead of oneDNN splitting every small batch-1 matmul over the intra-op pool. Stream s owns
heads [s N/S, (s+1) N/S) and feed-forward columns [s I/S, (s+1) I/S): its heads' Q, K, V and
attention, and its part of both output projections; the S parts are summed (+ bias +
residual) before each LayerNorm. Same arithmetic, summed in a different order (tests: 1e-5).
`StreamedBlock` holds the kernels cut per stream as new variables (a slice in the graph would
copy them per call); an export with streams stores those in place of the blocks' kernels.

It pays only with one intra-op and S inter-op threads (TF Serving:
`--tensorflow_intra_op_parallelism=1 --tensorflow_inter_op_parallelism=S`); with the default
pools it is no faster than the plain graph (docs/performance.md, "cpu_streams for batch-1
serving"). The export applies it by tracing the model inside `streamed(blocks)`; the layers
themselves have no notion of streams.

Shape legend: B = batch, T = keys (sequence length), Q = query rows (T, or the positions of
`query_positions`), H = hidden size, N = heads, D = head size, I = intermediate size,
S = streams, h = N / S heads per stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfbert.errors import UserError
from tfbert.layers.heads import gather_positions
from tfbert.ops import linear_2d, swap_axes_1_2


class StreamedBlock:
    """One `BertTransformerLayer`'s inference forward cut into `streams` streams, with its
    weights cut to match (module docstring).

    Args:
        layer: BertTransformerLayer (built). Its LayerNorms and the two output biases are used
            as they are; its Q/K/V, attention-output and feed-forward kernels are copied,
            cut per stream, into `variables`.
        streams: int. S; must divide the layer's heads and intermediate size.

    Example:
    >>> import numpy as np
    >>> from tfbert.layers import BertTransformerLayer
    >>> block = BertTransformerLayer(hidden_size=32, num_attention_heads=4,
    ...                              intermediate_size=64)
    >>> x = np.random.default_rng(0).normal(size=(2, 8, 32)).astype("float32")
    >>> plain = block(x, training=False)
    >>> split = StreamedBlock(block, 2)
    >>> with streamed([split]):
    ...     cut = block(x, training=False)
    >>> bool(np.allclose(cut, plain, atol=1e-5)), len(split.variables)
    (True, 20)
    """

    def __init__(self, layer: Any, streams: int) -> None:
        att = layer.attention
        denses = (att.query_dense, att.key_dense, att.value_dense, att.output_dense,
                  layer.intermediate_dense, layer.output_dense)
        width, heads, size = att.query_dense.kernel.shape
        check_streams(heads, layer.intermediate_size, streams, f"{layer.name}: ")
        if any(d.bias is None for d in denses):
            raise ValueError(f"{layer.name}: the streamed form needs every projection's bias")
        if any(d.lora_enabled or d.quantization_mode is not None for d in denses):
            raise ValueError(f"{layer.name}: LoRA or quantized layers have no streamed form; "
                             "export without streams")
        self.layer, self.streams = layer, streams
        self.heads, self.head_size = heads // streams, size
        value = keras.ops.convert_to_numpy
        q, k, v = (value(d.kernel) for d in denses[:3])  # [H, N, D]
        qb, kb, vb = (value(d.bias) for d in denses[:3])  # [N, D]
        out = value(att.output_dense.kernel).reshape(heads * size, width)  # [N D, H]
        wi, bi = value(layer.intermediate_dense.kernel), value(layer.intermediate_dense.bias)
        wo = value(layer.output_dense.kernel)  # [I, H]
        inter = layer.intermediate_size
        per, cols = heads // streams, inter // streams
        self.parts: list[dict[str, tf.Variable]] = []
        for s in range(streams):
            h, c = slice(s * per, (s + 1) * per), slice(s * cols, (s + 1) * cols)
            arrays = {
                "query": q[:, h].reshape(width, -1), "query_bias": qb[h].reshape(-1),
                "key": k[:, h].reshape(width, -1), "key_bias": kb[h].reshape(-1),
                "value": v[:, h].reshape(width, -1), "value_bias": vb[h].reshape(-1),
                "attention_output": out[s * per * size:(s + 1) * per * size],
                "intermediate": wi[:, c], "intermediate_bias": bi[c],
                "output": wo[c]}
            self.parts.append({
                name: tf.Variable(np.ascontiguousarray(a), trainable=False,
                                  name=f"{layer.name}/stream_{s}/{name}")
                for name, a in arrays.items()})
        # The layer's variables the streamed form no longer reads (the SavedModel leaves them out)
        self.replaced = [d.kernel for d in denses] + [d.bias for d in denses[:3]] + [
            layer.intermediate_dense.bias]

    def layer_call(self, x, attention_mask=None, training=None, return_attention_probs=False,
                   query_positions=None):
        """The layer's call (same arguments): streamed at inference, the layer's own otherwise."""
        if training or return_attention_probs:
            return type(self.layer).call(
                self.layer, x, attention_mask=attention_mask, training=training,
                return_attention_probs=return_attention_probs, query_positions=query_positions)
        return self(x, attention_mask, query_positions)

    @property
    def variables(self) -> list[Any]:
        return [v for part in self.parts for v in part.values()]

    def __call__(self, x, attention_mask=None, query_positions=None):
        """The layer's inference output ([B, Q, H]) for the layer's call arguments."""
        layer, att = self.layer, self.layer.attention
        dtype = att.compute_dtype  # the matmuls' dtype (bfloat16 under mixed precision)
        width = x.shape[-1]
        query = x if query_positions is None else gather_positions(x, query_positions)
        batch, keys, rows = tf.shape(x)[0], tf.shape(x)[1], tf.shape(query)[1]
        keys_2d = tf.cast(tf.reshape(x, (-1, width)), dtype)  # [B T, H]
        query_2d = tf.reshape(query, (-1, width))  # [B Q, H], the residual's dtype
        queries = keys_2d if query_positions is None else tf.cast(query_2d, dtype)
        bias = None
        if attention_mask is not None:  # [B, 1 or Q, T] -> additive [B, 1, 1 or Q, T]
            bias = tf.where(tf.cast(attention_mask, tf.bool)[:, None], 0.0, -1e9)
        query_heads = tf.stack([batch, rows, self.heads, self.head_size])
        key_heads = tf.stack([batch, keys, self.heads, self.head_size])
        to_heads = lambda y, shape: swap_axes_1_2(tf.reshape(y, shape))  # -> [B, h, L, D]
        # Stream 0's output projections carry the layer's biases (see _join).
        first = lambda bias, i: bias if i == 0 else None
        partials = []
        for i, part in enumerate(self.parts):
            q = to_heads(linear_2d(queries, part["query"], part["query_bias"]), query_heads)
            k = to_heads(linear_2d(keys_2d, part["key"], part["key_bias"]), key_heads)
            v = to_heads(linear_2d(keys_2d, part["value"], part["value_bias"]), key_heads)
            scores = tf.matmul(q, k, transpose_b=True)  # [B, h, Q, T]
            scores = tf.cast(scores * tf.cast(att.scale, dtype), tf.float32)
            probs = tf.nn.softmax(scores if bias is None else scores + bias)
            context = swap_axes_1_2(tf.matmul(tf.cast(probs, dtype), v))  # [B, Q, h, D]
            partials.append(linear_2d(tf.reshape(context, (-1, self.heads * self.head_size)),
                                       part["attention_output"],
                                       first(att.output_dense.bias, i)))  # [B Q, H]
        attended = _join(partials, query_2d)
        h = layer.attention_layer_norm(attended)  # [B Q, H]
        h_in = tf.cast(h, dtype)
        activation = layer.intermediate_dense.activation
        partials = [linear_2d(activation(linear_2d(h_in, part["intermediate"],
                                                     part["intermediate_bias"])),
                               part["output"], first(layer.output_dense.bias, i))
                    for i, part in enumerate(self.parts)]
        y = layer.output_layer_norm(_join(partials, h))  # [B Q, H]
        return tf.reshape(y, tf.stack([batch, rows, width]))


def _join(partials, residual):
    """The streams' partial projections (stream 0's with the layer's bias, fused into its
    matmul) summed with the residual, in the residual's dtype (float32 under mixed precision, as
    the layer adds them). The residual goes onto stream 0's part, which depends on stream 0
    alone and so is added while the other streams still run: what is left at the join, where
    one thread works and the others wait, is one add per further stream."""
    total = residual + tf.cast(partials[0], residual.dtype)
    for part in partials[1:]:
        total = total + tf.cast(part, residual.dtype)
    return total


def check_streams(heads: int, intermediate_size: int, streams: Any, where: str = "") -> None:
    """Raises UserError unless `streams` is a positive int dividing both `heads` and
    `intermediate_size`; the message names the values that would work.

    Example:
    >>> try:
    ...     check_streams(2, 64, 3)
    ... except UserError as e:
    ...     print(str(e).split("; ")[1])
    use 1 or 2 (1 is the plain graph)
    """
    if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
        raise UserError(f"{where}cpu_streams must be a positive int, got {streams!r}")
    if heads % streams == 0 and intermediate_size % streams == 0:
        return
    fits = [str(s) for s in range(1, heads + 1) if heads % s == 0 and intermediate_size % s == 0]
    choices = ", ".join(fits[:-1]) + " or " + fits[-1] if len(fits) > 1 else fits[0]
    raise UserError(f"{where}cpu_streams {streams} does not fit the model: {streams} streams must "
                    f"divide the {heads} attention heads and the intermediate size "
                    f"{intermediate_size}; use {choices} (1 is the plain graph)")


def split_streams(model: Any, streams: int) -> list[StreamedBlock]:
    """A StreamedBlock for every BertTransformerLayer of `model` (a BertEncoder or a task model
    wrapping one).

    Example:
    >>> from tfbert.config import BertConfig
    >>> from tfbert.models.encoder import BertEncoder
    >>> config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
    ...                     num_attention_heads=4, intermediate_size=64)
    >>> len(split_streams(BertEncoder(config), 2))
    2
    """
    encoder = getattr(model, "encoder", model)  # task models wrap one BertEncoder
    return [StreamedBlock(layer, streams) for layer in encoder.transformer_layers]


@contextlib.contextmanager
def streamed(blocks: Sequence[StreamedBlock]) -> Iterator[None]:
    """Within the block, the layers of `blocks` run (and trace) their streamed form at inference
    (training calls and calls that return attention probabilities keep the plain form).

    Each block's StreamedBlock is bound as its layer's `call` for the duration, and the layer's
    own call is restored after: the layer itself has no notion of streams.

    Example: see StreamedBlock.
    """
    layers = [block.layer for block in blocks]
    if len({id(layer) for layer in layers}) != len(layers):
        raise ValueError("streamed(): two StreamedBlocks for the same layer")
    for block in blocks:
        block.layer.call = block.layer_call
    try:
        yield
    finally:
        for layer in layers:
            del layer.call  # back to the class's call
