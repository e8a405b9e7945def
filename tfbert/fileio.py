"""Writing files so that nothing is half-written: a temp file beside the target, renamed over it.

A reader (or a rerun after kill -9) sees the old file or the new one, never a mix. Files get
ordinary permissions (0666 less the umask, i.e. 0644 usually; `tempfile.mkstemp` alone makes 0600).

Example:
>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "results.json")
>>> write_json(path, {"accuracy": 0.5})
>>> open(path).read()
'{\\n  "accuracy": 0.5\\n}\\n'
>>> oct(os.stat(path).st_mode & 0o777) == oct(0o666 & ~current_umask())
True
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterator
from typing import IO, Any

__all__ = ["atomic_write", "current_umask", "json_safe", "json_text", "ordinary_permissions",
           "write_json", "write_text"]


def current_umask() -> int:
    """The process umask (reading it means setting it; it is set straight back)."""
    umask = os.umask(0)
    os.umask(umask)
    return umask


def ordinary_permissions(path: str, directory: bool = False) -> None:
    """chmod to what open()/mkdir() would have made: 0666 (0777 for folders) less the umask."""
    os.chmod(path, (0o777 if directory else 0o666) & ~current_umask())


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", encoding: str | None = "utf-8",
                 newline: str | None = None) -> Iterator[IO[Any]]:
    """Opens a temp file beside `path`; on a clean exit it is flushed, synced and renamed over
    `path`; on an error it is removed and `path` is untouched (an OSError that names no file,
    such as a full disk's, is given `path`).

    Args:
        path: str. The file to write.
        mode: str. "w" (text) or "wb" (bytes).
        encoding: str or None. Text encoding (ignored for "wb").
        newline: str or None. As for open().
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.tmp-")
    try:
        binary = "b" in mode
        with os.fdopen(fd, mode, encoding=None if binary else encoding,
                       newline=None if binary else newline) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        ordinary_permissions(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        if isinstance(e, OSError) and e.filename is None:
            e.filename = path  # a failed write() (a full disk) does not say which file
        raise


def json_safe(value: Any) -> Any:
    """`value` with every non-finite float (NaN, Inf) replaced by None, so that it is valid JSON
    (Python's json writes bare NaN, which JSON does not allow and strict readers refuse).

    Example:
    >>> json_safe({"loss": float("nan"), "f1": [0.5, float("inf")]})
    {'loss': None, 'f1': [0.5, None]}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def json_text(value: Any, **options: Any) -> str:
    """`json.dumps(value, **options)` of valid JSON: NaN and Inf written as null (`json_safe`)."""
    return json.dumps(json_safe(value), allow_nan=False, **options)


def write_json(path: str, value: Any) -> None:
    """Writes `value` as indented, key-sorted UTF-8 JSON atomically; a NaN or Inf is written as
    null (JSON has no NaN)."""
    text = json_text(value, indent=2, sort_keys=True, ensure_ascii=False)
    with atomic_write(path) as f:
        f.write(text + "\n")


def write_text(path: str, text: str) -> None:
    """Writes `text` (UTF-8) atomically."""
    with atomic_write(path) as f:
        f.write(text)
