"""The user-error boundary: mistakes in what a user gave are one readable line and exit code 2.

Library code raises `UserError` (a `ValueError`, so callers that catch ValueError keep working)
for anything the person running tfbert can fix: a missing or malformed file, a bad flag value, a
folder another run holds. Every command-line entry point runs its main function through
`run_cli`, which prints such an error as one line on stderr and exits with 2. Anything else is a
bug and keeps its traceback. `TFBERT_TRACEBACK=1` shows the traceback of user errors too.

Three ends of a run are not bugs either, and are one line too: a loss that became NaN or Inf
(`NonFiniteLoss`, exit 2), a full disk or quota (OSError ENOSPC / EDQUOT, exit 2) and Ctrl-C
(exit 130). The line says what the run leaves behind: the code that knows wraps its work in
`failure_notes(step=..., kept=..., rerun=...)`, and the line reads "interrupted at step 40;
kept: ...; rerun the same command to resume from step 40".

Example:
>>> try:
...     raise UserError("train.tsv:3: 2 fields but the header has 3")
... except ValueError as e:
...     print(e)
train.tsv:3: 2 fields but the header has 3
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["EXIT_INTERRUPTED", "EXIT_USER_ERROR", "NonFiniteLoss", "UserError", "error_line",
           "failure_notes", "is_user_error", "no_space", "notes_of", "run_cli"]

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for a Ctrl-C
TRACEBACK_ENV = "TFBERT_TRACEBACK"
_NO_SPACE = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}
_NOTES = "tfbert_notes"  # the attribute failure_notes sets on an exception


class UserError(ValueError):
    """A mistake in the user's input (file, folder, flag, value); the message names it."""


class NonFiniteLoss(UserError, FloatingPointError):
    """Training stopped because the loss (or the weights) became NaN or Inf; the message names
    the step. Usually a learning rate too high for the model, or broken input data."""


@contextlib.contextmanager
def failure_notes(**notes: str | Callable[[], Any] | None) -> Iterator[None]:
    """Attaches notes to an exception or Ctrl-C that leaves the block, for `run_cli`'s line.

    Notes: `step` (the optimizer step reached), `kept` (what the output folder holds now),
    `rerun` (what rerunning the same command does: "resume from step 40", "start again"). A
    value may be a callable, called when the exception passes (None: no note); an inner
    block's note wins (an empty one silences the outer ones: the message already says it).

    Example:
    >>> try:
    ...     with failure_notes(kept="out/ as it was"), failure_notes(step=lambda: 3):
    ...         raise KeyboardInterrupt
    ... except KeyboardInterrupt as e:
    ...     print(error_line(e))
    interrupted at step 3; kept: out/ as it was
    """
    try:
        yield
    except BaseException as e:
        if not isinstance(e, SystemExit | GeneratorExit):
            known = dict(getattr(e, _NOTES, {}))
            for key, value in notes.items():
                if key not in known:
                    with contextlib.suppress(Exception):  # a note never hides the error
                        value = value() if callable(value) else value
                        if value is not None:
                            known[key] = value
            with contextlib.suppress(AttributeError, TypeError):
                setattr(e, _NOTES, known)
        raise


def notes_of(error: BaseException) -> dict[str, Any]:
    """The notes `failure_notes` attached to `error` ({} if none)."""
    return dict(getattr(error, _NOTES, {}))


def no_space(error: BaseException) -> bool:
    """True for a full disk or an exceeded quota (OSError ENOSPC / EDQUOT)."""
    return isinstance(error, OSError) and error.errno in _NO_SPACE


def is_user_error(error: BaseException) -> bool:
    """True for errors a user caused or can fix: UserError, missing files or folders, a full
    disk or quota."""
    return isinstance(error, UserError | FileNotFoundError | NotADirectoryError |
                      IsADirectoryError | PermissionError) or no_space(error)


def error_line(error: BaseException) -> str:
    """The line `run_cli` prints for `error` (after the program's name): its message, then, for
    a run that ended early (Ctrl-C, a full disk, a NaN loss), the notes `failure_notes`
    attached.

    Example:
    >>> error_line(OSError(errno.ENOSPC, "No space left on device", "out/results.json"))
    'no space left on device writing out/results.json'
    """
    notes = notes_of(error)
    interrupted = isinstance(error, KeyboardInterrupt)
    if interrupted:
        step = notes.get("step")
        message = "interrupted" + (f" at step {step}" if step is not None else "")
    elif no_space(error):
        message = _NO_SPACE[error.errno] + (f" writing {error.filename}" if error.filename
                                            else "")
    elif isinstance(error, OSError) and error.filename and error.strerror:  # "[Errno 2] ...: 'x'"
        message = f"{error.filename}: {error.strerror}"
    else:
        message = str(error).strip() or type(error).__name__
    ended_early = interrupted or no_space(error) or isinstance(error, NonFiniteLoss)
    if notes.get("kept") and ended_early:  # (a plain user error changed nothing to report)
        message += f"; kept: {notes['kept']}"
    if notes.get("rerun") and (interrupted or no_space(error)):
        message += f"; rerun the same command to {notes['rerun']}"
    return message


def run_cli(main: Callable[..., Any], *args: Any, prog: str | None = None) -> Any:
    """Runs `main(*args)`; a user error becomes `PROG: error: MESSAGE` on stderr and exit 2,
    a Ctrl-C `PROG: interrupted at step N; kept: ...; rerun ...` and exit 130.

    Args:
        main: the command's main function.
        *args: its arguments.
        prog: str or None. Name printed before the message (default: the script's name).

    Returns:
        What `main` returns.
    """
    traceback = os.environ.get(TRACEBACK_ENV, "") not in ("", "0")
    name = prog or os.path.basename(sys.argv[0] or "tfbert")
    try:
        return main(*args)
    except KeyboardInterrupt as e:
        if traceback:
            raise
        print(f"{name}: {error_line(e)}", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as e:  # noqa: BLE001 - sorted into user errors and bugs right here
        if not is_user_error(e) or traceback:
            raise
        print(f"{name}: error: {error_line(e)}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
