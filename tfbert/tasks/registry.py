"""The task registry: each tfbert model class, the task it runs and the SavedModel head serving it.

Every consumer asks here instead of naming classes: the export (`task_of(model).export`, the
serving head tfbert/export/heads/<export>.py), `tfbert.models.weights` (`find(model_class_name)`,
the classes a tfbert directory may name), the task modules. A task is declared once, by one
`register(Task(...))` line below; a new task adds its model module (tfbert/models/) and that
line, and a serving head only when no existing one serves its outputs.

    >>> from tfbert.tasks import registry
    >>> registry.get("ner").model_class.__name__, registry.get("ner").export
    ('BertTokenClassifier', 'ner')
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tfbert.errors import UserError
from tfbert.models.classifier import BertClassifier
from tfbert.models.encoder import BertEncoder
from tfbert.models.pretrainer import BertPretrainer
from tfbert.models.span_labeler import BertSpanLabeler
from tfbert.models.token_classifier import BertTokenClassifier


@dataclasses.dataclass(frozen=True)
class Task:
    """One task: the tfbert model class that runs it and the SavedModel head that serves it.

    Args:
        name: str. The task's name, as tfbert.json's "task" holds it ("qa", "ner", ...).
        model_class: type. A BertEncoder or BertTask subclass taking the encoder first; its
            `__name__` is tfbert.json's "model_class".
        export: str. The serving head that serves it: the module tfbert/export/heads/<export>.py
            ("classification", "ner", "qa", or "encoder": the model's encoder is served);
            the export looks it up, so a task needs no line in tfbert/export/.
    """

    name: str
    model_class: type
    export: str


_TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Adds `task`; its name and model class must be new (re-registering the same is a no-op)."""
    for other in _TASKS.values():
        if other != task and (other.name == task.name
                              or other.model_class.__name__ == task.model_class.__name__):
            raise ValueError(f"task {task.name!r} ({task.model_class.__name__}) clashes with "
                             f"registered task {other.name!r} ({other.model_class.__name__})")
    _TASKS[task.name] = task
    return task


def get(name: str) -> Task:
    """The task called `name`; KeyError naming the registered ones."""
    if name not in _TASKS:
        raise KeyError(f"no task {name!r}; registered: {sorted(_TASKS)}")
    return _TASKS[name]


def tasks() -> tuple[Task, ...]:
    """Every registered task, in registration order."""
    return tuple(_TASKS.values())


def find(model_class_name: str) -> Task | None:
    """The task whose model class is called `model_class_name` (tfbert.json's "model_class")."""
    return next((t for t in _TASKS.values() if t.model_class.__name__ == model_class_name), None)


def task_of(model: Any) -> Task:
    """The task of a model instance (or class): the one registered for exactly its class.

    Raises:
        UserError: the class is not a registered tfbert model class (the message lists them).
    """
    cls = model if isinstance(model, type) else type(model)
    task = next((t for t in _TASKS.values() if t.model_class is cls), None)
    if task is None:
        raise UserError(f"{cls.__name__} is not a tfbert task model; expected one of "
                        f"{sorted(t.model_class.__name__ for t in _TASKS.values())}")
    return task


register(Task("encoder", BertEncoder, export="encoder"))
register(Task("pretraining", BertPretrainer, export="encoder"))
register(Task("classification", BertClassifier, export="classification"))
register(Task("ner", BertTokenClassifier, export="ner"))
register(Task("qa", BertSpanLabeler, export="qa"))
