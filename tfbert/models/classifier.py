"""BertClassifier: sequence (or sentence-pair) classification on the pooled [CLS] output."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from tfbert.layers.dropout import BertDropout
from tfbert.layers.precision import float32_policy
from tfbert.models.encoder import BertEncoder
from tfbert.models.task import BertTask


@keras.saving.register_keras_serializable(package="tfbert")
class BertClassifier(BertTask):
    """Dropout + optional hidden dense layers + a dense to `num_classes` logits, on `pooled_output`.

    Inputs: the encoder's dict (`input_ids`, `input_mask`, `segment_ids`). Output: float32
    logits [B, num_classes]. `compile()` defaults to sparse cross-entropy from logits and
    accuracy; train with `model.fit(ds)` where ds yields (features, labels [B]).

    Args:
        encoder: tfbert.BertEncoder. The backbone (pretrained or fresh).
        num_classes: int. Number of labels C.
        head_hidden_layers: int. 0-3 extra dense layers (ReLU) before the output layer.
        head_hidden_size: int. Width of each extra dense layer.
        dropout: float. Dropout rate before each head dense layer.
        **kwargs: keras.Model arguments (name).

    Example:
    >>> from tfbert import BertConfig, BertEncoder
    >>> encoder = BertEncoder(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
    ...                                  num_attention_heads=4, intermediate_size=64))
    >>> model = BertClassifier(encoder, num_classes=3, head_hidden_layers=1, head_hidden_size=64)
    >>> ones = keras.ops.ones((2, 8), "int32")
    >>> tuple(model({"input_ids": ones, "input_mask": ones, "segment_ids": ones * 0}).shape)
    (2, 3)
    """

    def __init__(self, encoder: BertEncoder, num_classes: int, head_hidden_layers: int = 0,
                 head_hidden_size: int = 128, dropout: float = 0.1, **kwargs: Any) -> None:
        encoder = self._check_encoder(encoder, "BertClassifier")
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"BertClassifier: num_classes must be a positive int, "
                             f"got {num_classes!r}")
        if head_hidden_layers not in (0, 1, 2, 3):
            raise ValueError(f"BertClassifier: head_hidden_layers must be 0-3, "
                             f"got {head_hidden_layers!r}")
        if not isinstance(head_hidden_size, int) or head_hidden_size < 1:
            raise ValueError(f"BertClassifier: head_hidden_size must be a positive int, "
                             f"got {head_hidden_size!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"BertClassifier: dropout must be in [0, 1), got {dropout!r}")
        init = lambda: keras.initializers.TruncatedNormal(
            stddev=encoder.config.initializer_range)
        # === Layers ===
        self.encoder = encoder
        self.head_dropout = BertDropout(dropout, name="head_dropout",
                                                 dtype=encoder.dtype_policy)
        self.hidden_layers = [
            keras.layers.Dense(head_hidden_size, activation="relu", kernel_initializer=init(),
                               name=f"head_hidden_{i}", dtype=encoder.dtype_policy)
            for i in range(head_hidden_layers)]
        self.output_dense = keras.layers.Dense(
            num_classes, kernel_initializer=init(), name="logits",
            dtype=float32_policy(encoder.dtype_policy))
        # === Functional Model ===
        inputs = dict(encoder.input)
        x = encoder(inputs)["pooled_output"]  # [B, H]
        for layer in self.hidden_layers:
            x = layer(self.head_dropout(x))  # [B, head_hidden_size]
        logits = self.output_dense(self.head_dropout(x))  # [B, C]
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        # === Config ===
        self.num_classes = num_classes
        self.head_hidden_layers = head_hidden_layers
        self.head_hidden_size = head_hidden_size
        self.dropout = dropout

    def call(self, inputs: Any, training: bool | None = None, mask: Any = None) -> Any:
        """The functional graph's logits, with the last block computed only at [CLS], the one
        row the head reads (`BertEncoder.forward`): same logits and gradients (test); the last
        block's query projection, attention, output projection, FFN and LayerNorms run on 1
        row instead of T, 6.9% of a bert-base forward's matmul work at T = 128.
        """
        inputs = self._select_inputs(inputs)
        cls = ops.zeros_like(ops.cast(inputs["input_ids"][:, :1], "int32"))  # [B, 1]
        x = self.encoder.forward(inputs, training=training,
                                 last_layer_positions=cls)["pooled_output"]  # [B, H]
        for layer in self.hidden_layers:
            x = layer(self.head_dropout(x, training=training))  # [B, head_hidden_size]
        return self.output_dense(self.head_dropout(x, training=training))  # [B, C]

    def _head_config(self) -> dict[str, Any]:
        return {"num_classes": self.num_classes, "head_hidden_layers": self.head_hidden_layers,
                "head_hidden_size": self.head_hidden_size, "dropout": self.dropout}
