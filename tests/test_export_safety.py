"""The export writes only what it owns, keeps what it did not write, holds its model folder
against a second export, leaves the previous version whole through a failure, a full disk or a
kill -9, and its signatures (SavedModel and TFLite) check their inputs.

A tiny classifier (export_test_utils.tiny_model: 2 layers, hidden 32, max_seq_length 32) is exported
once per module; tests copy that export wherever they need earlier versions. Folder tests hash
every file (path and bytes) under their temp folder before and after; `tree(..., lock=False)`
leaves out the export lock file (`.tfbert.lock`, which stays in a model folder an export used).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import tensorflow as tf
from export_test_utils import SEQ, tiny_model

import tfbert
from tfbert.errors import UserError
from tfbert.export import export_model, layout, tflite, tflite_text
from tfbert.export.__main__ import main
from tfbert.export.layout import EXPORT_RECORD, TFLITE_RECORD, is_tfbert_export
from tfbert.rundir import LOCK_FILE

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = ["这家酒店的服务很好，房间也干净。", "质量太差了", ""]


def tree(root, lock: bool = True) -> dict[str, str]:
    """{path under root: sha256 of the file's bytes, or "dir"} of everything under root
    (lock=False: without export lock files)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + [f for f in files if lock or f != LOCK_FILE]:
            path = os.path.join(folder, name)
            key = os.path.relpath(path, root)
            if os.path.isdir(path):
                out[key] = "dir"
            else:
                with open(path, "rb") as f:
                    out[key] = hashlib.sha256(f.read()).hexdigest()
    return out


def leftovers(folder) -> list[str]:
    return [name for name in os.listdir(folder) if name.startswith(".tfbert-")]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, chinese_vocab_file) -> str:
    path = str(tmp_path_factory.mktemp("safety") / "model")
    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").readlines())
    model, metadata = tiny_model("classification", vocab_size)
    tfbert.save_pretrained(model, path, vocab_file=chinese_vocab_file, metadata=metadata)
    return path


@pytest.fixture(scope="module")
def reference_export(model_dir, tmp_path_factory) -> str:
    """saved_models/cls/1 of the tiny model (its base folder given: the first version is 1)."""
    base = tmp_path_factory.mktemp("reference") / "saved_models" / "cls"
    result = export_model(model_dir, str(base), check=False)
    assert result["export_dir"] == str(base / "1") and result["version"] == 1
    assert not result["replaced"]
    return result["export_dir"]


@pytest.fixture(scope="module")
def loaded(reference_export):
    return tf.saved_model.load(reference_export)


def logits(export_dir: str) -> np.ndarray:
    return tf.saved_model.load(export_dir).signatures["serving_default"](
        text=tf.constant(TEXTS))["logits"].numpy()


