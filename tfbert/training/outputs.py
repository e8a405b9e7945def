"""Fine-tuning outputs committed together: output_dir holds one complete run, never a mix.

A fine-tuning run writes everything it makes (model/, results.json, predictions, logs/, the
built-in data it used) into a staging folder inside output_dir, `.tfbert-run-<run id>/`, and
`commit`s it when it has finished. The manifest `tfbert_run.json`, written last and atomically,
names the complete run that the folder holds: run id, task, start and end time, host, command,
config, and the top-level entries that are its outputs. The outputs carry the run id too
(results.json's "run_id", model/tfbert.json's "run_id"), so a file can be matched to its run.

Commit, under the run's lock (tfbert.rundir):
  1. the journal `.tfbert-commit.json` (atomic): the new manifest, the previous run's outputs to
     remove, and same-named entries that no manifest lists, to be kept as `NAME.before-<run id>`
     (tfbert never deletes what it did not write);
  2. renames: the previous outputs into `.tfbert-trash-<run id>/`, the unlisted entries aside,
     then each staged output into place;
  3. the manifest; then the journal, the trash and the staging folder are removed.

A kill before step 1 leaves the previous run untouched and a staging folder; a kill after it
leaves the journal, and `recover` (what every run does first) repeats steps 2-3, each of which
is a rename that finds its entry either moved or not, so the commit finishes. A reader tells the
states apart with `describe`: the manifest's run, plus the journal's run when a commit was cut.

Example:
>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> with staged(folder, task="demo") as run:
...     write_json(run.path("results.json"), {"accuracy": 0.5})
>>> read_manifest(folder)["outputs"]
['results.json']
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import Any

from tfbert import ownership
from tfbert.fileio import ordinary_permissions, write_json
from tfbert.ownership import command_line, now
from tfbert.rundir import LOCK_FILE, remove_atomic_temp_files

logger = logging.getLogger(__name__)

MANIFEST = ownership.RUN_MANIFEST
JOURNAL = ownership.RUN_JOURNAL
STAGING_PREFIX = ".tfbert-run-"
TRASH_PREFIX = ".tfbert-trash-"
MARKER = ".tfbert-staging.json"  # inside a staging folder: whose it is
_OWN = (MANIFEST, JOURNAL, LOCK_FILE)


@dataclasses.dataclass
class Staging:
    """A run's staging folder: write every output to `path(name)`."""

    output_dir: str
    run_id: str
    started: str
    directory: str

    def path(self, name: str) -> str:
        """Where the output `name` (a top-level file or folder of output_dir) is written."""
        if not name or os.sep in name or name.startswith(".") or name in _OWN:
            raise ValueError(f"{name!r} is not a top-level output name")
        return os.path.join(self.directory, name)

    def outputs(self) -> list[str]:
        return sorted(e for e in os.listdir(self.directory) if e != MARKER)


@dataclasses.dataclass
class RunState:
    """What a folder holds (`describe`): the complete run (its manifest, or None), the run a
    cut commit was finishing (its manifest, or None), and interrupted staging folders."""

    complete: dict[str, Any] | None
    committing: dict[str, Any] | None
    interrupted: list[dict[str, Any]]


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def read_manifest(output_dir: str) -> dict[str, Any] | None:
    """The manifest of the complete run in output_dir (None: no tfbert run committed there).

    Raises:
        UserError: a manifest that is damaged or not tfbert's, naming it and what is wrong.
    """
    return ownership.read_json_file(os.path.join(output_dir, MANIFEST), "tfbert's run manifest",
                                    {"task": str, "run_id": str, "outputs": list})


def describe(output_dir: str) -> RunState:
    """What output_dir holds, read only (see the module docstring)."""
    journal = _read_json(os.path.join(output_dir, JOURNAL))
    complete = read_manifest(output_dir)
    finished = {run["run_id"] for run in (journal and journal["run"], complete) if run}
    interrupted = []
    for entry in _entries(output_dir, STAGING_PREFIX):
        marker = _read_json(os.path.join(output_dir, entry, MARKER))
        if marker and marker["run_id"] not in finished:
            interrupted.append(marker)
    return RunState(complete, journal["run"] if journal else None, interrupted)


