"""Pretrained models: tfbert's Keras models from and to checkpoints of any supported format.

    encoder = tfbert.from_pretrained("path/to/hf_or_google_dir")    # a BertEncoder
    model = tfbert.BertClassifier.from_pretrained(path, num_classes=3)
    tfbert.save_pretrained(model, "out", vocab_file="vocab.txt", metadata={"task": "sst2"})
    model = tfbert.checkpoints.load_model("out")                     # the same BertClassifier

The formats are read and written by `tfbert.checkpoints`; `tfbert.models.weights` maps them
onto the models' variables. Model classes are found by name in `tfbert.models.catalog` (this
module imports no model module), so the models' `from_pretrained` can import this one.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import keras
import numpy as np

from tfbert.checkpoints import Checkpoint, google, native, read_checkpoint, write_checkpoint
from tfbert.config import BertConfig
from tfbert.models import catalog, weights

__all__ = ["from_pretrained", "load_model", "model_from_pretrained", "save_pretrained"]

logger = logging.getLogger(__name__)

PROBE = "4 random sequences (seed 0) of length min(64, max_position_embeddings), 3 padded"


def from_pretrained(source: Any, config: BertConfig | None = None, strict: bool = True) -> Any:
    """The model a checkpoint of any supported format holds.

    A fine-tuned Hugging Face or Google checkpoint (config.json `architectures`
    BertForSequenceClassification / BertForTokenClassification / BertForQuestionAnswering,
    or run_classifier's / run_squad's head) gives its task model (BertClassifier,
    BertTokenClassifier, BertSpanLabeler) with the head loaded; anything else a `BertEncoder`
    (a tfbert directory's full model is `load_model`'s).

    Args:
        source: str, keras_hub.models.BertBackbone or Checkpoint. Checkpoint directory (or
            Google prefix), or one already read.
        config: BertConfig or None. Overrides the checkpoint's config file.
        strict: bool. If False, missing/unused variables are logged instead of raising (missing
            ones keep their initial values). Shape mismatches always raise.

    Returns:
        tfbert.BertEncoder, or the task model of a fine-tuned checkpoint.

    Raises:
        FileNotFoundError, CheckpointError: naming the file and variables at fault.

    Example:
    >>> encoder = tfbert.from_pretrained("uncased_L-12_H-768_A-12")  # doctest: +SKIP
    """
    checkpoint = _read(source, config)
    return model_from_pretrained(task_class(checkpoint) or weights.encoder_class(), checkpoint,
                                 strict=strict)


def task_class(checkpoint: Checkpoint) -> type | None:
    """The tfbert task model class of a fine-tuned HF or Google checkpoint's head, else None."""
    if checkpoint.format not in ("hf", "google") or not checkpoint.metadata:
        return None
    return catalog.model_classes().get(checkpoint.metadata.get("model_class", ""))


def _read(source: Any, config: BertConfig | None) -> Checkpoint:
    if not isinstance(source, Checkpoint):
        return read_checkpoint(source, config)
    return dataclasses.replace(source, config=config) if config else source


def model_from_pretrained(cls: type, source: Any, config: BertConfig | None = None,
                          strict: bool = True, **kwargs: Any) -> Any:
    """Builds `cls(encoder, **kwargs)` (or a BertEncoder) and loads what the checkpoint has.

    The encoder always loads. A BertPretrainer also gets the masked-LM and next-sentence heads
    when the checkpoint has them (else they keep their initial values, with a log line). A task
    model gets its head too when the checkpoint holds one of the same class (a tfbert
    directory saved from it, or a fine-tuned HF / Google checkpoint, `tfbert.checkpoints.heads`)
    and the head arguments (the saved ones overridden by `kwargs`) give the same variable
    shapes; a fine-tuned head's num_classes comes from its weights.

    Args:
        cls: type. tfbert.BertEncoder or a task model class taking the encoder first.
        source: str, keras_hub.models.BertBackbone or Checkpoint. Checkpoint to read.
        config: BertConfig or None. Overrides the checkpoint's config file.
        strict: bool. See `from_pretrained`.
        **kwargs: head arguments for `cls`, e.g. num_classes=3.
    """
    checkpoint = _read(source, config)
    checkpoint.check(strict)
    return weights.build_and_load(cls, checkpoint, strict=strict, **kwargs)


