"""LayerNorm at inference as one FusedBatchNormV3, which oneDNN runs as one kernel.

Grappler's oneDNN remapper rewrites one LayerNorm formulation into a single `_MklLayerNorm`:
a training-mode FusedBatchNormV3 over the input reshaped to [1, rows, H, 1] (NCHW, one
"channel" per row), then `* gamma + beta`. Called as the raw op with the configured epsilon
(tf.nn.fused_batch_norm's wrapper would raise BERT's 1e-12 to 1.001e-5). It replaces about ten
small ops per LayerNorm (docs/performance.md, "LayerNorm form", which also lists the
formulations that do not fuse). Used under `forms().fused_layer_norm` at inference, for float32
inputs normalized over the last axis with centre and scale; otherwise keras's own call runs, so
training numerics are keras's.
"""

from __future__ import annotations

from typing import Any

import keras

from tfbert.ops.switch import forms


def layer_norm(layer: keras.layers.LayerNormalization, x: Any, training: Any = None) -> Any:
    """`layer(x)` for a keras LayerNormalization: the same result (module docstring).

    Example:
    >>> import numpy as np
    >>> norm = keras.layers.LayerNormalization(epsilon=1e-12)
    >>> x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    >>> want = norm(x)  # (builds the layer)
    >>> bool(np.allclose(layer_norm(norm, x), want, atol=1e-5))
    True
    """
    if training or not _fusable(layer, x):
        return keras.layers.LayerNormalization.call(layer, x)
    import tensorflow as tf  # TensorFlow forms only: tfbert.ops imports under any Keras backend

    shape = tf.shape(x)
    rows = tf.reduce_prod(shape[:-1])
    x4 = tf.reshape(x, tf.stack([1, rows, x.shape[-1], 1]))
    empty = tf.constant([], tf.float32)
    normalized = tf.raw_ops.FusedBatchNormV3(
        x=x4, scale=tf.ones(tf.stack([rows])), offset=tf.zeros(tf.stack([rows])),
        mean=empty, variance=empty, epsilon=layer.epsilon, data_format="NCHW",
        is_training=True)[0]
    return tf.reshape(normalized, shape) * layer.gamma + layer.beta


def _fusable(layer: keras.layers.LayerNormalization, x: Any) -> bool:
    """The fused formulation applies: the form is on, float32, the last axis only, centred and
    scaled."""
    if not forms().fused_layer_norm:
        return False
    x = keras.ops.convert_to_tensor(x)
    rank = len(x.shape)
    axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    return (layer.compute_dtype == "float32"
            and keras.backend.standardize_dtype(x.dtype) == "float32"
            and [axis % rank for axis in axes] == [rank - 1]
            and x.shape[-1] is not None
            and layer.center and layer.scale and not layer.rms_scaling)
