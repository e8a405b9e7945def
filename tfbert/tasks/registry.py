"""The task registry: every task declared in tfbert/tasks/ (`tfbert.tasks.base.Task`).

Every consumer asks here instead of naming tasks or classes: the export (`task_of(model).export`,
and `serving_head(name)`: the head beside its task, tfbert/tasks/*_serving.py), the command
lines (`claiming(command, name)`: which task a --task_name runs), the tests (`tasks()`). A task is
declared once, by `TASK = Task(...)` (or `TASKS = (...)`) in its module tfbert/tasks/<name>.py,
which this module finds by importing the package's modules; a new task adds that module and
nothing here.

    >>> from tfbert.tasks import registry
    >>> registry.get("ner").model_class.__name__, registry.get("ner").export
    ('BertTokenClassifier', 'ner')
    >>> registry.claiming("classifier", "sts-b").name
    'regression'
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
from typing import Any

import tfbert.tasks
from tfbert.errors import UserError
from tfbert.tasks.base import Task

__all__ = ["Task", "claiming", "find", "get", "register", "serving_head", "serving_heads",
           "task_of", "tasks"]

SERVING = "_serving"  # tfbert/tasks/*_serving.py holds a task's serving head (`HEAD`)

_TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Adds `task` (a task defined outside tfbert/tasks/); its name, model class and task names
    must be new (re-registering the same declaration is a no-op)."""
    _declared()
    return _add(task)


def _add(task: Task) -> Task:
    for other in _TASKS.values():
        if other == task:
            return task
        if (other.name == task.name
                or other.model_class.__name__ == task.model_class.__name__
                or (other.command == task.command
                    and set(other.task_names) & set(task.task_names))):
            raise ValueError(f"task {task.name!r} ({task.model_class.__name__}) clashes with "
                             f"registered task {other.name!r} ({other.model_class.__name__})")
    _TASKS[task.name] = task
    return task


def _module_tasks(module_name: str) -> tuple[Task, ...]:
    """The tasks that tfbert.tasks.<module_name> declares (`TASKS`, then `TASK`)."""
    module = importlib.import_module(f"tfbert.tasks.{module_name}")
    return (*getattr(module, "TASKS", ()), *((module.TASK,) if hasattr(module, "TASK") else ()))


@functools.cache  # the package's modules do not change while it runs
def _scan() -> None:
    """Imports the modules of tfbert.tasks and adds the tasks they declare, in module order
    (a task `get` loaded by name earlier takes its module's place)."""
    found = [task for info in sorted(pkgutil.iter_modules(tfbert.tasks.__path__),
                                     key=lambda m: m.name)
             if _declares_tasks(info.name) for task in _module_tasks(info.name)]
    for task in found:
        _add(task)
    ordered = {task.name: task for task in found}
    ordered.update(_TASKS)
    _TASKS.clear()
    _TASKS.update(ordered)


def _declares_tasks(module_name: str) -> bool:
    """Whether a module of tfbert.tasks may declare tasks (not the declaration, the registry or
    the serving heads and what they build on)."""
    return (module_name not in ("base", "registry") and not module_name.endswith(SERVING)
            and not module_name.startswith("serving_"))


def _declared() -> dict[str, Task]:
    _scan()
    return _TASKS


def get(name: str) -> Task:
    """The task called `name`; KeyError naming the registered ones.

    A task declared by the module named after it (tfbert/tasks/ner.py declares "ner") loads
    that module alone, so a task module may look another task up while the registry scans."""
    if name not in _TASKS and importlib.util.find_spec(f"tfbert.tasks.{name}") is not None:
        for task in _module_tasks(name):
            _add(task)
    declared = _TASKS if name in _TASKS else _declared()
    if name not in declared:
        raise KeyError(f"no task {name!r}; registered: {sorted(declared)}")
    return declared[name]


def tasks() -> tuple[Task, ...]:
    """Every registered task: those of tfbert/tasks/ by module name, then any registered."""
    return tuple(_declared().values())


def find(model_class_name: str) -> Task | None:
    """The task whose model class is called `model_class_name` (tfbert.json's "model_class")."""
    return next((t for t in _declared().values() if t.model_class.__name__ == model_class_name),
                None)


def claiming(command: str, task_name: str | None) -> Task | None:
    """The task that `command`'s --task_name=`task_name` runs instead of the command's own, or
    None (compared in lower case)."""
    name = (task_name or "").lower()
    return next((t for t in _declared().values()
                 if t.command == command and name in t.task_names), None)


def task_of(model: Any) -> Task:
    """The task of a model instance (or class): the one registered for exactly its class.

    Raises:
        UserError: the class is not a registered tfbert model class (the message lists them).
    """
    cls = model if isinstance(model, type) else type(model)
    declared = _declared()
    task = next((t for t in declared.values() if t.model_class is cls), None)
    if task is None:
        raise UserError(f"{cls.__name__} is not a tfbert task model; expected one of "
                        f"{sorted(t.model_class.__name__ for t in declared.values())}")
    return task


@functools.cache  # the package's modules do not change while it runs; asked per ExportSpec
def serving_heads() -> dict[str, type]:
    """{head name: its ServingHead subclass}: the `HEAD` of every tfbert/tasks/*_serving.py
    (a Task's `export` names one), by name."""
    found = {}
    for info in pkgutil.iter_modules(tfbert.tasks.__path__):
        if info.name.endswith(SERVING):
            head = importlib.import_module(f"tfbert.tasks.{info.name}").HEAD
            found[head.name] = head
    return dict(sorted(found.items()))


def serving_head(name: str) -> type:
    """The serving head called `name` (a Task's `export`).

    Raises:
        UserError: no head has that name (the message lists them).
    """
    heads = serving_heads()
    if name not in heads:
        raise UserError(f"saved_model.py: task {name!r} is not one of {tuple(heads)}")
    return heads[name]
