"""Keras layers of BERT: embeddings, self-attention, the transformer block, the pretraining heads.

Written with Keras layers and keras.ops, so they run under any Keras backend. Where a faster
form exists for a backend or device, a layer calls a `tfbert.ops` function, which picks the
form by one switch (`tfbert.ops.forms()`).
"""

from tfbert.layers.activations import get_activation
from tfbert.layers.attention import BertSelfAttention
from tfbert.layers.dropout import BertDropout
from tfbert.layers.embeddings import BertEmbeddings
from tfbert.layers.heads import MaskedLMHead, gather_positions
from tfbert.layers.layer_norm import BertLayerNorm
from tfbert.layers.transformer import BertTransformerLayer

__all__ = ["BertDropout", "BertEmbeddings", "BertLayerNorm", "BertSelfAttention",
           "BertTransformerLayer", "MaskedLMHead", "gather_positions", "get_activation"]
