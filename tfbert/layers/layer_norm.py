"""BERT's LayerNorm: keras LayerNormalization, through `tfbert.ops.layer_norm` (one fused op at
inference on a TensorFlow CPU host)."""

from __future__ import annotations

from typing import Any

import keras

from tfbert.ops import layer_norm


@keras.saving.register_keras_serializable(package="tfbert")
class BertLayerNorm(keras.layers.LayerNormalization):
    """keras.layers.LayerNormalization (same arguments, variables and results) whose inference
    forward is `tfbert.ops.layer_norm`'s.

    Example:
    >>> import numpy as np
    >>> norm = BertLayerNorm(epsilon=1e-12)
    >>> x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    >>> stock = keras.layers.LayerNormalization(epsilon=1e-12)
    >>> bool(np.allclose(norm(x), stock(x), atol=1e-5))
    True
    """

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        return layer_norm(self, inputs, training=training)
