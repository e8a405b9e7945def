"""What the commands print reads as progress or a result: no "failed call to cuInit" on a
machine without an NVIDIA driver (tfbert/devices.py), no "unsupported characters ...
renamed" from an export (tfbert/export/saved_model.py, `capture_renames_unlogged`)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

import pytest
from export_test_utils import tiny_model
from model_test_utils import REPO

import tfbert
from tfbert import devices
from tfbert.export import export_model
from tfbert.export.saved_model import CAPTURE_RENAME, capture_renames_unlogged

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
# What a FunctionDef argument may be called; a signature input otherwise named is renamed.
FUNCTION_ARG_NAME = re.compile(r"[a-z][a-z0-9_]*")


def test_stderr_without_drops_only_the_marked_lines(capfd):
    with devices._stderr_without(b"failed call to cuInit"):
        os.write(2, b"kept 1\nE0000 cuda_platform.cc:52] failed call to cuInit: ...\nkept 2\n")
    assert capfd.readouterr().err == "kept 1\nkept 2\n"


def test_a_command_prints_no_cuinit_line(tmp_path):
    """A command that lists the devices (run_pretraining.py, refused after its flags are
    parsed: the devices are listed by then) says nothing of cuInit without a driver; with one,
    a failed cuInit is a real error and shows."""
    command = [sys.executable, os.path.join(REPO, "run_pretraining.py"),
               f"--output_dir={tmp_path / 'run'}", "--num_train_steps=2",
               "--num_warmup_steps=3"]
    ran = subprocess.run(command, cwd=REPO, env=ENV, capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 2, ran.stderr[-3000:]
    assert ran.stderr.strip().splitlines()[-1] == (
        "run_pretraining.py: error: num_warmup_steps 3 must be in [0, num_train_steps=2]")
    if not devices.has_nvidia_driver():
        assert "cuInit" not in ran.stderr, ran.stderr[-3000:]


def test_export_names_are_valid_and_nothing_is_renamed(tmp_path, chinese_vocab_file, caplog):
    """The signature inputs tfbert names are valid FunctionDef names, kept as they are in the
    SavedModel; TensorFlow's rename note about the tensors the signatures capture is not
    logged (a rename of a signature input would be)."""
    import tensorflow as tf

    with open(chinese_vocab_file, encoding="utf-8") as f:
        model, metadata = tiny_model("classification", sum(1 for _ in f))
    tfbert.save_pretrained(model, str(tmp_path / "model"), vocab_file=chinese_vocab_file,
                           metadata=metadata)
    with caplog.at_level(logging.INFO, logger="absl"):
        result = export_model(str(tmp_path / "model"), str(tmp_path / "export" / "1"))
    assert "renamed" not in caplog.text
    assert {k: v["inputs"] for k, v in result["signatures"].items()} == {
        "serving_default": ["text"], "serve_ids": ["input_ids", "input_mask", "segment_ids"]}
    loaded = tf.saved_model.load(str(tmp_path / "export" / "1"))
    for name, signature in loaded.signatures.items():
        inputs = sorted(signature.structured_input_signature[1])
        assert inputs == result["signatures"][name]["inputs"]
        assert all(FUNCTION_ARG_NAME.fullmatch(i) for i in inputs), inputs

    # The note still shows when it names a signature input.
    absl_logger = logging.getLogger("absl")
    template = f"Function `%s` contains input name(s) %s {CAPTURE_RENAME} %s in the SavedModel."
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="absl"), \
            capture_renames_unlogged(result["signatures"]):
        absl_logger.info(template, "_serve_text", "params, resource", "a_params, b_resource")
        absl_logger.info(template, "_serve_text", "text, params", "text_1, a_params")
    assert [r.args[1] for r in caplog.records] == ["text, params"]


@pytest.mark.parametrize("found", [True, False])
def test_the_driver_check_reads_the_kernel_module_or_libcuda(monkeypatch, found):
    monkeypatch.setattr(os.path, "exists", lambda path: found and path == "/proc/driver/nvidia")

    def no_library(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(devices.ctypes, "CDLL", no_library)
    assert devices.has_nvidia_driver() is found
