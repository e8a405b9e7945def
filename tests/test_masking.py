"""DynamicMasker: selection statistics, special tokens, whole words, determinism (no files)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfbert.pretraining_data.masking import (
    DynamicMasker,
    continuation_flags,
    special_token_flags,
    tokens_starting_words,
)

VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "[unused1]"]
         + [f"w{i}" for i in range(300)] + [f"##p{i}" for i in range(60)])
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIAL = special_token_flags(VOCAB)
CONTINUATION = continuation_flags(VOCAB)


def packed_batch(rng: np.random.Generator, batch: int, length: int,
                 with_unk: bool = True, min_used: int = 8) -> np.ndarray:
    """[CLS] A [SEP] B [SEP] [PAD]... rows of random words, ## pieces and a few [UNK]s."""
    ids = rng.integers(7, len(VOCAB), (batch, length)).astype(np.int32)
    if with_unk:
        ids[rng.random((batch, length)) < 0.01] = UNK
    for row, used in enumerate(rng.integers(min_used, length + 1, batch)):
        ids[row, 0] = CLS
        ids[row, used // 2] = SEP
        ids[row, used - 1] = SEP
        ids[row, used:] = PAD
    return ids


def chosen_matrix(out: dict, shape: tuple[int, int]) -> np.ndarray:
    chosen = np.zeros(shape, bool)
    rows, slots = np.nonzero(out["masked_lm_weights"] > 0)
    chosen[rows, out["masked_lm_positions"][rows, slots]] = True
    return chosen


def run(masker: DynamicMasker, ids: np.ndarray, seed=(1, 2), word_start=None) -> dict:
    word_start = None if word_start is None else tf.constant(word_start)
    out = masker(tf.constant(ids), tf.constant(seed, tf.int64), word_start)
    return {k: v.numpy() for k, v in out.items()}


def test_vocab_flags():
    assert SPECIAL[:7].all() and not SPECIAL[7:].any()
    assert CONTINUATION.sum() == 60 and CONTINUATION[-1]
    assert special_token_flags(["[", "]", "[x]", "a[b]", "[a b]"]).tolist() == [
        False, False, True, False, False]


def test_statistics_over_100k_tokens():
    """15% +- 0.5 of eligible tokens; of those 80/10/10 +- 1.5; specials never chosen."""
    rng = np.random.default_rng(0)
    masker = DynamicMasker(VOCAB, max_predictions_per_seq=20)
    ids = packed_batch(rng, 2048, 128)
    out = run(masker, ids)
    eligible = ~SPECIAL[ids]
    assert eligible.sum() > 100_000
    chosen = chosen_matrix(out, ids.shape)
    assert not (chosen & ~eligible).any(), "a special token was selected"
    rate = chosen.sum() / eligible.sum()
    assert abs(rate - 0.15) < 0.005, rate
    new = out["input_ids"][chosen]
    old = ids[chosen]
    masked = np.mean(new == MASK)
    unchanged = np.mean(new == old)
    randomized = 1 - masked - unchanged
    assert abs(masked - 0.8) < 0.015, masked
    assert abs(randomized - 0.1) < 0.015, randomized
    assert abs(unchanged - 0.1) < 0.015, unchanged
    # Random replacements are never special tokens; nothing outside the chosen set changes.
    assert not SPECIAL[new].any() or (new[SPECIAL[new]] == MASK).all()
    np.testing.assert_array_equal(out["input_ids"][~chosen], ids[~chosen])
    # Labels are the original ids; weights are exactly 1.0 at predictions and 0.0 elsewhere.
    weights = out["masked_lm_weights"]
    assert set(np.unique(weights)) <= {0.0, 1.0}
    rows, slots = np.nonzero(weights > 0)
    np.testing.assert_array_equal(out["masked_lm_ids"][rows, slots],
                                  ids[rows, out["masked_lm_positions"][rows, slots]])
    assert (out["masked_lm_ids"][weights == 0] == 0).all()
    assert (out["masked_lm_positions"][weights == 0] == 0).all()
    # Positions are sorted and predictions come first (padding after).
    for row in range(64):
        n = int(weights[row].sum())
        assert (weights[row, :n] == 1).all() and (weights[row, n:] == 0).all()
        assert np.all(np.diff(out["masked_lm_positions"][row, :n]) > 0)
    assert out["input_ids"].dtype == np.int32 and weights.dtype == np.float32


def test_cap_and_edge_cases():
    masker = DynamicMasker(VOCAB, max_predictions_per_seq=5)
    rng = np.random.default_rng(1)
    ids = packed_batch(rng, 64, 96, with_unk=False, min_used=48)
    out = run(masker, ids)
    assert (out["masked_lm_weights"].sum(axis=1) <= 5).all()
    assert (out["masked_lm_weights"].sum(axis=1) == 5).all()
    # One eligible token: it is chosen (the budget is at least 1). None: nothing is.
    tiny = np.array([[CLS, 10, SEP, PAD], [CLS, SEP, SEP, PAD]], np.int32)
    out = run(DynamicMasker(VOCAB, max_predictions_per_seq=6), tiny)
    assert out["masked_lm_weights"].tolist() == [[1, 0, 0, 0, 0, 0], [0] * 6]
    assert out["masked_lm_positions"][0, 0] == 1 and out["masked_lm_ids"][0, 0] == 10


def test_seed_determinism():
    masker = DynamicMasker(VOCAB, max_predictions_per_seq=20)
    ids = packed_batch(np.random.default_rng(2), 32, 64)
    a, b = run(masker, ids, (5, 7)), run(masker, ids, (5, 7))
    c = run(masker, ids, (5, 8))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["masked_lm_positions"], c["masked_lm_positions"])
    traced = tf.function(lambda i, s: masker(i, s))
    d = {k: v.numpy() for k, v in traced(tf.constant(ids), tf.constant([5, 7], tf.int64)).items()}
    np.testing.assert_array_equal(a["input_ids"], d["input_ids"])