def cli(args: list[str], cwd, monkeypatch, capsys) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `python -m tfbert.export ARGS` run in-process in cwd."""
    monkeypatch.chdir(cwd)
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


# --- the export writes only what it owns ----------------------------------------------------------


def test_export_dir_dot_is_refused(model_dir, tmp_path, monkeypatch, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.tsv").write_text("text\tlabel\n")
    before = tree(tmp_path)
    code, _, err = cli([f"--model_dir={model_dir}", "--export_dir=."], tmp_path,
                           monkeypatch, capsys)
    assert code == 2
    assert err.startswith("python -m tfbert.export: error: . holds data, notes.txt: not "
                          "numeric version folders or tflite/") and err.count("\n") == 1
    assert tree(tmp_path) == before


def test_fine_tuning_run_folder_is_refused(model_dir, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run1"
    shutil.copytree(model_dir, run / "model")
    (run / "results.json").write_text('{"accuracy": 0.9}')
    (run / "logs").mkdir()
    (run / "logs" / "train.log").write_text("step 1\n")
    before = tree(tmp_path)
    code, _, err = cli([f"--model_dir={model_dir}", "--export_dir=run1"], tmp_path,
                           monkeypatch, capsys)
    assert code == 2
    assert "error: run1 holds logs, model, results.json: not numeric version folders" in err
    assert tree(tmp_path) == before


def _model_folder(tmp_path, reference_export):
    """saved_models/cls with versions 1 and 2 (the reference export) and tflite/ (a file)."""
    base = tmp_path / "saved_models" / "cls"
    for version in ("1", "2"):
        shutil.copytree(reference_export, base / version)
    (base / "tflite").mkdir()
    (base / "tflite" / "model_ids_int8.tflite").write_bytes(b"not really")
    return base


@pytest.mark.slow  # 7 s; fast: the refusal tests of this module
def test_model_folder_gets_the_next_version(model_dir, reference_export, tmp_path, monkeypatch,
                                            capsys):
    base = _model_folder(tmp_path, reference_export)
    before = tree(tmp_path)
    code, out, _ = cli([f"--model_dir={model_dir}", "--export_dir=saved_models/cls"],
                           tmp_path, monkeypatch, capsys)
    assert code == 0
    assert out.startswith("SavedModel: saved_models/cls/3 (version 3; task classification")
    after = tree(tmp_path, lock=False)
    assert {k: v for k, v in after.items() if k in before} == before  # 1/, 2/, tflite/ as were
    new = sorted(k for k in after if k not in before)
    assert new[0] == os.path.join("saved_models", "cls", "3")
    assert all(k.startswith(new[0] + os.sep) for k in new[1:])
    assert is_tfbert_export(base / "3") and not leftovers(base)
    np.testing.assert_allclose(logits(str(base / "3")), logits(reference_export), atol=1e-6)


@pytest.mark.parametrize("case", ["tfbert export", "someone else's"])
def test_existing_version_needs_overwrite_and_must_be_tfberts(case, model_dir, reference_export,
                                                              tmp_path, monkeypatch, capsys):
    base = _model_folder(tmp_path, reference_export)
    if case == "someone else's":
        shutil.rmtree(base / "2")
        (base / "2").mkdir()
        (base / "2" / "saved_model.pb").write_bytes(b"another tool's model")
    before = tree(tmp_path)
    args = [f"--model_dir={model_dir}", "--export_dir=saved_models/cls/2"]
    code, _, err = cli(args, tmp_path, monkeypatch, capsys)
    assert code == 2
    if case == "tfbert export":
        assert ("error: saved_models/cls/2 already holds a tfbert export; pass --overwrite "
                "(overwrite=True) to replace it, or export to saved_models/cls to add the next "
                "version") in err
    else:
        assert "error: saved_models/cls/2 exists and is not a tfbert export" in err
        code, _, err = cli(args + ["--overwrite"], tmp_path, monkeypatch, capsys)
        assert code == 2 and "saved_models/cls/2 exists and is not a tfbert export" in err
    assert tree(tmp_path) == before


@pytest.mark.slow  # 8 s; fast: the refusal tests of this module
def test_overwrite_replaces_the_version(model_dir, reference_export, tmp_path, monkeypatch,
                                        capsys, caplog):
    base = _model_folder(tmp_path, reference_export)
    warmup = os.path.join("saved_models", "cls", "2", "assets.extra", "tf_serving_warmup_requests")
    _write_bytes(tmp_path / warmup, bytes(range(256)))  # TF Serving's warmup file: the user's
    before = tree(tmp_path)
    inode = os.stat(base / "2").st_ino
    with caplog.at_level(logging.INFO, logger="tfbert.export.layout"):
        code, out, _ = cli([f"--model_dir={model_dir}", "--export_dir=saved_models/cls/2",
                            "--overwrite"], tmp_path, monkeypatch, capsys)
    assert code == 0
    assert ("kept 1 file(s) that tfbert did not write in saved_models/cls/2, copied unchanged "
            "into the new export: assets.extra/tf_serving_warmup_requests") in caplog.messages
    assert out.startswith("SavedModel: saved_models/cls/2 (version 2, replacing the earlier "
                          "export; task classification")
    assert os.stat(base / "2").st_ino != inode and is_tfbert_export(base / "2")
    after = tree(tmp_path, lock=False)
    inside = os.path.join("saved_models", "cls", "2") + os.sep
    assert ({k: v for k, v in after.items() if not k.startswith(inside)}
            == {k: v for k, v in before.items() if not k.startswith(inside)})
    assert after[warmup] == before[warmup]
    assert not leftovers(base)
    np.testing.assert_allclose(logits(str(base / "2")), logits(reference_export), atol=1e-6)


def test_failed_export_leaves_the_previous_version(model_dir, reference_export, tmp_path,
                                                   monkeypatch):
    base = _model_folder(tmp_path, reference_export)
    before = tree(tmp_path)

    def save_then_fail(obj, export_dir, **kwargs):
        with open(os.path.join(export_dir, "saved_model.pb"), "wb") as f:
            f.write(b"half a model")
        raise OSError("No space left on device")

    monkeypatch.setattr(tf.saved_model, "save", save_then_fail)
    with pytest.raises(OSError, match="No space left"):
        export_model(model_dir, str(base / "2"), check=False, overwrite=True)
    assert tree(tmp_path, lock=False) == before  # no temp folder either
    assert (base / LOCK_FILE).read_text() == ""  # released


def _fake_export(path, tag: str) -> None:
    os.makedirs(os.path.join(path, "assets.extra"), exist_ok=True)
    with open(os.path.join(path, "saved_model.pb"), "w") as f:
        f.write(tag)
    with open(os.path.join(path, EXPORT_RECORD), "w") as f:
        f.write("{}")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_replacing_without_an_atomic_exchange(tmp_path, monkeypatch):
    """Where renameat2 is missing: the old version is renamed aside, the new one in, the old one
    deleted; a failing second rename puts the old one back."""
    _fake_export(tmp_path / "1", "old")
    monkeypatch.setattr(layout, "_exchange", lambda a, b: False)
    layout.write_version(str(tmp_path / "1"), lambda d: _fake_export(d, "new"),
                         overwrite=True)
    assert (tmp_path / "1" / "saved_model.pb").read_text() == "new"
    assert not leftovers(tmp_path)
    real_rename = os.rename

    def rename(src, dst):
        if os.path.basename(src).startswith(".tfbert-tmp-"):
            raise OSError("rename failed")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError, match="rename failed"):
        layout.write_version(str(tmp_path / "1"), lambda d: _fake_export(d, "newer"),
                             overwrite=True)
    assert (tmp_path / "1" / "saved_model.pb").read_text() == "new"
    assert not leftovers(tmp_path)


def test_leftovers_of_killed_exports(tmp_path):
    dead, alive = _dead_pid(), os.getpid()
    _fake_export(tmp_path / f".tfbert-old-1-{dead}-aaaa", "old 1")  # killed between renames
    _fake_export(tmp_path / "2", "new 2")
    _fake_export(tmp_path / f".tfbert-old-2-{dead}-bbbb", "old 2")  # killed before deleting it
    _fake_export(tmp_path / f".tfbert-tmp-3-{dead}-cccc", "half")  # killed while writing
    (tmp_path / f".tfbert-tmp-4-{dead}-dddd").mkdir()  # killed right after mkdtemp
    (tmp_path / f".tfbert-tmp-7-{dead}-gggg" / "variables").mkdir(parents=True)
    (tmp_path / f".tfbert-tmp-7-{dead}-gggg" / ".tfbert-writing").touch()  # killed in save()
    kept = [f".tfbert-tmp-5-{alive}-eeee", f".tfbert-tmp-6-{dead}-ffff", ".tfbert-tmp-x"]
    _fake_export(tmp_path / kept[0], "still being written")
    (tmp_path / kept[1]).mkdir()
    (tmp_path / kept[1] / "notes.txt").write_text("not tfbert's")  # no record: not recognised
    (tmp_path / kept[2]).mkdir()
    assert sorted(layout.remove_leftovers(str(tmp_path))) == [
        f".tfbert-old-1-{dead}-aaaa", f".tfbert-old-2-{dead}-bbbb", f".tfbert-tmp-3-{dead}-cccc",
        f".tfbert-tmp-4-{dead}-dddd", f".tfbert-tmp-7-{dead}-gggg"]
    assert sorted(os.listdir(tmp_path)) == sorted(["1", "2", *kept])
    assert (tmp_path / "1" / "saved_model.pb").read_text() == "old 1"  # put back
    assert (tmp_path / "2" / "saved_model.pb").read_text() == "new 2"
    with pytest.raises(UserError, match="holds .tfbert-tmp-x: not numeric"):
        layout.version_folder(str(tmp_path))  # a name tfbert does not make is foreign
    shutil.rmtree(tmp_path / kept[2])
    assert layout.version_folder(str(tmp_path)) == str(tmp_path / "3")


def _write_bytes(path, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def test_overwrite_keeps_the_files_tfbert_did_not_write(tmp_path, caplog):
    """The record lists what the export wrote; replacing it copies everything else (TF
    Serving's warmup requests, a user's notes, an empty folder, a link) unchanged into the new
    version, and says so."""
    version = tmp_path / "cls" / "1"
    layout.write_version(str(version), lambda d: _fake_export(d, "old"))
    with open(version / EXPORT_RECORD, encoding="utf-8") as f:
        assert json.load(f)["files"] == ["assets.extra/tfbert_export.json", "saved_model.pb"]
    warmup = bytes(range(256)) * 3
    _write_bytes(version / "assets.extra" / "tf_serving_warmup_requests", warmup)
    _write_bytes(version / "docs" / "NOTES.md", b"what this version is\n")
    os.chmod(version / "docs" / "NOTES.md", 0o600)
    (version / "empty").mkdir()
    os.symlink("saved_model.pb", version / "current")
    ours = ("saved_model.pb", EXPORT_RECORD, "current")  # (the link's target changes)
    mine = {k: v for k, v in tree(version).items() if k not in ours}
    for new in ("new", "newer"):  # kept again by the next export
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="tfbert.export.layout"):
            layout.write_version(str(version), lambda d, tag=new: _fake_export(d, tag),
                                 overwrite=True)
        assert (version / "saved_model.pb").read_text() == new
        assert {k: v for k, v in tree(version).items() if k not in ours} == mine
        assert (version / "assets.extra" / "tf_serving_warmup_requests").read_bytes() == warmup
        assert os.stat(version / "docs" / "NOTES.md").st_mode & 0o777 == 0o600
        assert os.readlink(version / "current") == "saved_model.pb"
        with open(version / EXPORT_RECORD, encoding="utf-8") as f:
            assert json.load(f)["files"] == ["assets.extra/tfbert_export.json",
                                             "saved_model.pb"]
        assert [r.getMessage() for r in caplog.records] == [
            f"kept 4 file(s) that tfbert did not write in {version}, copied unchanged into the "
            "new export: assets.extra/tf_serving_warmup_requests, current, docs/NOTES.md, empty"]
        assert not leftovers(tmp_path / "cls")


def test_overwrite_of_an_export_without_a_file_list(tmp_path):
    """A record without "files": the SavedModel's parts and the record are tfbert's, the rest
    is kept; a kept file in the way of one the new export writes stops it."""
    version = tmp_path / "1"
    _fake_export(version, "old")  # its record is "{}"
    _write_bytes(version / "variables" / "variables.index", b"old weights")
    _write_bytes(version / "fingerprint.pb", b"old fingerprint")
    _write_bytes(version / "assets.extra" / "tf_serving_warmup_requests", b"warm")
    layout.write_version(str(version), lambda d: _fake_export(d, "new"), overwrite=True)
    assert sorted(tree(version)) == sorted([
        "assets.extra", EXPORT_RECORD, os.path.join("assets.extra", "tf_serving_warmup_requests"),
        "saved_model.pb"])
    assert (version / "assets.extra" / "tf_serving_warmup_requests").read_bytes() == b"warm"

    _write_bytes(version / "extra.bin", b"the user's")
    before = tree(tmp_path)

    def with_extra(folder):
        _write_bytes(os.path.join(folder, "extra.bin"), b"tfbert's")
        _fake_export(folder, "newer")

    with pytest.raises(UserError, match=re.escape(
            f"{version / 'extra.bin'} was not written by tfbert, and the new export writes "
            "extra.bin too; move it away. Nothing was written")):
        layout.write_version(str(version), with_extra, overwrite=True)
    assert tree(tmp_path) == before


def test_a_full_disk_is_one_line_and_the_old_version_stays(tmp_path, monkeypatch):
    _fake_export(tmp_path / "1", "old")
    before = tree(tmp_path)

    def fill_up(folder):
        _write_bytes(os.path.join(folder, "saved_model.pb"), b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(UserError) as error:
        layout.write_version(str(tmp_path / "1"), fill_up, overwrite=True)
    assert str(error.value) == (
        f"writing the export {tmp_path / '1'} failed: the disk is full (No space left on "
        f"device); the previous export in {tmp_path / '1'} is intact, and no temp folder is "
        "left. Free some space and run the export again")
    with pytest.raises(UserError, match=re.escape(
            f"writing the export {tmp_path / '2'} failed: the disk is full (No space left on "
            f"device); {tmp_path / '2'} was not made, and no temp folder is left")):
        layout.write_version(str(tmp_path / "2"), fill_up)
    assert tree(tmp_path) == before
    with pytest.raises(OSError, match="Permission denied"):  # anything else keeps its trace
        layout.write_version(str(tmp_path / "2"), lambda d: (_ for _ in ()).throw(
            PermissionError(errno.EACCES, "Permission denied")))
    # A TFLite file: the file and tfbert's record of it stay as they were.
    tflite_dir = tmp_path / "tflite"
    layout.write_owned_file(str(tflite_dir), "model.tflite", b"v1")
    before = tree(tflite_dir)
    real_replace = os.replace

    def full_replace(src, dst):
        if os.path.basename(dst) == "model.tflite":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", full_replace)
    with pytest.raises(UserError, match=re.escape(
            f"writing {tflite_dir / 'model.tflite'} failed: the disk is full (No space left on "
            f"device); {tflite_dir / 'model.tflite'} is as it was")):
        layout.write_owned_file(str(tflite_dir), "model.tflite", b"v2", overwrite=True)
    assert (tflite_dir / "model.tflite").read_bytes() == b"v1"
    monkeypatch.undo()
    layout.write_owned_file(str(tflite_dir), "model.tflite", b"v2", overwrite=True)  # claimable
    assert (tflite_dir / "model.tflite").read_bytes() == b"v2" and before


def test_a_full_disk_during_the_export_command(model_dir, reference_export, tmp_path,
                                               monkeypatch, capsys):
    """TensorFlow's writers report a full disk as ResourceExhaustedError."""
    _model_folder(tmp_path, reference_export)
    before = tree(tmp_path)

    def save_then_fill(obj, export_dir, **kwargs):
        _write_bytes(os.path.join(export_dir, "variables", "variables.data-00000-of-00001"),
                     b"half")
        raise tf.errors.ResourceExhaustedError(
            None, None, f"{export_dir}/variables/variables.data-00000-of-00001; No space left "
                        "on device\n\t [[{{node SaveV2}}]]")

    monkeypatch.setattr(tf.saved_model, "save", save_then_fill)
    code, out, err = cli([f"--model_dir={model_dir}", "--export_dir=saved_models/cls/2",
                          "--overwrite"], tmp_path, monkeypatch, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(
        "python -m tfbert.export: error: writing the export saved_models/cls/2 failed: the disk "
        "is full (")
    assert err.endswith("No space left on device); the previous export in saved_models/cls/2 "
                        "is intact, and no temp folder is left. Free some space and run the "
                        "export again\n")
    assert tree(tmp_path, lock=False) == before  # version 2 byte for byte, no temp folder


_HOLD = textwrap.dedent("""
    import sys, time
    from tfbert.rundir import RunLock
    base = sys.argv[1]
    sys.argv = ["-m", "tfbert.export", "--export_dir=" + base, "--overwrite"]  # as the export
    RunLock(base).acquire()
    print("locked", flush=True)
    time.sleep(600)
""")


def test_a_second_export_to_a_model_folder_in_use(model_dir, reference_export, tmp_path,
                                                  monkeypatch, capsys):
    """An export holds its model folder's lock from choosing the version to its last file: a
    second one, with --overwrite or without, stops at once naming the first (a subprocess
    holds the lock as an export would), and writes nothing."""
    base = _model_folder(tmp_path, reference_export)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(base)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = tree(tmp_path)
        for args in (["--export_dir=saved_models/cls/2", "--overwrite"],
                     ["--export_dir=saved_models/cls"], ["--export_dir=saved_models/cls/3"]):
            code, out, err = cli([f"--model_dir={model_dir}", *args], tmp_path, monkeypatch,
                                 capsys)
            assert code == 2 and out == "" and err.count("\n") == 1, args
            assert err.startswith(
                f"python -m tfbert.export: error: {base} is in use by another export (pid "
                f"{holder.pid} on host "), args
            python = os.path.basename(sys.executable)  # the holder's interpreter, as recorded
            assert err.endswith(f": {python} -m tfbert.export --export_dir={base} --overwrite); "
                                "wait for it to end and run this export again. Nothing was "
                                "written\n"), args
            assert "pass --overwrite" not in err
            assert tree(tmp_path) == before
    finally:
        holder.kill()
        holder.wait(timeout=30)
    with layout.lock_model_folder(str(base)) as lock:  # free again once the holder is gone
        with open(lock.path, encoding="utf-8") as f:
            assert json.load(f)["pid"] == os.getpid()
    assert (base / LOCK_FILE).read_text() == ""
    assert layout.version_folder(str(base)) == str(base / "3")  # the lock file is tfbert's


def test_cpu_streams_that_do_not_fit_the_model(model_dir, tmp_path, monkeypatch, capsys):
    from tfbert.export.streams import check_streams

    code, out, err = cli([f"--model_dir={model_dir}", "--export_dir=saved_models/cls",
                          "--cpu_streams=3"], tmp_path, monkeypatch, capsys)
    assert (code, out) == (2, "")
    assert err == ("python -m tfbert.export: error: cpu_streams 3 does not fit the model: 3 "
                   "streams must divide the 4 attention heads and the intermediate size 64; use "
                   "1, 2 or 4 (1 is the plain graph)\n")
    assert os.listdir(tmp_path) == []
    with pytest.raises(UserError, match=re.escape(
            "cpu_streams 3 does not fit the model: 3 streams must divide the 2 attention heads "
            "and the intermediate size 32; use 1 or 2 (1 is the plain graph)")):
        check_streams(2, 32, 3)
    with pytest.raises(UserError, match=re.escape("intermediate size 30; use 1, 2, 3 or 6 (1 is")):
        check_streams(12, 30, 4)
    check_streams(12, 3072, 6)


@pytest.fixture(scope="module")
def pretraining_run(chinese_vocab_file, tmp_path_factory) -> tuple[str, object]:
    """A run_pretraining output folder as it saves its model (BertPretrainer, task
    "pretraining" in tfbert.json), and the pretrainer."""
    from tfbert.models.pretrainer import BertPretrainer

    run = tmp_path_factory.mktemp("pretraining") / "run"
    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").readlines())
    config = tfbert.BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=64, initializer_range=0.2)
    pretrainer = BertPretrainer(tfbert.BertEncoder(config))
    tfbert.save_pretrained(pretrainer, str(run / "model"), vocab_file=chinese_vocab_file,
                           metadata={"task": "pretraining", "max_seq_length": 16,
                                     "global_step": 4})
    (run / "pretrain_results.json").write_text('{"global_step": 4}')
    return str(run), pretrainer


