"""BertConfig: the model's shape and the tokenizer settings that travel with it.

Field names follow Google's bert_config.json so a config reads the same in code, flags, files and
docs. `lower_case` is not part of bert_config.json; it rides along so a saved model knows how to
tokenize its input.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from tfbert.errors import UserError
from tfbert.fields import check_fields, field
from tfbert.fileio import write_text
from tfbert.textfiles import read_text

# Activation names tfbert understands. Google's BERT code computes "gelu" with the tanh
# approximation; Hugging Face's "gelu" is the exact erf form. Inside tfbert "gelu" is the exact
# form and "gelu_tanh" the approximation; `from_json_file` translates each file's meaning.
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu", "tanh")
_HF_ACT = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
           "gelu_fast": "gelu_tanh", "relu": "relu", "silu": "silu", "swish": "silu",
           "tanh": "tanh"}
_GOOGLE_ACT = {"gelu": "gelu_tanh", "relu": "relu", "tanh": "tanh", "swish": "silu"}


@dataclasses.dataclass
class BertConfig:
    """The shape of a BERT model (bert_config.json fields) plus its tokenizer settings.

    Args:
        vocab_size: int. Rows of the word embedding table (21128 for bert-base-chinese).
        hidden_size: int. Width H of every transformer layer.
        num_hidden_layers: int. Number L of transformer blocks.
        num_attention_heads: int. Heads N per block; must divide hidden_size.
        intermediate_size: int. Width of the feed-forward layer (4H in the presets).
        hidden_act: str. "gelu" (exact erf), "gelu_tanh" (Google's approximation), "relu", ...
        hidden_dropout_prob: float. Dropout on embeddings, attention output and FFN output.
        attention_probs_dropout_prob: float. Dropout on the attention probabilities.
        max_position_embeddings: int. Longest sequence the position table covers.
        type_vocab_size: int. Number of segment ids (2 for sentence pairs).
        initializer_range: float. Stddev of the truncated-normal initializer.
        layer_norm_eps: float. LayerNorm epsilon (1e-12 in the reference).
        lower_case: bool. Tokenizer setting: lowercase + strip accents (uncased vocabs).

    Example:
    >>> config = BertConfig.from_preset("bert-mini")
    >>> config.hidden_size
    256
    """

    vocab_size: int = field(30522, lower_bound=1)
    hidden_size: int = field(768, lower_bound=1)
    num_hidden_layers: int = field(12, lower_bound=1)
    num_attention_heads: int = field(12, lower_bound=1)
    intermediate_size: int = field(3072, lower_bound=1)
    hidden_act: str = field("gelu", choices=ACTIVATIONS)
    hidden_dropout_prob: float = field(0.1, lower_bound=0, less_than=1)
    attention_probs_dropout_prob: float = field(0.1, lower_bound=0, less_than=1)
    max_position_embeddings: int = field(512, lower_bound=1)
    type_vocab_size: int = field(2, lower_bound=1)
    initializer_range: float = field(0.02, greater_than=0)
    layer_norm_eps: float = field(1e-12, greater_than=0)
    lower_case: bool = True

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raises UserError (a ValueError) naming the first field that makes no sense: its
        bounds (`tfbert.fields`), then how the fields fit together."""
        check_fields(self, prefix="BertConfig.")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of "
                f"num_attention_heads {self.num_attention_heads}")

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    # --- dict / json ---------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> BertConfig:
        """Builds a config from tfbert's own dict; unknown keys are an error, not ignored."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - fields)
        if unknown:
            raise ValueError(f"unknown BertConfig fields {unknown}; known fields: {sorted(fields)}")
        return cls(**values)

    def to_json_file(self, path: str, flavor: str = "tfbert") -> None:
        """Writes the config. flavor: "tfbert" (this dataclass), "hf" (config.json) or "google"."""
        values = self.to_dict()
        if flavor == "hf":
            values = _to_hf(values)
        elif flavor == "google":
            values = _to_google(values)
        elif flavor != "tfbert":
            raise ValueError(f"flavor must be 'tfbert', 'hf' or 'google', got {flavor!r}")
        write_text(path, json.dumps(values, indent=2, sort_keys=True) + "\n")  # atomically

    @classmethod
    def from_json_file(cls, path: str) -> BertConfig:
        """Reads tfbert's config, Google's bert_config.json or Hugging Face's config.json.

        The flavor is told from the content: HF files carry "model_type", tfbert's carry
        "lower_case" without "model_type"; anything else is read as Google's bert_config.json,
        whose "gelu" means the tanh approximation.
        """
        if not os.path.exists(path):
            raise FileNotFoundError(f"BERT config file not found: {path}")
        try:
            values = json.loads(read_text(path))
        except json.JSONDecodeError as e:
            raise UserError(f"{path}: not valid JSON ({e})") from None
        if not isinstance(values, dict):
            raise UserError(f"{path}: expected a JSON object, got {type(values).__name__}")
        try:
            if "model_type" in values:
                return cls(**_from_hf(values))
            if "lower_case" in values:
                return cls.from_dict(values)
            return cls(**_from_google(values))
        except (TypeError, ValueError) as e:
            raise UserError(f"{path}: {e}") from None

    @classmethod
    def from_hf_dict(cls, values: dict[str, Any]) -> BertConfig:
        """Builds a config from a Hugging Face config.json dict (its "gelu" is the exact form).

        Old files without "model_type" are accepted as BERT.
        """
        return cls(**_from_hf({**values, "model_type": values.get("model_type") or "bert"}))

    @classmethod
    def from_preset(cls, name: str) -> BertConfig:
        """One of PRESETS: the published BERT shapes (weights are not downloaded)."""
        if name not in PRESETS:
            raise UserError(f"unknown preset {name!r}; presets: {', '.join(sorted(PRESETS))}")
        return cls(**PRESETS[name])


_SHAPE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
               "intermediate_size", "hidden_dropout_prob", "attention_probs_dropout_prob",
               "max_position_embeddings", "type_vocab_size", "initializer_range")


def _pick(values: dict[str, Any], path_hint: str) -> dict[str, Any]:
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                           "num_attention_heads", "intermediate_size") if k not in values]
    if missing:
        raise ValueError(f"{path_hint} config lacks required fields {missing}")
    return {k: values[k] for k in _SHAPE_KEYS if k in values}


def _from_hf(values: dict[str, Any]) -> dict[str, Any]:
    if values.get("model_type") not in ("bert", None):
        raise ValueError(f"model_type {values['model_type']!r} is not a BERT model")
    out = _pick(values, "Hugging Face")
    act = values.get("hidden_act", "gelu")
    if act not in _HF_ACT:
        raise ValueError(f"unsupported hidden_act {act!r}")
    out["hidden_act"] = _HF_ACT[act]
    out["layer_norm_eps"] = values.get("layer_norm_eps", 1e-12)
    if "do_lower_case" in values:
        out["lower_case"] = bool(values["do_lower_case"])
    return out


def _from_google(values: dict[str, Any]) -> dict[str, Any]:
    out = _pick(values, "bert_config.json")
    act = values.get("hidden_act", "gelu")
    if act not in _GOOGLE_ACT:
        raise ValueError(f"unsupported hidden_act {act!r}")
    out["hidden_act"] = _GOOGLE_ACT[act]
    return out


def _to_hf(values: dict[str, Any]) -> dict[str, Any]:
    act = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu",
           "tanh": "tanh"}[values["hidden_act"]]
    out = {k: values[k] for k in _SHAPE_KEYS}
    out.update(model_type="bert", architectures=["BertModel"], hidden_act=act,
               layer_norm_eps=values["layer_norm_eps"], pad_token_id=0,
               position_embedding_type="absolute", do_lower_case=values["lower_case"])
    return out


def _to_google(values: dict[str, Any]) -> dict[str, Any]:
    if values["hidden_act"] == "gelu":
        raise ValueError("Google's bert_config.json cannot express exact-erf gelu "
                         "(its 'gelu' is the tanh approximation)")
    act = {"gelu_tanh": "gelu", "relu": "relu", "silu": "swish", "tanh": "tanh"}
    out = {k: values[k] for k in _SHAPE_KEYS}
    out["hidden_act"] = act[values["hidden_act"]]
    return out


def _shape(layers: int, hidden: int, vocab: int, lower_case: bool, act: str = "gelu_tanh"):
    return dict(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=hidden // 64,
                intermediate_size=4 * hidden, vocab_size=vocab, lower_case=lower_case,
                hidden_act=act)


# Google's released checkpoints (tanh GELU). Small BERTs: Turc et al. 2019, uncased vocab.
PRESETS: dict[str, dict[str, Any]] = {
    "bert-base-chinese": _shape(12, 768, 21128, lower_case=False),
    "bert-base-uncased": _shape(12, 768, 30522, lower_case=True),
    "bert-base-cased": _shape(12, 768, 28996, lower_case=False),
    "bert-large-uncased": _shape(24, 1024, 30522, lower_case=True),
    "bert-large-cased": _shape(24, 1024, 28996, lower_case=False),
    "bert-base-multilingual-cased": _shape(12, 768, 119547, lower_case=False),
    "bert-tiny": _shape(2, 128, 30522, lower_case=True),
    "bert-mini": _shape(4, 256, 30522, lower_case=True),
    "bert-small": _shape(4, 512, 30522, lower_case=True),
    "bert-medium": _shape(8, 512, 30522, lower_case=True),
}
