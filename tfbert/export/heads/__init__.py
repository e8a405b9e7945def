"""The serving heads as the export asks for them, by the name a task's registry entry gives
(`tfbert.tasks.registry.Task.export`). Each head sits beside its task, in
tfbert/tasks/*_serving.py (its `HEAD`, a `ServingHead` subclass); the registry finds them.

    >>> from tfbert.export import heads
    >>> heads.get("ner").name, heads.get("qa").text_b
    ('ner', 'always')
"""

from __future__ import annotations

from tfbert.tasks.registry import serving_head as get
from tfbert.tasks.registry import serving_heads
from tfbert.tasks.serving_base import ServingHead

__all__ = ["ServingHead", "get", "names"]


def names() -> tuple[str, ...]:
    """The heads there are, by name."""
    return tuple(serving_heads())
