"""What a tfbert command may write: the one ownership rule every writing command applies.

* A run folder (`output_dir` of pretraining and of each fine-tuning task) is written only when
  it is missing, empty, or holds a run of the same kind: its record says so
  (`tfbert_run.json`'s "task" for fine-tuning, or the journal of a commit cut short;
  `pretrain_config.json` for pretraining). tfbert's own bookkeeping (`.tfbert*` lock, staging
  and journal entries, `.NAME.tmp-*` files of an atomic write) does not count as content.
  Anything else is refused: a folder holding files no run wrote, a run of another kind, an
  existing file in place of the folder, a record that is damaged or not tfbert's.
* A single output file (a vocab, record shards) is written when it does not exist, or when
  tfbert wrote it and nobody changed it since: a sidecar `.NAME.tfbert.json` beside it holds
  its size and fingerprint (sha256 of its first and last MiB) and the command that wrote it
  (a generated table says so in its header instead). `overwrite` (`--overwrite`) replaces any
  file.
* No output path is one of the command's inputs, or lies inside an input that is a folder (a
  checkpoint prefix such as `dir/bert_model.ckpt` counts as its folder `dir`); symlinks are
  resolved first.

Every refusal is a `UserError` naming the path, raised before anything is written.

Example:
>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> claim_folder(os.path.join(folder, "run"), "classification") is None  # a new folder
True
>>> open(os.path.join(folder, "notes.txt"), "w").close()
>>> try:
...     claim_folder(folder, "pretraining")
... except UserError as e:
...     print(str(e).startswith(folder + " holds notes.txt"))
True
"""

from __future__ import annotations

import datetime
import glob
import hashlib
import json
import os
import re
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tfbert.errors import UserError
from tfbert.fileio import write_json

__all__ = ["PRETRAINING", "PRETRAIN_RECORD", "PRETRAIN_RECORD_KEYS", "RUN_JOURNAL",
           "RUN_MANIFEST", "check_not_inputs", "claim_files", "claim_folder", "command_line",
           "config_inputs", "folder_kind", "is_owned_file", "now", "read_json_file",
           "record_file", "sidecar_path", "visible_matches"]

RUN_MANIFEST = "tfbert_run.json"  # a fine-tuning run's manifest (tfbert.training.outputs)
RUN_JOURNAL = ".tfbert-commit.json"  # a fine-tuning commit in progress
PRETRAIN_RECORD = "pretrain_config.json"  # a pretraining run's settings (training.resume)
PRETRAIN_RECORD_KEYS = {"input_files": list}  # what every pretraining record holds
PRETRAINING = "pretraining"  # the kind of a pretraining run's folder
_BOOKKEEPING = re.compile(r"\.tfbert.*|\..+\.tmp-[\w-]+")  # locks, staging, journal, temp files
_FINGERPRINT_BYTES = 1 << 20


def command_line() -> str:
    """This process's command line, as a shell would take it ("python run_pretraining.py ...")."""
    return shlex.join([os.path.basename(sys.executable or "python"), *sys.argv])


