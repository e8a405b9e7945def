"""The export's folders: which version folder an export writes, what it may replace, and writing
it so that a failure or a kill -9 at any moment leaves the previous version whole.

TF Serving's layout is saved_models/NAME/VERSION: VERSION a number; the model server loads the
highest one and ignores every other name. `version_folder` applies this rule to an export_dir:

* Its name is a number (saved_models/NAME/3): that version folder. A new or empty folder is
  written; one holding a tfbert export (saved_model.pb and assets.extra/tfbert_export.json) is
  replaced only with overwrite; one holding anything else is an error, with or without overwrite.
* Any other name (saved_models/NAME): the model's base folder, and the export becomes its next
  version, the highest numeric version folder there + 1 (1 in a new or empty folder). The base
  folder may hold only numeric version folders, tfbert's `tflite/` folder, its lock file and
  tfbert's own leftovers (below); anything else (`.`, a fine-tuning run's folder) is an error.

An export holds `lock_model_folder(base)` (tfbert.rundir.RunLock, the file
`.tfbert.lock` in the base folder) from choosing its version until its last file is written, so
a second export to the same model folder stops at once with a UserError naming the first.

Replacing an earlier export keeps what tfbert did not write there: the record lists the files
the export wrote (its "files"); every other file in the old version folder (TF Serving's warmup
requests in `assets.extra/`, a user's notes) is copied, byte for byte, into the new one before
the swap. A disk that fills up while the export is written is a UserError saying that the
previous version is intact.

`write_version` writes a SavedModel into a temp folder beside the version folder (the same
parent, named `.tfbert-tmp-VERSION-PID-XXXXXXXX`, which TF Serving ignores) and renames it into
place. An earlier export there (overwrite) is swapped out by one atomic exchange (Linux
renameat2 RENAME_EXCHANGE) and then deleted; where the exchange is not available the old one is
renamed aside to `.tfbert-old-VERSION-PID-XXXXXXXX` first, so it stays on disk until the new one is
in. The next export into the same parent removes such leftovers of a killed export (an old
version set aside whose folder is missing is put back instead), only when the process that made
them is gone.

TFLite files are not versioned (saved_models/NAME/tflite/); `claim_files` says which of them may
be written: a missing file, one holding the same bytes, or, with overwrite, one that tfbert's
record there (`tfbert_tflite.json`, the sha256 of every file tfbert wrote) lists as unchanged.
Nothing else in that folder is touched.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator

from tfbert.errors import UserError, no_space
from tfbert.fileio import atomic_write, ordinary_permissions, write_json
from tfbert.rundir import LOCK_FILE, RunLock, describe_holder

logger = logging.getLogger(__name__)

EXPORT_RECORD = os.path.join("assets.extra", "tfbert_export.json")
TFLITE_DIR = "tflite"
TFLITE_RECORD = "tfbert_tflite.json"
_VERSION = re.compile(r"[0-9]+")
_LEFTOVER = re.compile(r"\.tfbert-(tmp|old)-([0-9]+)-([0-9]+)-\w+")  # kind, version, pid
_WRITING = ".tfbert-writing"  # in a temp folder until its export is whole
# The parts of a SavedModel: tfbert's in an export whose record lists no "files".
_SAVED_MODEL_PARTS = ("saved_model.pb", "saved_model.pbtxt", "fingerprint.pb", "variables",
                      "assets")
_HINT = ("--export_dir is a model's folder, saved_models/NAME (the export adds the next "
         "version), or one of its version folders, saved_models/NAME/VERSION")


def is_tfbert_export(path: str) -> bool:
    """A folder holding saved_model.pb and assets.extra/tfbert_export.json."""
    return (os.path.isfile(os.path.join(path, "saved_model.pb"))
            and os.path.isfile(os.path.join(path, EXPORT_RECORD)))


def version_folder(export_dir: str, overwrite: bool = False) -> str:
    """The version folder an export to `export_dir` writes (the rule in the module docstring).

    Args:
        export_dir: str. saved_models/NAME/VERSION, or saved_models/NAME for its next version.
        overwrite: bool. May replace an earlier tfbert export in that version folder.

    Returns:
        The version folder, e.g. saved_models/NAME/3.

    Raises:
        UserError: the folder holds something the export may not replace; nothing is written.

    Example:
    >>> base = os.path.join(tempfile.mkdtemp(), "cls")
    >>> version_folder(base) == os.path.join(base, "1")
    True
    >>> os.makedirs(os.path.join(base, "1"))
    >>> os.makedirs(os.path.join(base, "tflite"))
    >>> version_folder(base) == os.path.join(base, "2")
    True
    """
    path = os.path.normpath(export_dir)
    if _VERSION.fullmatch(os.path.basename(path)):
        _check_version(path, overwrite)
        return path
    if os.path.lexists(path) and not os.path.isdir(path):
        raise UserError(f"{export_dir} is a file; {_HINT}")
    entries = sorted(os.listdir(path)) if os.path.isdir(path) else []
    foreign = [e for e in entries if not (
        (_VERSION.fullmatch(e) or e == TFLITE_DIR) and os.path.isdir(os.path.join(path, e))
        or _LEFTOVER.fullmatch(e) or e == LOCK_FILE and os.path.isfile(os.path.join(path, e)))]
    if foreign:
        listed = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if len(foreign) > 4
                                           else "")
        raise UserError(f"{export_dir} holds {listed}: not numeric version folders or "
                        f"tflite/, so it is no model's folder; {_HINT}. Nothing was written")
    versions = [int(e) for e in entries if _VERSION.fullmatch(e)]
    return os.path.normpath(os.path.join(path, str(max(versions, default=0) + 1)))


def _check_version(path: str, overwrite: bool) -> None:
    if not os.path.lexists(path):
        return
    if not os.path.isdir(path):
        raise UserError(f"{path} is a file, not a version folder; {_HINT}")
    if not os.listdir(path):
        return
    base = os.path.dirname(path) or "."
    if not is_tfbert_export(path):
        raise UserError(f"{path} exists and is not a tfbert export (no saved_model.pb with "
                        f"{EXPORT_RECORD}); tfbert does not replace it. Export to a new version, "
                        f"or to {base} for the next free one")
    if not overwrite:
        raise UserError(f"{path} already holds a tfbert export; pass --overwrite "
                        f"(overwrite=True) to replace it, or export to {base} to add the next "
                        "version")


def model_folder(version_dir: str) -> str:
    """The model's base folder of a version folder (saved_models/NAME of saved_models/NAME/3)."""
    return os.path.dirname(os.path.abspath(version_dir))


