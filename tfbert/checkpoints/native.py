"""tfbert's own directory format: a Hugging Face BERT directory plus tfbert.json.

    config.json        HF-flavoured BERT config, with do_lower_case
    model.safetensors  encoder under `bert.*` HF names, pretraining heads under `cls.*`, other
                       task-head weights under `head.<layer>.<variable>`
    vocab.txt          when a vocab was given
    tokenizer_config.json  do_lower_case for transformers' tokenizers
    tfbert.json        {"format_version": 1, "model_class": ..., "model_config": <the model's
                       get_config() without the encoder>, "encoder_config": <the encoder's
                       get_config() without its BertConfig>, plus caller metadata (task, labels,
                       max_seq_length, ...)}

transformers' `BertModel.from_pretrained(dir)` reads the encoder from it unchanged.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tfbert.checkpoints import hf
from tfbert.checkpoints.canonical import Checkpoint, CheckpointError
from tfbert.config import BertConfig
from tfbert.fileio import json_text

METADATA_FILE = "tfbert.json"
FORMAT_VERSION = 1
_RESERVED = ("format_version", "model_class", "model_config", "encoder_config")


def read_metadata(path: str) -> dict[str, Any]:
    """tfbert.json of a tfbert directory, checked for its format version."""
    metadata_file = os.path.join(path, METADATA_FILE)
    if not os.path.isfile(metadata_file):
        raise CheckpointError(
            f"{path}: missing {METADATA_FILE}; only directories written by "
            "tfbert.save_pretrained have it (use tfbert.from_pretrained for other checkpoints)")
    try:
        with open(metadata_file, encoding="utf-8") as f:
            metadata = json.load(f)
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{metadata_file}: not valid JSON ({e})") from None
    version = metadata.get("format_version") if isinstance(metadata, dict) else None
    if version != FORMAT_VERSION:
        raise CheckpointError(f"{metadata_file}: format_version {version!r} is not supported "
                              f"(this tfbert reads version {FORMAT_VERSION})")
    missing = [k for k in ("model_class", "model_config") if k not in metadata]
    if missing:
        raise CheckpointError(f"{metadata_file}: lacks {missing}")
    return metadata


def read_native(path: str, config: BertConfig | None = None) -> Checkpoint:
    """A tfbert directory as a canonical Checkpoint, with tfbert.json as its metadata.

    Args:
        path: str. Directory written by `save_pretrained`.
        config: BertConfig or None. Overrides config.json when given.
    """
    metadata = read_metadata(path)
    checkpoint = hf.read_hf(path, config)
    checkpoint.format = "tfbert"
    checkpoint.metadata = metadata
    return checkpoint


def write_native(checkpoint: Checkpoint, directory: str, model_info: dict[str, Any],
                 metadata: dict[str, Any] | None = None) -> None:
    """Writes the HF files and tfbert.json.

    Args:
        checkpoint: Checkpoint. Weights (encoder, `cls.*`, `head.*`), config and vocab.
        directory: str. Created if missing.
        model_info: dict. {"model_class", "model_config"} (and "encoder_config") of the Keras
            model, from `tfbert.models.weights.describe`.
        metadata: dict or None. Caller data; must be JSON-serialisable and must not use the
            reserved keys format_version / model_class / model_config.
    """
    metadata = dict(metadata or {})
    clash = sorted(set(metadata) & set(_RESERVED))
    if clash:
        raise ValueError(f"metadata keys {clash} are reserved for tfbert.json itself")
    record = {"format_version": FORMAT_VERSION, **model_info, **metadata}
    try:
        text = json_text(record, indent=2, sort_keys=True)
    except TypeError as e:
        raise ValueError(f"metadata is not JSON-serialisable: {e}") from None
    hf.write_hf(checkpoint, directory)
    with open(os.path.join(directory, METADATA_FILE), "w", encoding="utf-8") as f:
        f.write(text + "\n")
