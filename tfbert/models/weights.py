"""Canonical checkpoints <-> tfbert's Keras models (BertEncoder and the task models).

Canonical weights are in Hugging Face's layout; Keras stores kernels [in, out] and attention
kernels as EinsumDense tensors (query/key/value [H, N, D], output [N, D, H]; see the variable
table in tfbert/models/encoder.py). A linear layer's HF weight W [out, in] becomes
`W.T.reshape(kernel.shape)`; every other weight is reshaped only (e.g. a Q bias [H] -> [N, D]).

Task-head weights (classifier, token classifier, span labeler) are stored as `head.<Keras
variable path with dots>`, e.g. `head.logits.kernel`, in Keras layout; `tfbert.checkpoints.heads`
maps Google's and Hugging Face's fine-tuned heads to and from these names.

`tfbert.models.pretrained` (from_pretrained, save_pretrained, load_model) is built on these.
This module imports no model module: it tells the models apart by their `model_kind` ("encoder",
"pretrainer", "task") and finds a class by name in `tfbert.models.catalog`, so the models'
`from_pretrained` can import the loaders.
"""

from __future__ import annotations

import logging
from typing import Any

import keras
import numpy as np

from tfbert.checkpoints import names
from tfbert.checkpoints.canonical import Checkpoint, CheckpointError, format_names
from tfbert.models import catalog

logger = logging.getLogger(__name__)

ENCODER = "BertEncoder"  # the encoder's class name: tfbert.json's "model_class" of bare weights


# --- variable maps --------------------------------------------------------------------------


def encoder_variables(encoder: Any) -> dict[str, Any]:
    """Canonical name -> Keras variable for every weight of a BertEncoder."""
    emb = encoder.embeddings
    out = {"embeddings.word_embeddings.weight": emb.word_embeddings.embeddings,
           "embeddings.position_embeddings.weight": emb.position_embeddings.embeddings,
           "embeddings.token_type_embeddings.weight": emb.token_type_embeddings.embeddings,
           "embeddings.LayerNorm.weight": emb.layer_norm.gamma,
           "embeddings.LayerNorm.bias": emb.layer_norm.beta}
    for i, layer in enumerate(encoder.transformer_layers):
        p, attn = f"encoder.layer.{i}", layer.attention
        sublayers = {"attention.self.query": attn.query_dense,
                     "attention.self.key": attn.key_dense,
                     "attention.self.value": attn.value_dense,
                     "attention.output.dense": attn.output_dense,
                     "intermediate.dense": layer.intermediate_dense,
                     "output.dense": layer.output_dense}
        for name, dense in sublayers.items():
            out[f"{p}.{name}.weight"], out[f"{p}.{name}.bias"] = dense.kernel, dense.bias
        for name, norm in (("attention.output.LayerNorm", layer.attention_layer_norm),
                           ("output.LayerNorm", layer.output_layer_norm)):
            out[f"{p}.{name}.weight"], out[f"{p}.{name}.bias"] = norm.gamma, norm.beta
    out["pooler.dense.weight"], out["pooler.dense.bias"] = (encoder.pooler.kernel,
                                                            encoder.pooler.bias)
    return out


def pretraining_variables(pretrainer: Any) -> dict[str, Any]:
    """Canonical `cls.*` name -> Keras variable of a BertPretrainer's MLM and NSP heads."""
    mlm, nsp = pretrainer.mlm_head, pretrainer.nsp_head
    return {"cls.predictions.transform.dense.weight": mlm.transform_dense.kernel,
            "cls.predictions.transform.dense.bias": mlm.transform_dense.bias,
            "cls.predictions.transform.LayerNorm.weight": mlm.transform_layer_norm.gamma,
            "cls.predictions.transform.LayerNorm.bias": mlm.transform_layer_norm.beta,
            "cls.predictions.bias": mlm.output_bias,
            "cls.seq_relationship.weight": nsp.kernel,
            "cls.seq_relationship.bias": nsp.bias}


def head_variables(model: Any, taken: dict[str, Any]) -> dict[str, Any]:
    """`head.<path>` -> variable for every weight of `model` not already in `taken`."""
    seen = {id(v) for v in taken.values()}
    out: dict[str, Any] = {}
    for variable in model.weights:
        if id(variable) in seen:
            continue
        seen.add(id(variable))
        name = names.HEAD_PREFIX + variable.path.replace("/", ".")
        if name in out:
            raise CheckpointError(f"{type(model).__name__}: two head variables share the path "
                                  f"{variable.path!r}; give the head layers distinct names")
        out[name] = variable
    return out


