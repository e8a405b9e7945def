"""Pretrained models: tfbert's Keras models from and to checkpoints of any supported format.

    encoder = tfbert.from_pretrained("path/to/hf_or_google_dir")    # a BertEncoder
    model = tfbert.BertClassifier.from_pretrained(path, num_classes=3)
    tfbert.save_pretrained(model, "out", vocab_file="vocab.txt", metadata={"task": "sst2"})
    model = tfbert.checkpoints.load_model("out")                     # the same BertClassifier

The formats are read and written by `tfbert.checkpoints`; `tfbert.models.weights` maps them
onto the models' variables.
"""

from __future__ import annotations

from typing import Any

from tfbert.checkpoints import Checkpoint, native, read_checkpoint, write_checkpoint
from tfbert.config import BertConfig
from tfbert.models import weights
from tfbert.models.encoder import BertEncoder

__all__ = ["from_pretrained", "load_model", "model_from_pretrained", "save_pretrained"]


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
    checkpoint = read_checkpoint(source, config)
    checkpoint.check(strict)
    return weights.build_and_load(cls, checkpoint, strict=strict, **kwargs)


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
    if isinstance(model, Checkpoint):
        checkpoint, model_info = model, weights.describe_encoder()
        if vocab_file:
            checkpoint.vocab_file = vocab_file
    else:
        checkpoint = weights.to_checkpoint(model, vocab_file=vocab_file)
        model_info = weights.describe(model)
    write_checkpoint(checkpoint, directory, format=format, model_info=model_info,
                     metadata=metadata)


def load_model(path: str, dtype: Any = None) -> Any:
    """Rebuilds the exact model `save_pretrained` wrote: its class, head arguments and weights.

    Every variable of the model must be in the file and every weight in the file must be used.
    `dtype`: a Keras dtype policy to build the model with instead of the saved one (None).
    """
    checkpoint = native.read_native(path)
    checkpoint.check(strict=True)
    return weights.rebuild(checkpoint, dtype=dtype)