def whole_words(ids: np.ndarray, word_start: np.ndarray) -> list[list[tuple[int, int]]]:
    """Per row, the words as lists of (row, position), computed the slow way."""
    rows = []
    for r in range(ids.shape[0]):
        words, current = [], []
        for t in range(ids.shape[1]):
            if ids[r, t] in (CLS, SEP, PAD):
                if current:
                    words.append(current)
                current = []
                continue
            if word_start[r, t] and current:
                words.append(current)
                current = []
            current.append((r, t))
        if current:
            words.append(current)
        rows.append(words)
    return rows


def test_whole_word_masking():
    """Every word is masked entirely or not at all; the rate stays at 15% of tokens."""
    rng = np.random.default_rng(3)
    ids = packed_batch(rng, 2048, 128)
    # Words: a token not starting with ## plus its ## pieces, and multi-token "jieba" words.
    word_start = ~CONTINUATION[ids] & (rng.random(ids.shape) < 0.6)
    masker = DynamicMasker(VOCAB, max_predictions_per_seq=20)
    out = run(masker, ids, word_start=word_start)
    chosen = chosen_matrix(out, ids.shape)
    eligible = ~SPECIAL[ids]
    assert eligible.sum() > 100_000
    cut = 0
    sizes = []
    with_unk = 0
    for words in whole_words(ids, word_start):
        for word in words:
            flags = [chosen[r, t] for r, t in word]
            cut += any(flags) and not all(flags)
            if all(flags):
                sizes.append(len(word))
            with_unk += any(ids[r, t] == UNK for r, t in word) and len(word) > 1
    assert cut == 0  # also for words holding an [UNK], which are never chosen
    assert with_unk > 100
    assert max(sizes) > 1  # multi-token words were masked whole
    assert abs(chosen.sum() / eligible.sum() - 0.15) < 0.005
    assert not (chosen & ~eligible).any()


def test_tokens_starting_words():
    token_starts = tf.ragged.constant([[0, 1, 2, 4, 5], [0, 3], [0, 1]], tf.int64)
    word_starts = tf.ragged.constant([[0, 2, 5], [0, 1], []], tf.int64)
    out = tokens_starting_words(token_starts, word_starts)
    assert out.to_list() == [[True, False, True, False, True], [True, False], [True, True]]


def test_bad_arguments():
    with pytest.raises(ValueError, match="no \\[MASK\\]"):
        DynamicMasker(["[PAD]", "a"], 5)
    with pytest.raises(ValueError, match="masked_lm_prob 1.5"):
        DynamicMasker(VOCAB, 5, masked_lm_prob=1.5)
    with pytest.raises(ValueError, match="max_predictions_per_seq 0"):
        DynamicMasker(VOCAB, 0)