def model_variables(model: Any) -> dict[str, Any]:
    """Every weight of a BertEncoder or task model under its checkpoint name."""
    if _is_encoder(model):
        return encoder_variables(model)
    out = encoder_variables(_encoder_of(model))
    if is_pretrainer(model):
        out.update(pretraining_variables(model))
    out.update(head_variables(model, out))
    return out


# --- value conversion -----------------------------------------------------------------------


def _is_linear(name: str) -> bool:
    """HF Linear weights ([out, in]); embedding tables and LayerNorm weights are not."""
    return (name.endswith(".weight") and "LayerNorm" not in name
            and not name.startswith("embeddings."))


def to_keras(name: str, value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A canonical (HF-layout) weight in the layout of a Keras variable of `shape`."""
    if name.startswith(names.HEAD_PREFIX):
        return value
    value = value.T if _is_linear(name) else value
    return np.reshape(value, shape)


def from_keras(name: str, value: np.ndarray, hf_shape: tuple[int, ...] | None) -> np.ndarray:
    """A Keras variable's value in canonical HF layout."""
    if hf_shape is None:  # task heads stay in Keras layout
        return value
    if _is_linear(name):
        return np.ascontiguousarray(np.reshape(value, hf_shape[::-1]).T)
    return np.reshape(value, hf_shape)


def _numpy(variable: Any) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(variable), dtype=np.float32)


# --- load / save ----------------------------------------------------------------------------


def assign(variables: dict[str, Any], weights: dict[str, np.ndarray], source: str) -> None:
    """Assigns weights[name] to variables[name] for every name in `variables` (all present)."""
    bad = []
    for name, variable in variables.items():
        value = weights[name]
        try:
            variable.assign(to_keras(name, value, tuple(variable.shape)))
        except ValueError:
            bad.append(f"{name}: model variable {variable.path} has shape "
                       f"{tuple(variable.shape)}, checkpoint has {tuple(value.shape)}")
    if bad:
        raise CheckpointError(f"{source}: {len(bad)} weight(s) do not fit the model:"
                              f"{format_names(bad)}")


def _load_present(variables: dict[str, Any], checkpoint: Checkpoint, what: str) -> None:
    present = {k: v for k, v in variables.items() if k in checkpoint.weights}
    missing = sorted(set(variables) - set(present))
    unused = [k for k in missing if k in checkpoint.optional]
    if unused:  # e.g. the pooler, which HF's token-classification and QA models lack
        logger.info("%s: %s keeps initial values for %s, which the checkpoint's model does "
                    "not use", checkpoint.source, what, ", ".join(unused))
        missing = [k for k in missing if k not in checkpoint.optional]
    if missing:  # check(strict=True) has already refused this unless the caller allowed it
        logger.warning("%s: %s has no value for %d variable(s); they keep their initial "
                       "values:%s", checkpoint.source, what, len(missing),
                       format_names(missing))
    assign(present, checkpoint.weights, checkpoint.source)


def _shapes_match(variables: dict[str, Any], weights: dict[str, np.ndarray]) -> bool:
    return set(variables) == set(weights) and all(
        tuple(v.shape) == tuple(weights[k].shape) for k, v in variables.items())


def build_and_load(cls: type, checkpoint: Checkpoint, strict: bool = True,
                   **kwargs: Any) -> Any:
    """`cls(encoder, **kwargs)` (or a BertEncoder) with the checkpoint's weights where they fit.

    See `tfbert.models.pretrained.model_from_pretrained` for what loads when.
    """
    encoder = encoder_class()(checkpoint.config)
    _load_present(encoder_variables(encoder), checkpoint, "the encoder")
    if _kind(cls) == "encoder":
        if kwargs:
            raise TypeError(f"BertEncoder.from_pretrained got unexpected arguments "
                            f"{sorted(kwargs)}")
        if checkpoint.head_weights():
            logger.info("%s holds a %s head; a BertEncoder loads the encoder only",
                        checkpoint.source, (checkpoint.metadata or {}).get("model_class"))
        return encoder
    metadata = checkpoint.metadata or {}
    same_class = metadata.get("model_class") == cls.__name__
    head_config = dict(metadata.get("model_config", {})) if same_class else {}
    head_config.pop("name", None)
    model = cls(encoder, **{**head_config, **kwargs})
    if is_pretrainer(model):
        heads = pretraining_variables(model)
        for entries, what in ((names.mlm_entries(), "masked-LM"),
                              (names.nsp_entries(), "next-sentence")):
            part = {e.canonical: heads[e.canonical] for e in entries}
            if all(k in checkpoint.weights for k in part):
                assign(part, checkpoint.weights, checkpoint.source)
            else:
                logger.warning("%s has no %s head; BertPretrainer's %s head starts from random "
                               "initial values", checkpoint.source, what, what)
    taken = model_variables(encoder)
    if is_pretrainer(model):
        taken.update(pretraining_variables(model))
    head = head_variables(model, taken)
    saved = {k: v for k, v in checkpoint.weights.items() if k.startswith(names.HEAD_PREFIX)}
    if head and same_class and _shapes_match(head, saved):
        assign(head, saved, checkpoint.source)
    elif head and saved:
        logger.warning("%s: the saved %s head does not fit %s(%s); the head starts from random "
                       "initial values", checkpoint.source, metadata.get("model_class"),
                       cls.__name__, ", ".join(f"{k}={v!r}" for k, v in kwargs.items()))
    return model


