"""Overlapping windows over a sequence of word pieces longer than a model's input.

A text of N pieces that does not fit a window of L pieces is read as windows of L pieces, one
every `doc_stride` pieces until one reaches the end (google-research/bert's run_squad.py rule),
and each piece is read from the window where it has the most context (`is_max_context`).
Extractive QA windows the context this way (tfbert.data.qa_features); classification and NER
window long texts with the same two functions, and the export does the same in the graph.

    >>> window_spans(10, 4, 2)
    [(0, 4), (2, 4), (4, 4), (6, 4)]
    >>> [is_max_context(window_spans(10, 4, 2), i, 4) for i in range(4)]
    [False, True, False, False]
"""

from __future__ import annotations

from collections.abc import Sequence

# How classification and NER read a text longer than the model's input: cut it ("truncate") or
# read it whole as overlapping windows ("windows"); each task has its own default.
LONG_INPUT = ("truncate", "windows")


def window_spans(num_tokens: int, max_tokens: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) of the context windows: a window every `doc_stride` tokens until one
    reaches the end (Google's run_squad.py rule). An empty context gets one empty window."""
    spans: list[tuple[int, int]] = []
    start = 0
    while True:
        length = min(num_tokens - start, max_tokens)
        spans.append((start, length))
        if start + length >= num_tokens:
            return spans
        start += min(length, doc_stride)


def is_max_context(spans: Sequence[tuple[int, int]], span_index: int, position: int) -> bool:
    """Whether window `span_index` is the one where token `position` has the most context
    (min of left and right context, ties to the longer window then the earlier one)."""
    best_score, best_index = None, None
    for i, (start, length) in enumerate(spans):
        end = start + length - 1
        if not start <= position <= end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, i
    return best_index == span_index
