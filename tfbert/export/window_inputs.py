"""Windows for the ids-in signature and TFLite: the caller's side of long-text reading.

The SavedModel's `serving_default` (text in) reads a text longer than the model as overlapping
windows in the graph (saved_model.py, ExportSpec.long_input "windows"). `serve_ids` and the
.tflite models take packed windows [W, T] instead; these functions make them from texts with the
same rules and merge the per-window outputs back per text, so a client gets what the text path
gives:

    batch = make_windows(tokenizer, texts, seq_length=128, doc_stride=64)
    out = serve_ids(**{k: tf.constant(v) for k, v in batch.inputs.items()})
    logits = merge_ner(batch, out["logits"].numpy())        # per text: [P, C], one per piece
    logits = merge_classification(batch, out["logits"].numpy())   # [B, C], windows averaged

Windows: single texts, T - 2 pieces every doc_stride pieces (tfbert.data.windows.window_spans),
packed `[CLS] w [SEP]`; pairs (text, text_b): a' = the first max(T - 3 - len(b), (T - 3) // 2)
pieces of text, windows of T - 3 - len(a') pieces over text_b, packed `[CLS] a' [SEP] w [SEP]`
(one window, packed as usual, when both fit). NER reads each piece from the window where it
has the most context (tfbert.data.windows.is_max_context); classification averages logits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfbert.data import windows


@dataclasses.dataclass
class WindowBatch:
    """Packed windows of a batch of texts.

    Attributes:
        inputs: {"input_ids", "input_mask", "segment_ids"}: int32 [W, T].
        row: int [W]. The text each window comes from.
        start: int [W]. The window's first piece (of text_b for pairs).
        length: int [W]. Its pieces.
        num_pieces: int [B]. Pieces of each text (of text_b for pairs).
        starts, ends: per text, int [P]: the characters of each piece (end exclusive).
    """

    inputs: dict[str, np.ndarray]
    row: np.ndarray
    start: np.ndarray
    length: np.ndarray
    num_pieces: np.ndarray
    starts: list[np.ndarray]
    ends: list[np.ndarray]


def make_windows(tokenizer: Any, texts: Sequence[str], seq_length: int,
                 doc_stride: int | None = None, texts_b: Sequence[str] | None = None
                 ) -> WindowBatch:
    """Tokenizes and packs the windows of `texts` (and `texts_b`) as the text path does.

    Args:
        tokenizer: tfbert.BertTokenizer of the model (its vocab and lower_case).
        texts: sequence of str. B texts.
        seq_length: int. T, the model's max_seq_length.
        doc_stride: int or None. Pieces between window starts (default T // 2).
        texts_b: sequence of str or None. Second segments of a pair model (windows over them).
    """
    # TensorFlow only for the ragged gather; the window bookkeeping here is NumPy.
    import tensorflow as tf

    stride = seq_length // 2 if doc_stride is None else doc_stride
    ids, starts, ends = (x.to_list() for x in tokenizer.tokenize_with_offsets(
        tf.constant(list(texts), tf.string)))
    ids_b = (tokenizer.tokenize_with_offsets(tf.constant(list(texts_b), tf.string))[0].to_list()
             if texts_b is not None else None)
    rows, spans, packed = [], [], []
    for i, pieces in enumerate(ids):
        if ids_b is None:
            prefix, body_ids, body = [], pieces, seq_length - 2
        else:
            b = ids_b[i]
            prefix = pieces[:max(seq_length - 3 - len(b), (seq_length - 3) // 2)]
            body_ids, body = b, seq_length - 3 - len(prefix)
        for start, length in windows.window_spans(len(body_ids), body, stride):
            window = body_ids[start:start + length]
            if ids_b is None:
                tokens = [tokenizer.cls_id, *window, tokenizer.sep_id]
                segments = [0] * len(tokens)
            else:
                tokens = [tokenizer.cls_id, *prefix, tokenizer.sep_id, *window, tokenizer.sep_id]
                segments = [0] * (len(prefix) + 2) + [1] * (len(window) + 1)
            rows.append(i)
            spans.append((start, length))
            packed.append((tokens, segments))
    w = len(packed)
    input_ids = np.full((w, seq_length), tokenizer.pad_id, np.int32)
    segment_ids = np.zeros((w, seq_length), np.int32)
    input_mask = np.zeros((w, seq_length), np.int32)
    for j, (tokens, segments) in enumerate(packed):
        input_ids[j, :len(tokens)], segment_ids[j, :len(tokens)] = tokens, segments
        input_mask[j, :len(tokens)] = 1
    num_pieces = [len(p) for p in (ids if ids_b is None else ids_b)]
    return WindowBatch({"input_ids": input_ids, "input_mask": input_mask,
                        "segment_ids": segment_ids},
                       np.array(rows, np.int64), np.array([s for s, _ in spans], np.int64),
                       np.array([n for _, n in spans], np.int64), np.array(num_pieces, np.int64),
                       [np.array(s, np.int64) for s in starts],
                       [np.array(e, np.int64) for e in ends])


def max_context_windows(batch: WindowBatch) -> list[np.ndarray]:
    """Per text, the window (index into W) where each of its pieces has the most context."""
    out = []
    for i, n in enumerate(batch.num_pieces):
        own = np.flatnonzero(batch.row == i)
        spans = list(zip(batch.start[own].tolist(), batch.length[own].tolist(), strict=True))
        best = [next(k for k in range(len(spans)) if windows.is_max_context(spans, k, p))
                for p in range(n)]
        out.append(own[np.array(best, np.int64)] if n else np.zeros(0, np.int64))
    return out


def merge_ner(batch: WindowBatch, logits: np.ndarray) -> list[np.ndarray]:
    """Per text, [P, C]: each piece's logits from its max-context window of the windows'
    per-position logits [W, T, C] (single texts: piece p of a window at position 1 + p - start)."""
    out = []
    for best in max_context_windows(batch):
        p = np.arange(len(best))
        out.append(np.asarray(logits)[best, 1 + p - batch.start[best]])
    return out


def merge_classification(batch: WindowBatch, logits: np.ndarray) -> np.ndarray:
    """[B, C]: the mean of each text's windows' logits [W, C]."""
    logits = np.asarray(logits)
    return np.stack([logits[batch.row == i].mean(axis=0) for i in range(len(batch.num_pieces))])
