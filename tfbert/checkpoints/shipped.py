"""Models shipped inside the package, loaded by name with no network: `tfbert-chinese`.

A shipped model is a tfbert directory (`native.py`: config.json, model.safetensors in 16-bit
floats, vocab.txt, tfbert.json) under `tfbert/checkpoints/shipped/<name>/`, with the record of
the run that made it (pretraining.json: command, versions, processor, wall time, tokens/s, the
corpus sha256), its curve (curve.json, curve.png) and SHA256SUMS, the sha256 of each of those
files. SHA256SUMS's own sha256 is written below, so a changed or truncated file, SHA256SUMS
included, is one readable error naming it, never a model with garbage weights. Nothing writes
into these folders; `make tfbert-chinese` re-makes the model's files (docs/pretraining.md).

    path = shipped.resolve("tfbert-chinese")   # the checked folder; any tfbert loader reads it
    encoder = tfbert.from_pretrained("tfbert-chinese")
"""

from __future__ import annotations

import functools
import hashlib
import os

from tfbert.checkpoints.canonical import CheckpointError

SUMS_FILE = "SHA256SUMS"
SHIPPED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shipped")
# name -> sha256 of its SHA256SUMS (written by `tfbert.checkpoints.release`)
SHIPPED = {
    "tfbert-chinese": "326ed585d3820d7e5d750d714f1b0813ddff8653e7447c5002a39709acd69442",
}


def names() -> list[str]:
    """The names of the shipped models."""
    return sorted(SHIPPED)


def is_name(source: object) -> bool:
    """Whether `source` is the name of a shipped model (and not a path that exists)."""
    return isinstance(source, str) and source in SHIPPED and not os.path.exists(source)


def looks_like_a_name(source: str) -> bool:
    """A string with no path separator and no dot-prefix, which a user may have meant as a
    model name (used to list the known names when no such path exists)."""
    return bool(source) and os.sep not in source and "/" not in source and \
        not source.startswith(".")


def folder(name: str) -> str:
    """The folder of shipped model `name` (unchecked)."""
    return os.path.join(SHIPPED_DIR, name)


def resolve(source: str) -> str:
    """The checked folder of a shipped model name; any other string is returned unchanged.

    Raises:
        CheckpointError: a file of the model is missing, truncated or changed (its name, its
            sha256 and the recorded one in the message).
    """
    if not is_name(source):
        return source
    path = folder(source)
    _verify(path, source, SHIPPED[source], _stamp(path))
    return path


def _stamp(path: str) -> tuple:
    """Sizes and modification times of the folder's files: a verified folder is not hashed
    again in the same process unless one of them changed."""
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except FileNotFoundError:
        return ()
    return tuple((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in entries)


def file_sha256(path: str) -> str:
    """sha256 (hex) of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_sums(path: str) -> dict[str, str]:
    """SHA256SUMS as {file name: sha256}; lines are `<sha256>  <name>` (sha256sum's format)."""
    sums = {}
    with open(os.path.join(path, SUMS_FILE), encoding="utf-8") as f:
        for line in f:
            digest, _, name = line.rstrip("\n").partition("  ")
            if digest and name:
                sums[name] = digest
    return sums


@functools.lru_cache(maxsize=8)
def _verify(path: str, name: str, expected_sums: str, stamp: tuple) -> None:
    sums_path = os.path.join(path, SUMS_FILE)
    reinstall = "reinstall tfbert (pip install --force-reinstall tfbert) or re-make it " \
        "(make tfbert-chinese)"
    if not os.path.isfile(sums_path):
        raise CheckpointError(f"shipped model {name}: {sums_path} is missing; {reinstall}")
    actual = file_sha256(sums_path)
    if expected_sums and actual != expected_sums:
        raise CheckpointError(f"shipped model {name}: {sums_path} has sha256 {actual[:16]}..., "
                              f"not the recorded {expected_sums[:16]}...; {reinstall}")
    for file_name, digest in read_sums(path).items():
        file_path = os.path.join(path, file_name)
        if not os.path.isfile(file_path):
            raise CheckpointError(f"shipped model {name}: {file_path} is missing; {reinstall}")
        got = file_sha256(file_path)
        if got != digest:
            raise CheckpointError(
                f"shipped model {name}: {file_path} is changed or truncated (sha256 "
                f"{got[:16]}..., recorded {digest[:16]}..., {os.path.getsize(file_path):,} "
                f"bytes); {reinstall}")
