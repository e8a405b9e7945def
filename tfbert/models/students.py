"""Students for distillation: a smaller model of the teacher's task class that keeps the
teacher's vocab, casing, labels and head settings (num_classes, multi_label, head layers, CRF,
dropout).

Four ways to make one:

    student = student_from_preset(teacher, "bert-mini")        # a published shape
    student = student_from_config(teacher, "student.json")     # any BertConfig file
    student, layers = student_from_teacher_layers(teacher, every=2)  # DistilBERT's init
    student = student_from_checkpoint(teacher, "small/model")  # a pretrained small model

A preset gives the shape only (layers, width, heads, intermediate size); everything else
(vocab_size, type_vocab_size, max_position_embeddings, hidden_act, dropout, initializer_range,
layer_norm_eps, lower_case) is the teacher's, so the student reads the teacher's inputs. A
config file is taken as written, with the teacher's casing; its vocab_size must be the
teacher's. Both start from random weights, except a CRF head's transitions, which are copied
from the teacher: they score tag pairs, whatever the width.

`student_from_teacher_layers` is DistilBERT's initialisation (Sanh et al., 2019): the student
has the teacher's width and every k-th of its layers, counted so the top layer is kept
(layers k-1, 2k-1, ...: for 12 layers and k=2, layers 1, 3, ..., 11), with the teacher's
embeddings, pooler and head copied exactly. It returns the teacher layers it took, which is the
layer map for intermediate transfer (`tfbert.models.distiller.Distiller(layer_map=...)`).

`student_from_checkpoint` starts the student from a pretrained small model of the teacher's
vocab (Turc et al., 2019, "Well-Read Students Learn Better": pre-trained compact models
distilled from a fine-tuned teacher): its encoder's weights and config as the checkpoint holds
them, a fresh head of the teacher's settings.

`model_parameters(model)` counts a model's weights (embeddings, encoder, head, total).

Example:
>>> from tfbert import BertClassifier, BertConfig, BertEncoder
>>> teacher = BertClassifier(BertEncoder(BertConfig(
...     vocab_size=100, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
...     intermediate_size=64)), num_classes=3)
>>> student, layers = student_from_teacher_layers(teacher, every=2)
>>> layers, student.encoder.config.num_hidden_layers, student.num_classes
([1, 3], 2, 3)
>>> model_parameters(student)["total"] < model_parameters(teacher)["total"]
True
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from typing import Any

from tfbert.config import BertConfig
from tfbert.errors import UserError
from tfbert.models.encoder import BertEncoder

logger = logging.getLogger(__name__)

# The fields a preset decides; the rest of a preset student's config is the teacher's.
SHAPE_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size")


def head_settings(model: Any) -> dict[str, Any]:
    """The task model's constructor arguments other than its encoder and name (num_classes,
    multi_label, dropout, crf, ...): its `get_config()` without those two."""
    return {k: v for k, v in model.get_config().items() if k not in ("encoder", "name")}


def build_student(teacher: Any, config: BertConfig) -> Any:
    """A fresh model of the teacher's class and head settings on an encoder of `config`.

    The CRF head's transitions (if any) are copied from the teacher. Build it inside the
    strategy scope and dtype policy the run uses (`tfbert.training.runtime.build_scope`).

    Raises:
        UserError: config's vocab_size is not the teacher's.
    """
    _check_task_model(teacher)
    check_vocab_size(teacher.encoder.config.vocab_size, config, "the student config")
    student = type(teacher)(BertEncoder(config), **head_settings(teacher))
    if getattr(teacher, "crf", None) is not None:
        student.crf.set_weights(teacher.crf.get_weights())
    return student


def check_vocab_size(theirs: int, config: BertConfig, source: str) -> None:
    """UserError unless `config` has the teacher's vocab_size `theirs` (the student reads the
    teacher's token ids)."""
    if config.vocab_size != theirs:
        raise UserError(f"{source} has vocab_size {config.vocab_size}, the teacher's vocab "
                        f"{theirs}: a student reads the teacher's token ids, so it needs the "
                        f"teacher's vocab (set vocab_size {theirs})")


def preset_config(teacher: Any, preset: str) -> BertConfig:
    """The teacher's BertConfig with the preset's shape (SHAPE_FIELDS)."""
    shape = BertConfig.from_preset(preset)
    return dataclasses.replace(teacher.encoder.config,
                               **{name: getattr(shape, name) for name in SHAPE_FIELDS})


def student_from_preset(teacher: Any, preset: str) -> Any:
    """A student of preset `preset`'s shape (bert-tiny, bert-mini, bert-small, bert-medium, ...:
    `tfbert.PRESETS`), the rest of its config the teacher's. Random weights (the CRF's
    transitions copied)."""
    return build_student(teacher, preset_config(teacher, preset))


def student_from_config(teacher: Any, config_file: str) -> Any:
    """A student of the shape a BertConfig file states (tfbert's, Google's bert_config.json or
    Hugging Face's config.json), with the teacher's casing. Random weights (the CRF's
    transitions copied).

    Raises:
        UserError: the file's vocab_size is not the teacher's.
    """
    config = BertConfig.from_json_file(config_file)
    check_vocab_size(teacher.encoder.config.vocab_size, config, f"student config {config_file}")
    return build_student(teacher, dataclasses.replace(
        config, lower_case=teacher.encoder.config.lower_case))


