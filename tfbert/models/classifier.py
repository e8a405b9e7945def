"""BertClassifier: sequence (or sentence-pair) classification on the pooled [CLS] output.

Also here: `WindowPooledClassifier` (a long text read as windows, its logits the mean of the
windows' logits) and `MultiLabelCrossentropy` (the multi-label loss, with per-label positive
weights).

Shape legend: B = batch (documents), K = windows per document, W = windows of a batch,
T = sequence, H = hidden, C = classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf
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
    accuracy; train with `model.fit(ds)` where ds yields (features, labels [B]). With
    `multi_label=True` each class is a yes/no label of its own (sigmoid of its logit):
    `compile()` defaults to binary cross-entropy from logits (`MultiLabelCrossentropy`) and
    binary accuracy at probability 0.5, and ds yields (features, label sets [B, C] of 0/1).

    Args:
        encoder: tfbert.BertEncoder. The backbone (pretrained or fresh).
        num_classes: int. Number of labels C.
        head_hidden_layers: int. 0-3 extra dense layers (ReLU) before the output layer.
        head_hidden_size: int. Width of each extra dense layer.
        dropout: float. Dropout rate before each head dense layer.
        multi_label: bool. Independent labels (sigmoid, binary cross-entropy) instead of one
            class per example (softmax, cross-entropy). The logits are the same either way.
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
                 head_hidden_size: int = 128, dropout: float = 0.1, multi_label: bool = False,
                 **kwargs: Any) -> None:
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
        self.multi_label = bool(multi_label)

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
                "head_hidden_size": self.head_hidden_size, "dropout": self.dropout,
                "multi_label": self.multi_label}

    def default_loss(self) -> Any:
        """Loss of `compile(loss="auto")`: binary cross-entropy from logits (multi-label), or
        cross-entropy on integer labels."""
        return MultiLabelCrossentropy() if self.multi_label else super().default_loss()

    def default_metrics(self) -> Any:
        """Weighted metrics of `compile(weighted_metrics="auto")`: accuracy; multi-label, the
        share of (example, label) entries right at probability 0.5 (logit 0)."""
        if self.multi_label:
            return [keras.metrics.BinaryAccuracy(name="binary_accuracy", threshold=0.0)]
        return super().default_metrics()


@keras.saving.register_keras_serializable(package="tfbert")
class MultiLabelCrossentropy(keras.losses.Loss):
    """Binary cross-entropy from logits, averaged over labels, with a weight on each label's
    positive entries (`tf.nn.weighted_cross_entropy_with_logits`).

    loss(y, z) = mean_c [-(w_c y_c log sigmoid(z_c) + (1 - y_c) log(1 - sigmoid(z_c)))]
    per example; with every w_c = 1 it is Keras's BinaryCrossentropy(from_logits=True).

    Args:
        positive_weights: sequence of float [C], optional. w_c (e.g. n_negative / n_positive
            of label c: `tfbert.data.classification.class_weights("balanced", ...,
            multi_label=True)`); None for 1.
        **kwargs: keras.losses.Loss arguments (reduction, name).

    Example:
    >>> loss = MultiLabelCrossentropy(positive_weights=[1.0, 3.0])
    >>> round(float(loss([[0.0, 1.0]], [[0.0, 0.0]])), 4)  # (log 2 + 3 log 2) / 2
    1.3863
    """

    def __init__(self, positive_weights: Sequence[float] | None = None,
                 name: str = "multi_label_crossentropy", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.positive_weights = (None if positive_weights is None
                                 else [float(w) for w in positive_weights])

    def call(self, y_true: Any, y_pred: Any) -> Any:
        logits = tf.cast(y_pred, tf.float32)  # [B, C]
        labels = tf.cast(y_true, tf.float32)
        weights = 1.0 if self.positive_weights is None else tf.constant(self.positive_weights)
        return tf.reduce_mean(tf.nn.weighted_cross_entropy_with_logits(
            labels, logits, pos_weight=weights), axis=-1)  # [B]

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "positive_weights": self.positive_weights}


def pool_windows(window_logits: Any, document: Any, num_documents: Any) -> Any:
    """A document's logits: the mean of its windows' logits.

    Mean, not max: the pooled logits average the windows' evidence whatever their number (a
    sum would grow with the length; a max lets one window decide, and passes the gradient to
    that window only), so documents of 1 and of 20 windows are on one scale. Mean logits are
    what the training loss sees (`WindowPooledClassifier`), so training and prediction pool
    alike. Measured (experiments/classifier_kit.py, 400 long review documents of 311-1,500
    characters, a tiny random-init model trained on mean logits at T = 128): test accuracy
    0.9125 pooling its windows by mean logits, 0.9125 by mean probabilities, 0.8850 by max
    logits.

    Args:
        window_logits: float [W, C].
        document: int [W]. The document (row of the output) of each window.
        num_documents: int. B.

    Returns:
        float [B, C] (0 for a document without windows).
    """
    return tf.math.unsorted_segment_mean(window_logits, document, num_documents)


@keras.saving.register_keras_serializable(package="tfbert")
class WindowPooledClassifier(keras.Model):
    """A BertClassifier over documents read as windows: logits = mean of the windows' logits.

    Inputs: `input_ids`, `input_mask`, `segment_ids` int32 [B, K, T], the K windows of each
    document (`tfbert.data.classification.make_window_dataset`); a window whose input_mask is 0
    at [CLS] is padding and is not run. Output: float32 logits [B, C] (`pool_windows`). It
    holds no weights of its own: train it with `fit` and save, export or reuse `classifier`,
    which scores one window at a time. Training on the pooled logits counts every document
    once, however many windows it has.

    Args:
        classifier: BertClassifier. Scores each window.
        **kwargs: keras.Model arguments (name).

    Example:
    >>> from tfbert import BertConfig, BertEncoder
    >>> encoder = BertEncoder(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
    ...                                  num_attention_heads=4, intermediate_size=64))
    >>> model = WindowPooledClassifier(BertClassifier(encoder, num_classes=3))
    >>> ones = keras.ops.ones((2, 4, 8), "int32")  # 2 documents of 4 windows
    >>> tuple(model({"input_ids": ones, "input_mask": ones, "segment_ids": ones * 0}).shape)
    (2, 3)
    """

    def __init__(self, classifier: BertClassifier, **kwargs: Any) -> None:
        if not isinstance(classifier, BertClassifier):
            raise TypeError(f"WindowPooledClassifier wraps a tfbert.BertClassifier, got "
                            f"{type(classifier).__name__}")
        super().__init__(**kwargs)
        # === Layers ===
        self.classifier = classifier

    def call(self, inputs: dict[str, Any], training: bool | None = None) -> Any:
        shape = tf.shape(inputs["input_ids"])
        b, k, t = shape[0], shape[1], shape[2]
        flat = {name: tf.reshape(inputs[name], [-1, t])  # [B * K, T]
                for name in ("input_ids", "input_mask", "segment_ids")}
        rows = tf.where(tf.not_equal(flat["input_mask"][:, 0], 0))[:, 0]  # [W]: real windows
        windows = {name: tf.gather(x, rows) for name, x in flat.items()}  # [W, T]
        logits = self.classifier(windows, training=training)  # [W, C]
        return pool_windows(logits, tf.cast(rows, tf.int32) // k, b)  # [B, C]

    def get_config(self) -> dict[str, Any]:
        return {"classifier": keras.layers.serialize(self.classifier), "name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> WindowPooledClassifier:
        config = dict(config)
        config["classifier"] = keras.layers.deserialize(config["classifier"])
        return cls(**config)
