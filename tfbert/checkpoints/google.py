"""Google TF1 BERT checkpoints: bert_config.json + bert_model.ckpt.{index,data-*} + vocab.txt.

Read with `tf.train.load_checkpoint` (no TF1 graph is built). Optimizer slots (`.../adam_m`,
`.../adam_v`) and `global_step` of a training checkpoint are skipped silently; the head of a
run_classifier.py or run_squad.py checkpoint (`output_weights`, `cls/squad/output_weights`) loads
as tfbert's task head (`heads.py`). Written with `tf.raw_ops.SaveV2` under Google's variable
names, so Google's run_classifier.py / run_squad.py can restore it. A config Google's code would
run differently is refused (`check_expressible`).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import logging
import os
import re
from typing import Any

import numpy as np

from tfbert.checkpoints import heads, names
from tfbert.checkpoints.canonical import (
    Checkpoint,
    CheckpointError,
    as_float32,
    read_config_object,
)
from tfbert.config import BertConfig

logger = logging.getLogger(__name__)

CONFIG_FILE = "bert_config.json"
CHECKPOINT_NAME = "bert_model.ckpt"
# Google's own rule (tokenization.validate_case_matches_checkpoint): these released models
# were trained on lower-cased text, the "cased" ones were not.
_LOWER_MODELS = ("uncased_L-", "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12")
_CASED_MODELS = ("cased_L-", "multi_cased_L-12_H-768_A-12")


def is_google_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, CONFIG_FILE)) or bool(
        glob.glob(os.path.join(path, "*.ckpt*.index")))


def checkpoint_prefix(path: str) -> str:
    """The checkpoint prefix in a directory (or `path` itself when it is a prefix)."""
    if os.path.isfile(path + ".index"):
        return path
    if os.path.isfile(os.path.join(path, CHECKPOINT_NAME + ".index")):
        return os.path.join(path, CHECKPOINT_NAME)
    import tensorflow as tf  # reading a TF1 checkpoint: the other formats load without TF

    latest = tf.train.latest_checkpoint(path) if os.path.isdir(path) else None
    if latest:
        return latest
    prefixes = sorted(p[: -len(".index")] for p in glob.glob(os.path.join(path, "*.index")))
    if len(prefixes) == 1:
        return prefixes[0]
    if not prefixes:
        raise CheckpointError(
            f"{path}: no TF checkpoint found (expected {CHECKPOINT_NAME}.index and "
            f"{CHECKPOINT_NAME}.data-*). Files present: {sorted(os.listdir(path))}")
    raise CheckpointError(f"{path}: several checkpoints and no `checkpoint` file saying which "
                          f"to use: {[os.path.basename(p) for p in prefixes]}")


def lower_case_by_name(path: str) -> bool | None:
    """The casing Google's name rule gives a released model's folder, else None."""
    name = os.path.basename(os.path.normpath(path))
    if any(m in name for m in _LOWER_MODELS) and not name.startswith(_CASED_MODELS):
        return True
    if any(name.startswith(m) for m in _CASED_MODELS):
        return False
    return None


def _guess_lower_case(path: str, vocab_file: str | None) -> bool:
    """Google's name rule, else the vocab: a cased vocab holds capitalised words."""
    by_name = lower_case_by_name(path)
    if by_name is not None:
        return by_name
    if vocab_file:
        with open(vocab_file, encoding="utf-8") as f:
            cased = sum(1 for line in f if re.fullmatch(r"[A-Z][a-z]+", line.strip()))
        lower = cased < 10
        logger.info("%s: no do_lower_case in %s; vocab has %d capitalised words, so "
                    "lower_case=%s", path, CONFIG_FILE, cased, lower)
        return lower
    logger.warning("%s: cannot tell whether the model is cased; assuming lower_case=True", path)
    return True


def read_values(path: str) -> dict[str, Any]:
    """bert_config.json of a directory as a dict."""
    return read_config_object(os.path.join(path, CONFIG_FILE))


def read_config(path: str, vocab_file: str | None = None) -> BertConfig:
    """bert_config.json as a BertConfig (its "gelu" is the tanh approximation).

    A `tfbert_config` entry (written by `write_google` for configs Google's fields cannot
    express, e.g. exact-erf GELU) wins; `do_lower_case`, when present, sets lower_case.
    """
    config_file = os.path.join(path, CONFIG_FILE)
    if not os.path.isfile(config_file):
        raise CheckpointError(f"{path}: missing {CONFIG_FILE} (a Google BERT checkpoint "
                              f"directory needs it). Files present: {sorted(os.listdir(path))}")
    values = read_values(path)
    if "tfbert_config" in values:
        try:
            return BertConfig.from_dict(values["tfbert_config"])
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"{config_file}: bad tfbert_config entry: {e}") from None
    config = BertConfig.from_json_file(config_file)
    if "do_lower_case" in values:
        config.lower_case = bool(values["do_lower_case"])
    elif "model_type" not in values:
        config.lower_case = _guess_lower_case(path, vocab_file)
    return config


