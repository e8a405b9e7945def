"""The pretraining model: a BertPretrainer built fresh or from a checkpoint, its position table
(BERT's random or a sinusoid start), and the position count known before any data work.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tfbert.config import BertConfig
from tfbert.models.pretrainer import BertPretrainer
from tfbert.training.model_source import (
    build_model,
    checkpoint_config,
)
from tfbert.training.pretrain_config import DEFAULT_MODEL, PretrainConfig


def build_pretrainer(bert_config: BertConfig | None, init_checkpoint: str | None
                     ) -> BertPretrainer:
    """A BertPretrainer: fresh from `bert_config`, or with `init_checkpoint`'s weights (its
    MLM/NSP heads too when it has them; `bert_config`, if given, overrides its config file)."""
    return build_model(BertPretrainer, bert_config, init_checkpoint)


def model_positions(config: PretrainConfig) -> tuple[int | None, str]:
    """The model's max_position_embeddings, known before any data work (None: only once the
    init_checkpoint is loaded), and where it comes from."""
    if config.bert_config_file:
        return BertConfig.from_json_file(config.bert_config_file).max_position_embeddings, \
            config.bert_config_file
    if config.preset:
        return BertConfig.from_preset(config.preset).max_position_embeddings, \
            f"preset {config.preset}"
    if config.init_checkpoint:
        peek = checkpoint_config(config.init_checkpoint)
        return (peek.max_position_embeddings if peek else None), config.init_checkpoint
    return DEFAULT_MODEL["max_position_embeddings"], "the built-in default model"


def sinusoidal_positions(rows: int, width: int, stddev: float) -> Any:
    """Vaswani et al.'s sinusoid table [rows, width], scaled to standard deviation `stddev`.

    A starting point for BERT's learned position table, not a change of architecture: the
    table stays a trainable variable and checkpoints are unchanged. In a sinusoid table the
    row of position t + k is a fixed rotation of row t's frequency pairs, so "attend to the
    previous token" is one linear map of the query/key projections for every position at once;
    from random rows it has to be learned pair by pair, which is what keeps a short masked-LM
    run on its bag-of-characters plateau (README, "Fine-tuning quality").
    """
    position = np.arange(rows, dtype="float64")[:, None]
    rate = 10000.0 ** (-np.arange(0, width, 2, dtype="float64") / width)  # [ceil(W / 2)]
    table = np.zeros((rows, width))
    table[:, 0::2] = np.sin(position * rate)
    table[:, 1::2] = np.cos(position * rate[:width // 2])
    return (table * stddev / table.std()).astype("float32")


def init_position_embeddings(encoder: Any, scheme: str) -> None:
    """Sets a fresh encoder's position table by `scheme` ("random": keep it, "sinusoidal")."""
    if scheme == "random":
        return
    config = encoder.config
    table = encoder.embeddings.position_embeddings.embeddings
    table.assign(sinusoidal_positions(config.max_position_embeddings, config.hidden_size,
                                      config.initializer_range))
