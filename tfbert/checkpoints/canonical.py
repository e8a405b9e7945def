"""The canonical checkpoint every reader produces: a BertConfig plus numpy arrays under HF names.

`Checkpoint.check()` is the one place that compares weights with the config, so every format
fails the same way: shape mismatches, missing variables and unused variables are listed by name.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import numpy as np

from tfbert.checkpoints import names
from tfbert.config import BertConfig
from tfbert.errors import UserError

logger = logging.getLogger(__name__)

_MAX_LISTED = 25


class CheckpointError(UserError):
    """A checkpoint that cannot be loaded as asked; the message names the file and variables."""


def read_config_object(config_file: str) -> dict[str, Any]:
    """A checkpoint's JSON config file (config.json, bert_config.json) as a dict; a file that is
    not a JSON object is a CheckpointError naming it."""
    with open(config_file, encoding="utf-8") as f:
        try:
            values = json.load(f)
        except json.JSONDecodeError as e:
            raise CheckpointError(f"{config_file}: not valid JSON ({e})") from None
    if not isinstance(values, dict):
        raise CheckpointError(f"{config_file}: expected a JSON object")
    return values


def format_names(items: list[str]) -> str:
    """One name per line, the first 25 of them, then how many more."""
    shown = "\n  ".join(items[:_MAX_LISTED])
    more = f"\n  ... and {len(items) - _MAX_LISTED} more" if len(items) > _MAX_LISTED else ""
    return f"\n  {shown}{more}"


@dataclasses.dataclass
class Checkpoint:
    """A BERT checkpoint in canonical form.

    Args:
        config: BertConfig. The model shape and tokenizer settings.
        weights: dict[str, np.ndarray]. Canonical (HF, no `bert.` prefix) name -> array in HF
            layout; may include the pretraining heads (`cls.*`) and tfbert task heads (`head.*`).
        source: str. Where it came from (a path or a description), for error messages.
        format: str. "hf", "google", "keras_hub" or "tfbert".
        vocab_file: str or None. The vocab.txt that goes with the weights, if any.
        metadata: dict or None. tfbert.json of a tfbert directory; for a fine-tuned HF or
            Google checkpoint, the same entries read from its task head (`heads.py`:
            model_class, model_config, task, labels).
        foreign: dict[str, np.ndarray]. Weights of a non-BERT head in the source (e.g. a HF
            `classifier.weight` when config.json names no class tfbert knows): kept aside,
            never loaded, listed in a log line.
        optional: tuple of str. Encoder names the source's model has no use for (the pooler
            of HF's token-classification and QA classes): their absence is not an error.
    """

    config: BertConfig
    weights: dict[str, np.ndarray]
    source: str
    format: str
    vocab_file: str | None = None
    metadata: dict[str, Any] | None = None
    foreign: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    optional: tuple[str, ...] = ()

    @property
    def has_mlm(self) -> bool:
        return all(e.canonical in self.weights for e in names.mlm_entries())

    @property
    def has_nsp(self) -> bool:
        return all(e.canonical in self.weights for e in names.nsp_entries())

    def head_weights(self) -> dict[str, np.ndarray]:
        """tfbert task-head weights (`head.*`), keyed without the prefix."""
        n = len(names.HEAD_PREFIX)
        return {k[n:]: v for k, v in self.weights.items() if k.startswith(names.HEAD_PREFIX)}

    def check(self, strict: bool = True) -> None:
        """Checks every weight against the config.

        Shape mismatches always raise. Missing encoder variables, a partly present pretraining
        head and variables that belong nowhere raise too when `strict`, else they are logged
        (missing ones then keep the model's initial values).

        Raises:
            CheckpointError: listing every offending variable with its expected/found shape.
        """
        expected = names.expected_shapes(self.config)
        bad = [f"{k}: config expects {expected[k]}, checkpoint has {tuple(v.shape)}"
               for k, v in self.weights.items() if k in expected and tuple(v.shape) != expected[k]]
        if bad:
            raise CheckpointError(
                f"{self.source}: {len(bad)} weight(s) do not match the config "
                f"(hidden_size={self.config.hidden_size}, "
                f"num_hidden_layers={self.config.num_hidden_layers}, "
                f"intermediate_size={self.config.intermediate_size}, "
                f"vocab_size={self.config.vocab_size}):{format_names(bad)}")

        problems = []
        missing = [e.canonical for e in names.encoder_entries(self.config.num_hidden_layers)
                   if e.canonical not in self.weights and e.canonical not in self.optional]
        for entries in (names.mlm_entries(), names.nsp_entries()):
            present = [e.canonical for e in entries if e.canonical in self.weights]
            if present and len(present) < len(entries):
                missing += [e.canonical for e in entries if e.canonical not in self.weights]
        if missing:
            problems.append(f"{len(missing)} variable(s) missing:{format_names(missing)}")
        unused = sorted(k for k in self.weights
                        if k not in expected and not k.startswith(names.HEAD_PREFIX))
        if unused:
            problems.append(f"{len(unused)} variable(s) that belong to no BERT weight "
                            f"(unused):{format_names(unused)}")
        if problems:
            message = f"{self.source} ({self.format} checkpoint): " + "; ".join(problems)
            if strict:
                raise CheckpointError(message + "\nPass strict=False to load anyway "
                                      "(missing variables keep their initial values).")
            logger.warning(message)
        if self.foreign:
            logger.info("%s: ignoring weights of a non-BERT head: %s", self.source,
                        ", ".join(sorted(self.foreign)))


def as_float32(name: str, value: Any, source: str) -> np.ndarray:
    """A weight as a float32 numpy array; a non-float value is an error naming the variable."""
    array = np.asarray(value)
    if not (np.issubdtype(array.dtype, np.floating) or array.dtype.name == "bfloat16"):
        raise CheckpointError(f"{source}: variable {name} has dtype {array.dtype}, "
                              "expected a floating point weight")
    return array.astype(np.float32, copy=False)
