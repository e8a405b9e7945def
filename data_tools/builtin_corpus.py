"""data_tools/builtin_corpus.py: a shim for tfbert/cli/builtin_corpus.py, which holds the command
and its --help (installed as `tfbert-builtin-corpus`). The repo root goes on sys.path so that a
checkout runs it without an install."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tfbert.cli.builtin_corpus import build_parser, entry, main  # noqa: E402

__all__ = ["build_parser", "entry", "main"]

if __name__ == "__main__":
    entry()
