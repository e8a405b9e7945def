"""BertRegressor: one real-valued score per text or sentence pair (GLUE STS-B), on `pooled_output`.

The head is transformers' BertForSequenceClassification with num_labels=1 (its "regression"
problem type): dropout, then one dense unit on the pooled [CLS] vector, trained with mean squared
error. Shape legend: B = batch, T = sequence, H = hidden.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from tfbert.layers.dropout import BertDropout
from tfbert.layers.precision import float32_policy
from tfbert.models.encoder import BertEncoder
from tfbert.models.task import BertTask


@keras.saving.register_keras_serializable(package="tfbert")
class BertRegressor(BertTask):
    """Dropout + a dense to one unit on `pooled_output`: a float32 score [B] per example.

    Inputs: the encoder's dict (`input_ids`, `input_mask`, `segment_ids`). `compile()` defaults
    to mean squared error and root mean squared error; train with `model.fit(ds)` where ds yields
    (features, scores [B] float32).

    Args:
        encoder: tfbert.BertEncoder. The backbone (pretrained or fresh).
        dropout: float. Dropout rate before the output layer.
        **kwargs: keras.Model arguments (name).

    Example:
    >>> from tfbert import BertConfig, BertEncoder
    >>> encoder = BertEncoder(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
    ...                                  num_attention_heads=4, intermediate_size=64))
    >>> ones = keras.ops.ones((2, 8), "int32")
    >>> tuple(BertRegressor(encoder)(
    ...     {"input_ids": ones, "input_mask": ones, "segment_ids": ones * 0}).shape)
    (2,)
    """

    def __init__(self, encoder: BertEncoder, dropout: float = 0.1, **kwargs: Any) -> None:
        encoder = self._check_encoder(encoder, "BertRegressor")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"BertRegressor: dropout must be in [0, 1), got {dropout!r}")
        # === Layers ===
        self.encoder = encoder
        self.head_dropout = BertDropout(dropout, name="head_dropout", dtype=encoder.dtype_policy)
        self.output_dense = keras.layers.Dense(
            1, name="score", dtype=float32_policy(encoder.dtype_policy),
            kernel_initializer=keras.initializers.TruncatedNormal(
                stddev=encoder.config.initializer_range))
        # === Functional Model ===
        inputs = dict(encoder.input)
        x = encoder(inputs)["pooled_output"]  # [B, H]
        score = self.output_dense(self.head_dropout(x))[:, 0]  # [B]
        super().__init__(inputs=inputs, outputs=score, **kwargs)
        # === Config ===
        self.dropout = dropout

    def call(self, inputs: Any, training: bool | None = None, mask: Any = None) -> Any:
        """The functional graph's score with the last block computed only at [CLS], the one row
        the head reads (`BertEncoder.forward`), as BertClassifier does."""
        inputs = self._select_inputs(inputs)
        cls = ops.zeros_like(ops.cast(inputs["input_ids"][:, :1], "int32"))  # [B, 1]
        x = self.encoder.forward(inputs, training=training,
                                 last_layer_positions=cls)["pooled_output"]  # [B, H]
        return self.output_dense(self.head_dropout(x, training=training))[:, 0]  # [B]

    def _head_config(self) -> dict[str, Any]:
        return {"dropout": self.dropout}

    def default_loss(self) -> Any:
        """Loss of `compile(loss="auto")`: mean squared error."""
        return keras.losses.MeanSquaredError()

    def default_metrics(self) -> Any:
        """Weighted metrics of `compile(weighted_metrics="auto")`: root mean squared error."""
        return [keras.metrics.RootMeanSquaredError(name="rmse")]