def test_a_pretraining_run_exports_its_encoder(pretraining_run):
    """docs/serving.md: any pretrained checkpoint exports as an encoder; a run_pretraining
    output (its model/ folder or the run folder) too."""
    from tfbert.export import load_for_export

    run, pretrainer = pretraining_run
    for model_dir in (os.path.join(run, "model"), run):
        encoder, _, spec, metadata = load_for_export(model_dir)
        assert metadata["task"] == "pretraining"
        assert (type(encoder).__name__, spec.task, spec.seq_length) == ("BertEncoder",
                                                                        "encoder", 16)
        want = pretrainer.encoder.get_weights()
        assert len(encoder.get_weights()) == len(want)
        for got, weight in zip(encoder.get_weights(), want, strict=True):
            np.testing.assert_array_equal(got, weight)


@pytest.mark.slow  # writes and checks a SavedModel (~15 s CPU); fast: the test above
def test_the_export_command_on_a_pretraining_run(pretraining_run, tmp_path, monkeypatch,
                                                 capsys):
    run, _ = pretraining_run
    code, out, err = cli([f"--model_dir={run}/model", "--export_dir=saved_models/bert"],
                         tmp_path, monkeypatch, capsys)
    assert code == 0, err
    assert out.startswith("SavedModel: saved_models/bert/1 (version 1; task encoder, "
                          "max_seq_length 16, float32)")
    assert ("serve_ids: input_ids, input_mask, segment_ids -> input_mask, pooled_output, "
            "sequence_output") in out
    assert "TF Serving 2.20: OK" in out