@contextlib.contextmanager
def lock_model_folder(base: str) -> Iterator[RunLock]:
    """Holds the export lock on a model's base folder (created if missing) within the block.

    Raises:
        UserError: another process holds it; the message names that process (pid, host,
            start time, command line).
    """
    lock = RunLock(base)
    try:
        with _disk_full(f"taking the export lock {lock.path}", "nothing was written"):
            lock.acquire()
    except UserError as e:
        if " is in use by " not in str(e):
            raise
        try:
            with open(lock.path, encoding="utf-8") as f:
                holder = json.loads(f.read() or "{}")
        except (OSError, ValueError):
            holder = {}
        raise UserError(f"{base} is in use by another export ({describe_holder(holder)}); "
                        "wait for it to end and run this export again. Nothing was "
                        "written") from None
    try:
        yield lock
    finally:
        lock.release()


def write_version(version_dir: str, write: Callable[[str], None], overwrite: bool = False
                  ) -> None:
    """Writes a version folder through a temp folder beside it, renamed into place.

    The record (assets.extra/tfbert_export.json) gets "files", the files `write` made. Replacing
    an earlier export (overwrite), every file there that its record does not list is copied
    unchanged into the new version first (the module docstring).

    Args:
        version_dir: str. A numeric version folder that `version_folder` allows.
        write: callable(folder). Writes the whole export, assets.extra/tfbert_export.json
            last, into the temp folder.
        overwrite: bool. May replace an earlier tfbert export there.

    Raises:
        UserError: the folder may not be written (version_folder), or the disk filled up; in
            both cases the version folder is as it was and no temp folder is left.
    """
    path = version_folder(version_dir, overwrite)
    parent, version = os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    full = _disk_full(f"writing the export {path}",
                      f"the previous export in {path} is intact, and no temp folder is left"
                      if is_tfbert_export(path) else f"{path} was not made, and no temp folder "
                      "is left")
    with full:
        os.makedirs(parent, exist_ok=True)
        remove_leftovers(parent)
        tmp = tempfile.mkdtemp(prefix=f".tfbert-tmp-{version}-{os.getpid()}-", dir=parent)
        try:
            # Empty, then marked, then holding the record: recognisably tfbert's at every moment.
            open(os.path.join(tmp, _WRITING), "x").close()
            ordinary_permissions(tmp, directory=True)  # mkdtemp makes 0700
            write(tmp)
            record = os.path.join(tmp, EXPORT_RECORD)
            if not os.path.isfile(record):
                raise RuntimeError(f"layout.py: the export into {tmp} wrote no {EXPORT_RECORD}")
            _list_files(tmp)
            if os.path.lexists(path) and os.listdir(path):  # an earlier export: swap it out
                version_folder(path, overwrite)  # still tfbert's
                kept = _carry_foreign_files(path, tmp)
                if kept:
                    logger.info("kept %d file(s) that tfbert did not write in %s, copied "
                                "unchanged into the new export: %s", len(kept), path,
                                ", ".join(kept))
                os.remove(os.path.join(tmp, _WRITING))
                if not _exchange(tmp, path):
                    aside = os.path.join(parent, f".tfbert-old-{version}-{os.getpid()}-"
                                                 f"{secrets.token_hex(4)}")
                    os.rename(path, aside)
                    try:
                        os.rename(tmp, path)
                    except BaseException:
                        os.rename(aside, path)
                        raise
                    tmp = aside
                shutil.rmtree(tmp)
            else:
                os.remove(os.path.join(tmp, _WRITING))
                os.rename(tmp, path)  # atomic; replaces an empty folder, fails on a full one
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def _files_under(root: str) -> list[str]:
    """Every file and link under root, and every empty folder (with a trailing "/"), as paths
    relative to root with "/"."""
    found = []
    for folder, dirs, files in os.walk(root):
        links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
        found += [os.path.join(folder, n) for n in files + links]
        if not dirs and not files and folder != root:
            found.append(os.path.join(folder, ""))
    return sorted(os.path.relpath(p, root).replace(os.sep, "/") + ("/" if p.endswith(os.sep)
                                                                   else "") for p in found)


