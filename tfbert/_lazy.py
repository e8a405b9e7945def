"""Names a package loads on first use: `__getattr__` and `__dir__` from a {name: module} map.

    __getattr__, __dir__ = lazy_names(__name__, globals(), {"BertEncoder": "tfbert.models.encoder"})

A name maps to the module that defines it; a name mapped to its own module path
(`"data": "tfbert.data"`) is that module itself. The value is cached in the package's globals,
so `__getattr__` runs once per name. Any other submodule of the package loads on first use too
(`tfbert.data.ner` without `import tfbert.data.ner`), as after an explicit import.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, namespace: dict[str, Any], names: Mapping[str, str],
               fallback: Callable[[str], Any] | None = None
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level `__getattr__` and `__dir__` of `package` for the lazy `names`.

    Args:
        package: str. The package's `__name__` (for the AttributeError message).
        namespace: dict. The package's `globals()`, where loaded values are cached.
        names: mapping of attribute name -> module path that defines it (or is it).
        fallback: callable or None. For a name neither in `names` nor a submodule: its value,
            or None when there is none (AttributeError).
    """

    def __getattr__(name: str) -> Any:
        if name not in names:
            if name.startswith("_"):
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            if importlib.util.find_spec(f"{package}.{name}") is not None:
                return importlib.import_module(f"{package}.{name}")  # a submodule
            value = fallback(name) if fallback else None
            if value is None:
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            namespace[name] = value
            return value
        module = importlib.import_module(names[name])
        value = module if module.__name__ == f"{package}.{name}" else getattr(module, name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
