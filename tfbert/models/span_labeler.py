"""BertSpanLabeler: extractive QA (SQuAD-style) start/end logits on `sequence_output`."""

from __future__ import annotations

from typing import Any

import keras

from tfbert.layers.precision import float32_policy
from tfbert.models.encoder import BertEncoder
from tfbert.models.task import BertTask


@keras.saving.register_keras_serializable(package="tfbert")
class BertSpanLabeler(BertTask):
    """A dense to 2 logits per token (reference `cls/squad`), split into start and end.

    Outputs: dict of float32 `start_logits` [B, T] and `end_logits` [B, T]. `compile()`
    defaults to sparse cross-entropy on each (labels: dict `start_logits`/`end_logits` of
    token positions [B], as `fit` pairs labels with outputs by name) and accuracy.

    Args:
        encoder: tfbert.BertEncoder. The backbone.
        **kwargs: keras.Model arguments (name).

    Example:
    >>> from tfbert import BertConfig, BertEncoder
    >>> encoder = BertEncoder(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
    ...                                  num_attention_heads=4, intermediate_size=64))
    >>> ones = keras.ops.ones((2, 8), "int32")
    >>> out = BertSpanLabeler(encoder)(
    ...     {"input_ids": ones, "input_mask": ones, "segment_ids": ones * 0})
    >>> tuple(out["start_logits"].shape), tuple(out["end_logits"].shape)
    ((2, 8), (2, 8))
    """

    def __init__(self, encoder: BertEncoder, **kwargs: Any) -> None:
        encoder = self._check_encoder(encoder, "BertSpanLabeler")
        # === Layers ===
        self.encoder = encoder
        self.output_dense = keras.layers.Dense(
            2, name="span_logits", dtype=float32_policy(encoder.dtype_policy),
            kernel_initializer=keras.initializers.TruncatedNormal(
                stddev=encoder.config.initializer_range))
        # === Functional Model ===
        inputs = dict(encoder.input)
        x = encoder(inputs)["sequence_output"]  # [B, T, H]
        logits = self.output_dense(x)  # [B, T, 2]
        outputs = {"start_logits": logits[:, :, 0], "end_logits": logits[:, :, 1]}  # [B, T]
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

    def default_loss(self) -> Any:
        loss = lambda: keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return {"start_logits": loss(), "end_logits": loss()}

    def default_metrics(self) -> Any:
        return {name: [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
                for name in ("start_logits", "end_logits")}
