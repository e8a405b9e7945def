"""Extractive QA features: SQuAD examples windowed into BERT inputs and span labels.

Features (B = batch, T = max_seq_length). The question is segment A (its first `max_query_length`
word pieces), a window of the context's word pieces is segment B:
`[CLS] question [SEP] window [SEP] [PAD]...`. Windows start every `doc_stride` word pieces (the
stride is the step between window starts, as in Google's run_squad.py) until the last one reaches
the end of the context. Each feature keeps, per position, the character span of its token in the
original context (`token_start_char`/`token_end_char`, -1 outside the window) and whether this
window is the one that gives the token the most context on both sides (`token_is_max_context`),
which is what postprocessing needs to turn logits back into text. Training labels are the
positions of the first and last answer token in the packed sequence, or 0 ([CLS]) when the
answer is not inside the window or the question has no answer.

    features, stats = convert_examples(data.examples, tfbert.BertTokenizer("vocab.txt"),
                                       max_seq_length=384, doc_stride=128, max_query_length=64)
    ds = make_dataset(features, batch_size=32, training=True)   # (inputs, start/end labels)
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from tqdm import tqdm

from tfbert.data import length_buckets as lb
from tfbert.data.squad import QAExample
from tfbert.data.windows import is_max_context, window_spans

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class TokenizedExample:
    """Word-piece ids of a question and a context, with each context piece's [start, end)
    character span in the original context."""

    query_ids: list[int]
    doc_ids: list[int]
    doc_starts: list[int]
    doc_ends: list[int]


@dataclasses.dataclass
class QAFeature:
    """One window of one example, packed to max_seq_length (T).

    Args:
        example_index: int. Index of the example in the list the features were made from.
        window_index: int. Which window of that example (0 = the first).
        input_ids, input_mask, segment_ids: int32 array [T]. The model inputs.
        token_start_char, token_end_char: int32 array [T]. Character span in the context of the
            token at each position; -1 for [CLS], question, [SEP] and padding positions.
        token_is_max_context: bool array [T]. Whether this window gives the token at the position
            its most balanced context (only such positions may start an answer).
        start_position, end_position: int. Training labels (0 = [CLS]: no answer in the window).
    """

    example_index: int
    window_index: int
    input_ids: np.ndarray
    input_mask: np.ndarray
    segment_ids: np.ndarray
    token_start_char: np.ndarray
    token_end_char: np.ndarray
    token_is_max_context: np.ndarray
    start_position: int = 0
    end_position: int = 0


def tokenize_examples(examples: Sequence[QAExample], tokenizer: Any,
                      batch_size: int = 256) -> list[TokenizedExample]:
    """Runs a `tfbert.BertTokenizer` over questions and contexts (contexts with offsets).

    Args:
        examples: sequence of QAExample.
        tokenizer: tfbert.BertTokenizer. `tokenize(texts)` and `tokenize_with_offsets(texts)`
            give word-piece ids and character offsets into the original strings.
        batch_size: int. Strings per tokenizer call.
    """
    out: list[TokenizedExample] = []
    for i in tqdm(range(0, len(examples), batch_size), desc="tokenizing questions and contexts",
                  unit="batch", disable=None, leave=False):
        batch = examples[i:i + batch_size]
        queries = tokenizer.tokenize(tf.constant([ex.question for ex in batch])).to_list()
        ids, starts, ends = tokenizer.tokenize_with_offsets(
            tf.constant([ex.context for ex in batch]))
        for q, d, s, e in zip(queries, ids.to_list(), starts.to_list(), ends.to_list(),
                              strict=True):
            out.append(TokenizedExample([int(x) for x in q], [int(x) for x in d],
                                        [int(x) for x in s], [int(x) for x in e]))
    return out


def char_span_to_tokens(starts: Sequence[int], ends: Sequence[int], char_start: int,
                        char_end: int) -> tuple[int, int] | None:
    """First and last token (inclusive) overlapping characters [char_start, char_end), or None
    when no token does (the span is only whitespace or dropped characters)."""
    first = bisect.bisect_right(list(ends), char_start)  # first token ending after char_start
    last = bisect.bisect_left(list(starts), char_end) - 1  # last token starting before char_end
    if first >= len(starts) or last < first:
        return None
    return first, last


def make_features(examples: Sequence[QAExample], tokenized: Sequence[TokenizedExample],
                  max_seq_length: int, doc_stride: int, max_query_length: int,
                  cls_id: int, sep_id: int, pad_id: int) -> tuple[list[QAFeature], dict[str, int]]:
    """Windows each tokenized example into packed features.

    Args:
        examples: sequence of QAExample.
        tokenized: the same examples through `tokenize_examples`.
        max_seq_length: int. T, the packed length.
        doc_stride: int. Word pieces between the starts of consecutive windows.
        max_query_length: int. Question word pieces kept (the rest is cut off).
        cls_id, sep_id, pad_id: int. Special token ids.

    Returns:
        (features, stats): stats counts examples, features, truncated questions, answers that
        fall outside a window, and answers that cover no token.
    """
    if len(examples) != len(tokenized):
        raise ValueError(f"{len(examples)} examples but {len(tokenized)} tokenized examples")
    if doc_stride < 1:
        raise ValueError(f"doc_stride must be at least 1, got {doc_stride}")
    if max_seq_length < max_query_length + 4:
        raise ValueError(f"max_seq_length {max_seq_length} leaves no room for the context after "
                         f"max_query_length {max_query_length} + 3 special tokens")
    stats = collections.Counter(examples=len(examples))
    features: list[QAFeature] = []
    no_tokens: list[str] = []  # questions whose answer covers no word piece
    for example_index, (ex, tok) in enumerate(zip(examples, tokenized, strict=True)):
        query = tok.query_ids[:max_query_length]
        stats["truncated_questions"] += len(tok.query_ids) > max_query_length
        answer_tokens = None
        char_span = ex.answer_char_span
        if char_span is not None:
            answer_tokens = char_span_to_tokens(tok.doc_starts, tok.doc_ends, *char_span)
            if answer_tokens is None:
                no_tokens.append(ex.qas_id)
        offset = len(query) + 2  # [CLS] question [SEP]
        spans = window_spans(len(tok.doc_ids), max_seq_length - offset - 1, doc_stride)
        for window_index, (start, length) in enumerate(spans):
            ids = [cls_id] + query + [sep_id] + tok.doc_ids[start:start + length] + [sep_id]
            n = len(ids)
            input_ids = np.full(max_seq_length, pad_id, np.int32)
            input_ids[:n] = ids
            input_mask = (np.arange(max_seq_length) < n).astype(np.int32)
            segment_ids = np.zeros(max_seq_length, np.int32)
            segment_ids[offset:n] = 1
            start_char = np.full(max_seq_length, -1, np.int32)
            end_char = np.full(max_seq_length, -1, np.int32)
            start_char[offset:offset + length] = tok.doc_starts[start:start + length]
            end_char[offset:offset + length] = tok.doc_ends[start:start + length]
            max_context = np.zeros(max_seq_length, bool)
            for j in range(length):
                max_context[offset + j] = is_max_context(spans, window_index, start + j)
            start_position = end_position = 0
            if answer_tokens is not None:
                first, last = answer_tokens
                if start <= first and last < start + length:
                    start_position, end_position = first - start + offset, last - start + offset
                else:
                    stats["answer_outside_window"] += 1
            features.append(QAFeature(example_index, window_index, input_ids, input_mask,
                                      segment_ids, start_char, end_char, max_context,
                                      start_position, end_position))
    stats["features"] = len(features)
    if no_tokens:
        stats["answers_without_tokens"] = len(no_tokens)
        logger.warning("%d answer(s) cover no word piece of their context (only whitespace or "
                       "dropped characters; trained as no answer): %s", len(no_tokens),
                       ", ".join(no_tokens[:10]) + (", ..." if len(no_tokens) > 10 else ""))
    return features, dict(stats)


def convert_examples(examples: Sequence[QAExample], tokenizer: Any, max_seq_length: int,
                     doc_stride: int, max_query_length: int
                     ) -> tuple[list[QAFeature], dict[str, int]]:
    """`tokenize_examples` then `make_features` with the tokenizer's special ids."""
    tokenized = tokenize_examples(examples, tokenizer)
    return make_features(examples, tokenized, max_seq_length, doc_stride, max_query_length,
                         tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)


