"""data_tools/build_vocab.py: a shim for tfbert/cli/build_vocab.py, which holds the command and
its --help (installed as `tfbert-build-vocab`). The repo root goes on sys.path so that a checkout
runs it without an install."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tfbert.cli.build_vocab import build_parser, entry, main, parse_args  # noqa: E402

__all__ = ["build_parser", "entry", "main", "parse_args"]

if __name__ == "__main__":
    entry()