@pytest.mark.slow
def test_kill_9_leaves_the_old_or_the_new_export(model_dir, reference_export, tmp_path):
    """`python -m tfbert.export --overwrite` over version 1, killed with SIGKILL at several
    moments (before its temp folder appears, while it writes, right after the swap): version 1
    is a whole export every time, loadable, with the same outputs."""
    base = tmp_path / "saved_models" / "cls"
    version = base / "1"
    shutil.copytree(reference_export, version)
    want = logits(reference_export)
    command = [sys.executable, "-m", "tfbert.export", f"--model_dir={model_dir}",
               f"--export_dir={version}", "--overwrite"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    seen = []
    for moment in ("start", 0.0, 0.4, 1.5, "swap"):
        inode = os.stat(version).st_ino
        proc = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        temp = f".tfbert-tmp-1-{proc.pid}-"
        deadline = time.monotonic() + 300
        if moment == "start":
            time.sleep(1.0)
        else:
            while (proc.poll() is None and time.monotonic() < deadline
                   and not any(n.startswith(temp) for n in os.listdir(base))):
                time.sleep(0.005)
            if moment == "swap":
                while proc.poll() is None and os.stat(version).st_ino == inode:
                    time.sleep(0.001)
            else:
                time.sleep(moment)
        assert proc.poll() is None, f"the export ended before the kill at {moment}"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert is_tfbert_export(version), moment
        with open(version / EXPORT_RECORD, encoding="utf-8") as f:
            assert json.load(f)["task"] == "classification", moment
        np.testing.assert_allclose(logits(str(version)), want, atol=1e-6, err_msg=str(moment))
        seen.append("new" if os.stat(version).st_ino != inode else "old")
    assert seen[0] == "old" and seen[-1] == "new", seen
    subprocess.run(command, env=env, cwd=REPO, check=True, capture_output=True, timeout=300)
    assert not leftovers(base)  # the last export cleaned what the killed ones left


# --- TFLite files ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tflite_export(model_dir, tmp_path_factory) -> dict:
    """saved_models/cls/1 and tflite/model_{ids,text}_float32.tflite, written under umask 022."""
    base = tmp_path_factory.mktemp("tflite") / "saved_models" / "cls"
    umask = os.umask(0o022)
    try:
        return export_model(model_dir, str(base), tflite=("float32",), check=False)
    finally:
        os.umask(umask)


@pytest.mark.slow  # (TFLite conversion; test_tflite.py converts fast)
def test_written_files_have_ordinary_permissions(tflite_export):
    base = os.path.dirname(tflite_export["export_dir"])
    modes = {}
    for folder, dirs, files in os.walk(base):
        for name in dirs + files:
            path = os.path.join(folder, name)
            modes[os.path.relpath(path, base)] = os.stat(path).st_mode & 0o777
    assert {os.path.join("tflite", n) for n in ("model_ids_float32.tflite", "vocab.txt",
                                                "model_text_float32.tflite", TFLITE_RECORD)
            } | {"1", os.path.join("1", "saved_model.pb"), os.path.join("1", EXPORT_RECORD)
                 } <= set(modes)
    wrong = {k: oct(m) for k, m in modes.items()
             if m != (0o755 if os.path.isdir(os.path.join(base, k)) else 0o644)}
    assert not wrong


@pytest.mark.slow  # (TFLite conversion)
def test_tflite_files_are_replaced_only_if_tfberts(model_dir, tflite_export, tmp_path):
    base = tmp_path / "cls"
    shutil.copytree(os.path.dirname(tflite_export["export_dir"]), base)
    (base / "tflite" / "notes.txt").write_text("mine")
    before = tree(tmp_path)
    with pytest.raises(UserError, match=re.escape(
            f"{base / 'tflite' / 'model_ids_float32.tflite'} exists; pass --overwrite")):
        export_model(model_dir, str(base), tflite=("float32",), text_tflite=False, check=False)
    with (base / "tflite" / "model_ids_float32.tflite").open("ab") as f:
        f.write(b"edited")
    edited = tree(tmp_path)
    with pytest.raises(UserError, match="model_ids_float32.tflite was not written by tfbert, "
                                        "or changed since"):
        export_model(model_dir, str(base), tflite=("float32",), text_tflite=False, check=False,
                     overwrite=True)
    assert tree(tmp_path) == edited and edited != before  # refused before anything was written
    shutil.copy(os.path.join(os.path.dirname(tflite_export["export_dir"]), "tflite",
                             "model_ids_float32.tflite"), base / "tflite")
    result = export_model(model_dir, str(base), tflite=("float32",), text_tflite=False,
                          check=False, overwrite=True)
    assert result["export_dir"] == str(base / "2")
    after = tree(tmp_path)
    unchanged = [os.path.join("cls", p) for p in ("1", os.path.join("tflite", "notes.txt"),
                                                  os.path.join("tflite", "vocab.txt"),
                                                  os.path.join("tflite",
                                                               "model_text_float32.tflite"))]
    assert all(after[k] == before[k] for k in unchanged)
    with open(base / "tflite" / TFLITE_RECORD, encoding="utf-8") as f:
        record = json.load(f)["files"]
    assert record["model_ids_float32.tflite"] == [
        after[os.path.join("cls", "tflite", "model_ids_float32.tflite")]]
    assert not leftovers(base) and not leftovers(base / "tflite")


# --- the serving boundary ------------------------------------------------------------------------


def _bad(name: str, value: int) -> dict[str, np.ndarray]:
    inputs = {"input_ids": np.full([1, SEQ], 100, np.int32),
              "input_mask": np.ones([1, SEQ], np.int32),
              "segment_ids": np.zeros([1, SEQ], np.int32)}
    inputs[name][0, 3] = value
    return inputs


def _bad_cases(vocab_size: int) -> list[tuple[dict, str]]:
    return [(_bad("input_ids", 99999), f"input_ids holds 99999, outside [0, {vocab_size})"),
            (_bad("input_ids", -5), f"input_ids holds -5, outside [0, {vocab_size})"),
            (_bad("segment_ids", 7), "segment_ids holds 7, outside [0, 2)"),
            (_bad("input_mask", 2), "input_mask holds 2, not 0 or 1"),
            ({**_bad("input_ids", 100), "input_mask": np.ones([2, SEQ], np.int32)},
             f"input_ids, input_mask and segment_ids have shapes [1 {SEQ}], [2 {SEQ}] and "
             f"[1 {SEQ}]; they must have the same shape")]


def test_serve_ids_names_the_bad_input(loaded, chinese_vocab_file):
    serve_ids = loaded.signatures["serve_ids"]
    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").readlines())
    for inputs, message in _bad_cases(vocab_size):
        with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(message)):
            serve_ids(**{k: tf.constant(v) for k, v in inputs.items()})
    good = serve_ids(**{k: tf.constant(v) for k, v in _bad("input_ids", 100).items()})
    assert good["logits"].shape == (1, 2)  # and it keeps serving


