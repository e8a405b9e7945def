"""BertTask: what every task model shares (one encoder, config round trip, default compile)."""

from __future__ import annotations

from typing import Any, ClassVar

import keras

from tfbert.models import pretrained
from tfbert.models.encoder import BertEncoder, FeatureDictModel


class BertTask(FeatureDictModel):
    """Base of the task models: a functional model = `self.encoder` + a small head.

    Subclasses build their head in `__init__` and return their own arguments from
    `_head_config()`; `get_config()` adds the serialized encoder and the name, and
    `from_config(config)` is `cls(**config)` with the encoder deserialized.
    """

    encoder: BertEncoder
    # Checkpoints hold the encoder's weights and the head's under `head.*` names. BertTask itself
    # is not registered with Keras, so `tfbert.models.catalog` lists its subclasses only.
    model_kind: ClassVar[str] = "task"

    @staticmethod
    def _check_encoder(encoder: Any, task: str) -> BertEncoder:
        if not isinstance(encoder, BertEncoder):
            raise TypeError(f"{task} wraps a tfbert.BertEncoder, got {type(encoder).__name__}")
        return encoder

    def _head_config(self) -> dict[str, Any]:
        return {}

    def get_config(self) -> dict[str, Any]:
        # Not chained to super(): the constructor arguments rebuild the graph.
        return {"encoder": keras.layers.serialize(self.encoder), **self._head_config(),
                "name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BertTask:
        config = dict(config)
        if isinstance(config.get("encoder"), dict):
            config["encoder"] = keras.layers.deserialize(config["encoder"])
        return cls(**config)

    @classmethod
    def from_pretrained(cls, path: str, **kwargs: Any) -> BertTask:
        """This task model on a pretrained encoder (or a saved task model) from `path`.

        Args:
            path: str. A checkpoint directory (see `tfbert.from_pretrained`).
            **kwargs: head arguments (e.g. num_classes) and loader options.
        """
        return pretrained.model_from_pretrained(cls, path, **kwargs)

    def compile_from_config(self, config: dict[str, Any]) -> None:
        """Recompiles a model loaded from `.keras` with its saved compile arguments."""
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built and self.optimizer is not None:
            self.optimizer.build(self.trainable_variables)

    # --- training defaults ----------------------------------------------------------------------

    def default_loss(self) -> Any:
        """Loss used by `compile(loss="auto")`: cross-entropy on integer labels, from logits."""
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def default_metrics(self) -> Any:
        """Weighted metrics used by `compile(weighted_metrics="auto")`: accuracy."""
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    def compile(self, optimizer: Any = "auto", loss: Any = "auto", metrics: Any = None,
                weighted_metrics: Any = "auto", **kwargs: Any) -> None:
        """keras.Model.compile with fine-tuning defaults.

        Args:
            optimizer: "auto" (Adam, learning rate 5e-5, as BERT fine-tuning uses) or any
                Keras optimizer.
            loss: "auto" (`default_loss()`) or any Keras loss.
            metrics: Keras metrics (unweighted).
            weighted_metrics: "auto" (`default_metrics()`: accuracy, honouring sample weights
                such as a padding mask) or Keras metrics.
            **kwargs: other keras.Model.compile arguments (jit_compile, ...). The default
                jit_compile="auto" is Keras's choice: XLA off on a CPU-only TensorFlow, on with
                a GPU/TPU or JAX (docs/performance.md, "XLA on CPU").
        """
        if optimizer == "auto":
            optimizer = keras.optimizers.Adam(5e-5)
        if loss == "auto":
            loss = self.default_loss()
        if weighted_metrics == "auto":
            weighted_metrics = self.default_metrics()
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics,
                        weighted_metrics=weighted_metrics, **kwargs)
