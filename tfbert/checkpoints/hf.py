"""Hugging Face BERT directories: config.json + model.safetensors (or pytorch_model.bin).

Reads what transformers' `BertModel`, `BertForPreTraining`, `BertForMaskedLM`, ... save: keys with
or without the `bert.` prefix, old LayerNorm `gamma`/`beta` names, sharded safetensors (an
`*.index.json`), and pytorch_model.bin when torch is installed. Writes model.safetensors under the
`bert.` prefix (BertForPreTraining's layout) so transformers reads it back. A sentence-transformers
directory (modules.json) is read through its Transformer module's BERT, with its pooling,
projection and normalisation as a BertSentenceEncoder head (`sentence_transformers.py`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save

from tfbert.checkpoints import heads, names, sentence_transformers
from tfbert.checkpoints.canonical import (
    Checkpoint,
    CheckpointError,
    as_float32,
    read_config_object,
)
from tfbert.config import BertConfig
from tfbert.fileio import atomic_write

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
_IGNORED = ("embeddings.position_ids",)  # a torch buffer, not a weight
_DECODER_WEIGHT = "cls.predictions.decoder.weight"  # tied to the word embeddings in BERT
_DECODER_BIAS = "cls.predictions.decoder.bias"  # tied to cls.predictions.bias in newer HF
_MAX_HEADER_SIZE = 100_000_000  # safetensors' own limit on the JSON header


def is_hf_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, CONFIG_FILE)) and any(
        os.path.isfile(os.path.join(path, f)) for f in WEIGHT_FILES)


def weight_file(path: str) -> str:
    """The weight file of a HF directory: safetensors first, then pytorch_model.bin."""
    for name in WEIGHT_FILES:
        candidate = os.path.join(path, name)
        if os.path.isfile(candidate):
            return candidate
    raise CheckpointError(
        f"{path}: Hugging Face directory has {CONFIG_FILE} but no weights; expected one of "
        f"{', '.join(WEIGHT_FILES)}. Files present: {sorted(os.listdir(path))}")


def read_state_dict(path: str) -> dict[str, np.ndarray]:
    """All tensors of a safetensors / pytorch_model.bin file (or a sharded *.index.json)."""
    if path.endswith(".index.json"):
        with open(path, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        out: dict[str, np.ndarray] = {}
        for shard in shards:
            out.update(read_state_dict(os.path.join(os.path.dirname(path), shard)))
        return out
    if path.endswith(".safetensors"):
        return read_safetensors(path)
    try:  # torch is optional: only pytorch_model.bin files need it
        import torch
    except ImportError:
        raise CheckpointError(
            f"{path}: reading pytorch_model.bin needs torch, which is not installed "
            "(pip install torch), or convert the directory to model.safetensors") from None
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {k: v.detach().float().numpy() if v.is_floating_point() else v.numpy()
            for k, v in state.items()}


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    """All tensors of a safetensors file; a damaged or truncated one is a CheckpointError naming
    the file and what is wrong (`safetensors_problem`)."""
    try:
        return load_file(path)
    except SafetensorError as e:
        raise CheckpointError(f"{path} is damaged or truncated: "
                              f"{safetensors_problem(path, str(e))}") from None


def safetensors_problem(path: str, reason: str) -> str:
    """What is wrong with a safetensors file that does not load: its size against the size its
    header gives (8 bytes of header length, the JSON header, then the tensors' bytes), else
    `reason` (safetensors' own words)."""
    reason = reason.removeprefix("Error while deserializing header: ")
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            return f"{size} bytes, shorter than the 8 bytes that give its header's length"
        header_size = int.from_bytes(prefix, "little")
        if header_size > _MAX_HEADER_SIZE:
            return f"{reason} (not a safetensors file?)"
        if size < 8 + header_size:
            return f"{size} bytes, its header alone takes {8 + header_size}"
        try:
            header = json.loads(f.read(header_size))
            end = max((int(v["data_offsets"][1]) for k, v in header.items()
                       if k != "__metadata__"), default=0)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return reason
    expected = 8 + header_size + end
    return f"{size} bytes, its header expects {expected}" if size < expected else reason


def read_lower_case(path: str, values: dict[str, Any]) -> bool | None:
    """do_lower_case from config.json, else from tokenizer_config.json, else None."""
    if "do_lower_case" in values:
        return bool(values["do_lower_case"])
    tokenizer_config = os.path.join(path, "tokenizer_config.json")
    if os.path.isfile(tokenizer_config):
        with open(tokenizer_config, encoding="utf-8") as f:
            try:
                tok = json.load(f)
            except json.JSONDecodeError as e:
                raise CheckpointError(f"{tokenizer_config}: not valid JSON ({e})") from None
        if isinstance(tok, dict) and "do_lower_case" in tok:
            return bool(tok["do_lower_case"])
    return None


def read_values(path: str) -> dict[str, Any]:
    """config.json of a HF directory as a dict."""
    return read_config_object(os.path.join(path, CONFIG_FILE))


def read_config(path: str) -> BertConfig:
    """config.json (+ tokenizer_config.json's do_lower_case) as a BertConfig."""
    config_file = os.path.join(path, CONFIG_FILE)
    values = read_values(path)
    if isinstance(values, dict) and "model_type" not in values:
        # pytorch-pretrained-bert's config.json has no model_type, and its "gelu" is the exact
        # erf form like transformers'; BertConfig.from_json_file would read it as Google's.
        try:
            config = BertConfig.from_hf_dict(values)
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"{config_file}: {e}") from None
    else:
        config = BertConfig.from_json_file(config_file)
    lower_case = read_lower_case(path, values)
    if lower_case is not None:
        config.lower_case = lower_case
    else:
        logger.warning("%s: neither config.json nor tokenizer_config.json says do_lower_case; "
                       "assuming lower_case=%s", path, config.lower_case)
    return config


def to_canonical(state: dict[str, np.ndarray], source: str) -> tuple[dict, dict]:
    """HF state dict -> (canonical weights, foreign head weights).

    With a `bert.` prefix present, keys outside `bert.`/`cls.` (and tfbert's own `head.`) are
    another model's task head (e.g. BertForSequenceClassification's `classifier.*`) and go to the
    foreign dict.
    """
    prefixed = any(k.startswith("bert.") for k in state)
    weights: dict[str, np.ndarray] = {}
    foreign: dict[str, np.ndarray] = {}
    for key, value in state.items():
        name = names.hf_to_canonical(key)
        if name in _IGNORED or name.endswith(".position_ids"):
            continue
        if prefixed and not key.startswith(("bert.", "cls.", names.HEAD_PREFIX)):
            foreign[key] = np.asarray(value)
            continue
        if name in weights:
            raise CheckpointError(f"{source}: two keys map to {name} (with and without "
                                  "the `bert.` prefix)")
        weights[name] = as_float32(key, value, source)
    decoder = weights.pop(_DECODER_WEIGHT, None)
    words = weights.get("embeddings.word_embeddings.weight")
    if decoder is not None and words is not None and not np.array_equal(decoder, words):
        logger.warning("%s: %s differs from the word embeddings (max abs diff %.3g); BERT ties "
                       "them, so the word embeddings are used", source, _DECODER_WEIGHT,
                       float(np.max(np.abs(decoder - words))) if decoder.shape == words.shape
                       else float("nan"))
    bias = weights.pop(_DECODER_BIAS, None)
    if bias is not None:
        if "cls.predictions.bias" in weights and not np.array_equal(
                bias, weights["cls.predictions.bias"]):
            raise CheckpointError(f"{source}: {_DECODER_BIAS} and cls.predictions.bias differ; "
                                  "BERT ties them")
        weights["cls.predictions.bias"] = bias
    return weights, foreign


def read_hf(path: str, config: BertConfig | None = None) -> Checkpoint:
    """A Hugging Face BERT directory as a canonical Checkpoint (not yet checked).

    Args:
        path: str. Directory with config.json and model.safetensors / pytorch_model.bin, or a
            sentence-transformers directory (modules.json).
        config: BertConfig or None. Overrides config.json when given.
    """
    modules = sentence_transformers.read_modules(path) if sentence_transformers.is_st_dir(
        path) else None
    if modules is not None:
        path = modules.transformer_dir
    if not os.path.isfile(os.path.join(path, CONFIG_FILE)):
        raise CheckpointError(f"{path}: missing {CONFIG_FILE} (a Hugging Face BERT directory "
                              f"needs it). Files present: {sorted(os.listdir(path))}")
    config = config or read_config(path)
    source = weight_file(path)
    state = read_state_dict(source)
    values = read_values(path)
    # A BertFor... head named by config.json's architectures; tfbert's own head.* keys
    # (a tfbert directory) are read as they are.
    metadata = None
    if modules is None and not any(k.startswith(names.HEAD_PREFIX) for k in state):
        metadata = heads.from_hf(state, values, os.path.join(path, CONFIG_FILE))
    weights, foreign = to_canonical(state, source)
    if modules is not None:  # the pooling, projection and normalisation after the BERT
        metadata = modules.metadata(config)
        config = dataclasses.replace(config, lower_case=metadata["lower_case"])
        if modules.dense_dir is not None:
            dense_file = modules.dense_file()
            weights.update(modules.head_weights(read_state_dict(dense_file), dense_file))
    head = heads.by_class((metadata or {}).get("model_class"))
    vocab = os.path.join(path, "vocab.txt")
    return Checkpoint(config=config, weights=weights, source=source, format="hf",
                      vocab_file=vocab if os.path.isfile(vocab) else None, foreign=foreign,
                      metadata=metadata, optional=heads.POOLER if head and head.sequence else ())


def to_hf_state(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Canonical weights -> the state dict tfbert writes (encoder under `bert.`)."""
    return {names.canonical_to_hf(k): np.ascontiguousarray(v, dtype=np.float32)
            for k, v in weights.items()}


def write_hf(checkpoint: Checkpoint, directory: str,
             config_entries: dict[str, Any] | None = None) -> None:
    """Writes config.json (HF flavour, with do_lower_case), model.safetensors and vocab.txt.

    Args:
        checkpoint: Checkpoint. What to write (every weight, under `names.canonical_to_hf`).
        directory: str. Created if missing; existing files of the same names are replaced.
        config_entries: dict or None. Set in config.json over the config's own fields (a task
            head's architectures, id2label, label2id, num_labels, ...).
    """
    os.makedirs(directory, exist_ok=True)
    config_file = os.path.join(directory, CONFIG_FILE)
    checkpoint.config.to_json_file(config_file, "hf")
    if config_entries:
        with open(config_file, encoding="utf-8") as f:
            values = {**json.load(f), **config_entries}
        with open(config_file, "w", encoding="utf-8") as f:
            json.dump(values, f, indent=2, sort_keys=True)
            f.write("\n")
    # (safetensors' save_file writes in place with mode 0600: atomically, with ordinary modes)
    with atomic_write(os.path.join(directory, "model.safetensors"), "wb") as f:
        f.write(save(to_hf_state(checkpoint.weights), metadata={"format": "pt"}))
    if checkpoint.vocab_file:
        target = os.path.join(directory, "vocab.txt")
        if os.path.abspath(checkpoint.vocab_file) != os.path.abspath(target):
            with open(checkpoint.vocab_file, "rb") as src, atomic_write(target, "wb") as dst:
                dst.write(src.read())
        # transformers' tokenizers read the casing from here, not from config.json.
        with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"do_lower_case": checkpoint.config.lower_case,
                       "tokenizer_class": "BertTokenizer"}, f, indent=2)
            f.write("\n")