def now() -> str:
    """The local time with its UTC offset, to the second (ISO 8601)."""
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def read_json_file(path: str, what: str = "JSON", required: Mapping[str, type] | None = None
                   ) -> Any:
    """The JSON in `path` (None when it does not exist).

    Args:
        path: str. The file.
        what: str. What the file is, for the message ("tfbert's run manifest").
        required: {key: type} the value must hold (then it must be an object).

    Raises:
        UserError: not UTF-8 JSON (a truncated file), or without a required key, naming the
            file and what is wrong.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise UserError(f"{path} is a folder where {what} belongs") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text, so not {what}; move it away or restore "
                        "it") from None
    try:
        value = json.loads(text)
    except ValueError as e:
        cut = " (truncated?)" if text.strip() and (
            e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated")) else ""
        raise UserError(f"{path} is not valid JSON{cut}: {e.msg}: line {e.lineno} column "
                        f"{e.colno}; it should be {what}: restore it, or move it away") from None
    for key, kind in (required or {}).items():
        if not isinstance(value, dict) or not isinstance(value.get(key), kind):
            found = (f"no {key!r}" if isinstance(value, dict) and key not in value else
                     f"{key!r} is {type(value.get(key)).__name__}" if isinstance(value, dict)
                     else f"a JSON {type(value).__name__}")
            raise UserError(f"{path} is not {what} ({found}); tfbert did not write it: move it "
                            "away, or choose another folder")
    return value


# --- run folders ----------------------------------------------------------------------------


def folder_kind(folder: str) -> str | None:
    """The kind of run `folder` holds ("pretraining", "classification", "ner", "qa", ...), from
    its record; None when it holds no run record.

    Raises:
        UserError: a record that is damaged or not tfbert's (named, with what is wrong).
    """
    manifest = read_json_file(os.path.join(folder, RUN_MANIFEST), "tfbert's run manifest",
                              {"task": str, "run_id": str, "outputs": list})
    if manifest is not None:
        return manifest["task"]
    journal = read_json_file(os.path.join(folder, RUN_JOURNAL), "tfbert's commit journal",
                             {"run": dict})
    if journal is not None:
        if not isinstance(journal["run"].get("task"), str):
            raise UserError(f"{os.path.join(folder, RUN_JOURNAL)} is not tfbert's commit journal "
                            "(its run has no 'task'); move it away")
        return journal["run"]["task"]
    record = read_json_file(os.path.join(folder, PRETRAIN_RECORD),
                            "tfbert's pretraining record", PRETRAIN_RECORD_KEYS)
    return PRETRAINING if record is not None else None


def claim_folder(folder: str, kind: str, inputs: Mapping[str, Any] | None = None,
                 name: str = "output_dir") -> str | None:
    """Raises UserError unless a `kind` run may write into `folder` (the rule above); returns
    the kind of run it holds (None: missing or empty). Reads only.

    Args:
        folder: str. The run's output folder.
        kind: str. The run's kind ("pretraining", or the fine-tuning task).
        inputs: {setting name: path or paths} the run reads (see `config_inputs`).
        name: str. The setting that names the folder, for the message.
    """
    if not folder:
        raise UserError(f"{name} is required")
    if "://" in folder:  # a remote file system: no listing rules (and no lock, see rundir)
        return None
    check_not_inputs([folder], inputs or {}, name)
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise UserError(f"{folder} is a file; {name} names the folder a run writes into: "
                        "choose a new folder")
    if not os.path.isdir(folder):
        return None
    found = folder_kind(folder)
    if found == kind:
        return found
    if found is not None:
        record = RUN_MANIFEST if found != PRETRAINING else PRETRAIN_RECORD
        raise UserError(f"{folder} holds a {found} run ({record}); a {kind} run does not write "
                        f"into it, so nothing there is replaced: choose another {name}")
    foreign = sorted(e for e in os.listdir(folder) if not _BOOKKEEPING.fullmatch(e))
    if foreign:
        listed = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more"
                                           if len(foreign) > 4 else "")
        raise UserError(f"{folder} holds {listed}, and no tfbert run record ({RUN_MANIFEST} or "
                        f"{PRETRAIN_RECORD}); a run writes only into an empty folder or one of "
                        f"its own kind's, so nothing there is replaced: choose another {name}")
    return None


def config_inputs(config: Any) -> dict[str, Any]:
    """{field: path} of what a run config reads: its `*_file` fields, init_checkpoint and
    data_dir (the ones that are set)."""
    fields = getattr(config, "__dataclass_fields__", {})
    return {f: getattr(config, f) for f in fields
            if (f.endswith("_file") or f in ("init_checkpoint", "data_dir"))
            and getattr(config, f, None)}


# --- single files ---------------------------------------------------------------------------


def sidecar_path(path: str) -> str:
    """`dir/.NAME.tfbert.json`: tfbert's record of the file `dir/NAME` it wrote."""
    directory, base = os.path.split(path)
    return os.path.join(directory, f".{base}.tfbert.json")


def is_owned_file(path: str) -> bool:
    """Whether tfbert wrote `path` and it is unchanged since (its sidecar says so)."""
    try:
        record = read_json_file(sidecar_path(path), "tfbert's record of a file it wrote",
                                {"bytes": int, "fingerprint": str})
    except UserError:
        return False
    return (record is not None and os.path.isfile(path)
            and record["bytes"] == os.path.getsize(path)
            and record["fingerprint"] == _fingerprint(path))