def _list_files(folder: str) -> None:
    """Adds "files" (what the export wrote) to the record in `folder`."""
    record_path = os.path.join(folder, EXPORT_RECORD)
    with open(record_path, encoding="utf-8") as f:
        record = json.load(f)
    record["files"] = [p for p in _files_under(folder) if p != _WRITING]
    write_json(record_path, record)


def _tfberts(old: str) -> Callable[[str], bool]:
    """Says which paths of the export in `old` tfbert wrote: those its record lists, or (a
    record without "files") the SavedModel's parts and the record."""
    try:
        with open(os.path.join(old, EXPORT_RECORD), encoding="utf-8") as f:
            listed = json.load(f).get("files")
    except (OSError, ValueError, AttributeError):
        listed = None
    if isinstance(listed, list):
        own = {str(p) for p in listed} | {EXPORT_RECORD.replace(os.sep, "/")}
        return lambda p: p in own
    return lambda p: (p == EXPORT_RECORD.replace(os.sep, "/")
                      or p.split("/")[0] in _SAVED_MODEL_PARTS)


def _carry_foreign_files(old: str, new: str) -> list[str]:
    """Copies every file of the export in `old` that tfbert did not write into `new`
    (bytes, mode and times; links as links); returns their relative paths."""
    ours = _tfberts(old)
    carried = []
    for rel in _files_under(old):
        if ours(rel):
            continue
        source, target = os.path.join(old, rel), os.path.join(new, rel)
        if os.path.lexists(target.rstrip("/")):
            raise UserError(f"{source} was not written by tfbert, and the new export writes "
                            f"{rel} too; move it away. Nothing was written")
        if rel.endswith("/"):
            os.makedirs(target, exist_ok=True)  # an empty folder
        elif os.path.islink(source) or os.path.isfile(source):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
        else:
            raise UserError(f"{source} is not a file or folder (a pipe or device?); tfbert "
                            "does not copy it into the new export: move it away. Nothing was "
                            "written")
        carried.append(rel.rstrip("/"))
    return carried


def _is_disk_full(error: BaseException) -> bool:
    """ENOSPC / EDQUOT (`tfbert.errors.no_space`), or TensorFlow's ResourceExhaustedError, the
    way its SavedModel writes report a full disk."""
    if no_space(error):
        return True
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(error, tf.errors.ResourceExhaustedError)


