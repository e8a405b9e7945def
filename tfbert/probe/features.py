"""Frozen features of every layer: the embeddings' output (index 0), then each transformer
layer's hidden states, one forward pass per batch, cached as numpy arrays.

Shape legend: B = batch, T = sequence length, H = hidden size, N = attention heads,
L = transformer layers, n = probed examples.

Alignment (Chinese is character-level): each text is tokenized with the model's own tokenizer
and offsets (`BertTokenizer.tokenize_with_offsets`); a character is probed when exactly one
token spans exactly that character, and that token's hidden state is its feature. Characters
inside a longer token (a run of Latin letters or digits, "１９９８") or dropped by the
tokenizer's cleaning are left out and counted (no sentence is skipped for them). A text longer
than max_seq_length - 2 tokens is cut there, and the characters past the cut are left out too.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tfbert.errors import UserError

__all__ = ["Encoded", "encode", "hidden_state_function", "layer_features", "load_encoder",
           "random_init_encoder", "resolve_model", "vocab_path"]

logger = logging.getLogger(__name__)

PAD_MULTIPLE = 16  # batches are padded to a multiple of this: few traced shapes


@dataclasses.dataclass
class Encoded:
    """Texts as token ids (no special tokens, cut to fit) and the character -> token map.

    Attributes:
        ids: per text, its token ids.
        kept: per text, int indices of the characters that have their own token.
        positions: per text, the packed position ([CLS] = 0) of each kept character's token.
        left_out: characters that have no token of their own (or lie past the cut).
    """

    ids: list[list[int]]
    kept: list[np.ndarray]
    positions: list[np.ndarray]
    left_out: int


def resolve_model(model: str) -> str:
    """The checkpoint folder (or Google prefix) that `model` names: a shipped model's name, a
    checkpoint folder or prefix, or a fine-tuning / pretraining run's output_dir (its model/
    folder).

    Raises:
        UserError: no such path or shipped name; no vocab.txt beside the checkpoint.
    """
    from tfbert.checkpoints import resolve_source, shipped
    from tfbert.training.model_source import vocab_beside

    path = os.fspath(resolve_source(model))
    if not os.path.exists(path) and not os.path.isfile(path + ".index"):
        raise UserError(f"--model {model}: no such model (not a checkpoint folder, a Google "
                        f"checkpoint prefix or a shipped model: {', '.join(shipped.names())})")
    run_model = os.path.join(path, "model")
    if os.path.isdir(path) and vocab_beside(path) is None and vocab_beside(run_model):
        path = run_model  # a run's output_dir
    if vocab_beside(path) is None:
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        raise UserError(f"--model {model}: no vocab.txt in {folder or '.'}; the probe tokenizes "
                        "with the model's own vocab")
    return path


def vocab_path(path: str) -> str:
    """vocab.txt of a `resolve_model` path (a folder, or a Google prefix's folder)."""
    from tfbert.training.model_source import vocab_beside

    return vocab_beside(path)


def load_encoder(path: str) -> Any:
    """The BertEncoder of any checkpoint tfbert reads (a task model's encoder).

    Args:
        path: str. A `resolve_model` path.

    Raises:
        UserError: the path holds no checkpoint tfbert reads, or its model has no per-layer
            hidden states.
    """
    from tfbert.models.pretrained import from_pretrained

    try:
        loaded = from_pretrained(path)
    except FileNotFoundError as e:
        raise UserError(f"{path}: no model tfbert reads ({e})") from None
    encoder = getattr(loaded, "encoder", loaded)
    if not all(hasattr(encoder, a) for a in ("forward", "embeddings", "config")):
        raise UserError(f"{path}: its model ({type(loaded).__name__}) gives no per-layer "
                        "hidden states (encoder_outputs); the probe needs a BERT encoder")
    return encoder


def random_init_encoder(config: Any, seed: int = 0) -> Any:
    """A BertEncoder of the same shape from random initial values (`seed` fixes them).

    Args:
        config: BertConfig. The shape.
        seed: int. Keras's global seed before building.
    """
    import keras

    from tfbert.models.encoder import BertEncoder

    keras.utils.set_random_seed(seed)
    return BertEncoder(config)


def hidden_state_function(encoder: Any, attention: bool = False
                          ) -> Callable[[dict[str, np.ndarray]], dict[str, list[np.ndarray]]]:
    """A compiled forward pass on the frozen encoder whose result is `hidden_states` (L + 1
    float32 arrays [B, T, H]: the embeddings' output, then each layer's) and, with
    `attention`, `attention_probs` (L float32 arrays [B, N, T, T]).

    A tf.function over `encoder.forward`, not a Keras model on the encoder's layers: a Keras
    functional graph takes a layer's output structure from its first call, which had no
    attention probabilities.

    Args:
        encoder: BertEncoder. Its weights are used as they are (inference: no dropout).
        attention: bool. Also return every layer's attention probabilities.

    Raises:
        UserError: the encoder's forward pass gives no `encoder_outputs`.
    """
    import tensorflow as tf

    @tf.function(reduce_retracing=True)
    def forward(inputs: dict[str, Any]) -> dict[str, Any]:
        outputs = encoder.forward(inputs, training=False, output_attention_probs=attention)
        if "encoder_outputs" not in outputs:
            raise UserError(f"{type(encoder).__name__} gives no encoder_outputs (per-layer "
                            "hidden states); the probe needs them")
        embedded = encoder.embeddings(inputs["input_ids"], inputs["segment_ids"],
                                      training=False)  # [B, T, H]
        result = {"hidden_states": [tf.cast(h, tf.float32)
                                    for h in (embedded, *outputs["encoder_outputs"])]}
        if attention:
            result["attention_probs"] = [tf.cast(p, tf.float32)
                                         for p in outputs["attention_probs"]]
        return result

    def run(inputs: dict[str, np.ndarray]) -> dict[str, list[np.ndarray]]:
        result = forward({k: tf.constant(v, tf.int32) for k, v in inputs.items()})
        return {k: [t.numpy() for t in v] for k, v in result.items()}

    return run


def encode(tokenizer: Any, texts: Sequence[str], seq_length: int) -> Encoded:
    """Tokenizes `texts` and maps characters to tokens (see the module docstring).

    Args:
        tokenizer: tfbert.BertTokenizer. The model's tokenizer.
        texts: the texts.
        seq_length: int. Packed length, [CLS] and [SEP] included.
    """
    import tensorflow as tf

    if not texts:
        return Encoded([], [], [], 0)
    ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(list(texts)))
    room = seq_length - 2
    out = Encoded([], [], [], 0)
    for text, row, start, end in zip(texts, ids.to_list(), starts.to_list(), ends.to_list(),
                                     strict=True):
        row, start, end = row[:room], start[:room], end[:room]
        cover = np.zeros(len(text), np.int64)
        own = np.full(len(text), -1, np.int64)
        for j, (s, e) in enumerate(zip(start, end, strict=True)):
            cover[s:max(e, s + 1)] += 1
            if e == s + 1:
                own[s] = j
        kept = np.flatnonzero((cover == 1) & (own >= 0))
        out.ids.append(row)
        out.kept.append(kept)
        out.positions.append(own[kept] + 1)
        out.left_out += sum(not ch.isspace() for ch in text) - len(kept)
    return out


