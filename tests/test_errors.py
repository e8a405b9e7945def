"""The user-error boundary (tfbert.errors.run_cli, common_flags.run) and the package's lazy
attributes."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tfbert
from tfbert.errors import UserError, is_user_error, run_cli


def _fails_with(error: BaseException):
    def main(*_):
        raise error
    return main


def test_user_error_is_one_line_and_exit_2(capsys, monkeypatch):
    monkeypatch.delenv("TFBERT_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        run_cli(_fails_with(UserError("train.tsv:3: 2 fields but the header has 3")), prog="x")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "x: error: train.tsv:3: 2 fields but the header has 3\n"


def test_missing_file_is_a_user_error(capsys, monkeypatch):
    monkeypatch.delenv("TFBERT_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        run_cli(_fails_with(FileNotFoundError(2, "No such file or directory", "vocab.txt")),
                prog="x")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "x: error: vocab.txt: No such file or directory\n"


def test_bugs_keep_their_traceback():
    with pytest.raises(KeyError):
        run_cli(_fails_with(KeyError("bug")))
    with pytest.raises(ValueError):  # a plain ValueError is not known to be the user's
        run_cli(_fails_with(ValueError("bug")))
    assert not is_user_error(ValueError("x")) and is_user_error(UserError("x"))


def test_traceback_env_shows_user_errors(monkeypatch):
    monkeypatch.setenv("TFBERT_TRACEBACK", "1")
    with pytest.raises(UserError):
        run_cli(_fails_with(UserError("shown")))


def test_returns_what_main_returns():
    assert run_cli(lambda a, b: a + b, 2, 3) == 5


@pytest.mark.parametrize("args, message", [
    (["--bogus=1"], "Unknown command line flag 'bogus'"),
    (["--output_dir=/tmp/x", "--max_seq_length=1"], "max_seq_length"),
])
def test_run_scripts_report_bad_flags_in_one_line(args, message):
    out = subprocess.run([sys.executable, "run_classifier.py", *args], capture_output=True,
                         text=True, cwd=tfbert.__path__[0] + "/..", timeout=120)
    assert out.returncode == 2
    last = [line for line in out.stderr.splitlines() if line.startswith("run_classifier.py")]
    assert len(last) == 1 and message in last[0] and "Traceback" not in out.stderr


def test_subpackages_are_attributes():
    assert tfbert.pretraining_data.pretraining_dataset.__name__ == "pretraining_dataset"
    assert tfbert.errors.UserError is UserError
    assert "data" in dir(tfbert)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        tfbert.nope  # noqa: B018
