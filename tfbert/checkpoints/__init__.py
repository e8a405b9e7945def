"""Checkpoints: load BERT weights from Hugging Face, Google TF1, keras-hub or tfbert's own format.

Every source is read into one canonical form (`Checkpoint`: a BertConfig plus numpy arrays under
Hugging Face BERT names, see `names.py`), checked against the config, then copied into Keras
models (`keras_model.py`). Writers go the other way.

    encoder = tfbert.from_pretrained("path/to/hf_or_google_dir")    # a BertEncoder
    model = tfbert.BertClassifier.from_pretrained(path, num_classes=3)
    tfbert.save_pretrained(model, "out", vocab_file="vocab.txt", metadata={"task": "sst2"})
    model = tfbert.checkpoints.load_model("out")                     # the same BertClassifier

Formats, told apart by their files:
  tfbert     tfbert.json + config.json + model.safetensors (+ vocab.txt), from save_pretrained
  keras-hub  config.json with "registered_name" (a preset from `save_to_preset`), or a
             keras_hub.models.BertBackbone instance
  hf         config.json + model.safetensors | model.safetensors.index.json | pytorch_model.bin
  google     bert_config.json + bert_model.ckpt.{index,data-*} (or a checkpoint prefix)
"""

from __future__ import annotations

import os
from typing import Any

from tfbert.checkpoints import google, hf, keras_hub, native
from tfbert.checkpoints.canonical import Checkpoint, CheckpointError
from tfbert.config import BertConfig

__all__ = ["Checkpoint", "CheckpointError", "detect_format", "from_pretrained", "load_model",
           "model_from_pretrained", "read_checkpoint", "read_metadata", "save_pretrained"]

FORMATS = ("tfbert", "hf", "google", "keras_hub")


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
    path = os.fspath(source)
    if os.path.isfile(path + ".index"):
        return "google"
    if not os.path.exists(path):
        raise FileNotFoundError(f"checkpoint path not found: {path}")
    if os.path.isfile(path):
        raise CheckpointError(f"{path}: is a file; pass the checkpoint directory (or, for a "
                              "Google checkpoint, its prefix such as .../bert_model.ckpt)")
    if os.path.isfile(os.path.join(path, native.METADATA_FILE)):
        return "tfbert"
    if keras_hub.is_keras_hub_preset(path):
        return "keras_hub"
    if os.path.isfile(os.path.join(path, hf.CONFIG_FILE)):
        return "hf"
    if google.is_google_dir(path):
        return "google"
    raise CheckpointError(
        f"{path}: unknown checkpoint format. Expected a Hugging Face directory (config.json + "
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


def from_pretrained(source: Any, config: BertConfig | None = None, strict: bool = True) -> Any:
    """A `BertEncoder` with the weights of a checkpoint of any supported format.

    Args:
        source: str or keras_hub.models.BertBackbone. Checkpoint directory (or Google prefix).
        config: BertConfig or None. Overrides the checkpoint's config file.
        strict: bool. If False, missing/unused variables are logged instead of raising (missing
            ones keep their initial values). Shape mismatches always raise.

    Returns:
        tfbert.BertEncoder.

    Raises:
        FileNotFoundError, CheckpointError: naming the file and variables at fault.

    Example:
    >>> encoder = tfbert.from_pretrained("uncased_L-12_H-768_A-12")  # doctest: +SKIP
    """
    from tfbert.models.encoder import BertEncoder

    return model_from_pretrained(BertEncoder, source, config=config, strict=strict)


def model_from_pretrained(cls: type, source: Any, config: BertConfig | None = None,
                          strict: bool = True, **kwargs: Any) -> Any:
    """Builds `cls(encoder, **kwargs)` (or a BertEncoder) and loads what the checkpoint has.

    The encoder always loads. A BertPretrainer also gets the masked-LM and next-sentence heads
    when the checkpoint has them (else they keep their initial values, with a log line). A task
    model loaded from a tfbert directory saved from the same class gets its head too, when the
    head arguments (the saved ones overridden by `kwargs`) give the same variable shapes.

    Args:
        cls: type. tfbert.BertEncoder or a task model class taking the encoder first.
        source: str or keras_hub.models.BertBackbone. Checkpoint to read.
        config: BertConfig or None. Overrides the checkpoint's config file.
        strict: bool. See `from_pretrained`.
        **kwargs: head arguments for `cls`, e.g. num_classes=3.
    """
    from tfbert.checkpoints import keras_model

    checkpoint = read_checkpoint(source, config)
    checkpoint.check(strict)
    return keras_model.build_and_load(cls, checkpoint, strict=strict, **kwargs)


def save_pretrained(model: Any, directory: str, vocab_file: str | None = None,
                    metadata: dict[str, Any] | None = None, format: str = "tfbert") -> None:
    """Writes a model (or a `Checkpoint`) to a directory.

    Args:
        model: tfbert.BertEncoder, a task model with `.encoder`, or a Checkpoint.
        directory: str. Created if missing.
        vocab_file: str or None. Copied in as vocab.txt.
        metadata: dict or None. JSON-serialisable caller data for tfbert.json (e.g. task,
            labels, max_seq_length); tfbert format only.
        format: str. "tfbert" (default: config.json, model.safetensors, vocab.txt, tfbert.json;
            transformers' BertModel reads it too), "hf" (the same without tfbert.json and task
            heads) or "google" (bert_config.json + bert_model.ckpt.*).
    """
    from tfbert.checkpoints import keras_model

    if format not in ("tfbert", "hf", "google"):
        raise ValueError(f"format must be 'tfbert', 'hf' or 'google', got {format!r}")
    if isinstance(model, Checkpoint):
        checkpoint, model_info = model, None
        if vocab_file:
            checkpoint.vocab_file = vocab_file
    else:
        checkpoint = keras_model.to_checkpoint(model, vocab_file=vocab_file)
        model_info = keras_model.describe(model)
    if metadata and format != "tfbert":
        raise ValueError(f"metadata is written to tfbert.json, which format={format!r} has not")
    if format == "google":
        google.write_google(checkpoint, directory)
    elif format == "hf":
        plain = dict(checkpoint.weights)
        for name in [k for k in plain if k.startswith("head.")]:
            del plain[name]
        hf.write_hf(Checkpoint(config=checkpoint.config, weights=plain, source=checkpoint.source,
                               format="hf", vocab_file=checkpoint.vocab_file), directory)
    else:
        native.write_native(checkpoint, directory, model_info, metadata)


def load_model(path: str, dtype: Any = None) -> Any:
    """Rebuilds the exact model `save_pretrained` wrote: its class, head arguments and weights.

    Every variable of the model must be in the file and every weight in the file must be used.
    `dtype`: a Keras dtype policy to build the model with instead of the saved one (None).
    """
    from tfbert.checkpoints import keras_model

    checkpoint = native.read_native(path)
    checkpoint.check(strict=True)
    return keras_model.rebuild(checkpoint, dtype=dtype)


def read_metadata(path: str) -> dict[str, Any]:
    """tfbert.json of a directory written by `save_pretrained` (model class, head config, and
    the caller's metadata such as task, labels, max_seq_length)."""
    return native.read_metadata(path)