def read_google(path: str, config: BertConfig | None = None) -> Checkpoint:
    """A Google TF1 checkpoint (directory or prefix) as a canonical Checkpoint (not yet checked).

    Args:
        path: str. Directory with bert_config.json and bert_model.ckpt.*, or the prefix itself.
        config: BertConfig or None. Overrides bert_config.json when given.
    """
    directory = path if os.path.isdir(path) else os.path.dirname(path)
    vocab = os.path.join(directory, "vocab.txt")
    vocab = vocab if os.path.isfile(vocab) else None
    config = config or read_config(directory, vocab)
    prefix = checkpoint_prefix(path)
    by_google = {e.google: e for e in names.all_entries(config.num_hidden_layers)}
    reader = open_reader(prefix)
    weights: dict[str, np.ndarray] = {}
    for name in sorted(reader.get_variable_to_shape_map()):
        if names.is_google_non_model(name):
            continue
        entry = by_google.get(name)
        if entry is None:  # kept under its own name, so check() lists it as unused
            weights[name] = np.asarray(_tensor(reader, name, prefix))
            continue
        value = as_float32(name, _tensor(reader, name, prefix), prefix)
        weights[entry.canonical] = value.T if entry.transpose else value
    metadata = heads.from_google(weights, prefix)
    return Checkpoint(config=config, weights=weights, source=prefix, format="google",
                      vocab_file=vocab, metadata=metadata)


def open_reader(prefix: str) -> Any:
    """A `tf.train.load_checkpoint` reader of a checkpoint prefix whose files are all there.

    Raises:
        CheckpointError: a damaged or truncated .index, a missing data shard, or data shards
            shorter than the tensors the index lists, naming the file and both sizes.
    """
    import tensorflow as tf  # reading a TF1 checkpoint: the other formats load without TF

    index = prefix + ".index"
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as e:
        raise CheckpointError(f"{index} is damaged or truncated ({os.path.getsize(index)} "
                              f"bytes): {_reason(e)}; cannot read the TF checkpoint") from None
    shards = data_shards(prefix)
    counts = {int(p.rsplit("-of-", 1)[1]) for p in shards}
    if not shards:
        raise CheckpointError(f"{prefix}.data-00000-of-00001: no such file (the tensors of "
                              f"{os.path.basename(index)}); cannot read the TF checkpoint")
    if len(counts) != 1 or len(shards) != counts.pop():
        raise CheckpointError(f"{prefix}: data shards missing or mixed (found "
                              f"{[os.path.basename(p) for p in shards]}); cannot read the TF "
                              "checkpoint")
    size = sum(os.path.getsize(p) for p in shards)
    least, exact = tensor_bytes(reader)
    if size < least:
        raise CheckpointError(f"{_shards_name(prefix)}: truncated ({size} bytes, the index expects "
                              f"{'' if exact else 'at least '}{least})")
    return reader


def data_shards(prefix: str) -> list[str]:
    """The data shards of a checkpoint prefix: PREFIX.data-NNNNN-of-MMMMM files."""
    return sorted(p for p in glob.glob(glob.escape(prefix) + ".data-*-of-*")
                  if re.search(r"\.data-\d+-of-\d+$", p))


def _shards_name(prefix: str) -> str:
    shards = data_shards(prefix)
    return shards[0] if len(shards) == 1 else f"{prefix}.data-* ({len(shards)} files)"


def tensor_bytes(reader: Any) -> tuple[int, bool]:
    """(bytes the fixed-size tensors of a checkpoint take in its data shards, whether that is
    every tensor): a lower bound on the shards' size, exact when no tensor is a string."""
    import tensorflow as tf  # reading a TF1 checkpoint: the other formats load without TF

    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    total, exact = 0, True
    for name, dtype in dtypes.items():
        if dtype in (tf.string, tf.variant, tf.resource) or not dtype.is_numpy_compatible:
            exact = False
            continue
        total += int(np.prod(shapes[name], dtype=np.int64)) * dtype.size
    return total, exact


def _tensor(reader: Any, name: str, prefix: str) -> Any:
    """reader.get_tensor(name); a damaged data shard is a CheckpointError naming the tensor."""
    import tensorflow as tf  # reading a TF1 checkpoint: the other formats load without TF

    try:
        return reader.get_tensor(name)
    except (tf.errors.OpError, IndexError) as e:  # IndexError: "Read less bytes than requested"
        raise CheckpointError(f"{_shards_name(prefix)}: damaged at tensor {name} "
                              f"({_reason(e)}); cannot read the TF checkpoint") from None


def _reason(error: Exception) -> str:
    return getattr(error, "message", None) or str(error)


