"""Projections: a Keras Dense / EinsumDense applied as one 2-D matmul with a BiasAdd.

Under `forms().matmul_2d` each projection is [B*T, in] x [in, out] on the kernel reshaped to
2-D, the bias added by `tf.nn.bias_add`: Grappler's oneDNN remapper fuses MatMul + BiasAdd +
GELU into one _FusedMatMul only in that form, and EinsumDense's own form is a broadcasting
BatchMatMulV2 (docs/performance.md, "Projections as 2-D matmuls" and "Feed-forward: fused
MatMul + bias + GELU"). Otherwise, and for layers with LoRA or quantization, the layer's own
call runs.

Shape legend: B = batch, T = sequence length, H = hidden size, N = heads, D = head size.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from tfbert.ops.switch import forms


def linear_2d(x: Any, kernel: Any, bias: Any = None) -> Any:
    """x [R, K] @ kernel [K, C] (+ bias [C]), in x's dtype; under TensorFlow the bias is a
    BiasAdd op.

    Example:
    >>> import numpy as np
    >>> tuple(linear_2d(np.ones((3, 4), "float32"), np.ones((4, 5), "float32")).shape)
    (3, 5)
    """
    x = ops.convert_to_tensor(x)
    y = ops.matmul(x, ops.cast(kernel, x.dtype))
    if bias is None:
        return y
    bias = ops.cast(bias, y.dtype)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf  # TensorFlow forms only: tfbert.ops imports under any Keras backend

        return tf.nn.bias_add(y, bias)
    return y + bias


def _own_call(layer: keras.layers.Layer) -> bool:
    """The layer's own call must run: the 2-D form is off, or LoRA / quantization is on."""
    return (not forms().matmul_2d or getattr(layer, "lora_enabled", False)
            or getattr(layer, "quantization_mode", None) is not None)


def dense(layer: keras.layers.Dense, x: Any) -> Any:
    """`layer(x)` for a keras Dense on [..., in]: the same result (module docstring)."""
    if _own_call(layer):
        return layer(x)
    x = ops.cast(x, layer.compute_dtype)
    batch_shape = ops.shape(x)[:-1]
    y = linear_2d(ops.reshape(x, (-1, x.shape[-1])), layer.kernel, layer.bias)
    if layer.activation is not None:
        y = layer.activation(y)
    return ops.reshape(y, (*batch_shape, layer.units))


def project_heads(layer: keras.layers.EinsumDense, x: Any) -> Any:
    """`layer(x)` for a Q/K/V EinsumDense "abc,cde->abde":
    [B, T, H] x [H, N, D] -> [B, T, N, D]."""
    if _own_call(layer):
        return layer(x)
    width, heads, head_size = layer.kernel.shape
    x = ops.cast(x, layer.compute_dtype)
    batch_shape = ops.shape(x)[:-1]
    bias = None if layer.bias is None else ops.reshape(layer.bias, (heads * head_size,))
    y = linear_2d(ops.reshape(x, (-1, width)),
                  ops.reshape(layer.kernel, (width, heads * head_size)), bias)  # [B*T, N*D]
    return ops.reshape(y, (*batch_shape, heads, head_size))  # [B, T, N, D]


def merge_heads(layer: keras.layers.EinsumDense, x: Any) -> Any:
    """`layer(x)` for the output EinsumDense "abcd,cde->abe":
    [B, T, N, D] x [N, D, H] -> [B, T, H]."""
    if _own_call(layer):
        return layer(x)
    heads, head_size, width = layer.kernel.shape
    x = ops.cast(x, layer.compute_dtype)
    batch_shape = ops.shape(x)[:-2]
    y = linear_2d(ops.reshape(x, (-1, heads * head_size)),
                  ops.reshape(layer.kernel, (heads * head_size, width)), layer.bias)  # [B*T, H]
    return ops.reshape(y, (*batch_shape, width))  # [B, T, H]