def rebuild(checkpoint: Checkpoint, dtype: Any = None) -> Any:
    """The exact model a tfbert directory was saved from (class, head config, all weights).

    `dtype`: a Keras dtype policy to build it with instead of the saved one (e.g. "bfloat16"
    for a half-precision serving export); the weights are cast on assignment."""
    metadata = checkpoint.metadata or {}
    class_name = metadata.get("model_class")
    cls = catalog.find(class_name)
    if cls is None:
        builtin = tuple(catalog.model_classes())
        raise CheckpointError(f"{checkpoint.source}: model_class {class_name!r} is neither "
                              f"one of {builtin} nor a registered Keras class")
    encoder_config = {**metadata.get("encoder_config", {}), "config": checkpoint.config.to_dict()}
    if dtype is not None:
        encoder_config["dtype"] = dtype
    encoder = encoder_class().from_config(encoder_config)
    if _kind(cls) == "encoder":
        model = encoder
    else:
        model = cls.from_config({**metadata["model_config"], "encoder": encoder})
    variables = model_variables(model)
    missing = sorted(set(variables) - set(checkpoint.weights))
    unused = sorted(set(checkpoint.weights) - set(variables))
    problems = []
    if missing:
        problems.append(f"{len(missing)} model variable(s) missing:{format_names(missing)}")
    if unused:
        problems.append(f"{len(unused)} weight(s) the model has no variable for (unused):"
                        f"{format_names(unused)}")
    if problems:
        raise CheckpointError(f"{checkpoint.source}: the saved weights do not fit "
                              f"{class_name}: " + "; ".join(problems))
    assign(variables, checkpoint.weights, checkpoint.source)
    return model


def to_checkpoint(model: Any, vocab_file: str | None = None) -> Checkpoint:
    """A BertEncoder or task model as a canonical Checkpoint (numpy copies of its weights)."""
    encoder = model if _is_encoder(model) else _encoder_of(model)
    config = encoder.config
    shapes = names.expected_shapes(config)
    weights = {name: from_keras(name, _numpy(variable), shapes.get(name))
               for name, variable in model_variables(model).items()}
    return Checkpoint(config=config, weights=weights, format="tfbert", vocab_file=vocab_file,
                      source=f"{type(model).__name__} {model.name!r}")


def describe_encoder() -> dict[str, Any]:
    """tfbert.json's model entries for bare encoder weights (a Checkpoint, no Keras model)."""
    return {"model_class": ENCODER, "model_config": {}}


def describe(model: Any) -> dict[str, Any]:
    """tfbert.json's model entries: class, head config (no encoder), encoder settings."""
    encoder = model if _is_encoder(model) else _encoder_of(model)
    encoder_config = {k: v for k, v in encoder.get_config().items() if k != "config"}
    if _is_encoder(model):
        return {"model_class": type(model).__name__, "model_config": {},
                "encoder_config": encoder_config}
    model_config = {k: v for k, v in model.get_config().items() if k != "encoder"}
    cls = type(model)
    name = (cls.__name__ if cls.__name__ in catalog.model_classes()
            else keras.saving.get_registered_name(cls))
    return {"model_class": name, "model_config": model_config, "encoder_config": encoder_config}


def encoder_class() -> type:
    """BertEncoder, the class every model's encoder is built from."""
    return catalog.model_classes()[ENCODER]


def is_pretrainer(model: Any) -> bool:
    """Whether `model` is a BertPretrainer (has the masked-LM and next-sentence heads)."""
    return _kind(model) == "pretrainer"


def _kind(model_or_class: Any) -> str | None:
    """The `model_kind` of a tfbert model or model class; None for anything else."""
    kind = getattr(model_or_class, "model_kind", None)
    return kind if isinstance(kind, str) else None


def _is_encoder(model: Any) -> bool:
    return _kind(model) == "encoder"


def _encoder_of(model: Any) -> Any:
    encoder = getattr(model, "encoder", None)
    if not _is_encoder(encoder):
        raise TypeError(f"expected a tfbert.BertEncoder or a task model with an `.encoder`, got "
                        f"{type(model).__module__}.{type(model).__name__}")
    return encoder