def _batches(encoded: Encoded, batch_size: int, cls_id: int, sep_id: int, seq_length: int):
    """(text indices, inputs dict) per batch, texts sorted by length, padded to PAD_MULTIPLE."""
    order = np.argsort([len(r) for r in encoded.ids], kind="stable")
    for i in range(0, len(order), batch_size):
        chosen = order[i:i + batch_size]
        longest = max(len(encoded.ids[k]) for k in chosen) + 2
        width = min(seq_length, -(-longest // PAD_MULTIPLE) * PAD_MULTIPLE)
        ids = np.zeros((len(chosen), width), np.int32)
        mask = np.zeros_like(ids)
        for b, k in enumerate(chosen):
            row = [cls_id, *encoded.ids[k], sep_id]
            ids[b, :len(row)] = row
            mask[b, :len(row)] = 1
        yield chosen, {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}


def layer_features(model: Any, encoded: Encoded, tokens: dict[str, int], seq_length: int,
                   pool: str = "chars", batch_size: int = 32,
                   on_attention: Callable[[list[np.ndarray], np.ndarray], None] | None = None,
                   progress: Any = None) -> np.ndarray:
    """Every layer's features of the encoded texts, float16 [L + 1, n, H].

    Args:
        model: a `hidden_state_function`.
        encoded: Encoded. The texts.
        tokens: {"cls_id", "sep_id"} of the vocab.
        seq_length: int. Longest packed length.
        pool: str. "chars": one row per kept character, texts in order (n = kept characters);
            "mean": one row per text, the mean over its text tokens (no [CLS] / [SEP]).
        batch_size: int. Texts per forward pass.
        on_attention: callable or None. Called with each batch's attention probabilities (L
            arrays [B, N, T, T]) and its input_mask [B, T] (the model must output them).
        progress: a tqdm bar or None. Advanced by the texts of each batch.
    """
    counts = [len(k) for k in encoded.kept] if pool == "chars" else [1] * len(encoded.ids)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    out = None
    for chosen, inputs in _batches(encoded, batch_size, tokens["cls_id"], tokens["sep_id"],
                                   seq_length):
        result = model(inputs)
        hidden = np.stack(result["hidden_states"])  # [L + 1, B, T, H]
        if out is None:  # [L + 1, n, H]
            out = np.zeros((hidden.shape[0], offsets[-1], hidden.shape[-1]), np.float16)
        for b, k in enumerate(chosen):
            if pool == "chars":
                out[:, offsets[k]:offsets[k + 1]] = hidden[:, b, encoded.positions[k]]
            else:
                n = max(len(encoded.ids[k]), 1)
                out[:, offsets[k]] = hidden[:, b, 1:1 + n].mean(axis=1)
        if on_attention is not None:
            on_attention(result["attention_probs"], inputs["input_mask"])
        if progress is not None:
            progress.update(len(chosen))
    if out is None:
        raise UserError("no text to probe: every probe set is empty")
    return out