def test_shapes_tf_serving_would_pass_through(reference_export):
    """TF Serving feeds tensors of any shape to the graph (its Session::Run checks none); the
    TF1 session below does the same, past Python's feed shape check."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], reference_export)

        def run(signature: str, feeds: dict[str, np.ndarray]) -> None:
            sig = meta.signature_def[signature]
            get = sess.graph.get_tensor_by_name
            sess._call_tf_sessionrun(
                None, {get(sig.inputs[k].name)._as_tf_output(): v for k, v in feeds.items()},
                [get(sig.outputs["logits"].name)._as_tf_output()], [], None)

        run("serving_default", {"text": np.array([b"ok"], object)})
        for text, shape in [([[b"a", b"b"], [b"c", b"d"]], "[2 2]"), ([[[b"a"]]], "[1 1 1]"),
                            (b"a", "[]")]:
            with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(
                    f"text has shape {shape}, expected [B] (one string per example)")):
                run("serving_default", {"text": np.array(text, object)})
        ids = {k: v[0] for k, v in _bad("input_ids", 100).items()}  # [T]
        with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(
                f"input_ids has shape [{SEQ}], expected [B, {SEQ}]")):
            run("serve_ids", ids)
        long = {k: np.concatenate([v, v[:, :1]], 1) for k, v in _bad("input_ids", 100).items()}
        with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(
                f"input_ids has shape [1 {SEQ + 1}], expected [B, {SEQ}]")):
            run("serve_ids", long)


def test_text_pairs_must_match(model_dir):
    from tfbert.export import load_for_export
    from tfbert.export.saved_model import BertServingModule

    model, vocab_file, spec, _ = load_for_export(model_dir, pair=True)
    module = BertServingModule(model, vocab_file, spec)
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(
            "text has 2 strings and text_b 1: text and text_b must have the same number of "
            "strings")):
        module.serve_text(tf.constant(["a", "b"]), tf.constant(["c"]))


@pytest.mark.slow  # (TFLite conversion)
def test_tflite_ids_model_fails_on_bad_input(tflite_export, loaded, chinese_vocab_file):
    """TFLite has no Assert: a failed check makes the interpreter fail (no message names the
    input); a good input gives the SavedModel's outputs."""
    path = tflite_export["tflite"]["model_ids_float32.tflite"]["path"]
    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").readlines())
    for inputs, _ in _bad_cases(vocab_size):
        with pytest.raises(RuntimeError, match="gather index out of bounds"):
            tflite.run_tflite(tflite.make_interpreter(path, text_ops=False), inputs)
    good = _bad("input_ids", 100)
    got = tflite.run_tflite(tflite.make_interpreter(path, text_ops=False), good)
    want = loaded.signatures["serve_ids"](**{k: tf.constant(v) for k, v in good.items()})
    np.testing.assert_allclose(got["logits"], want["logits"].numpy(), atol=1e-4)
    text = tflite_export["tflite"]["model_text_float32.tflite"]["path"]
    with pytest.raises(RuntimeError, match="shape must be rank 1"):
        tflite.run_tflite(tflite.make_interpreter(text, text_ops=True),
                          {"text": np.array([[b"a", b"b"]], object)})


