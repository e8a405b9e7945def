"""The one canonical name map: every BERT variable under its Hugging Face name and Google's.

tfbert's checkpoint code converts every source format into one canonical form: a dict of numpy
arrays keyed by Hugging Face BERT names without the `bert.` prefix, in Hugging Face's layout
(torch Linear weights are [out, in]). Readers translate into it, writers out of it, and
`tfbert.models.weights` moves it in and out of a Keras model. Names:

    embeddings.word_embeddings.weight                   [V, H]
    embeddings.position_embeddings.weight               [max_position_embeddings, H]
    embeddings.token_type_embeddings.weight             [type_vocab_size, H]
    embeddings.LayerNorm.weight | .bias                 [H]
    encoder.layer.{i}.attention.self.query.weight       [H, H]  ([out, in]); .bias [H]
    encoder.layer.{i}.attention.self.key.weight | value
    encoder.layer.{i}.attention.output.dense.weight     [H, H]; .bias [H]
    encoder.layer.{i}.attention.output.LayerNorm.weight | .bias  [H]
    encoder.layer.{i}.intermediate.dense.weight         [I, H]; .bias [I]
    encoder.layer.{i}.output.dense.weight               [H, I]; .bias [H]
    encoder.layer.{i}.output.LayerNorm.weight | .bias   [H]
    pooler.dense.weight                                 [H, H]; .bias [H]
    cls.predictions.transform.dense.weight              [H, H]; .bias [H]   (masked-LM head)
    cls.predictions.transform.LayerNorm.weight | .bias  [H]
    cls.predictions.bias                                [V]  (output projection tied to words)
    cls.seq_relationship.weight                         [2, H]; .bias [2]   (next-sentence head)

Google's TF1 names are `bert/embeddings/word_embeddings`, `bert/encoder/layer_0/attention/self/
query/kernel` ([in, out], the transpose), LayerNorm `gamma`/`beta`, `cls/predictions/output_bias`
and `cls/seq_relationship/output_weights` ([2, H], the same layout as Hugging Face's).
"""

from __future__ import annotations

import dataclasses
import re

from tfbert.config import BertConfig

ENCODER_PREFIXES = ("embeddings.", "encoder.", "pooler.")
MLM_PREFIX = "cls.predictions."
NSP_PREFIX = "cls.seq_relationship."
HEAD_PREFIX = "head."  # tfbert task-head weights (classifier, token classifier, span labeler)

# Google TF1 checkpoints also hold optimizer state and a step counter: not model weights.
_GOOGLE_NON_MODEL = re.compile(
    r"(^|/)(global_step|beta1_power|beta2_power|good_steps|loss_scale|current_loss_scale)$"
    r"|/(adam_m|adam_v|Adam|Adam_1|Momentum|lamb_m|lamb_v)$|^_CHECKPOINTABLE_OBJECT_GRAPH$")


@dataclasses.dataclass(frozen=True)
class NameEntry:
    """One variable: canonical (HF) name, Google TF1 name, whether Google stores it transposed."""

    canonical: str
    google: str
    transpose: bool


def _dense(hf: str, google: str) -> list[NameEntry]:
    return [NameEntry(f"{hf}.weight", f"{google}/kernel", True),
            NameEntry(f"{hf}.bias", f"{google}/bias", False)]


def _layer_norm(hf: str, google: str) -> list[NameEntry]:
    return [NameEntry(f"{hf}.weight", f"{google}/gamma", False),
            NameEntry(f"{hf}.bias", f"{google}/beta", False)]


