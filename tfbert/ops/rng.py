"""Dropout from 16 random bits per element.

keras.layers.Dropout's TensorFlow path runs `tf.nn.experimental.stateless_dropout`: a divide,
a 32-bit float draw per element, compare and select forward, select and divide backward. Under
`forms().dropout_16bit` each element takes 16 random bits (one Philox word serves two elements)
and the result is one multiply by a {0, 1 / keep} mask, which is also the whole gradient
(docs/performance.md, "Dropout RNG"). An element is dropped when its draw is below
round(rate * 65536), so the drop probability is the rate rounded to a multiple of 1/65536
(0.1 -> 0.100006); kept elements are scaled by the inverse of that keep probability, so the
output stays unbiased.
"""

from __future__ import annotations

from typing import Any

import keras

from tfbert.ops.switch import forms

_LEVELS = 1 << 16  # 16-bit draws


def dropout(layer: keras.layers.Dropout, x: Any, training: Any = None) -> Any:
    """`layer(x, training)` for a keras Dropout, drawing from the layer's SeedGenerator in the
    same order (module docstring). A `noise_shape` keeps keras's own call.

    Example:
    >>> import numpy as np
    >>> layer = keras.layers.Dropout(0.5, seed=1)
    >>> y = np.asarray(dropout(layer, np.ones((4, 4), "float32"), training=True))
    >>> sorted(set(y.ravel().tolist())) in ([0.0, 2.0], [2.0])
    True
    """
    if (not training or layer.rate <= 0 or layer.noise_shape is not None
            or not forms().dropout_16bit):
        return keras.layers.Dropout.call(layer, x, training=training)
    return _dropout_16bit(x, layer.rate, layer.seed_generator.next())


def _dropout_16bit(x: Any, rate: float, seed: Any) -> Any:
    import tensorflow as tf  # TensorFlow forms only: tfbert.ops imports under any Keras backend

    if seed.dtype != tf.int32:  # as keras' TF backend casts SeedGenerator states
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
    threshold = min(round(rate * _LEVELS), _LEVELS - 1)
    scale = _LEVELS / (_LEVELS - threshold)
    size = tf.size(x)
    words = tf.random.stateless_uniform([(size + 1) // 2], seed=seed, minval=None, maxval=None,
                                        dtype=tf.uint32)  # full-range 32-bit ints
    bits = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:size]
    mask = tf.where(bits >= tf.constant(threshold, tf.uint16), tf.constant(scale, x.dtype),
                    tf.constant(0, x.dtype))
    return x * tf.reshape(mask, tf.shape(x))
