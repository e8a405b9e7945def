"""tfbert/text/data/unicode_classes.txt: written as data_tools/make_tokenizer_tables.py writes it,
and (slow) the same file again when regenerated from the installed `tokenizers` and TF Text."""

from __future__ import annotations

import os
import sys
from importlib import resources

import pytest

from tfbert.text import char_tables

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "data_tools"))

import make_tokenizer_tables  # noqa: E402


def _file() -> str:
    return resources.files("tfbert.text").joinpath("data", "unicode_classes.txt").read_text(
        encoding="utf-8")


def test_file_is_what_the_generator_writes():
    sections = {name: " ".join(text.split()) for name, text in char_tables.sections().items()}
    assert list(sections) == list(make_tokenizer_tables.SECTIONS)
    assert make_tokenizer_tables.render(sections) == _file()
    assert (0xFFFD, 0xFFFD) in char_tables.code_point_ranges("dropped")


@pytest.mark.slow
def test_regenerating_gives_the_same_file():
    pytest.importorskip("tokenizers")
    assert make_tokenizer_tables.render(make_tokenizer_tables.compute()) == _file()
