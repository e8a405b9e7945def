"""keras-hub `BertBackbone`s (an instance, or a preset directory from `save_to_preset`).

keras-hub's BERT is post-LN like the reference, with the tanh GELU (`gelu_approximate`) and
LayerNorm epsilon 1e-12; its attention kernels are keras MultiHeadAttention EinsumDense kernels:
query/key/value [H, N, H/N] with bias [N, H/N], output [N, H/N, H]. keras-hub backbones carry no
pretraining heads, so only the encoder converts.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

import numpy as np

from tfbert.checkpoints.canonical import Checkpoint, CheckpointError
from tfbert.config import BertConfig

logger = logging.getLogger(__name__)


def is_keras_hub_preset(path: str) -> bool:
    config_file = os.path.join(path, "config.json")
    if not os.path.isfile(config_file):
        return False
    with open(config_file, encoding="utf-8") as f:
        try:
            values = json.load(f)
        except json.JSONDecodeError:
            return False
    return isinstance(values, dict) and "registered_name" in values


def is_backbone(obj: Any) -> bool:
    """True for a keras_hub BertBackbone, without importing keras_hub for other objects."""
    return any(c.__name__ == "BertBackbone" and c.__module__.startswith("keras_hub")
               for c in type(obj).__mro__)


def _config(backbone: Any, lower_case: bool) -> BertConfig:
    return BertConfig(
        vocab_size=backbone.vocabulary_size, hidden_size=backbone.hidden_dim,
        num_hidden_layers=backbone.num_layers, num_attention_heads=backbone.num_heads,
        intermediate_size=backbone.intermediate_dim, hidden_act="gelu_tanh",
        hidden_dropout_prob=backbone.dropout, attention_probs_dropout_prob=backbone.dropout,
        max_position_embeddings=backbone.max_sequence_length,
        type_vocab_size=backbone.num_segments, layer_norm_eps=1e-12, lower_case=lower_case)


def _value(variable: Any) -> np.ndarray:
    return np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable,
                      dtype=np.float32)


def read_backbone(backbone: Any, lower_case: bool = True, source: str | None = None) -> Checkpoint:
    """A keras_hub.models.BertBackbone as a canonical Checkpoint.

    Args:
        backbone: keras_hub.models.BertBackbone. Built (it is a functional model, so always).
        lower_case: bool. Tokenizer setting to record (a backbone has no tokenizer).
        source: str or None. Description for error messages.
    """
    if not is_backbone(backbone):
        raise CheckpointError(f"expected a keras_hub.models.BertBackbone, got "
                              f"{type(backbone).__module__}.{type(backbone).__name__}")
    config = _config(backbone, lower_case)
    h = config.hidden_size
    w: dict[str, np.ndarray] = {
        "embeddings.word_embeddings.weight":
            _value(backbone.get_layer("token_embedding").embeddings),
        "embeddings.position_embeddings.weight":
            _value(backbone.get_layer("position_embedding").position_embeddings),
        "embeddings.token_type_embeddings.weight":
            _value(backbone.get_layer("segment_embedding").embeddings),
    }
    norm = backbone.get_layer("embeddings_layer_norm")
    w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"] = (
        _value(norm.gamma), _value(norm.beta))
    for i in range(config.num_hidden_layers):
        block = backbone.get_layer(f"transformer_layer_{i}")
        attn, p = block._self_attention_layer, f"encoder.layer.{i}"
        for part, dense in (("query", attn.query_dense), ("key", attn.key_dense),
                            ("value", attn.value_dense)):
            w[f"{p}.attention.self.{part}.weight"] = _value(dense.kernel).reshape(h, h).T
            w[f"{p}.attention.self.{part}.bias"] = _value(dense.bias).reshape(h)
        w[f"{p}.attention.output.dense.weight"] = _value(attn.output_dense.kernel).reshape(h, h).T
        w[f"{p}.attention.output.dense.bias"] = _value(attn.output_dense.bias)
        for hf, layer in ((f"{p}.attention.output.LayerNorm", block._self_attention_layer_norm),
                          (f"{p}.output.LayerNorm", block._feedforward_layer_norm)):
            w[f"{hf}.weight"], w[f"{hf}.bias"] = _value(layer.gamma), _value(layer.beta)
        for hf, layer in ((f"{p}.intermediate.dense", block._feedforward_intermediate_dense),
                          (f"{p}.output.dense", block._feedforward_output_dense)):
            w[f"{hf}.weight"], w[f"{hf}.bias"] = _value(layer.kernel).T, _value(layer.bias)
    pooler = backbone.get_layer("pooled_dense")
    w["pooler.dense.weight"], w["pooler.dense.bias"] = _value(pooler.kernel).T, _value(pooler.bias)
    return Checkpoint(config=config, weights=w, format="keras_hub",
                      source=source or f"keras_hub BertBackbone {backbone.name!r}")


def read_preset(path: str) -> Checkpoint:
    """A keras-hub preset directory (written by `backbone.save_to_preset(path)`)."""
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        values = json.load(f)
    if values.get("class_name") != "BertBackbone":
        raise CheckpointError(f"{path}: keras-hub preset of {values.get('class_name')!r}, "
                              "not a BertBackbone")
    import keras_hub  # heavy, and only keras-hub presets need it

    try:
        backbone = keras_hub.models.BertBackbone.from_preset(path)
    except OSError as e:  # h5py's: a truncated or damaged model.weights.h5
        sizes = re.search(r"truncated file: eof = (\d+).*stored_eof = (\d+)", str(e))
        weights = os.path.join(path, "model.weights.h5")
        if sizes:
            raise CheckpointError(f"{weights}: truncated ({sizes.group(1)} bytes, the file "
                                  f"says {sizes.group(2)})") from None
        raise CheckpointError(f"{path}: keras-hub cannot load the preset: {e}") from None
    lower_case = True
    tokenizer_file = os.path.join(path, "tokenizer.json")
    if os.path.isfile(tokenizer_file):
        with open(tokenizer_file, encoding="utf-8") as f:
            lower_case = bool(json.load(f).get("config", {}).get("lowercase", True))
    checkpoint = read_backbone(backbone, lower_case, source=path)
    vocab = os.path.join(path, "assets", "tokenizer", "vocabulary.txt")
    checkpoint.vocab_file = vocab if os.path.isfile(vocab) else None
    return checkpoint


def write_backbone(checkpoint: Checkpoint) -> Any:
    """A new keras_hub BertBackbone holding the checkpoint's encoder weights.

    keras-hub's blocks always use tanh GELU and epsilon 1e-12; other configs are refused
    rather than converted into a model that computes something else.
    """
    import keras_hub  # heavy, and only keras-hub presets need it

    config = checkpoint.config
    checkpoint.check()
    if config.hidden_act != "gelu_tanh" or config.layer_norm_eps != 1e-12:
        raise CheckpointError(
            f"{checkpoint.source}: keras-hub's BertBackbone computes tanh GELU with LayerNorm "
            f"epsilon 1e-12; this model has hidden_act={config.hidden_act!r}, "
            f"layer_norm_eps={config.layer_norm_eps}")
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads, hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size, dropout=config.hidden_dropout_prob,
        max_sequence_length=config.max_position_embeddings,
        num_segments=config.type_vocab_size)
    w = checkpoint.weights.__getitem__
    h, n, d = config.hidden_size, config.num_attention_heads, config.head_size
    backbone.get_layer("token_embedding").embeddings.assign(w("embeddings.word_embeddings.weight"))
    backbone.get_layer("position_embedding").position_embeddings.assign(
        w("embeddings.position_embeddings.weight"))
    backbone.get_layer("segment_embedding").embeddings.assign(
        w("embeddings.token_type_embeddings.weight"))
    norm = backbone.get_layer("embeddings_layer_norm")
    norm.gamma.assign(w("embeddings.LayerNorm.weight"))
    norm.beta.assign(w("embeddings.LayerNorm.bias"))
    for i in range(config.num_hidden_layers):
        block = backbone.get_layer(f"transformer_layer_{i}")
        attn, p = block._self_attention_layer, f"encoder.layer.{i}"
        for part, dense in (("query", attn.query_dense), ("key", attn.key_dense),
                            ("value", attn.value_dense)):
            dense.kernel.assign(w(f"{p}.attention.self.{part}.weight").T.reshape(h, n, d))
            dense.bias.assign(w(f"{p}.attention.self.{part}.bias").reshape(n, d))
        attn.output_dense.kernel.assign(w(f"{p}.attention.output.dense.weight").T.reshape(n, d, h))
        attn.output_dense.bias.assign(w(f"{p}.attention.output.dense.bias"))
        for hf, layer in ((f"{p}.attention.output.LayerNorm", block._self_attention_layer_norm),
                          (f"{p}.output.LayerNorm", block._feedforward_layer_norm)):
            layer.gamma.assign(w(f"{hf}.weight"))
            layer.beta.assign(w(f"{hf}.bias"))
        for hf, layer in ((f"{p}.intermediate.dense", block._feedforward_intermediate_dense),
                          (f"{p}.output.dense", block._feedforward_output_dense)):
            layer.kernel.assign(w(f"{hf}.weight").T)
            layer.bias.assign(w(f"{hf}.bias"))
    pooler = backbone.get_layer("pooled_dense")
    pooler.kernel.assign(w("pooler.dense.weight").T)
    pooler.bias.assign(w("pooler.dense.bias"))
    return backbone