@contextlib.contextmanager
def _disk_full(what: str, kept: str) -> Iterator[None]:
    """A full disk (ENOSPC, EDQUOT, TensorFlow's ResourceExhaustedError) in the block becomes a
    one-line UserError: "`what` failed: the disk is full (...); `kept`. Free some space ..."."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - only a full disk is turned into a message
        if not _is_disk_full(e):
            raise
        detail = (e.strerror if isinstance(e, OSError) and e.strerror
                  else (getattr(e, "message", "") or str(e)).strip().splitlines()[0])
        raise UserError(f"{what} failed: the disk is full ({detail}); {kept}. Free some "
                        "space and run the export again") from None


def _exchange(a: str, b: str) -> bool:
    """Swaps two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):  # kernel or file system lacks it
        return False
    raise OSError(code, os.strerror(code), b)


def remove_leftovers(parent: str) -> list[str]:
    """Removes what killed exports left in `parent`; returns the names it removed or restored.

    Only folders named like tfbert's temp (`.tfbert-tmp-...`: empty, marked as being written,
    or holding the export record) and set-aside (`.tfbert-old-...`: a whole tfbert export)
    folders, and only when the process named in them is gone. A set-aside old version whose
    version folder is missing (the kill came between the two renames) is put back.
    """
    done = []
    for name in sorted(os.listdir(parent)):
        match = _LEFTOVER.fullmatch(name)
        path = os.path.join(parent, name)
        if not match or _alive(int(match.group(3))) or os.path.islink(path) or not os.path.isdir(
                path):
            continue
        kind, version = match.group(1), match.group(2)
        if kind == "old" and is_tfbert_export(path):
            if not os.path.lexists(os.path.join(parent, version)):
                os.rename(path, os.path.join(parent, version))
            else:
                shutil.rmtree(path)
        elif kind == "tmp" and (not os.listdir(path) or any(
                os.path.isfile(os.path.join(path, p)) for p in (_WRITING, EXPORT_RECORD))):
            shutil.rmtree(path)
        else:
            continue
        done.append(name)
    return done


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


# --- files in the (unversioned) tflite folder ---------------------------------------------------


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_record(directory: str) -> dict[str, list[str]]:
    path = os.path.join(directory, TFLITE_RECORD)
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            files = json.load(f)["files"]
        return {name: list(hashes) for name, hashes in files.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise UserError(f"{path} is not tfbert's record of the files it wrote (unreadable); "
                        "move it away") from None


def claim_files(directory: str, files: dict[str, bytes | None], overwrite: bool = False
                ) -> None:
    """Raises UserError unless tfbert may write each of `files` in `directory`.

    Args:
        directory: str. The folder (it may not exist yet).
        files: {name: the bytes to write, or None when not known yet}.
        overwrite: bool. May replace files that tfbert wrote there and nobody changed since.
    """
    record = _read_record(directory)
    for name, content in files.items():
        path = os.path.join(directory, name)
        if not os.path.lexists(path):
            continue
        if os.path.islink(path) or not os.path.isfile(path):
            raise UserError(f"{path} exists and is not a file; tfbert does not replace it")
        current = _sha256(path)
        if content is not None and hashlib.sha256(content).hexdigest() == current:
            continue  # the same bytes: nothing changes
        if not overwrite:
            raise UserError(f"{path} exists; pass --overwrite (overwrite=True) to replace the "
                            "TFLite files tfbert wrote there")
        if current not in record.get(name, []):
            raise UserError(f"{path} was not written by tfbert, or changed since ({TFLITE_RECORD} "
                            "does not list it); tfbert does not replace it: move it away")


def write_owned_file(directory: str, name: str, content: bytes, overwrite: bool = False
                     ) -> str:
    """Writes `content` to directory/name atomically if `claim_files` allows it, and records it.

    The record lists the new file's sha256 before the file is replaced and drops the old one's
    after, so a kill at any moment leaves a file that the record lists.

    Returns:
        The file's path.
    """
    claim_files(directory, {name: content}, overwrite)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    new = hashlib.sha256(content).hexdigest()
    record = _read_record(directory)
    record[name] = [h for h in record.get(name, []) if h != new] + [new]
    with _disk_full(f"writing {path}", f"{path} is as it was"):
        write_json(os.path.join(directory, TFLITE_RECORD), {"files": record})
        with atomic_write(path, "wb") as f:
            f.write(content)
        record[name] = [new]
        write_json(os.path.join(directory, TFLITE_RECORD), {"files": record})
    return path
