"""In-graph dynamic masked-LM masking, token-level or whole-word, deterministic for a seed.

Shape legend: B = batch, T = sequence length, P = max_predictions_per_seq, V = vocab size.

The procedure is the reference's `create_masked_lm_predictions`, on batches of packed ids:
- eligible tokens: every real token that is not a special token (`[CLS]`, `[SEP]`, `[PAD]`,
  `[MASK]`, `[UNK]`, `[unusedN]`: every vocab entry written `[...]`);
- the budget: 15% of the eligible tokens (stochastically rounded, so the expected rate is
  exactly `masked_lm_prob` at every length; the reference rounds to nearest), at least 1, at
  most `max_predictions_per_seq`;
- groups: each token is a group, or with whole-word masking a word is (a token plus its `##`
  pieces, or all tokens whose first character lies inside one jieba word). A word holding a
  token that cannot be predicted (an `[UNK]` inside a jieba word) is not a candidate. Groups
  are visited in a random order and taken whole while they fit the budget; a group that does
  not fit is skipped (the reference's rule), so no word is ever masked in part;
- each chosen token independently: 80% `[MASK]`, 10% a random non-special vocab token, 10%
  unchanged; positions sorted, padded with 0 / weight 0 up to P.

Why not TF Text's `RandomItemSelector` / `MaskValuesChooser` / `mask_language_model`: they were
checked (tensorflow-text 2.21) and do not fit here. Their randomness is stateful
(`tf.random.shuffle`, `tf.random.uniform` with no seed argument in `MaskValuesChooser`), so masks
cannot be made deterministic per (seed, batch) nor fresh per epoch on demand; `MaskValuesChooser`
draws random tokens from `[0, vocab_size)`, special tokens included; the selector takes
`ceil(n * rate)` items (biased above 15%) and counts the cap in words, not tokens, for whole-word
masking (so P can be exceeded); and it runs a `map_fn` per row. This module uses
`tf.random.stateless_*` ops only, vectorized over the batch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import tensorflow as tf

_SPECIAL = re.compile(r"^\[[^\[\]\s]+\]$")


class BatchRows(NamedTuple):
    """A seed for some rows of a larger batch: a batch masked with it gets exactly the masks
    those rows get when the whole batch is masked with `seed` (how each tf.distribute worker
    masks its share of a global batch, whatever the number of workers).

    Attributes:
        seed: int [2]. The whole batch's stateless seed.
        rows: int32 [B]. Which of its rows this batch holds, in order.
        total: int. Rows of the whole batch.
    """

    seed: tf.Tensor
    rows: tf.Tensor
    total: int


def special_token_flags(vocab: Sequence[str]) -> np.ndarray:
    """bool [V]: True for special tokens (every entry written `[...]`, e.g. `[CLS]`,
    `[unused3]`); they are never chosen for prediction nor used as random replacements."""
    return np.array([bool(_SPECIAL.match(t)) for t in vocab], dtype=bool)


def continuation_flags(vocab: Sequence[str]) -> np.ndarray:
    """bool [V]: True for WordPiece continuation pieces (`##...`)."""
    return np.array([t.startswith("##") for t in vocab], dtype=bool)


def tokens_starting_words(token_starts: tf.RaggedTensor,
                          word_starts: tf.RaggedTensor) -> tf.RaggedTensor:
    """Which tokens start a word, from character offsets.

    Args:
        token_starts: ragged int [B, (N)]. Start char of each token.
        word_starts: ragged int [B, (J)]. Sorted start chars of the words (jieba); an empty
            row means no word information: every token then starts a word.

    Returns:
        ragged bool [B, (N)]: the token's first character is the first character of a word.
    """
    big = tf.constant(np.iinfo(np.int64).max, tf.int64)
    tokens = tf.cast(token_starts, tf.int64).to_tensor(default_value=-1)  # [B, N]
    words = tf.cast(word_starts, tf.int64).to_tensor(default_value=big)  # [B, J]
    words = tf.concat([words, tf.fill([tf.shape(words)[0], 1], big)], axis=1)  # [B, J+1]
    index = tf.searchsorted(words, tokens, side="left")  # [B, N]
    starts = tf.equal(tf.gather(words, index, batch_dims=1), tokens)
    no_words = tf.equal(word_starts.row_lengths(), 0)[:, None]  # [B, 1]
    starts = tf.logical_or(starts, no_words)
    return tf.RaggedTensor.from_tensor(starts, lengths=token_starts.row_lengths())


class DynamicMasker:
    """Masks packed token ids for the masked-LM task (see the module docstring).

    Args:
        vocab: sequence of str. The WordPiece vocab (id order).
        max_predictions_per_seq: int. P, the most masked positions per sequence.
        masked_lm_prob: float. Share of eligible tokens to predict.
        mask_token_rate: float. Share of chosen tokens replaced by `[MASK]`.
        random_token_rate: float. Share replaced by a random non-special token.

    Example:
    >>> from tfbert import BertPreprocessor
    >>> from tfbert.text.vocab import load_vocab
    >>> vocab = load_vocab("vocab.txt")
    >>> pre = BertPreprocessor(vocab, seq_length=16)
    >>> packed = pre(tf.constant(["今天天气很好，我们去公园散步"]))
    >>> masker = DynamicMasker(vocab, max_predictions_per_seq=4)
    >>> out = masker(packed["input_ids"], seed=tf.constant([1, 2]))  # dict of masked features
    >>> out["masked_lm_positions"].shape.as_list(), float(tf.reduce_sum(out["masked_lm_weights"]))
    ([1, 4], 2.0)
    """

    def __init__(self, vocab: Sequence[str], max_predictions_per_seq: int,
                 masked_lm_prob: float = 0.15, mask_token_rate: float = 0.8,
                 random_token_rate: float = 0.1):
        if "[MASK]" not in vocab:
            raise ValueError(f"the vocab ({len(vocab)} tokens) has no [MASK] token")
        if max_predictions_per_seq < 1:
            raise ValueError(f"max_predictions_per_seq {max_predictions_per_seq} must be >= 1")
        if not 0.0 < masked_lm_prob <= 1.0:
            raise ValueError(f"masked_lm_prob {masked_lm_prob} is not in (0, 1]")
        if mask_token_rate < 0 or random_token_rate < 0 or (
                mask_token_rate + random_token_rate > 1.0):
            raise ValueError(f"mask_token_rate {mask_token_rate} + random_token_rate "
                             f"{random_token_rate} must be rates summing to at most 1")
        special = special_token_flags(vocab)
        if special.all():
            raise ValueError("every vocab token is special: nothing to use as a random token")
        self.max_predictions_per_seq = max_predictions_per_seq
        self.masked_lm_prob = masked_lm_prob
        self.mask_token_rate = mask_token_rate
        self.random_token_rate = random_token_rate
        self.mask_id = list(vocab).index("[MASK]")
        self.special = tf.constant(special)  # [V]
        structural = np.zeros(len(vocab), bool)
        structural[[list(vocab).index(t) for t in ("[CLS]", "[SEP]", "[PAD]")
                    if t in vocab]] = True
        self.structural = tf.constant(structural)  # [V]
        self.random_ids = tf.constant(np.flatnonzero(~special).astype(np.int32))  # [R]

    def __call__(self, input_ids: tf.Tensor, seed: tf.Tensor,
                 word_start: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        """Masks a batch.

        Args:
            input_ids: int32 [B, T]. Packed ids ([CLS] A [SEP] B [SEP] [PAD]...).
            seed: int [2], or BatchRows. Stateless seed; the same ids and seed give the same
                masks (for BatchRows: those of its rows in the whole batch).
            word_start: bool [B, T] | None. True where a token starts a new word (whole-word
                masking); None masks single tokens.

        Returns:
            dict: `input_ids` int32 [B, T] (masked), `masked_lm_positions` int32 [B, P],
            `masked_lm_ids` int32 [B, P], `masked_lm_weights` float32 [B, P] (1.0 exactly at
            real predictions, 0.0 at padding).
        """
        input_ids = tf.convert_to_tensor(input_ids, tf.int32)
        batch, length = tf.shape(input_ids)[0], tf.shape(input_ids)[1]
        p = self.max_predictions_per_seq
        rows, total = None, batch
        if isinstance(seed, BatchRows):
            seed, rows, total = seed

        def uniform(shape, key, **kwargs):  # [B, ...]: drawn for the whole batch, then its rows
            values = tf.random.stateless_uniform([total, *shape], key, **kwargs)
            return values if rows is None else tf.gather(values, rows)

        seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 5)  # [5, 2]
        positions = tf.range(length)[None, :]  # [1, T]

        eligible = tf.logical_not(tf.gather(self.special, input_ids))  # [B, T]
        # Words live between [CLS]/[SEP]/[PAD]; a word holding an unpredictable token (e.g.
        # [UNK]) is not a candidate at all, so no word is ever masked in part.
        inside = tf.logical_not(tf.gather(self.structural, input_ids))  # [B, T]
        previous = tf.pad(inside[:, :-1], [[0, 0], [1, 0]])
        start = tf.ones_like(inside) if word_start is None else tf.cast(word_start, tf.bool)
        start = tf.logical_and(inside, tf.logical_or(start, tf.logical_not(previous)))

        # Group of each token (1-based within its row; 0 outside words) and group sizes.
        group = tf.cumsum(tf.cast(start, tf.int32), axis=1) * tf.cast(inside, tf.int32)
        slots = length + 1
        segment = group + tf.range(batch)[:, None] * slots  # [B, T], unique per (row, group)
        sizes = tf.math.unsorted_segment_sum(tf.cast(inside, tf.int32), segment,
                                             batch * slots)  # [B * (T+1)]
        blocked = tf.math.unsorted_segment_max(
            tf.cast(tf.logical_and(inside, tf.logical_not(eligible)), tf.int32), segment,
            batch * slots)  # [B * (T+1)], 1 where a word holds an unpredictable token
        start = tf.logical_and(start, tf.equal(tf.gather(blocked, segment), 0))
        size_at = tf.where(start, tf.gather(sizes, segment), 0)  # [B, T], size at group starts

        # Budget: masked_lm_prob of the eligible tokens, stochastically rounded, in [1, P].
        num_eligible = tf.reduce_sum(tf.cast(eligible, tf.float32), axis=1)  # [B]
        jitter = uniform([], seeds[0])
        budget = tf.floor(num_eligible * self.masked_lm_prob + jitter)
        budget = tf.clip_by_value(budget, 1.0, float(p))
        budget = tf.cast(tf.where(num_eligible > 0, budget, 0.0), tf.int32)  # [B]

        # Visit groups in random order; take each whole while it fits (reference rule).
        priority = uniform([length], seeds[1])
        order = tf.argsort(tf.where(start, priority, 2.0), axis=1, stable=True)  # [B, T]
        sorted_size = tf.gather(size_at, order, batch_dims=1)  # [B, T]; 0 after the groups
        sorted_start = tf.gather(start, order, batch_dims=1)
        taken = tf.logical_and(sorted_start, tf.cumsum(sorted_size, axis=1) <= budget[:, None])
        left = budget - tf.reduce_sum(tf.where(taken, sorted_size, 0), axis=1)  # [B]

        def fits(taken, left):
            return tf.logical_and(
                tf.logical_and(sorted_start, tf.logical_not(taken)),
                sorted_size <= left[:, None])  # [B, T]

        def more(taken, left):
            return tf.reduce_any(fits(taken, left))

        def take_next(taken, left):
            candidates = fits(taken, left)
            first = tf.argmax(tf.cast(candidates, tf.int32), axis=1, output_type=tf.int32)
            found = tf.reduce_any(candidates, axis=1)  # [B]
            pick = tf.logical_and(tf.equal(tf.range(length)[None, :], first[:, None]),
                                  found[:, None])
            left -= tf.reduce_sum(tf.where(pick, sorted_size, 0), axis=1)
            return tf.logical_or(taken, pick), left

        # Skipped groups only matter once the prefix stops; each round takes >= 1 token.
        taken, left = tf.while_loop(more, take_next, (taken, left),
                                    maximum_iterations=p)
        inverse = tf.argsort(order, axis=1)
        taken_start = tf.gather(taken, inverse, batch_dims=1)  # [B, T], at group starts
        taken_group = tf.math.unsorted_segment_max(tf.cast(taken_start, tf.int32), segment,
                                                   batch * slots)
        chosen = tf.logical_and(eligible, tf.gather(taken_group, segment) > 0)  # [B, T]

        # Replacement: 80% [MASK], 10% random non-special token, 10% unchanged.
        draw = uniform([length], seeds[2])
        pick = uniform([length], seeds[3], minval=0, maxval=tf.size(self.random_ids),
                       dtype=tf.int32)
        random_ids = tf.gather(self.random_ids, pick)
        replaced = tf.where(draw < self.mask_token_rate, self.mask_id,
                            tf.where(draw < self.mask_token_rate + self.random_token_rate,
                                     random_ids, input_ids))
        masked_ids = tf.where(chosen, replaced, input_ids)

        # Sorted chosen positions, padded to P with (position 0, id 0, weight 0).
        key = tf.where(chosen, positions, length + positions)  # chosen first, in order
        pad = tf.maximum(p - length, 0)
        key = tf.pad(key, [[0, 0], [0, pad]], constant_values=2 * length + 1)
        ids = tf.pad(input_ids, [[0, 0], [0, pad]])
        chosen_padded = tf.pad(chosen, [[0, 0], [0, pad]])
        _, first = tf.math.top_k(-key, k=p, sorted=True)  # [B, P]
        weights = tf.cast(tf.gather(chosen_padded, first, batch_dims=1), tf.float32)
        masked_positions = tf.where(weights > 0, first, 0)
        masked_lm_ids = tf.where(weights > 0, tf.gather(ids, first, batch_dims=1), 0)
        return {
            "input_ids": masked_ids,
            "masked_lm_positions": tf.cast(masked_positions, tf.int32),
            "masked_lm_ids": tf.cast(masked_lm_ids, tf.int32),
            "masked_lm_weights": weights,
        }