def student_from_checkpoint(teacher: Any, checkpoint: str, config: BertConfig | None = None
                            ) -> Any:
    """A student whose encoder is the pretrained model `checkpoint` (any checkpoint
    `from_pretrained` reads; `config`, if given, its config), with a fresh head of the
    teacher's class and settings (the CRF's transitions copied from the teacher) and the
    teacher's casing. Whether its vocab holds the teacher's token ids is the caller's check
    (`tfbert.tasks.distill.pretrained_student` compares the vocab files).

    Raises:
        UserError: the checkpoint's vocab_size is not the teacher's.
    """
    _check_task_model(teacher)
    if config is not None:
        check_vocab_size(teacher.encoder.config.vocab_size, config,
                         f"student_checkpoint {checkpoint}")
        config = dataclasses.replace(config, lower_case=teacher.encoder.config.lower_case)
    student = type(teacher).from_pretrained(checkpoint, config=config,
                                            **head_settings(teacher))
    check_vocab_size(teacher.encoder.config.vocab_size, student.encoder.config,
                     f"student_checkpoint {checkpoint}")
    if getattr(teacher, "crf", None) is not None:
        student.crf.set_weights(teacher.crf.get_weights())
    logger.info("student: encoder from %s (%d layers, hidden %d), fresh head", checkpoint,
                student.encoder.config.num_hidden_layers, student.encoder.config.hidden_size)
    return student


def every_kth_layer(num_layers: int, every: int) -> list[int]:
    """The layers (0-based) a student keeps when it takes every `every`-th of `num_layers`,
    counted so the top layer is kept: every-1, 2*every-1, ...

    Example:
    >>> every_kth_layer(12, 2), every_kth_layer(12, 3), every_kth_layer(4, 4)
    ([1, 3, 5, 7, 9, 11], [2, 5, 8, 11], [3])
    """
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise UserError(f"student_layers_from_teacher must be a positive integer, got {every!r}")
    if every > num_layers:
        raise UserError(f"student_layers_from_teacher={every}: the teacher has {num_layers} "
                        f"layer(s), so taking every {every}th leaves none (use at most "
                        f"{num_layers})")
    return list(range(every - 1, num_layers, every))


def student_from_teacher_layers(teacher: Any, every: int | None = None,
                                layers: Sequence[int] | None = None) -> tuple[Any, list[int]]:
    """DistilBERT's init: the teacher's width, embeddings, pooler and head, and a subset of its
    layers, all copied exactly.

    Args:
        teacher: a tfbert task model (BertClassifier, BertTokenClassifier, BertSpanLabeler).
        every: int or None. Take every `every`-th layer (`every_kth_layer`).
        layers: sequence of int or None. The teacher layers to take (0-based, increasing),
            instead of `every`.

    Returns:
        (student, the teacher layers it holds, in order).
    """
    _check_task_model(teacher)
    total = teacher.encoder.config.num_hidden_layers
    if (every is None) == (layers is None):
        raise ValueError("give every or layers, not both and not neither")
    chosen = every_kth_layer(total, every) if layers is None else [int(i) for i in layers]
    if not chosen or chosen != sorted(set(chosen)) or not 0 <= chosen[0] <= chosen[-1] < total:
        raise UserError(f"layers {list(layers or [])} must be distinct, increasing and in "
                        f"[0, {total}) (the teacher's layers)")
    config = dataclasses.replace(teacher.encoder.config, num_hidden_layers=len(chosen))
    student = build_student(teacher, config)
    source, target = teacher.encoder, student.encoder
    target.embeddings.set_weights(source.embeddings.get_weights())
    for j, i in enumerate(chosen):
        target.transformer_layers[j].set_weights(source.transformer_layers[i].get_weights())
    target.pooler.set_weights(source.pooler.get_weights())
    for mine, theirs in zip(head_weights(student), head_weights(teacher), strict=True):
        mine.assign(theirs)
    logger.info("student: teacher layers %s of %d, embeddings, pooler and head copied",
                chosen, total)
    return student, chosen


def head_weights(model: Any) -> list[Any]:
    """The task model's weights outside its encoder (the head's, a CRF's), in a fixed order."""
    encoder = {id(v) for v in model.encoder.weights}
    return [v for v in model.weights if id(v) not in encoder]


def model_parameters(model: Any) -> dict[str, int]:
    """Weight counts of a task model (or an encoder): "embeddings" (word, position, segment
    tables and their LayerNorm), "encoder" (embeddings, layers, pooler), "head" (the rest: the
    task head, a CRF) and "total"."""
    encoder = getattr(model, "encoder", model)
    count = lambda variables: sum(math.prod(v.shape) for v in variables)  # noqa: E731
    counts = {"embeddings": count(encoder.embeddings.weights), "encoder": count(encoder.weights),
              "total": count(model.weights)}
    counts["head"] = counts["total"] - counts["encoder"]
    return counts


def _check_task_model(model: Any) -> None:
    if not isinstance(getattr(model, "encoder", None), BertEncoder) or isinstance(
            model, BertEncoder):
        raise UserError(f"the teacher must be a fine-tuned tfbert task model with a head (e.g. "
                        f"BertClassifier, BertTokenClassifier); got {type(model).__name__}")
