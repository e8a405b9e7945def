"""Checkpoints: BERT weights in Hugging Face, Google TF1, keras-hub or tfbert's own format.

Every source is read into one canonical form (`Checkpoint`: a BertConfig plus numpy arrays under
Hugging Face BERT names, see `names.py`) and checked against the config; writers go the other
way. This package knows formats only: tfbert's Keras models sit above it
(`tfbert.models.weights` copies a Checkpoint into a model and back).

    checkpoint = tfbert.checkpoints.read_checkpoint("path/to/hf_or_google_dir")
    tfbert.checkpoints.write_checkpoint(checkpoint, "out", format="hf")

Written only: "sentence-transformers" (the "hf" BERT plus modules.json and the modules'
folders, `sentence_transformers.py`), which is read back as "hf".

The model-level calls (`from_pretrained`, `model_from_pretrained`, `save_pretrained`,
`load_model`) are defined in `tfbert.models.pretrained` and reachable here by name, loaded on
first use:

    model = tfbert.checkpoints.load_model("out")   # the model save_pretrained wrote

A shipped model is read by its name (`tfbert-chinese`, `shipped.py`), offline.

Formats, told apart by their files:
  tfbert     tfbert.json + config.json + model.safetensors (+ vocab.txt), from save_pretrained
  keras-hub  config.json with "registered_name" (a preset from `save_to_preset`), or a
             keras_hub.models.BertBackbone instance
  hf         config.json + model.safetensors | model.safetensors.index.json | pytorch_model.bin;
             also a sentence-transformers directory (modules.json: its BERT, read with its
             pooling, projection and normalisation as a BertSentenceEncoder head)
  google     bert_config.json + bert_model.ckpt.{index,data-*} (or a checkpoint prefix)
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from tfbert._lazy import lazy_names
from tfbert.checkpoints import (
    google,
    heads,
    hf,
    keras_hub,
    names,
    native,
    sentence_transformers,
    shipped,
)
from tfbert.checkpoints.canonical import Checkpoint, CheckpointError
from tfbert.config import BertConfig

# Model-level names: tfbert.models sits above this package, so they load on first use.
_MODEL_CALLS = {name: "tfbert.models.pretrained" for name in
                ("from_pretrained", "load_model", "model_from_pretrained", "save_pretrained")}

__all__ = ["Checkpoint", "CheckpointError", "detect_format", "read_checkpoint", "read_metadata",
           "resolve_source", "stated_lower_case", "write_checkpoint", *sorted(_MODEL_CALLS)]

__getattr__, __dir__ = lazy_names(__name__, globals(), _MODEL_CALLS)

FORMATS = ("tfbert", "hf", "google", "keras_hub")
WRITABLE_FORMATS = ("tfbert", "hf", "google", "sentence-transformers")


def resolve_source(source: Any) -> Any:
    """A shipped model's name (`shipped.names()`, e.g. "tfbert-chinese") as its checked folder;
    any other source unchanged."""
    return shipped.resolve(source) if isinstance(source, str) else source


def detect_format(source: Any) -> str:
    """"tfbert", "keras_hub", "hf" or "google" for a path or a keras-hub backbone.

    Raises:
        FileNotFoundError: the path does not exist.
        CheckpointError: the path holds none of the formats (the message lists its files).
    """
    if keras_hub.is_backbone(source):
        return "keras_hub"
    if not isinstance(source, (str, os.PathLike)):
        raise CheckpointError(f"cannot load a checkpoint from a {type(source).__name__}; pass "
                              "a directory path or a keras_hub.models.BertBackbone")
    path = os.fspath(resolve_source(source))
    if os.path.isfile(path + ".index"):
        return "google"
    if not os.path.exists(path):
        known = (f" (nor a shipped model name: {', '.join(shipped.names())})"
                 if shipped.looks_like_a_name(path) else "")
        raise FileNotFoundError(f"checkpoint path not found: {path}{known}")
    if os.path.isfile(path):
        raise CheckpointError(f"{path}: is a file; pass the checkpoint directory (or, for a "
                              "Google checkpoint, its prefix such as .../bert_model.ckpt)")
    if os.path.isfile(os.path.join(path, native.METADATA_FILE)):
        return "tfbert"
    if keras_hub.is_keras_hub_preset(path):
        return "keras_hub"
    if (os.path.isfile(os.path.join(path, hf.CONFIG_FILE))
            or sentence_transformers.is_st_dir(path)):
        return "hf"
    if google.is_google_dir(path):
        return "google"
    raise CheckpointError(
        f"{path} holds no checkpoint tfbert reads (unknown checkpoint format). Expected a "
        "Hugging Face directory (config.json + "
        "model.safetensors or pytorch_model.bin), a Google TF1 directory (bert_config.json + "
        "bert_model.ckpt.index/.data-*), a keras-hub preset (config.json with "
        "registered_name) or a tfbert directory (tfbert.json + config.json + model.safetensors)."
        f" Files present: {sorted(os.listdir(path))}")


def read_checkpoint(source: Any, config: BertConfig | None = None) -> Checkpoint:
    """Any supported source as a canonical `Checkpoint` (weights as numpy arrays, not checked).

    Args:
        source: str or keras_hub.models.BertBackbone. See the module docstring for formats.
        config: BertConfig or None. Overrides the checkpoint's config file (not used for a
            keras-hub backbone, whose shape is its config).
    """
    source = resolve_source(source)
    fmt = detect_format(source)
    if fmt == "keras_hub":
        if keras_hub.is_backbone(source):
            return keras_hub.read_backbone(source)
        return keras_hub.read_preset(os.fspath(source))
    path = os.fspath(source)
    if fmt == "tfbert":
        return native.read_native(path, config)
    if fmt == "hf":
        return hf.read_hf(path, config)
    return google.read_google(path, config)


def write_checkpoint(checkpoint: Checkpoint, directory: str, format: str = "tfbert",
                     model_info: dict[str, Any] | None = None,
                     metadata: dict[str, Any] | None = None,
                     approximate_activation: bool = False,
                     approximation: dict[str, Any] | None = None) -> None:
    """Writes a canonical checkpoint to a directory in one of the writable formats.

    Args:
        checkpoint: Checkpoint. Weights (encoder, `cls.*`, `head.*`), config and vocab.
        directory: str. Created if missing.
        format: str. "tfbert" (config.json, model.safetensors, vocab.txt, tfbert.json;
            transformers' BertModel reads it too), "hf" (transformers' layout; a task head
            as its `BertFor...` class, `heads.py`), "google" (bert_config.json +
            bert_model.ckpt.*; a task head under run_classifier's / run_squad's names) or
            "sentence-transformers" (a BertSentenceEncoder: the "hf" BERT plus modules.json
            and its modules, which sentence_transformers.SentenceTransformer loads).
        model_info: dict or None. tfbert.json's model entries (`native.write_native`): the
            class whose head the `head.*` weights are; needed for format "tfbert" and for a
            task head in the other formats.
        metadata: dict or None. JSON-serialisable caller data for tfbert.json. Format "hf"
            takes only "labels" (written as id2label / label2id); "google" takes none;
            "sentence-transformers" takes "max_seq_length" (sentence_bert_config.json; else
            the checkpoint's own metadata's) and "lower_case" (the tokenizer's casing, else
            the config's).
        approximate_activation: bool. Format "google": write exact GELU as Google's tanh form
            (else that is a CheckpointError, `google.check_expressible`).
        approximation: dict or None. Format "google": the measured change, recorded in
            bert_config.json.

    Raises:
        CheckpointError: a config or head the format cannot hold, before anything is written.
    """
    if format not in WRITABLE_FORMATS:
        raise ValueError(f"format must be one of {WRITABLE_FORMATS}, got {format!r}")
    allowed = {"hf": {"labels"}, "google": set(),
               "sentence-transformers": {"max_seq_length", "lower_case"}}.get(format)
    if metadata and allowed is not None and set(metadata) - allowed:
        raise ValueError(f"metadata is written to tfbert.json, which format={format!r} has not "
                         f"(it holds {sorted(allowed) or 'no metadata'}); got "
                         f"{sorted(set(metadata) - allowed)}")
    if approximate_activation and format != "google":
        raise ValueError("approximate_activation applies to format='google' only")
    if format == "google":
        google.write_google(checkpoint, directory, model_info, approximate_activation,
                            approximation)
    elif format == "hf":
        head_state, entries = heads.to_hf(checkpoint.weights, model_info,
                                          (metadata or {}).get("labels"), checkpoint.source)
        head = heads.by_class((model_info or {}).get("model_class")) if head_state else None
        dropped = heads.POOLER if head and head.sequence else ()  # not in HF's class
        plain = {k: v for k, v in checkpoint.weights.items()
                 if not k.startswith(names.HEAD_PREFIX) and k not in dropped}
        hf.write_hf(Checkpoint(config=checkpoint.config, weights={**plain, **head_state},
                               source=checkpoint.source, format="hf",
                               vocab_file=checkpoint.vocab_file), directory, entries)
    elif format == "sentence-transformers":
        _write_sentence_transformers(checkpoint, directory, model_info, metadata or {})
    elif model_info is None:
        raise ValueError("format 'tfbert' records the model class: pass model_info")
    else:
        native.write_native(checkpoint, directory, model_info, metadata)


def _write_sentence_transformers(checkpoint: Checkpoint, directory: str,
                                 model_info: dict[str, Any] | None,
                                 metadata: dict[str, Any]) -> None:
    """The BERT as format "hf" writes a bare encoder, then the sentence-transformers modules."""
    head = {k: v for k, v in checkpoint.weights.items() if k.startswith(names.HEAD_PREFIX)}
    sentence_transformers.check_writable(model_info, head, checkpoint.source)  # before writing
    if not checkpoint.vocab_file:
        raise CheckpointError(f"{checkpoint.source}: format 'sentence-transformers' needs the "
                              "vocab (sentence-transformers loads its tokenizer from the "
                              "directory); pass vocab_file")
    saved = checkpoint.metadata or {}
    max_seq_length = metadata.get("max_seq_length", saved.get("max_seq_length"))
    config = checkpoint.config
    if "lower_case" in metadata:
        config = dataclasses.replace(config, lower_case=bool(metadata["lower_case"]))
    plain = {k: v for k, v in checkpoint.weights.items() if k not in head}
    hf.write_hf(Checkpoint(config=config, weights=plain, source=checkpoint.source, format="hf",
                           vocab_file=checkpoint.vocab_file), directory)
    sentence_transformers.write_modules(directory, model_info, head, config.hidden_size,
                                        max_seq_length, checkpoint.source)


def read_metadata(path: str) -> dict[str, Any]:
    """tfbert.json of a directory written by `save_pretrained` (model class, head config, and
    the caller's metadata such as task, labels, max_seq_length)."""
    return native.read_metadata(path)


def stated_lower_case(path: str) -> tuple[bool, str] | None:
    """The casing a checkpoint states, and where, read without its weights: a
    sentence-transformers directory's (its tokenizer's casing, or its sentence_bert_config.json's
    do_lower_case: `sentence_transformers.Modules.lower_case`), tfbert.json's
    lower_case (the casing a fine-tuning run tokenized with), else do_lower_case in config.json
    or tokenizer_config.json (Hugging Face, tfbert) or bert_config.json (or its tfbert_config),
    else Google's name rule for its released models. None when nothing states it (a reader then
    guesses, `hf.read_config`, `google.read_config`).

    Args:
        path: str. A checkpoint directory or a Google checkpoint prefix.
    """
    directory = path if os.path.isdir(path) else os.path.dirname(path)
    if sentence_transformers.is_st_dir(directory):
        modules = sentence_transformers.read_modules(directory)
        bert = modules.transformer_dir
        value = hf.read_lower_case(bert, hf.read_values(bert))
        if value is not None or modules.do_lower_case:
            return (modules.lower_case(bool(value)),
                    f"{os.path.join(bert, 'tokenizer_config.json')} and "
                    f"{os.path.join(bert, sentence_transformers.CONFIG_FILE)}")
    if os.path.isfile(os.path.join(directory, native.METADATA_FILE)):
        value = native.read_metadata(directory).get("lower_case")
        if isinstance(value, bool):
            return value, os.path.join(directory, native.METADATA_FILE)
    if (os.path.isfile(os.path.join(directory, hf.CONFIG_FILE))
            and not keras_hub.is_keras_hub_preset(directory)):
        values = hf.read_values(directory)
        value = hf.read_lower_case(directory, values)
        if value is not None:
            where = hf.CONFIG_FILE if "do_lower_case" in values else "tokenizer_config.json"
            return value, os.path.join(directory, where)
    if os.path.isfile(os.path.join(directory, google.CONFIG_FILE)):
        values = google.read_values(directory)
        own = values.get("tfbert_config")
        if isinstance(own, dict) and isinstance(own.get("lower_case"), bool):
            return own["lower_case"], os.path.join(directory, google.CONFIG_FILE)
        if "do_lower_case" in values:
            return bool(values["do_lower_case"]), os.path.join(directory, google.CONFIG_FILE)
        value = google.lower_case_by_name(directory)
        if value is not None:
            return value, f"Google's rule for its model {os.path.basename(directory)}"
    return None
