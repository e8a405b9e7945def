"""`Task`: one task as the rest of tfbert sees it, declared once in its module
tfbert/tasks/<name>.py.

A task module ends with `TASK = Task(...)` (or `TASKS = (...)` for several); the registry
(`tfbert.tasks.registry`) finds it there, and the export, the loaders, the command lines and the
tests ask the registry, so a new task needs no line elsewhere. Its model class comes from the
models layer (tfbert/models/, found there by name when a saved model is loaded), its serving head
from the `HEAD` of tfbert/tasks/*_serving.py whose name its `export` gives.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class Task:
    """One task: its model, its serving head, and the command and run that train it.

    Args:
        name: str. The task's name, as tfbert.json's "task" holds it ("qa", "ner", ...).
        model_class: type. A BertEncoder or BertTask subclass taking the encoder first; its
            `__name__` is tfbert.json's "model_class".
        export: str. The name of the serving head that serves it (`registry.serving_head`: the
            `HEAD` of a module tfbert/tasks/*_serving.py)
            ("classification", "ner", "qa", "regression", or "encoder": the model's encoder is
            served).
        command: str or None. The command line that runs it: the module tfbert.cli.<command>
            ("classifier" is run_classifier.py).
        task_names: tuple of str. The --task_name values of that command that run this task
            rather than the command's own (run_classifier.py --task_name=sts-b runs the
            regression task); lower case.
        config_class: type or None. The run's config dataclass; its fields are the command's
            flags that apply to this task.
        run: callable or None. `run(config) -> results` (results.json's content).
        load_data: callable or None. The task's data reader, `load_data(config)` -> its splits
            (what its run reads; distillation reads a teacher's data through it).
    """

    name: str
    model_class: type
    export: str
    command: str | None = None
    task_names: tuple[str, ...] = ()
    config_class: type | None = None
    run: Callable[[Any], dict[str, Any]] | None = None
    load_data: Callable[[Any], Any] | None = None
