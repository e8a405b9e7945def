"""Keras layers of BERT: embeddings, the transformer block, the pretraining heads.

All are written with Keras 3 layers and keras.ops only, so they run under any Keras backend
(BertLayerNorm adds a TensorFlow-only inference path with the same results).
"""

from tfbert.layers.activations import get_activation
from tfbert.layers.dropout import BertDropout
from tfbert.layers.embeddings import BertEmbeddings
from tfbert.layers.heads import MaskedLMHead, gather_positions
from tfbert.layers.layer_norm import BertLayerNorm
from tfbert.layers.transformer import BertSelfAttention, BertTransformerLayer

__all__ = ["BertDropout", "BertEmbeddings", "BertLayerNorm", "BertSelfAttention",
           "BertTransformerLayer", "MaskedLMHead", "gather_positions", "get_activation"]
