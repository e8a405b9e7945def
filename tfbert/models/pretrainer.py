"""BertPretrainer: masked-LM + next-sentence prediction on one BertEncoder.

Shape legend: B = batch, T = sequence length, P = max_predictions_per_seq, H = hidden, V = vocab.
"""

from __future__ import annotations

from typing import Any, ClassVar

import keras
from keras import ops

from tfbert.layers.heads import MaskedLMHead
from tfbert.layers.precision import float32_policy
from tfbert.models.encoder import BertEncoder
from tfbert.models.task import BertTask

LABELS = ("masked_lm_ids", "masked_lm_weights", "next_sentence_labels")


@keras.saving.register_keras_serializable(package="tfbert")
class BertPretrainer(BertTask):
    """BERT pretraining: masked-LM head (tied to the word embeddings) and NSP head.

    Inputs: dict of int32 `input_ids`, `input_mask`, `segment_ids` [B, T] and
    `masked_lm_positions` [B, P]. Outputs: dict of float32 `mlm_logits` [B, P, V] and
    `nsp_logits` [B, 2]. The model computes its own loss (`compute_loss`): MLM =
    sum(masked_lm_weights * CE) / (sum(masked_lm_weights) + 1e-5), NSP = mean CE, loss = MLM + NSP,
    reading `masked_lm_ids`, `masked_lm_weights`, `next_sentence_labels` from the labels dict if
    `fit` gets (features, labels), else from the feature dict itself. `fit` reports `loss`,
    `mlm_loss`, `nsp_loss`, `masked_lm_accuracy` (weighted) and `next_sentence_accuracy`.

    Args:
        encoder: tfbert.BertEncoder. The backbone being pretrained.
        **kwargs: keras.Model arguments (name).

    Example:
    >>> from tfbert import BertConfig, BertEncoder
    >>> encoder = BertEncoder(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
    ...                                  num_attention_heads=4, intermediate_size=64))
    >>> model = BertPretrainer(encoder)
    >>> model.compile(optimizer="adam")
    >>> # model.fit(ds) with ds yielding the pretraining feature dict (tfbert.data).
    """

    # Checkpoints hold its MLM and NSP heads under their canonical `cls.*` names.
    model_kind: ClassVar[str] = "pretrainer"

    def __init__(self, encoder: BertEncoder, **kwargs: Any) -> None:
        encoder = self._check_encoder(encoder, "BertPretrainer")
        config = encoder.config
        # === Layers ===
        self.encoder = encoder
        self.mlm_head = MaskedLMHead(
            vocab_size=config.vocab_size, hidden_size=config.hidden_size,
            hidden_act=config.hidden_act, layer_norm_eps=config.layer_norm_eps,
            initializer_range=config.initializer_range,
            token_embedding=encoder.embeddings.word_embeddings, name="mlm_head",
            dtype=encoder.dtype_policy)
        self.nsp_head = keras.layers.Dense(
            2, name="nsp_head", dtype=float32_policy(encoder.dtype_policy),
            kernel_initializer=keras.initializers.TruncatedNormal(
                stddev=config.initializer_range))
        # === Functional Model ===
        inputs = dict(encoder.input)
        inputs["masked_lm_positions"] = keras.Input(
            shape=(None,), dtype="int32", name="masked_lm_positions")
        outputs = encoder(inputs)
        mlm_logits = self.mlm_head(outputs["sequence_output"],
                                   inputs["masked_lm_positions"])  # [B, P, V]
        nsp_logits = self.nsp_head(outputs["pooled_output"])  # [B, 2]
        super().__init__(inputs=inputs,
                         outputs={"mlm_logits": mlm_logits, "nsp_logits": nsp_logits}, **kwargs)
        # === Metrics ===
        self.mlm_loss_tracker = keras.metrics.Mean(name="mlm_loss")
        self.nsp_loss_tracker = keras.metrics.Mean(name="nsp_loss")
        self.mlm_accuracy = keras.metrics.SparseCategoricalAccuracy(name="masked_lm_accuracy")
        self.nsp_accuracy = keras.metrics.SparseCategoricalAccuracy(
            name="next_sentence_accuracy")

    def call(self, inputs: Any, training: bool | None = None, mask: Any = None) -> Any:
        """The functional graph's outputs, with the last block computed only at [CLS] and the
        masked positions, the only rows the heads read (`BertEncoder.forward`).

        Same logits as the graph (test); the last block's query projection, attention output,
        feed-forward layer and LayerNorms run on 1 + P rows instead of T: at 4 layers, T = 128,
        P = 20, 15.5% less matmul work and a 9% faster step (docs/performance.md, "Last block
        only where the heads read it").
        """
        inputs = self._select_inputs(inputs)
        positions = ops.cast(inputs["masked_lm_positions"], "int32")  # [B, P]
        rows = ops.concatenate([ops.zeros_like(positions[:, :1]), positions], axis=1)
        outputs = self.encoder.forward(inputs, training=training, last_layer_positions=rows)
        x = outputs["sequence_output"]  # [B, 1 + P, H]: [CLS], then the masked positions
        return {"mlm_logits": self.mlm_head(x[:, 1:, :]),  # [B, P, V]
                "nsp_logits": self.nsp_head(outputs["pooled_output"])}  # [B, 2]

    def compile(self, optimizer: Any = "auto", loss: Any = None, **kwargs: Any) -> None:
        """keras.Model.compile; the loss is built in, so `loss` must stay None.

        Args:
            optimizer: "auto" (Adam, learning rate 1e-4, BERT's pretraining rate) or any Keras
                optimizer.
            loss: must be None (the model computes MLM + NSP itself).
            **kwargs: other keras.Model.compile arguments (jit_compile, steps_per_execution, ...).
                jit_compile="auto" (the default) is XLA on with a GPU/TPU or JAX, as Keras
                decides; on a CPU-only TensorFlow it is XLA on for a float32 model and off for a
                mixed-precision one. Measured on an idle 2-core Xeon: XLA runs the float32
                step 1.12x faster than the TF graph with oneDNN kernels, while in bfloat16
                oneDNN's AMX matmuls are far ahead of XLA's CPU dots (docs/performance.md,
                "XLA on CPU").
        """
        if loss is not None:
            raise ValueError("BertPretrainer computes its own MLM + NSP loss; "
                             f"compile() takes no loss (got {loss!r})")
        if optimizer == "auto":
            optimizer = keras.optimizers.Adam(1e-4)
        if kwargs.get("jit_compile", "auto") == "auto":
            kwargs["jit_compile"] = _auto_jit_compile(self.compute_dtype)
        super(BertTask, self).compile(optimizer=optimizer, **kwargs)

    @staticmethod
    def _labels(x: Any, y: Any) -> dict[str, Any]:
        if y is not None and not isinstance(y, dict):
            raise ValueError(f"BertPretrainer labels must be a dict with keys {list(LABELS)} "
                             f"(or None, labels inside the features), got {type(y).__name__}")
        sources = [s for s in (y, x) if isinstance(s, dict)]
        labels = {}
        for key in LABELS:
            found = [s[key] for s in sources if key in s]
            if not found:
                raise ValueError(f"BertPretrainer needs {key!r} in the features or labels; got "
                                 f"keys {sorted(set().union(*sources))}")
            labels[key] = found[0]
        return labels

    def compute_loss(self, x: Any = None, y: Any = None, y_pred: Any = None,
                     sample_weight: Any = None, training: bool = True) -> Any:
        """MLM + NSP loss from the feature dict `x` (or labels dict `y`); updates the metrics.

        `sample_weight` is not used: `masked_lm_weights` weights the MLM positions.
        """
        labels = self._labels(x, y)
        mlm_logits = ops.cast(y_pred["mlm_logits"], "float32")  # [B, P, V]
        nsp_logits = ops.cast(y_pred["nsp_logits"], "float32")  # [B, 2]
        mlm_ids = ops.cast(labels["masked_lm_ids"], "int32")  # [B, P]
        mlm_weights = ops.cast(labels["masked_lm_weights"], "float32")  # [B, P]
        nsp_labels = ops.reshape(ops.cast(labels["next_sentence_labels"], "int32"), (-1,))  # [B]

        mlm_ce = ops.sparse_categorical_crossentropy(mlm_ids, mlm_logits, from_logits=True)
        mlm_loss = ops.sum(mlm_ce * mlm_weights) / (ops.sum(mlm_weights) + 1e-5)
        nsp_loss = ops.mean(
            ops.sparse_categorical_crossentropy(nsp_labels, nsp_logits, from_logits=True))
        loss = mlm_loss + nsp_loss
        for extra in self.losses:  # regularizers, if a caller adds any
            loss = loss + ops.cast(ops.sum(extra), "float32")

        self.mlm_loss_tracker.update_state(mlm_loss)
        self.nsp_loss_tracker.update_state(nsp_loss)
        self.mlm_accuracy.update_state(mlm_ids, mlm_logits, sample_weight=mlm_weights)
        self.nsp_accuracy.update_state(nsp_labels, nsp_logits)
        return _per_replica(loss)


def _per_replica(loss: Any) -> Any:
    """The loss divided by the replica count under tf.distribute, as Keras's own losses scale
    theirs: the replicas' gradients are summed, so their sum is the global mean's gradient."""
    if keras.backend.backend() != "tensorflow":
        return loss
    import tensorflow as tf  # here: the model runs on every Keras backend, TensorFlow or not

    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if replicas > 1:
        loss = ops.multiply(loss, ops.cast(1.0 / replicas, loss.dtype))
    return loss


def _auto_jit_compile(compute_dtype: str) -> bool | str:
    """BertPretrainer's jit_compile="auto": Keras's choice, except on a CPU-only TensorFlow,
    where XLA runs the float32 step faster and the mixed-precision one slower."""
    if keras.backend.backend() != "tensorflow":
        return "auto"
    import tensorflow as tf  # here: the model runs on every Keras backend, TensorFlow or not

    if tf.config.list_physical_devices("GPU") or tf.config.list_logical_devices("TPU"):
        return "auto"
    return compute_dtype == "float32"
