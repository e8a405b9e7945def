"""The regression head's export (`tfbert.models.regressor.BertRegressor`, GLUE STS-B): one score.

serving_default and serve_ids return score [B] float32, the model's prediction for each text
(or `text`, `text_b` pair when the model was trained on pairs); the TFLite models the same.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfbert.export.heads.base import ServingHead


class RegressionHead(ServingHead):
    name = "regression"
    text_b = "pair"

    @classmethod
    def spec_fields(cls, model: Any, metadata: dict[str, Any], model_dir: str) -> dict[str, Any]:
        return {**super().spec_fields(model, metadata, model_dir),
                "pair": bool(metadata.get("pair", False))}

    def model_outputs(self, outputs: Any, seq_length: int) -> dict[str, tf.Tensor]:
        return {"score": tf.cast(outputs, tf.float32)}  # [B]

    def decode(self, inputs: dict[str, tf.Tensor] | None, outputs: dict[str, tf.Tensor],
               chars: dict[str, tf.Tensor] | None) -> dict[str, tf.Tensor]:
        return {"score": outputs["score"]}

    @classmethod
    def tflite_outputs(cls, model: Any, spec: Any, inputs: dict[str, tf.Tensor], outputs: Any,
                       continuation: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"score": tf.cast(outputs, tf.float32)}


HEAD = RegressionHead