def stack_features(features: Sequence[QAFeature]) -> dict[str, np.ndarray]:
    """Model inputs as arrays [N, T] int32 plus `start_positions`/`end_positions` [N]."""
    if not features:
        raise ValueError("no features to stack (empty example list?)")
    return {
        "input_ids": np.stack([f.input_ids for f in features]),
        "input_mask": np.stack([f.input_mask for f in features]),
        "segment_ids": np.stack([f.segment_ids for f in features]),
        "start_positions": np.array([f.start_position for f in features], np.int32),
        "end_positions": np.array([f.end_position for f in features], np.int32),
    }


def make_dataset(features: Sequence[QAFeature], batch_size: int, training: bool = False,
                 seed: int | None = None, with_labels: bool = True,
                 length_buckets: bool = False) -> Any:
    """A tf.data.Dataset of (inputs, labels) batches, or of inputs alone.

    Args:
        features: sequence of QAFeature.
        batch_size: int. Batch size (the last batch may be smaller).
        training: bool. Shuffle (every epoch, with `seed`) and repeat nothing.
        seed: int or None. Shuffle seed.
        with_labels: bool. Yield `(inputs, {"start_logits": start [B], "end_logits": end [B]})`
            so the label keys match `BertSpanLabeler`'s outputs; False yields inputs only.
        length_buckets: bool. Batches of one bucket each, inputs cut to its length
            (`tfbert.data.length_buckets`; the positions are inside the window, so they hold);
            without training each input dict carries `example_index` for
            `tfbert.data.length_buckets.predict_in_order`. False (the library default): every
            batch [B, max_seq_length] in feature order.
    """
    arrays = stack_features(features)
    inputs = {k: arrays[k] for k in ("input_ids", "input_mask", "segment_ids")}
    if with_labels:
        labels = {"start_logits": arrays["start_positions"], "end_logits": arrays["end_positions"]}
        ds = tf.data.Dataset.from_tensor_slices((inputs, labels))
    else:
        ds = tf.data.Dataset.from_tensor_slices(inputs)
    if length_buckets:
        return lb.batch_by_length(ds, batch_size, arrays["input_mask"].shape[1],
                                  shuffle=training, seed=seed,
                                  lengths=arrays["input_mask"].sum(axis=1))
    if training:
        ds = ds.shuffle(len(features), seed=seed, reshuffle_each_iteration=True)
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)