def recover(output_dir: str) -> dict[str, Any] | None:
    """Finishes a cut commit and removes interrupted staging folders and trash; returns the
    manifest of the complete run the folder then holds (None if none). Hold the run's lock."""
    if not os.path.isdir(output_dir):
        return None
    journal = _read_json(os.path.join(output_dir, JOURNAL))
    if journal:
        _apply(output_dir, journal)
        logger.warning("%s: run %s was interrupted while its outputs were moved into place; "
                       "that commit is finished now", output_dir, journal["run"]["run_id"])
    committed = (read_manifest(output_dir) or {}).get("run_id")
    for entry in _entries(output_dir, STAGING_PREFIX):
        path = os.path.join(output_dir, entry)
        marker = _read_json(os.path.join(path, MARKER))
        if marker and marker["run_id"] == committed:  # emptied by a commit cut at its end
            shutil.rmtree(path)
        elif marker:
            shutil.rmtree(path)
            logger.warning("%s holds an interrupted run (run %s, started %s); its partial "
                           "outputs (%s) were removed", output_dir, marker["run_id"],
                           marker["started"], entry)
        elif all(e.startswith(f".{MARKER}.tmp-") for e in os.listdir(path)):
            shutil.rmtree(path)  # killed between mkdir and the marker's rename
    for entry in _entries(output_dir, TRASH_PREFIX):
        shutil.rmtree(os.path.join(output_dir, entry))
    remove_atomic_temp_files(output_dir, (MANIFEST, JOURNAL))
    return read_manifest(output_dir)


@contextlib.contextmanager
def staged(output_dir: str, task: str, config: dict[str, Any] | None = None,
           keep: Sequence[str] = (), discard: bool = False) -> Iterator[Staging]:
    """A staging folder for one run's outputs, committed when the block ends without an error
    (removed, leaving output_dir as it was, when it raises). Hold the run's lock around it.

    Args:
        output_dir: str. The run's output folder (created if missing).
        task: str. Recorded in the manifest ("classification", "ner", "qa", ...).
        config: dict or None. The run's config, recorded in the manifest.
        keep: top-level outputs of the previous run that this run keeps unless it writes them
            itself (e.g. the model/ an eval-only run reads); they stay in place and in the
            manifest.
        discard: bool. Stage in a temporary folder outside output_dir and remove it at the
            end instead of committing (a non-chief multi-worker task: the chief's outputs are
            the run's).
    """
    os.makedirs(output_dir, exist_ok=True)
    previous = None if discard else recover(output_dir)
    if previous:
        logger.info("%s holds a complete run from %s (run %s); this run replaces it when it "
                    "finishes", output_dir, previous.get("finished"), previous["run_id"])
    run_id = new_run_id()
    run = Staging(output_dir, run_id, now(),
                  tempfile.mkdtemp(prefix=f"tfbert-{run_id}-") if discard
                  else os.path.join(output_dir, STAGING_PREFIX + run_id))
    os.makedirs(run.directory, exist_ok=True)
    write_json(os.path.join(run.directory, MARKER),
               {"run_id": run.run_id, "started": run.started, "pid": os.getpid(),
                "command": command_line()})
    try:
        yield run
    except BaseException:
        shutil.rmtree(run.directory, ignore_errors=True)
        logger.info("%s: the run failed; its partial outputs were removed and the folder "
                    "holds what it held before", output_dir)
        raise
    if discard:
        shutil.rmtree(run.directory, ignore_errors=True)
    else:
        commit(run, task, config, keep, previous)


