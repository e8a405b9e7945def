"""tfbert.text.vocab_builder and data_tools/build_vocab.py: layout, determinism, the learned
pieces, the CLI, and (slow) the full 21,128-token Chinese vocab's held-out [UNK] rate."""

from __future__ import annotations

import os
import sys
import time

import pytest
import tensorflow as tf

from tfbert.data import corpora
from tfbert.pretraining_data.vocab_corpus import build_vocab_file
from tfbert.text import vocab as vocab_lib
from tfbert.text import vocab_builder
from tfbert.text.tokenizer import BertTokenizer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "data_tools"))

MIXED = ([text for text, _ in corpora.reviews()][:800]
         + ["The tokenizer learns word pieces from running text.",
            "Tokenizers tokenize tokens; learners learn.", "Running, runner, runs!"] * 20)


@pytest.fixture(scope="module")
def small_vocab() -> list[str]:
    return vocab_builder.build_vocab(MIXED, vocab_size=3000, show_progress=False)


def test_layout_and_size(small_vocab):
    assert len(small_vocab) == 3000
    ids = vocab_lib.special_ids(small_vocab)
    assert ids == {"pad_id": 0, "unk_id": 100, "cls_id": 101, "sep_id": 102, "mask_id": 103}
    assert small_vocab[1:100] == [f"[unused{i}]" for i in range(1, 100)]
    assert len(set(small_vocab)) == len(small_vocab)
    # Letters and digits come plain and as continuations; CJK and punctuation plain only.
    for token in ("t", "##t", "e", "##e", "1", "##1", "好", "，", "!"):
        assert token in small_vocab, token
    assert "##好" not in small_vocab and "##，" not in small_vocab
    # Frequent English words were merged into pieces.
    assert {"token", "learn"} <= set(small_vocab) or "tokenize" in small_vocab


def test_deterministic():
    first = vocab_builder.build_vocab(MIXED[:800], vocab_size=1200, show_progress=False)
    second = vocab_builder.build_vocab(list(reversed(MIXED[:800])), vocab_size=1200,
                                       show_progress=False)
    assert first == second


def test_learned_pieces_by_hand():
    """Counts: low 5, lower 2, newest 6, widest 3 (the classic BPE example)."""
    counts = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
    tokens = vocab_builder.learn_wordpieces(counts, budget=40, min_frequency=2)
    chars = [t for t in tokens if len(t.removeprefix("##")) == 1]
    pieces = tokens[len(chars):]
    # The most frequent pair first, equal counts in string order: ##e ##s (9) before ##s ##t
    # (9); then ##es ##t (9); ##o ##w (7) before l ##o (7); then l ##ow (7).
    assert pieces[:4] == ["##es", "##est", "##ow", "low"]
    assert chars[:4] == ["e", "##e", "w", "##w"]  # by frequency (e: 17, w: 16), both forms
    assert len(tokens) == len(set(tokens))
    assert len(vocab_builder.learn_wordpieces(counts, budget=5)) == 5  # a hard limit


def test_cjk_fill_and_unused_slots():
    chinese = vocab_builder.build_vocab(MIXED[:500], vocab_size=2500, show_progress=False)
    assert len(chinese) == 2500 and "[unused100]" not in chinese
    assert "的" in chinese and "之" in chinese  # common hanzi fill the spare slots
    english = vocab_builder.build_vocab(["tiny english text only"] * 5, vocab_size=300,
                                        show_progress=False)
    assert len(english) == 300 and english[-1].startswith("[unused")


def test_written_vocab_tokenizes_like_the_reference(tmp_path, small_vocab):
    tokenizers = pytest.importorskip("tokenizers")
    path = str(tmp_path / "vocab.txt")
    vocab_builder.write_vocab(small_vocab, path)
    assert vocab_lib.load_vocab(path) == small_vocab
    ref = tokenizers.BertWordPieceTokenizer(path, lowercase=True)
    texts = MIXED[:200]
    ids = BertTokenizer(path).tokenize(tf.constant(texts)).to_list()
    assert ids == [e.ids for e in ref.encode_batch(texts, add_special_tokens=False)]
    with pytest.raises(ValueError, match="no \\[PAD\\]"):
        vocab_builder.write_vocab(["a", "b"], str(tmp_path / "bad.txt"))


def test_cli_on_files(tmp_path):
    import build_vocab

    for i in range(2):
        (tmp_path / f"part{i}.txt").write_text("\n".join(MIXED[i::2]) + "\n", encoding="utf-8")
    out = str(tmp_path / "out" / "vocab.txt")
    summary = build_vocab.main([f"--input_file={tmp_path}/part0.txt,{tmp_path}/part1.*",
                                f"--vocab_file={out}", "--vocab_size=2000",
                                "--lower_case=false", "--no_progress"])
    assert summary["vocab_size"] == 2000 and os.path.exists(out)
    assert summary["lines_train"] + summary["lines_heldout"] == len(MIXED)
    assert 0 <= summary["heldout_unk_rate"] < 0.05  # 2,000 tokens cannot hold every hanzi
    tokens = vocab_lib.load_vocab(out)
    assert "The" in tokens or "T" in tokens  # cased
    with pytest.raises(SystemExit):
        build_vocab.parse_args(["--vocab_file=x", "--lower_case=maybe"])
    with pytest.raises(FileNotFoundError, match="no file matches"):
        build_vocab.main([f"--input_file={tmp_path}/missing*.txt", f"--vocab_file={out}"])


@pytest.mark.slow
def test_default_chinese_vocab(tmp_path):
    """The default build (built-in corpus, 21,128 tokens): [UNK] below 0.5% of held-out tokens,
    well under a few minutes."""
    start = time.time()
    summary = build_vocab_file(str(tmp_path / "vocab.txt"), show_progress=False)
    elapsed = time.time() - start
    assert summary["vocab_size"] == 21128
    assert summary["heldout_unk_rate"] < 0.005, summary
    assert summary["heldout_tokens"] > 100_000
    assert elapsed < 180, elapsed
