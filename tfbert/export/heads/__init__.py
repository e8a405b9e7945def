"""The serving heads: tfbert/export/heads/<name>.py serves the tasks whose registry entry names
it (`tfbert.tasks.registry.Task.export`); its `HEAD` is a `ServingHead` subclass.

    >>> from tfbert.export import heads
    >>> heads.get("ner").name, heads.get("qa").text_b
    ('ner', 'always')
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from tfbert.errors import UserError
from tfbert.export.heads.base import ServingHead

__all__ = ["ServingHead", "get", "names"]


@functools.cache  # the package's modules do not change while it runs; asked per ExportSpec
def names() -> tuple[str, ...]:
    """The heads there are: the modules of this package other than base."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "base"))


def get(name: str) -> type[ServingHead]:
    """The head called `name`; UserError naming the ones there are."""
    if name not in names():
        raise UserError(f"saved_model.py: task {name!r} is not one of {names()}")
    return importlib.import_module(f"{__name__}.{name}").HEAD
