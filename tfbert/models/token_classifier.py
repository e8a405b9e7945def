"""BertTokenClassifier: one label per token (NER, POS tagging) on `sequence_output`, with an
optional linear-chain CRF over the tags (tfbert.layers.crf); `training_loss`, the loss it trains
with."""

from __future__ import annotations

from typing import Any

import keras

from tfbert.layers import crf
from tfbert.layers.dropout import BertDropout
from tfbert.layers.precision import float32_policy
from tfbert.models.encoder import BertEncoder
from tfbert.models.task import BertTask


@keras.saving.register_keras_serializable(package="tfbert")
class BertTokenClassifier(BertTask):
    """Dropout + a dense to `num_classes` logits at every position of `sequence_output`.

    Output: float32 logits [B, T, num_classes]. `compile()` defaults to sparse cross-entropy
    from logits and weighted accuracy; pass a [B, T] sample weight (e.g. `input_mask`, or a mask
    of first word pieces) so padding does not count: `fit` on (features, labels, weights).

    With `crf=True` the logits are a CRF's emission scores: the model holds a
    `tfbert.layers.LinearChainCrf` as `crf` (its transitions are saved with the model), the
    default loss is the CRF's negative log-likelihood over the positions of nonzero sample
    weight (`CrfLoss`), and `decode(logits, mask)` picks the tags by Viterbi over the masked
    positions instead of the per-position argmax. The outputs stay the logits.

    Args:
        encoder: tfbert.BertEncoder. The backbone.
        num_classes: int. Number of tags C.
        dropout: float. Dropout rate on `sequence_output`.
        crf: bool. Add a linear-chain CRF over the tags.
        **kwargs: keras.Model arguments (name).

    Example:
    >>> from tfbert import BertConfig, BertEncoder
    >>> encoder = BertEncoder(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
    ...                                  num_attention_heads=4, intermediate_size=64))
    >>> ones = keras.ops.ones((2, 8), "int32")
    >>> model = BertTokenClassifier(encoder, num_classes=7)
    >>> tuple(model({"input_ids": ones, "input_mask": ones, "segment_ids": ones * 0}).shape)
    (2, 8, 7)
    """

    def __init__(self, encoder: BertEncoder, num_classes: int, dropout: float = 0.1,
                 crf: bool = False, **kwargs: Any) -> None:
        encoder = self._check_encoder(encoder, "BertTokenClassifier")
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"BertTokenClassifier: num_classes must be a positive int, "
                             f"got {num_classes!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"BertTokenClassifier: dropout must be in [0, 1), got {dropout!r}")
        # === Layers ===
        self.encoder = encoder
        self.head_dropout = BertDropout(dropout, name="head_dropout",
                                                 dtype=encoder.dtype_policy)
        self.output_dense = keras.layers.Dense(
            num_classes, name="logits", dtype=float32_policy(encoder.dtype_policy),
            kernel_initializer=keras.initializers.TruncatedNormal(
                stddev=encoder.config.initializer_range))
        # === Functional Model ===
        inputs = dict(encoder.input)
        x = encoder(inputs)["sequence_output"]  # [B, T, H]
        logits = self.output_dense(self.head_dropout(x))  # [B, T, C]
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        # The CRF scores tag sequences of the logits; it is used by the loss and `decode`, not
        # by the forward pass (tracked as an attribute, so its weights save with the model).
        self.crf = _crf_module().LinearChainCrf(num_classes, name="crf") if crf else None
        # === Config ===
        self.num_classes = num_classes
        self.dropout = dropout
        self.use_crf = bool(crf)

    def _head_config(self) -> dict[str, Any]:
        config = {"num_classes": self.num_classes, "dropout": self.dropout}
        return {**config, "crf": True} if self.use_crf else config

    def decode(self, logits: Any, mask: Any) -> Any:
        """Tag ids [B, T] int32 from logits [B, T, C] at the positions where `mask` [B, T] is
        true (-1 elsewhere): Viterbi with the CRF, the per-position argmax without.

        The mask selects the positions predictions read, e.g. the first word piece of each
        word; the CRF chains them in order and skips the rest (as in training).
        """
        mask = keras.ops.cast(mask, "bool")
        if self.crf is not None:
            return self.crf(logits, mask)
        return keras.ops.where(mask, keras.ops.cast(keras.ops.argmax(logits, axis=-1), "int32"),
                               -1)

    def default_loss(self) -> Any:
        """Sparse cross-entropy from logits; with the CRF, its negative log-likelihood."""
        return (_crf_module().CrfLoss(self.crf) if self.crf is not None
                else super().default_loss())


def _crf_module() -> Any:
    """tfbert.layers.crf, imported when a CRF is used: its loops are TensorFlow's, and the plain
    model must import under Keras's JAX backend without TensorFlow."""
    return crf


def training_loss(model: Any) -> Any:
    """The loss run_ner trains `model` with: the cross-entropy averaged over the labelled
    pieces of the batch (the sum of weight x loss over the sum of the weights, so padding,
    [CLS], [SEP] and unlabelled pieces neither count nor dilute it); with a CRF head, the CRF's
    negative log-likelihood per window."""
    if getattr(model, "crf", None) is not None:
        return model.default_loss()
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                      reduction="mean_with_sample_weight")