def check_expressible(config: BertConfig, approximate_activation: bool = False,
                      source: str = "") -> None:
    """Refuses a config that Google's modeling.py would run differently from tfbert.

    Its "gelu" is the tanh form and its LayerNorm epsilon is fixed at 1e-12. Exact-erf GELU
    is written as "gelu" only with `approximate_activation` (the caller then states the
    change, `tfbert.models.pretrained.save_pretrained` measures it).

    Raises:
        CheckpointError: naming the field and the option, if any, that allows it.
    """
    where = f"{source}: " if source else ""
    if config.layer_norm_eps != 1e-12:
        raise CheckpointError(
            f"{where}layer_norm_eps={config.layer_norm_eps:g} cannot be expressed in Google's "
            "bert_config.json (its modeling.py fixes LayerNorm epsilon at 1e-12); save with "
            "format='hf' or 'tfbert'")
    if config.hidden_act == "gelu" and not approximate_activation:
        raise CheckpointError(
            f"{where}hidden_act='gelu' (exact erf) cannot be expressed in Google's "
            "bert_config.json: its \"gelu\" runs the tanh approximation, which moves the "
            "outputs. Pass approximate_activation=True to write it as the tanh form (the save "
            "measures and reports the largest output change), or save with format='hf'")


def write_google(checkpoint: Checkpoint, directory: str,
                 model_info: dict[str, Any] | None = None, approximate_activation: bool = False,
                 approximation: dict[str, Any] | None = None) -> str:
    """Writes bert_config.json, bert_model.ckpt.{index,data-00000-of-00001} and vocab.txt.

    The encoder, pretraining heads and a task head (run_classifier's `output_weights` /
    `output_bias`, run_squad's `cls/squad/...`) are written under Google's names. With
    `approximate_activation`, exact-erf GELU is written as Google's "gelu" (tanh), and the full
    tfbert config rides along as `tfbert_config` (Google's code ignores it) so tfbert reads the
    model back exactly; `approximation` (the measured change) is recorded beside it.

    Args:
        checkpoint: Checkpoint. What to write.
        directory: str. Created if missing.
        model_info: dict or None. {"model_class", "model_config"} of the model the `head.*`
            weights belong to (`tfbert.models.weights.describe`).
        approximate_activation: bool. Allow exact GELU to become Google's tanh form.
        approximation: dict or None. Written to bert_config.json as `tfbert_approximation`.

    Returns:
        The checkpoint prefix written.

    Raises:
        CheckpointError: before anything is written, for a config (`check_expressible`) or a
            head (`heads.to_google`) Google's code cannot run as tfbert does.
    """
    import tensorflow as tf  # reading a TF1 checkpoint: the other formats load without TF

    config = checkpoint.config
    check_expressible(config, approximate_activation, checkpoint.source)
    head = heads.to_google(checkpoint.weights, model_info, checkpoint.source)
    os.makedirs(directory, exist_ok=True)
    _write_config(config, os.path.join(directory, CONFIG_FILE), approximation)
    tensor_names, tensors = list(head), list(head.values())
    for entry in names.all_entries(config.num_hidden_layers):
        if entry.canonical in checkpoint.weights:
            value = np.asarray(checkpoint.weights[entry.canonical], dtype=np.float32)
            tensor_names.append(entry.google)
            tensors.append(np.ascontiguousarray(value.T if entry.transpose else value))
    skipped = sorted(k for k in checkpoint.weights if not (
        names.is_encoder(k) or names.is_pretraining_head(k) or k.startswith(names.HEAD_PREFIX)))
    if skipped:
        raise CheckpointError(f"{checkpoint.source}: weights with no Google name: "
                              f"{', '.join(skipped)}")
    prefix = os.path.join(directory, CHECKPOINT_NAME)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=tensor_names,
                      shape_and_slices=[""] * len(tensors), tensors=tensors)
    if checkpoint.vocab_file:
        target = os.path.join(directory, "vocab.txt")
        if os.path.abspath(checkpoint.vocab_file) != os.path.abspath(target):
            with open(checkpoint.vocab_file, "rb") as src, open(target, "wb") as dst:
                dst.write(src.read())
    return prefix


def _write_config(config: BertConfig, path: str,
                  approximation: dict[str, Any] | None) -> None:
    # Google's "gelu" is the tanh form: the nearest thing it can run for exact GELU
    # (check_expressible has let it through only with approximate_activation).
    nearest = config if config.hidden_act != "gelu" else dataclasses.replace(
        config, hidden_act="gelu_tanh")
    nearest.to_json_file(path, "google")
    with open(path, encoding="utf-8") as f:
        values = json.load(f)
    values["do_lower_case"] = config.lower_case
    if nearest is not config:
        values["tfbert_config"] = config.to_dict()
        if approximation:
            values["tfbert_approximation"] = approximation
    with open(path, "w", encoding="utf-8") as f:
        json.dump(values, f, indent=2, sort_keys=True)
        f.write("\n")
