"""The sentence encoder's export (`tfbert.models.sentence_encoder.BertSentenceEncoder`): a vector
per text.

serving_default takes `text` [B] and returns `embeddings` [B, D] float32 (L2-normalised when the
model normalises, as sentence-transformers' Normalize module does), serve_ids the same from ids;
the TFLite models return `embeddings` too. Texts longer than the model's max_seq_length are cut,
as sentence-transformers cuts them.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfbert.export.heads.base import ServingHead


class EmbeddingHead(ServingHead):
    name = "embedding"

    def model_outputs(self, outputs: Any, seq_length: int) -> dict[str, tf.Tensor]:
        return {"embeddings": tf.cast(outputs, tf.float32)}  # [B, D]

    def decode(self, inputs: dict[str, tf.Tensor] | None, outputs: dict[str, tf.Tensor],
               chars: dict[str, tf.Tensor] | None) -> dict[str, tf.Tensor]:
        return {"embeddings": outputs["embeddings"]}

    @classmethod
    def tflite_outputs(cls, model: Any, spec: Any, inputs: dict[str, tf.Tensor], outputs: Any,
                       continuation: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"embeddings": tf.cast(outputs, tf.float32)}


HEAD = EmbeddingHead