def claim_files(paths: Iterable[str], inputs: Mapping[str, Any] | None = None,
                overwrite: bool = False, name: str = "output_file",
                marker: str | None = None) -> None:
    """Raises UserError unless each of `paths` may be written (the rule above). Reads only.

    Args:
        paths: the files the command writes.
        inputs: {setting name: path or paths} the command reads.
        overwrite: bool. May replace an existing file that tfbert did not write.
        name: str. The setting that names the output, for the message.
        marker: str or None. For a generated file that carries a header: text in its first
            KiB that says tfbert wrote it ("Generated by data_tools/..."), instead of a sidecar.
    """
    paths = [p for p in paths if "://" not in p]
    check_not_inputs(paths, inputs or {}, name)
    for path in paths:
        if os.path.isdir(path):
            raise UserError(f"{path} is a folder; {name} names a file")
        if not os.path.lexists(path) or overwrite:
            continue
        if marker is not None and _head_holds(path, marker):
            continue
        if marker is None and is_owned_file(path):
            continue
        record = (f"its header does not say {marker!r}" if marker is not None else
                  f"no matching {os.path.basename(sidecar_path(path))} beside it")
        raise UserError(f"{path} exists and tfbert did not write it (or it changed since: "
                        f"{record}); pass --overwrite (overwrite=True) to replace it, or choose "
                        f"another {name}")


def visible_matches(pattern: str, matched: Iterable[str]) -> list[str]:
    """`matched` (a glob's matches) without hidden files, as a shell's glob leaves them out:
    tfbert's records `.NAME.tfbert.json` and the `.NAME.tmp-*` files of a write in progress are
    no input (`tf.io.gfile.glob("data/*")` matches them). A pattern whose last part starts with
    "." keeps them."""
    if os.path.basename(pattern).startswith("."):
        return list(matched)
    return [m for m in matched if not os.path.basename(m.rstrip("/")).startswith(".")]


def record_file(path: str) -> None:
    """Writes `path`'s sidecar (call it right after `path` is complete)."""
    if "://" in path:
        return
    write_json(sidecar_path(path), {"file": os.path.basename(path),
                                    "bytes": os.path.getsize(path),
                                    "fingerprint": _fingerprint(path),
                                    "written_by": command_line(), "time": now()})


def _head_holds(path: str, marker: str) -> bool:
    with open(path, "rb") as f:
        return marker.encode("utf-8") in f.read(1024)


def _fingerprint(path: str) -> str:
    digest = hashlib.sha256()
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        digest.update(f.read(_FINGERPRINT_BYTES))
        if size > 2 * _FINGERPRINT_BYTES:
            f.seek(size - _FINGERPRINT_BYTES)
        digest.update(f.read(_FINGERPRINT_BYTES))
    return digest.hexdigest()


# --- outputs and inputs ---------------------------------------------------------------------


def check_not_inputs(outputs: Sequence[str], inputs: Mapping[str, Any], name: str) -> None:
    """Raises UserError when an output is one of the inputs or lies inside an input folder.

    Args:
        outputs: the paths the command writes.
        inputs: {setting name: a path, comma-separated globs, or a list of them}.
        name: str. The setting that names the outputs, for the message.
    """
    for setting, value in inputs.items():
        for given in _paths(value):
            source = os.path.realpath(given)
            folder = source if os.path.isdir(source) else _prefix_folder(source)
            for output in outputs:
                target = os.path.realpath(output)
                if target == source:
                    typed = "" if os.path.abspath(given) == os.path.abspath(output) else (
                        f" ({given})")
                    raise UserError(f"{output} is also the {setting}{typed}; a command never "
                                    f"writes over one of its inputs: choose another {name}")
                if folder and (target == folder or target.startswith(folder + os.sep)):
                    raise UserError(f"{output} is inside the {setting} folder ({given}); a "
                                    f"command never writes into one of its inputs: choose "
                                    f"another {name}")


def _paths(value: Any) -> list[str]:
    """Local paths in an input setting: comma-separated parts, globs expanded (and kept)."""
    paths = []
    for part in [value] if isinstance(value, str) else list(value or ()):
        for piece in (part.split(",") if isinstance(part, str) else []):
            piece = piece.strip()
            if piece and "://" not in piece:
                paths.append(piece)
                if glob.has_magic(piece):
                    paths.extend(glob.glob(piece))
    return paths


def _prefix_folder(path: str) -> str | None:
    """The folder of a checkpoint prefix (`dir/bert_model.ckpt` with `.index` and `.data-*`
    files beside it), else None."""
    directory, base = os.path.split(path)
    if os.path.lexists(path) or not base or not os.path.isdir(directory):
        return None
    return directory if any(e.startswith(base + ".") for e in os.listdir(directory)) else None
