"""The sentence encoder's export (`tfbert.models.sentence_encoder.BertSentenceEncoder`): a vector
per text.

serving_default takes `text` [B] and returns `embeddings` [B, D] float32 (L2-normalised when the
model normalises, as sentence-transformers' Normalize module does), serve_ids the same from ids;
the TFLite models return `embeddings` too. `similarity` takes `queries` [Q] and `passages` [P]
and returns their cosine `scores` [Q, P] float32. Texts longer than the model's max_seq_length
are cut, as sentence-transformers cuts them.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfbert.tasks.serving_base import SingleOutputHead


class EmbeddingHead(SingleOutputHead):
    name = "embedding"
    output = "embeddings"  # [B, D]

    def extra_signatures(self, serve_text: Any) -> dict[str, Any]:
        strings = [tf.TensorSpec([None], tf.string, name="queries"),
                   tf.TensorSpec([None], tf.string, name="passages")]

        def similarity(queries: tf.Tensor, passages: tf.Tensor) -> dict[str, tf.Tensor]:
            q = tf.math.l2_normalize(serve_text(queries)[self.output], -1)  # [Q, D]
            p = tf.math.l2_normalize(serve_text(passages)[self.output], -1)  # [P, D]
            return {"scores": tf.matmul(q, p, transpose_b=True)}  # [Q, P] cosine

        return {"similarity": tf.function(similarity, input_signature=strings)}


HEAD = EmbeddingHead
