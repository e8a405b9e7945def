"""TensorFlow graph forms of two operations that oneDNN-enabled TensorFlow runs slowly, and the
switch that turns them off.

- LayerNorm: see `tfbert.layers.layer_norm` (one fused `_MklLayerNorm` at inference).
- Swapping axes 1 and 2 of a [B, T, N, D] tensor (the attention heads' layout change):
  TensorFlow's oneDNN graph rewrite runs every float32 Transpose as `_MklTranspose`, a oneDNN
  reorder; the same permutation on the tensor's bits as integers runs in TensorFlow's own
  transpose kernel, which copies whole D-element rows. Measured: 0.095 vs 0.018 ms per
  [1, 128, 12, 64] swap (docs/performance.md, "Attention core"). The bitcasts are views, not
  copies. Gradients flow through the same swap.

Graphs traced inside `stock_ops()` use keras's own ops for both: the TFLite export does, since
the converter decomposes the fused LayerNorm into more ops than keras's and has no use for the
integer swap.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator

import keras
from keras import ops

_STOCK = contextvars.ContextVar("tfbert_stock_ops", default=False)


@contextlib.contextmanager
def stock_ops() -> Iterator[None]:
    """Within the block, tfbert's layers run (and trace) keras's own ops instead of the
    TensorFlow graph forms of this module.

    Example:
    >>> import numpy as np
    >>> import tensorflow as tf
    >>> forward = tf.function(lambda x: swap_axes_1_2(x))
    >>> x = np.zeros((1, 4, 2, 3), "float32")
    >>> with stock_ops():
    ...     graph = forward.get_concrete_function(x).graph
    >>> "Bitcast" in {op.type for op in graph.get_operations()}
    False
    """
    token = _STOCK.set(True)
    try:
        yield
    finally:
        _STOCK.reset(token)


def tensorflow_forms() -> bool:
    """True when the TensorFlow graph forms apply: TensorFlow backend, not inside stock_ops().

    Example:
    >>> tensorflow_forms()
    True
    >>> with stock_ops():
    ...     tensorflow_forms()
    False
    """
    return not _STOCK.get() and keras.backend.backend() == "tensorflow"


@functools.cache
def has_gpu() -> bool:
    """Whether TensorFlow sees a GPU (some forms are CPU-only).

    Example:
    >>> isinstance(has_gpu(), bool)
    True
    """
    import tensorflow as tf

    return bool(tf.config.list_logical_devices("GPU"))


_SAME_WIDTH_INT = {"float64": "int64", "float32": "int32", "bfloat16": "int16",
                   "float16": "int16"}


def swap_axes_1_2(x):
    """[B, X, Y, D] -> [B, Y, X, D]; under TensorFlow as a transpose of the bits (module
    docstring).

    Example:
    >>> import numpy as np
    >>> x = np.arange(24, dtype="float32").reshape(1, 2, 3, 4)
    >>> bool(np.array_equal(swap_axes_1_2(x), x.transpose(0, 2, 1, 3)))
    True
    """
    x = ops.convert_to_tensor(x)
    dtype = keras.backend.standardize_dtype(x.dtype)
    if not tensorflow_forms() or dtype not in _SAME_WIDTH_INT:
        return ops.transpose(x, (0, 2, 1, 3))
    return _bitwise_swap()(x)


@functools.cache
def _bitwise_swap():
    import tensorflow as tf

    def swap(x):
        ints = tf.bitcast(x, _SAME_WIDTH_INT[x.dtype.name])
        return tf.bitcast(tf.transpose(ints, (0, 2, 1, 3)), x.dtype)

    @tf.custom_gradient
    def bitwise_swap(x):
        return swap(x), swap  # the swap is its own inverse

    return bitwise_swap