def save_pretrained(model: Any, directory: str, vocab_file: str | None = None,
                    metadata: dict[str, Any] | None = None, format: str = "tfbert",
                    approximate_activation: bool = False) -> dict[str, Any]:
    """Writes a model (or a `Checkpoint`) to a directory.

    A task head is kept in every format: "hf" writes transformers' BertForSequenceClassification
    / BertForTokenClassification / BertForQuestionAnswering layout (config.json
    `architectures`, `id2label`, `label2id`, num_labels), "google" run_classifier's
    `output_weights` / `output_bias` or run_squad's `cls/squad/...`, "sentence-transformers" a
    BertSentenceEncoder's pooling, projection and normalisation as sentence-transformers'
    modules. A head or config a format cannot hold is a UserError (CheckpointError) naming the
    option at fault, raised before anything is written.

    Args:
        model: tfbert.BertEncoder, a task model with `.encoder`, or a Checkpoint.
        directory: str. Created if missing.
        vocab_file: str or None. Copied in as vocab.txt.
        metadata: dict or None. JSON-serialisable caller data for tfbert.json (e.g. task,
            labels, max_seq_length); format "hf" takes only "labels" (its id2label),
            "sentence-transformers" only "max_seq_length" (the length sentence-transformers
            truncates texts to) and "lower_case".
        format: str. "tfbert" (default: config.json, model.safetensors, vocab.txt, tfbert.json;
            transformers' BertModel reads it too), "hf", "google" (bert_config.json +
            bert_model.ckpt.*) or "sentence-transformers" (a BertSentenceEncoder: the "hf"
            BERT plus modules.json, 1_Pooling, 2_Dense, 2_Normalize or 3_Normalize,
            sentence_bert_config.json; `sentence_transformers.SentenceTransformer(directory)`
            loads it).
        approximate_activation: bool. Format "google" and exact-erf GELU: write Google's
            "gelu", which its modeling.py runs as the tanh form. The save runs the model with
            both activations on a probe batch and reports the largest output change (log
            line, return value, bert_config.json `tfbert_approximation`); tfbert itself reads
            the exact config back. Without it such a save is an error.

    Returns:
        {"directory", "format"} and, when an activation was approximated, "approximation":
        {"hidden_act", "written_as", "max_abs_output_change", "probe"}.
    """
    if isinstance(model, Checkpoint):
        checkpoint = model
        saved = checkpoint.metadata or {}
        model_info = ({"model_class": saved["model_class"],
                       "model_config": saved.get("model_config", {})}
                      if "model_class" in saved else weights.describe_encoder())
        if vocab_file:
            checkpoint.vocab_file = vocab_file
    else:
        checkpoint = weights.to_checkpoint(model, vocab_file=vocab_file)
        model_info = weights.describe(model)
    result: dict[str, Any] = {"directory": directory, "format": format}
    approximation = None
    if format == "google" and approximate_activation and checkpoint.config.hidden_act == "gelu":
        google.check_expressible(checkpoint.config, True, checkpoint.source)  # before measuring
        change = activation_change(model, "gelu_tanh")
        approximation = {"hidden_act": "gelu", "written_as": "gelu (Google's tanh form)",
                         "max_abs_output_change": change, "probe": PROBE}
        logger.warning("%s: exact GELU written as Google's tanh \"gelu\"; Google's code runs "
                       "the model with outputs moved by up to %.3g (largest absolute change "
                       "on a probe batch of %s)", directory, change, PROBE)
        result["approximation"] = approximation
    write_checkpoint(checkpoint, directory, format=format, model_info=model_info,
                     metadata=metadata, approximate_activation=approximate_activation,
                     approximation=approximation)
    return result


def activation_change(model: Any, hidden_act: str) -> float:
    """The largest absolute change of any output of `model` (a Keras model or a Checkpoint)
    when its encoder runs with `hidden_act` instead, on the probe batch `PROBE`."""
    if isinstance(model, Checkpoint):
        model = from_pretrained(model, strict=False)
    checkpoint = weights.to_checkpoint(model)
    checkpoint.metadata = weights.describe(model)
    checkpoint.config = dataclasses.replace(checkpoint.config, hidden_act=hidden_act)
    other = weights.rebuild(checkpoint)
    inputs = probe_batch(checkpoint.config, with_positions=weights.is_pretrainer(model))
    a = keras.tree.flatten(model(inputs, training=False))
    b = keras.tree.flatten(other(inputs, training=False))
    return max(float(np.max(np.abs(keras.ops.convert_to_numpy(x).astype(np.float32)
                                   - keras.ops.convert_to_numpy(y).astype(np.float32))))
               for x, y in zip(a, b, strict=True))


def probe_batch(config: BertConfig, with_positions: bool = False) -> dict[str, np.ndarray]:
    """The fixed batch `activation_change` runs: `PROBE`, with segment ids 0/1."""
    rng = np.random.default_rng(0)
    length = min(64, config.max_position_embeddings)
    lengths = np.array([length, max(2, 3 * length // 4), max(2, length // 2),
                        max(2, length // 4)])
    mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(1, config.vocab_size, (4, length)).astype(np.int32) * mask
    segments = (np.arange(length)[None] >= lengths[:, None] // 2) * mask
    batch = {"input_ids": ids, "input_mask": mask,
             "segment_ids": np.minimum(segments, config.type_vocab_size - 1).astype(np.int32)}
    if with_positions:
        batch["masked_lm_positions"] = np.stack(
            [np.arange(1, 3) % n for n in lengths]).astype(np.int32)
    return batch


def load_model(path: str, dtype: Any = None) -> Any:
    """Rebuilds the exact model `save_pretrained` wrote: its class, head arguments and weights.

    Every variable of the model must be in the file and every weight in the file must be used.
    `dtype`: a Keras dtype policy to build the model with instead of the saved one (None).
    """
    checkpoint = native.read_native(path)
    checkpoint.check(strict=True)
    return weights.rebuild(checkpoint, dtype=dtype)
