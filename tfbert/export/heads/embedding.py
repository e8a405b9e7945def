"""The sentence encoder's export (`tfbert.models.sentence_encoder.BertSentenceEncoder`): a vector
per text.

serving_default takes `text` [B] and returns `embeddings` [B, D] float32 (L2-normalised when the
model normalises, as sentence-transformers' Normalize module does), serve_ids the same from ids;
the TFLite models return `embeddings` too. Texts longer than the model's max_seq_length are cut,
as sentence-transformers cuts them.
"""

from __future__ import annotations

from tfbert.export.heads.base import SingleOutputHead


class EmbeddingHead(SingleOutputHead):
    name = "embedding"
    output = "embeddings"  # [B, D]


HEAD = EmbeddingHead