def commit(run: Staging, task: str, config: dict[str, Any] | None = None,
           keep: Sequence[str] = (), previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """Moves a finished run's staged outputs into place (see the module docstring); returns
    its manifest."""
    output_dir = run.output_dir
    previous = previous if previous is not None else read_manifest(output_dir)
    old = list(previous["outputs"]) if previous else []
    new = run.outputs()
    kept = {name: _kept_run(previous, name) for name in keep if name in old and name not in new}
    listed = set(old)
    aside = {name: f"{name}.before-{run.run_id}" for name in new
             if name not in listed and os.path.lexists(os.path.join(output_dir, name))}
    manifest = {"run_id": run.run_id, "task": task, "started": run.started, "finished": now(),
                "command": command_line(), "pid": os.getpid(),
                "outputs": sorted(set(new) | set(kept)), "kept": kept, "config": config or {}}
    journal = {"run": manifest, "staging": os.path.basename(run.directory),
               "remove": [n for n in old if n not in kept], "aside": aside}
    write_json(os.path.join(output_dir, JOURNAL), journal)
    _apply(output_dir, journal)
    for name, moved in aside.items():
        logger.warning("%s/%s was not written by a tfbert run; it is kept as %s", output_dir,
                       name, moved)
    logger.info("%s: run %s committed (%s)", output_dir, run.run_id, ", ".join(manifest["outputs"]))
    return manifest


def _apply(output_dir: str, journal: dict[str, Any]) -> None:
    """Steps 2-3 of a commit; safe to repeat after a kill at any point."""
    manifest = journal["run"]
    staging = os.path.join(output_dir, journal["staging"])
    trash = os.path.join(output_dir, TRASH_PREFIX + manifest["run_id"])
    new = [n for n in manifest["outputs"] if n not in manifest.get("kept", {})]
    top = lambda name: os.path.join(output_dir, name)  # noqa: E731
    pending = lambda name: os.path.lexists(os.path.join(staging, name))  # noqa: E731
    for name in journal["remove"]:  # the previous run's outputs (a moved-in new one stays)
        if os.path.lexists(top(name)) and (name not in new or pending(name)):
            os.makedirs(trash, exist_ok=True)
            if os.path.lexists(os.path.join(trash, name)):
                _remove(os.path.join(trash, name))
            _rename(top(name), os.path.join(trash, name))
    for name, moved in journal["aside"].items():
        if os.path.lexists(top(name)) and pending(name) and not os.path.lexists(top(moved)):
            _rename(top(name), top(moved))
    for name in new:
        if pending(name):
            _rename(os.path.join(staging, name), top(name))
    write_json(top(MANIFEST), manifest)
    _remove(top(JOURNAL))
    for path in (trash, staging):
        if os.path.lexists(path):
            _remove(path)


def save_model(model: Any, directory: str, **kwargs: Any) -> None:
    """`tfbert.save_pretrained(model, directory, **kwargs)`, its files given ordinary
    permissions (safetensors writes model.safetensors 0600)."""
    # Here, not at the top: the commit machinery (staging, recovery, the run lock) loads
    # without Keras or TensorFlow, so a run folder is checked before the model loads.
    from tfbert.models.pretrained import save_pretrained

    save_pretrained(model, directory, **kwargs)
    for root, _, files in os.walk(directory):
        for name in files:
            ordinary_permissions(os.path.join(root, name))


def _rename(src: str, dst: str) -> None:
    os.replace(src, dst)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)


def _kept_run(previous: dict[str, Any], name: str) -> str:
    return previous.get("kept", {}).get(name, previous["run_id"])


def _entries(output_dir: str, prefix: str) -> list[str]:
    if not os.path.isdir(output_dir):
        return []
    return sorted(e for e in os.listdir(output_dir) if e.startswith(prefix)
                  and os.path.isdir(os.path.join(output_dir, e)))


def _read_json(path: str) -> Any:
    return ownership.read_json_file(path, "a tfbert run's bookkeeping file")
