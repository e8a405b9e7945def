"""Keras layers of BERT: embeddings, self-attention, the transformer block, the pretraining heads,
and a linear-chain CRF for tagging heads.

Written with Keras layers and keras.ops, so they run under any Keras backend; the CRF's two
loops are TensorFlow's (tf.scan and tf.while_loop), so it loads on first use and the rest imports
without TensorFlow. Where a faster form exists for a backend or device, a layer calls a
`tfbert.ops` function, which picks the form by one switch (`tfbert.ops.forms()`).
"""

from tfbert._lazy import lazy_names
from tfbert.layers.activations import get_activation
from tfbert.layers.attention import BertSelfAttention
from tfbert.layers.dropout import BertDropout
from tfbert.layers.embeddings import BertEmbeddings
from tfbert.layers.heads import MaskedLMHead, gather_positions
from tfbert.layers.layer_norm import BertLayerNorm
from tfbert.layers.transformer import BertTransformerLayer

__all__ = ["BertDropout", "BertEmbeddings", "BertLayerNorm", "BertSelfAttention",
           "BertTransformerLayer", "CrfLoss", "LinearChainCrf", "MaskedLMHead",
           "gather_positions", "get_activation"]

__getattr__, __dir__ = lazy_names(__name__, globals(), dict.fromkeys(
    ("CrfLoss", "LinearChainCrf"), "tfbert.layers.crf"))
