"""A run owns its output_dir: one lock per folder, held for the run's whole life.

Every tfbert run (pretraining, each fine-tuning task) takes `RunLock(output_dir)` before it
reads or builds anything. The lock is `fcntl.flock` on `output_dir/.tfbert.lock`; the file holds
the holder's pid, host, start time and command line. A second run on the same folder fails at
once with a UserError naming the folder and the holder. The operating system drops the lock when
the process ends in any way (kill -9 included), so there is no stale lock to clear by hand; the
file itself stays (deleting it would let two runs lock two different files of the same name).

Multi-worker pretraining: the chief locks `.tfbert.lock`; non-chief worker i writes only its
scratch checkpoints (`checkpoints/.worker_i_tmp`) and locks `.tfbert.worker-i.lock`, so a second
job on the same folder fails on every worker instead of sharing the scratch folders. flock works
on local file systems and on NFS (Linux emulates it with POSIX locks there); on a system without
fcntl (Windows) or an output_dir on a remote file system (gs://) there is no lock, with a log
line that says so.

Example:
>>> import tempfile
>>> folder = tempfile.mkdtemp()
>>> with RunLock(folder):
...     try:
...         RunLock(folder).acquire()
...     except UserError as e:
...         print(str(e).split(" is in use")[0] == folder)
True
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
from typing import Any

from tfbert.errors import UserError
from tfbert.ownership import command_line, now

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

logger = logging.getLogger(__name__)

LOCK_FILE = ".tfbert.lock"
_MAX_COMMAND = 400  # characters of the holder's command line shown in the message


class RunLock:
    """An exclusive, non-blocking lock on a run's output folder (a context manager).

    Args:
        directory: str. The run's output_dir (created if missing).
        name: str. The lock file's name in it (LOCK_FILE; `.tfbert.worker-I.lock` for a
            non-chief multi-worker task).
    """

    def __init__(self, directory: str, name: str = LOCK_FILE) -> None:
        self.directory = directory
        self.path = os.path.join(directory, name)
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        """Takes the lock; raises UserError naming the holder when another process has it."""
        if "://" in self.directory or fcntl is None:
            logger.warning("%s: no run lock on this file system; make sure no other run writes "
                           "to it", self.directory)
            return self
        os.makedirs(self.directory, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _read_holder(fd)
            os.close(fd)
            raise UserError(f"{self.directory} is in use by {describe_holder(holder)}; wait "
                            "for that run to end, or give this one another output_dir") from None
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": now(),
                "command": command_line()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode("utf-8"), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Empties the holder record and drops the lock (the file stays)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        return json.loads(os.pread(fd, 1 << 16, 0).decode("utf-8") or "{}")
    except (OSError, ValueError):
        return {}


def describe_holder(holder: dict[str, Any]) -> str:
    """"pid 1234 on host h since 2026-...: python run_pretraining.py ..." (or what is known)."""
    if not holder.get("pid"):  # the holder has not written its record yet
        return "another process (it is just starting)"
    command = holder.get("command", "?")
    if len(command) > _MAX_COMMAND:
        command = command[:_MAX_COMMAND] + " ..."
    return (f"pid {holder['pid']} on host {holder.get('host', '?')} since "
            f"{holder.get('started', '?')}: {command}")


def worker_lock_name(worker: int) -> str:
    """The lock file of non-chief multi-worker task `worker`."""
    return f".tfbert.worker-{worker}.lock"


def remove_checkpoint_temp_dirs(directory: str, checkpoint_name: str = "ckpt") -> list[str]:
    """Removes the `<checkpoint_name>-N_temp/` folders that tf.train.Checkpoint writes a save
    into before renaming its files, left behind by a kill during a save; returns their paths.

    Only folders of exactly that name pattern directly in `directory` are touched. Call it with
    the run's lock held.
    """
    if not os.path.isdir(directory):
        return []
    pattern = re.compile(re.escape(checkpoint_name) + r"-\d+_temp")
    removed = []
    for entry in sorted(os.listdir(directory)):
        path = os.path.join(directory, entry)
        if pattern.fullmatch(entry) and os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
            removed.append(path)
    if removed:
        logger.info("removed %d unfinished checkpoint save(s) of an interrupted run: %s",
                    len(removed), ", ".join(os.path.basename(p) for p in removed))
    return removed


def remove_atomic_temp_files(directory: str, names: tuple[str, ...]) -> list[str]:
    """Removes `.NAME.tmp-*` files (tfbert.fileio.atomic_write's temp files, left by a kill
    before their rename) of the given file names in `directory`; returns their paths."""
    if not os.path.isdir(directory):
        return []
    prefixes = tuple(f".{n}.tmp-" for n in names)
    removed = [os.path.join(directory, e) for e in sorted(os.listdir(directory))
               if e.startswith(prefixes)]
    for path in removed:
        if os.path.isfile(path) and not os.path.islink(path):
            os.remove(path)
    return removed
