"""Every docstring example in the library runs (STYLE.md: "a short runnable example"): doctest
over every tfbert module, in a working directory holding the files the examples name (a
`vocab.txt`, `data/pretrain.tfrecord-*`, an export at `saved_models/sentiment/1`)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import random
import shutil

import pytest
from export_test_utils import exported
from pretrain_test_utils import run_create_pretraining_data

import tfbert
from tfbert.data import corpora


@pytest.fixture(scope="module")
def example_dir(tmp_path_factory, chinese_vocab_file) -> str:
    root = tmp_path_factory.mktemp("examples")
    shutil.copy(chinese_vocab_file, root / "vocab.txt")
    docs = corpora.people_daily_documents()[:60] + corpora.review_documents()[:200]
    random.Random(0).shuffle(docs)
    text = root / "corpus.txt"
    text.write_text("\n\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")
    (root / "data").mkdir()
    run_create_pretraining_data([
        f"--input_file={text}", f"--output_file={root / 'data' / 'pretrain.tfrecord'}",
        f"--vocab_file={chinese_vocab_file}", "--max_seq_length=128", "--dupe_factor=1",
        "--random_seed=1", "--num_shards=2", "--no_progress"])
    _, export_dir, _ = exported("classification", str(root / "exports"), chinese_vocab_file)
    shutil.copytree(export_dir, root / "saved_models" / "sentiment" / "1")
    return str(root)


def test_every_docstring_example_runs(example_dir, monkeypatch, capsys):
    monkeypatch.chdir(example_dir)
    # The absl commands (tfbert/cli/) define their flags on import, into one global registry:
    # importing two of them in one process is an error; their docstrings hold no examples.
    commands = {f"tfbert.cli.{name}" for name in ("pretrain", "classifier", "ner", "squad",
                                                  "distill")}
    names = sorted(m.name for m in pkgutil.walk_packages(tfbert.__path__, "tfbert.")
                   if not m.name.endswith("__main__") and m.name not in commands)
    attempted, failed = 0, []
    for name in names:
        result = doctest.testmod(importlib.import_module(name),
                                 optionflags=doctest.NORMALIZE_WHITESPACE)
        attempted += result.attempted
        if result.failed:
            failed.append(name)
    report = capsys.readouterr().out
    assert not failed, f"docstring examples failed in {failed}:\n{report}"
    assert attempted >= 90, attempted  # the examples were found (not skipped by an import)