@pytest.mark.slow  # converts a text TFLite model (the pair form), ~8 s
def test_tflite_pair_text_model(model_dir, chinese_vocab_file, tmp_path):
    """A sentence-pair text model converts, packs like the reference, and fails (at prepare, in
    the packer's GATHER) on a text_b count that differs from text's."""
    from tfbert.export import load_for_export

    model, vocab_file, spec, _ = load_for_export(model_dir, pair=True)
    files = tflite.export_tflite(model, spec, vocab_file, str(tmp_path), ("float32",),
                                 kinds=("text",))
    path = files["model_text_float32.tflite"]["path"]
    a, b = ["北京欢迎你", "质量太差了，不推荐购买。"], ["你好", ""]
    got = tflite.run_tflite(tflite.make_interpreter(path, text_ops=True), {
        "text": np.array([t.encode() for t in a], object),
        "text_b": np.array([t.encode() for t in b], object)})
    want = tfbert.BertPreprocessor(chinese_vocab_file, SEQ)((tf.constant(a), tf.constant(b)))
    np.testing.assert_array_equal(got["input_ids"], want["input_ids"].numpy())
    with pytest.raises(RuntimeError, match=re.escape("(GATHER) failed to prepare")):
        tflite.run_tflite(tflite.make_interpreter(path, text_ops=True), {
            "text": np.array([b"a", b"b"], object), "text_b": np.array([b"c"], object)})


