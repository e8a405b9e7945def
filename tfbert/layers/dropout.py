"""BERT's dropout: keras.layers.Dropout, drawing its mask through `tfbert.ops.dropout`."""

from __future__ import annotations

from typing import Any

import keras

from tfbert.ops import dropout


@keras.saving.register_keras_serializable(package="tfbert")
class BertDropout(keras.layers.Dropout):
    """keras.layers.Dropout (same arguments, config, SeedGenerator and seeding order) whose mask
    comes from `tfbert.ops.dropout`: 16 random bits per element under TensorFlow, keras's own
    draw elsewhere.

    Example:
    >>> import numpy as np
    >>> y = BertDropout(0.5, seed=1)(np.ones((4, 4), "float32"), training=True)
    >>> sorted(set(np.asarray(y).ravel().tolist()))
    [0.0, 2.0]
    """

    def call(self, inputs: Any, training: bool = False) -> Any:
        return dropout(self, inputs, training=training)