def encoder_entries(num_layers: int) -> list[NameEntry]:
    """Every encoder variable (embeddings, `num_layers` blocks, pooler), in model order."""
    out = [NameEntry(f"embeddings.{t}.weight", f"bert/embeddings/{t}", False)
           for t in ("word_embeddings", "position_embeddings", "token_type_embeddings")]
    out += _layer_norm("embeddings.LayerNorm", "bert/embeddings/LayerNorm")
    for i in range(num_layers):
        hf, g = f"encoder.layer.{i}", f"bert/encoder/layer_{i}"
        for part in ("query", "key", "value"):
            out += _dense(f"{hf}.attention.self.{part}", f"{g}/attention/self/{part}")
        out += _dense(f"{hf}.attention.output.dense", f"{g}/attention/output/dense")
        out += _layer_norm(f"{hf}.attention.output.LayerNorm", f"{g}/attention/output/LayerNorm")
        out += _dense(f"{hf}.intermediate.dense", f"{g}/intermediate/dense")
        out += _dense(f"{hf}.output.dense", f"{g}/output/dense")
        out += _layer_norm(f"{hf}.output.LayerNorm", f"{g}/output/LayerNorm")
    out += _dense("pooler.dense", "bert/pooler/dense")
    return out


def mlm_entries() -> list[NameEntry]:
    """The masked-LM head (its output projection is the word-embedding table, not stored)."""
    return (_dense("cls.predictions.transform.dense", "cls/predictions/transform/dense")
            + _layer_norm("cls.predictions.transform.LayerNorm",
                          "cls/predictions/transform/LayerNorm")
            + [NameEntry("cls.predictions.bias", "cls/predictions/output_bias", False)])


def nsp_entries() -> list[NameEntry]:
    """The next-sentence head: Google's output_weights is [2, H] like HF's Linear weight."""
    return [NameEntry("cls.seq_relationship.weight", "cls/seq_relationship/output_weights", False),
            NameEntry("cls.seq_relationship.bias", "cls/seq_relationship/output_bias", False)]


def all_entries(num_layers: int) -> list[NameEntry]:
    return encoder_entries(num_layers) + mlm_entries() + nsp_entries()


def expected_shapes(config: BertConfig) -> dict[str, tuple[int, ...]]:
    """Canonical name -> shape (HF layout) for the encoder and both pretraining heads."""
    h, inter, v = config.hidden_size, config.intermediate_size, config.vocab_size
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (v, h),
        "embeddings.position_embeddings.weight": (config.max_position_embeddings, h),
        "embeddings.token_type_embeddings.weight": (config.type_vocab_size, h),
        "cls.predictions.bias": (v,),
        "cls.seq_relationship.weight": (2, h),
        "cls.seq_relationship.bias": (2,),
    }
    for entry in all_entries(config.num_hidden_layers):
        name = entry.canonical
        if name in shapes:
            continue
        if ".intermediate.dense." in name:
            shapes[name] = (inter, h) if name.endswith(".weight") else (inter,)
        elif re.search(r"\.output\.dense\.weight$", name) and ".attention." not in name:
            shapes[name] = (h, inter)
        elif name.endswith(".weight") and "LayerNorm" not in name:
            shapes[name] = (h, h)
        else:
            shapes[name] = (h,)
    return shapes


def is_google_non_model(name: str) -> bool:
    """True for optimizer slots (adam_m/adam_v, ...) and step counters in TF1 checkpoints."""
    return bool(_GOOGLE_NON_MODEL.search(name))


def hf_to_canonical(key: str) -> str:
    """Hugging Face state-dict key -> canonical name: drops `bert.`, old gamma/beta -> weight/bias.

    Keys outside BERT's namespace (e.g. a HF task head `classifier.weight`) come back unchanged.
    """
    if key.startswith("bert."):
        key = key[len("bert."):]
    if ".LayerNorm." in key:
        key = re.sub(r"\.gamma$", ".weight", key)
        key = re.sub(r"\.beta$", ".bias", key)
    return key


def canonical_to_hf(name: str) -> str:
    """Canonical name -> the key tfbert writes: the encoder under `bert.` (BertForPreTraining's
    layout, which transformers' BertModel also loads), heads under their own prefix."""
    return f"bert.{name}" if name.startswith(ENCODER_PREFIXES) else name


def is_encoder(name: str) -> bool:
    return name.startswith(ENCODER_PREFIXES)


def is_pretraining_head(name: str) -> bool:
    return name.startswith((MLM_PREFIX, NSP_PREFIX))
