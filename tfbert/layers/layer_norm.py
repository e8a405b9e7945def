"""BERT's LayerNorm: keras LayerNormalization, one fused op at inference under TensorFlow.

Grappler's oneDNN remapper rewrites one LayerNorm formulation into a single `_MklLayerNorm`
kernel: a training-mode FusedBatchNormV3 over the input reshaped to [1, rows, H, 1] (NCHW, one
"channel" per row), then `* gamma + beta`. `BertLayerNorm` emits that form at inference under
TensorFlow, passing the configured epsilon to the raw op (tf.nn.fused_batch_norm's wrapper would
raise BERT's 1e-12 to 1.001e-5), in place of about ten small ops per LayerNorm. Measured: 4-8%
off a bert-base batch-1 forward (docs/performance.md, "LayerNorm form", which also lists the
formulations that do not fuse). Training keeps keras's ops, so training numerics are unchanged;
so do other backends, non-float32 inputs, hosts with a GPU (cuDNN's batch norm clamps epsilon
to 1e-5) and graphs traced inside `tfbert.layers.graph_forms.stock_ops()` (the TFLite export:
the converter decomposes the fused form into more ops than keras's).
"""

from __future__ import annotations

import keras

from tfbert.layers.graph_forms import has_gpu, tensorflow_forms


@keras.saving.register_keras_serializable(package="tfbert")
class BertLayerNorm(keras.layers.LayerNormalization):
    """keras.layers.LayerNormalization (same arguments, variables and results) whose inference
    forward under TensorFlow is one op after Grappler's oneDNN rewrite (module docstring).

    Example:
    >>> import numpy as np
    >>> norm = BertLayerNorm(epsilon=1e-12)
    >>> x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    >>> stock = keras.layers.LayerNormalization(epsilon=1e-12)
    >>> bool(np.allclose(norm(x), stock(x), atol=1e-5))
    True
    """

    def call(self, inputs, training=None):
        if training or not self._fusable(inputs):
            return super().call(inputs)
        import tensorflow as tf

        shape = tf.shape(inputs)
        rows = tf.reduce_prod(shape[:-1])
        width = inputs.shape[-1]
        x = tf.reshape(inputs, tf.stack([1, rows, width, 1]))
        empty = tf.constant([], tf.float32)
        normalized = tf.raw_ops.FusedBatchNormV3(
            x=x, scale=tf.ones(tf.stack([rows])), offset=tf.zeros(tf.stack([rows])),
            mean=empty, variance=empty, epsilon=self.epsilon, data_format="NCHW",
            is_training=True)[0]
        return tf.reshape(normalized, shape) * self.gamma + self.beta

    def _fusable(self, inputs) -> bool:
        """The fused formulation applies: TensorFlow, float32, the last axis only, centred and
        scaled, no GPU, not inside stock_ops()."""
        rank = len(inputs.shape)
        return (tensorflow_forms()
                and self.compute_dtype == "float32"
                and keras.backend.standardize_dtype(inputs.dtype) == "float32"
                and [axis % rank for axis in self.axis] == [rank - 1]
                and inputs.shape[-1] is not None
                and self.center and self.scale and not self.rms_scaling and not has_gpu())

