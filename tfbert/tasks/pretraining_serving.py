"""The encoder's export (a BertEncoder, or a pretrainer's encoder): its outputs as they are.

serving_default and serve_ids return pooled_output [B, H], sequence_output [B, T, H] and
input_mask [B, T] int32.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfbert.tasks.serving_base import ServingHead
from tfbert.tasks.serving_ops import pad_positions


class EncoderHead(ServingHead):
    name = "encoder"

    @classmethod
    def served_model(cls, model: Any) -> Any:
        return getattr(model, "encoder", model)  # a pretrainer exports its encoder

    def model_outputs(self, outputs: Any, seq_length: int) -> dict[str, tf.Tensor]:
        return {"pooled_output": tf.cast(outputs["pooled_output"], tf.float32),
                "sequence_output": pad_positions(tf.cast(outputs["sequence_output"],
                                                         tf.float32), seq_length)}

    def decode(self, inputs: dict[str, tf.Tensor] | None, outputs: dict[str, tf.Tensor],
               chars: dict[str, tf.Tensor] | None) -> dict[str, tf.Tensor]:
        return {**outputs, "input_mask": inputs["input_mask"]}

    @classmethod
    def tflite_outputs(cls, model: Any, spec: Any, inputs: dict[str, tf.Tensor], outputs: Any,
                       continuation: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"pooled_output": tf.cast(outputs["pooled_output"], tf.float32),
                "sequence_output": tf.cast(outputs["sequence_output"], tf.float32)}


HEAD = EncoderHead
