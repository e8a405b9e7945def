"""The user-error boundary: mistakes in what a user gave are one readable line and exit code 2.

Library code raises `UserError` (a `ValueError`, so callers that catch ValueError keep working)
for anything the person running tfbert can fix: a missing or malformed file, a bad flag value, a
folder another run holds. Every command-line entry point runs its main function through
`run_cli`, which prints such an error as one line on stderr and exits with 2. Anything else is a
bug and keeps its traceback. `TFBERT_TRACEBACK=1` shows the traceback of user errors too.

Example:
>>> try:
...     raise UserError("train.tsv:3: 2 fields but the header has 3")
... except ValueError as e:
...     print(e)
train.tsv:3: 2 fields but the header has 3
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["EXIT_USER_ERROR", "UserError", "is_user_error", "run_cli"]

EXIT_USER_ERROR = 2
TRACEBACK_ENV = "TFBERT_TRACEBACK"


class UserError(ValueError):
    """A mistake in the user's input (file, folder, flag, value); the message names it."""


def is_user_error(error: BaseException) -> bool:
    """True for errors a user caused: UserError and missing files or folders."""
    return isinstance(error, UserError | FileNotFoundError | NotADirectoryError |
                      IsADirectoryError | PermissionError)


def run_cli(main: Callable[..., Any], *args: Any, prog: str | None = None) -> Any:
    """Runs `main(*args)`; a user error becomes `PROG: error: MESSAGE` on stderr and exit 2.

    Args:
        main: the command's main function.
        *args: its arguments.
        prog: str or None. Name printed before the message (default: the script's name).

    Returns:
        What `main` returns.
    """
    try:
        return main(*args)
    except Exception as e:  # noqa: BLE001 - sorted into user errors and bugs right here
        if not is_user_error(e) or os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
            raise
        name = prog or os.path.basename(sys.argv[0] or "tfbert")
        message = str(e).strip() or type(e).__name__
        if isinstance(e, OSError) and e.filename and e.strerror:  # "[Errno 2] ...: 'x'"
            message = f"{e.filename}: {e.strerror}"
        print(f"{name}: error: {message}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