INVALID_UTF8 = [b"\x80\x80\x80", "中国".encode() + b"\xff" + "人民".encode(), b"the\x80b",
                "\ufffd".encode(), "好".encode() + b"\xe4\xb8", b"\xed\xa0\x80\xc0\xafa",
                "模型".encode()]


@pytest.mark.slow  # (TFLite conversion)
def test_invalid_utf8_reads_alike_in_saved_model_and_tflite(tflite_export, loaded,
                                                            chinese_vocab_file):
    """Both drop invalid byte sequences (and U+FFFD), as the reference tokenizer does: an
    all-invalid text is [CLS] [SEP]."""
    path = tflite_export["tflite"]["model_text_float32.tflite"]["path"]
    got = tflite.run_tflite(tflite.make_interpreter(path, text_ops=True),
                            {"text": np.array(INVALID_UTF8, object)})
    reference = tfbert.BertPreprocessor(chinese_vocab_file, SEQ)(tf.constant(INVALID_UTF8))
    np.testing.assert_array_equal(got["input_ids"], reference["input_ids"].numpy())
    assert got["input_ids"][0, :3].tolist() == [2, 3, 0]  # [CLS] [SEP] [PAD]
    want = loaded.signatures["serving_default"](text=tf.constant(INVALID_UTF8))["logits"]
    np.testing.assert_allclose(got["logits"], want.numpy(), atol=1e-4)


def test_drop_invalid_utf8_matches_python_decoding():
    rng = np.random.default_rng(0)
    alphabet = [0x41, 0x20, 0x80, 0x8F, 0x9F, 0xA0, 0xBF, 0xBD, 0xC0, 0xC3, 0xE0, 0xE4, 0xED,
                0xEF, 0xF0, 0xF4, 0xF5, 0xFF]
    texts = [bytes(rng.choice(alphabet, rng.integers(0, 24)).tolist()) for _ in range(400)]
    texts += [bytes(rng.integers(0, 256, 16).tolist()) for _ in range(100)]
    texts += [b"a\x80" * 300]  # more stretches than UTF8_STRETCHES
    got = tf.function(tflite_text.drop_invalid_utf8)(tf.constant(texts)).numpy().tolist()
    want = [t.decode("utf-8", errors="replace").replace("\ufffd", "").encode() for t in texts]
    assert got[:-1] == want[:-1]
    kept = tflite_text.UTF8_STRETCHES - 1
    assert got[-1] == b"a" * (kept + 1) + b"\x80a" * (300 - kept - 1)  # the rest as it was
