"""The attention core's two products, and the axis swap of its heads-first form.

Under `forms().heads_first` the scores and context are batch matmuls in the heads-first
[B, N, T, D] layout (the key transposed inside the matmul, the 1/sqrt(D) scale on the scores),
entered and left by `swap_axes_1_2`. That swap runs on the tensor's bits as same-width
integers: TensorFlow's oneDNN rewrite runs every float32 Transpose as a slow `_MklTranspose`
reorder, the integer one runs in TensorFlow's own kernel; the bitcasts are views, gradients flow
through the same swap (docs/performance.md, "Attention core"). Otherwise both products are
keras.ops einsums.

Shape legend: B = batch, Q = query rows, T = keys, N = heads, D = head size.
"""

from __future__ import annotations

import functools
from typing import Any

import keras
from keras import ops

from tfbert.ops.switch import forms

_SAME_WIDTH_INT = {"float64": "int64", "float32": "int32", "bfloat16": "int16",
                   "float16": "int16"}


def attention_scores(query: Any, key: Any, scale: float) -> Any:
    """scale * query . key: [B, Q, N, D] x [B, T, N, D] -> [B, N, Q, T], in the inputs' dtype.

    Example:
    >>> import numpy as np
    >>> q, k = np.ones((2, 3, 4, 8), "float32"), np.ones((2, 5, 4, 8), "float32")
    >>> tuple(attention_scores(q, k, 0.5).shape)
    (2, 4, 3, 5)
    """
    if forms().heads_first:
        import tensorflow as tf  # TensorFlow forms only: tfbert.ops imports under any Keras backend

        scores = tf.matmul(swap_axes_1_2(query), swap_axes_1_2(key),
                           transpose_b=True)  # [B, N, Q, T]
        return scores * ops.cast(scale, scores.dtype)
    query = ops.convert_to_tensor(query)
    query = query * ops.cast(scale, query.dtype)
    return ops.einsum("bqnd,btnd->bnqt", query, key)  # [B, N, Q, T]


def attention_context(probs: Any, value: Any) -> Any:
    """probs . value: [B, N, Q, T] x [B, T, N, D] -> [B, Q, N, D].

    Example:
    >>> import numpy as np
    >>> p, v = np.ones((2, 4, 3, 5), "float32"), np.ones((2, 5, 4, 8), "float32")
    >>> tuple(attention_context(p, v).shape)
    (2, 3, 4, 8)
    """
    if forms().heads_first:
        return swap_axes_1_2(ops.matmul(probs, swap_axes_1_2(value)))  # [B, Q, N, D]
    return ops.einsum("bnqt,btnd->bqnd", probs, value)  # [B, Q, N, D]


def swap_axes_1_2(x: Any) -> Any:
    """[B, X, Y, D] -> [B, Y, X, D]; under `forms().heads_first` as a transpose of the bits.

    Example:
    >>> import numpy as np
    >>> x = np.arange(24, dtype="float32").reshape(1, 2, 3, 4)
    >>> bool(np.array_equal(swap_axes_1_2(x), x.transpose(0, 2, 1, 3)))
    True
    """
    x = ops.convert_to_tensor(x)
    dtype = keras.backend.standardize_dtype(x.dtype)
    if not forms().heads_first or dtype not in _SAME_WIDTH_INT:
        return ops.transpose(x, (0, 2, 1, 3))
    return _bitwise_swap()(x)


@functools.cache
def _bitwise_swap():
    import tensorflow as tf  # TensorFlow forms only: tfbert.ops imports under any Keras backend

    def swap(x):
        ints = tf.bitcast(x, _SAME_WIDTH_INT[x.dtype.name])
        return tf.bitcast(tf.transpose(ints, (0, 2, 1, 3)), x.dtype)

    @tf.custom_gradient
    def bitwise_swap(x):
        return swap(x), swap  # the swap is its own inverse

    return bitwise_swap
