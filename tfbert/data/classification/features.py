"""Classification examples as model input: batches through a `tfbert.BertPreprocessor` inside
`tf.data.map` (`make_dataset`: texts longer than the model are cut), or every text whole as
overlapping windows (`encode_windows`, `pack_windows`), batched as documents [B, K, T]
(`make_window_dataset`: K windows).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfbert.data import length_buckets as lb
from tfbert.data.classification.labels import label_ids, label_matrix
from tfbert.data.classification.readers import ClassificationExample
from tfbert.data.windows import window_spans
from tfbert.errors import UserError

_PREPROCESS_BATCH = 256  # texts tokenized per call inside the pipeline


def _check_pairs(examples: Sequence[ClassificationExample]) -> bool:
    """Whether the examples are sentence pairs (all or none; mixed is an error)."""
    if not examples:
        raise ValueError("no examples")
    pairs = [e.text_b is not None for e in examples]
    if any(pairs) and not all(pairs):
        odd = examples[pairs.index(not pairs[0])]
        raise UserError(f"{odd.source}: mixes single texts and sentence pairs "
                         f"(first example {examples[0].source} is "
                         f"{'a pair' if pairs[0] else 'a single text'})")
    return pairs[0]


def _targets(examples: Sequence[ClassificationExample], labels: Sequence[str],
             multi_label: bool) -> np.ndarray:
    return label_matrix(examples, labels) if multi_label else label_ids(examples, labels)


def make_dataset(examples: Sequence[ClassificationExample], preprocessor: Any,
                 labels: Sequence[str] | None, batch_size: int, shuffle: bool = False,
                 seed: int | None = None, multi_label: bool = False,
                 sample_weights: np.ndarray | None = None, length_buckets: bool = False) -> Any:
    """A tf.data.Dataset of (input dict, label id [B]) batches, or input dicts when labels is None.

    Tokenizing and packing run once, when the dataset is made, in batches through tf.data
    (`preprocessor` is a `tfbert.BertPreprocessor` or anything that maps a string batch, or a
    (text, text_b) pair of batches, to the input dict of [B, T] tensors); the packed examples
    are held in memory as arrays, so every pass only shuffles and batches. With
    `length_buckets` the batches are cut to bucket lengths (`tfbert.data.length_buckets`; the
    dataset's cardinality is the count of its batches); without shuffle each input dict then
    carries `example_index`, and `tfbert.data.length_buckets.predict_in_order` gives the
    outputs in example order.

    Args:
        examples: sequence of ClassificationExample. All single texts or all pairs.
        preprocessor: callable. texts [B] (or (texts [B], texts_b [B])) -> input dict.
        labels: sequence of str, optional. Label names in class-id order; None for no labels.
        batch_size: int. Examples per batch (the last batch may be smaller).
        shuffle: bool. Shuffle all examples, differently each epoch.
        seed: int, optional. Shuffle seed.
        multi_label: bool. Targets are multi-hot label sets [B, C] float32 (`label_matrix`).
        sample_weights: float [N], optional. A loss weight per example (e.g. its class
            weight); batches are then (inputs, targets, weights [B]).
        length_buckets: bool. Batches of one bucket each, cut to its length; False (the
            library default): every batch [B, max_seq_length] in example order.
    """
    if not examples:
        raise ValueError("make_dataset: no examples")
    pairs = _check_pairs(examples)
    texts: Any = tf.constant([e.text for e in examples])
    if pairs:
        texts = (texts, tf.constant([e.text_b for e in examples]))
    # Packed once into arrays: an iterator over a cache of the tokenizing pipeline would build
    # that pipeline (its vocab table) again at every pass, a cost on every dev evaluation.
    encoded = tf.data.Dataset.from_tensor_slices(texts).batch(_PREPROCESS_BATCH).map(
        lambda *x: preprocessor(x if len(x) > 1 else x[0]), num_parallel_calls=tf.data.AUTOTUNE)
    batches = list(encoded.as_numpy_iterator())
    arrays = {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}
    ds = tf.data.Dataset.from_tensor_slices(arrays)
    if labels is not None:
        parts = (ds, tf.data.Dataset.from_tensor_slices(_targets(examples, labels, multi_label)))
        if sample_weights is not None:
            parts += (tf.data.Dataset.from_tensor_slices(
                np.asarray(sample_weights, np.float32)),)
        ds = tf.data.Dataset.zip(parts)
    if length_buckets:
        return lb.batch_by_length(ds, batch_size, lb.packed_length(ds), shuffle=shuffle,
                                  seed=seed, lengths=arrays["input_mask"].sum(axis=1))
    if shuffle:
        ds = ds.shuffle(len(examples), seed=seed, reshuffle_each_iteration=True)
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def pack_windows(pieces: Sequence[int], pieces_b: Sequence[int] | None, max_seq_length: int,
                 doc_stride: int, cls_id: int, sep_id: int
                 ) -> list[tuple[list[int], list[int]]]:
    """The windows that read one whole text (or pair): (input ids, segment ids) of each,
    unpadded. The rule (the export's graph follows it to the letter):

    A single text of word pieces P: windows of body T - 2 (T = max_seq_length) at
    `window_spans(len(P), T - 2, doc_stride)`, each `[CLS] w [SEP]`.
    A pair (a, b) with len(a) + len(b) <= T - 3: one window `[CLS] a [SEP] b [SEP]` (the
    packing of a pair that fits). Otherwise a is cut to a' = a[:max(T - 3 - len(b),
    (T - 3) // 2)] and b is read in windows of body T - 3 - len(a'), each
    `[CLS] a' [SEP] w [SEP]`. A stride longer than a window's body steps by the body
    (`window_spans`: no piece is skipped).

    Args:
        pieces: sequence of int. Word-piece ids of the text (no special tokens).
        pieces_b: sequence of int, optional. Word-piece ids of text_b (a pair).
        max_seq_length: int. T (>= 3; >= 5 for pairs).
        doc_stride: int. Pieces between window starts (>= 1).
        cls_id, sep_id: int. Ids of [CLS] and [SEP].

    Example:
    >>> pack_windows([11, 12, 13, 14, 15], None, 5, 2, cls_id=1, sep_id=2)
    [([1, 11, 12, 13, 2], [0, 0, 0, 0, 0]), ([1, 13, 14, 15, 2], [0, 0, 0, 0, 0])]
    """
    t = max_seq_length
    if doc_stride < 1:
        raise ValueError(f"doc_stride must be >= 1, got {doc_stride}")
    if pieces_b is None:
        if t < 3:
            raise ValueError(f"max_seq_length {t} leaves no room for a word piece")
        return [([cls_id, *pieces[s:s + n], sep_id], [0] * (n + 2))
                for s, n in window_spans(len(pieces), t - 2, doc_stride)]
    if t < 5:
        raise ValueError(f"max_seq_length {t} is too short for sentence pairs (at least 5)")
    a, b = list(pieces), list(pieces_b)
    if len(a) + len(b) <= t - 3:
        return [([cls_id, *a, sep_id, *b, sep_id], [0] * (len(a) + 2) + [1] * (len(b) + 1))]
    a = a[:max(t - 3 - len(b), (t - 3) // 2)]
    head = [cls_id, *a, sep_id]
    return [(head + b[s:s + n] + [sep_id], [0] * len(head) + [1] * (n + 1))
            for s, n in window_spans(len(b), t - 3 - len(a), doc_stride)]


@dataclasses.dataclass
class WindowFeatures:
    """The windows of a list of examples, flattened: W windows of T positions.

    Attributes:
        input_ids, input_mask, segment_ids: int32 [W, T]. The model inputs of every window.
        document: int32 [W]. The example each window reads (windows of one example are
            consecutive, in text order).
        num_documents: int. N, the examples.
    """

    input_ids: np.ndarray
    input_mask: np.ndarray
    segment_ids: np.ndarray
    document: np.ndarray
    num_documents: int

    def inputs(self) -> dict[str, np.ndarray]:
        """The flat model inputs {name: [W, T]}."""
        return {"input_ids": self.input_ids, "input_mask": self.input_mask,
                "segment_ids": self.segment_ids}

    def windows_per_document(self) -> np.ndarray:
        """int [N]: how many windows read each example."""
        return np.bincount(self.document, minlength=self.num_documents)

    @property
    def stats(self) -> dict[str, int]:
        """{"documents", "windows", "documents_over_one_window", "max_windows"}."""
        counts = self.windows_per_document()
        return {"documents": self.num_documents, "windows": int(counts.sum()),
                "documents_over_one_window": int((counts > 1).sum()),
                "max_windows": int(counts.max(initial=0))}


def encode_windows(examples: Sequence[ClassificationExample], tokenizer: Any,
                   max_seq_length: int, doc_stride: int, batch_size: int = 512
                   ) -> WindowFeatures:
    """Tokenizes every text whole and packs its windows (`pack_windows`).

    Args:
        examples: sequence of ClassificationExample. All single texts or all pairs.
        tokenizer: a `tfbert.BertTokenizer` (tokenize, cls_id, sep_id, pad_id).
        max_seq_length: int. T.
        doc_stride: int. Pieces between window starts.
        batch_size: int. Texts tokenized per call.

    Returns:
        WindowFeatures.
    """
    pairs = _check_pairs(examples)
    ids, segments, document = [], [], []
    for begin in range(0, len(examples), batch_size):
        chunk = examples[begin:begin + batch_size]
        a = tokenizer.tokenize(tf.constant([e.text for e in chunk])).to_list()
        b = (tokenizer.tokenize(tf.constant([e.text_b for e in chunk])).to_list() if pairs
             else [None] * len(chunk))
        for row, (pieces, pieces_b) in enumerate(zip(a, b, strict=True)):
            for window_ids, window_segments in pack_windows(
                    pieces, pieces_b, max_seq_length, doc_stride, tokenizer.cls_id,
                    tokenizer.sep_id):
                ids.append(window_ids)
                segments.append(window_segments)
                document.append(begin + row)
    input_ids = np.full((len(ids), max_seq_length), tokenizer.pad_id, np.int32)
    input_mask = np.zeros((len(ids), max_seq_length), np.int32)
    segment_ids = np.zeros((len(ids), max_seq_length), np.int32)
    for w, (window_ids, window_segments) in enumerate(zip(ids, segments, strict=True)):
        input_ids[w, :len(window_ids)] = window_ids
        input_mask[w, :len(window_ids)] = 1
        segment_ids[w, :len(window_ids)] = window_segments
    return WindowFeatures(input_ids, input_mask, segment_ids, np.asarray(document, np.int32),
                          len(examples))


def make_window_dataset(windows: WindowFeatures, targets: np.ndarray | None, batch_size: int,
                        shuffle: bool = False, seed: int | None = None,
                        sample_weights: np.ndarray | None = None,
                        length_buckets: bool = False) -> Any:
    """A tf.data.Dataset of documents: (input dict of [B, K, T], targets[, weights]) batches.

    Each batch holds `batch_size` documents with all their windows, padded to the batch's most
    windows K with all-zero windows (input_mask 0 at [CLS]:
    `tfbert.models.classifier.WindowPooledClassifier` skips them, so they cost no model work).
    Without targets the batches are the input dicts. With `length_buckets` a document's length
    is its longest window's, and T is cut to its bucket's length ([B, K, L];
    `tfbert.data.length_buckets`, as in `make_dataset`).

    Args:
        windows: WindowFeatures (`encode_windows`).
        targets: [N] class ids (`label_ids`) or [N, C] label sets (`label_matrix`), or None.
        batch_size: int. Documents per batch.
        shuffle: bool. Shuffle the documents, differently each epoch.
        seed: int, optional. Shuffle seed.
        sample_weights: float [N], optional. A loss weight per document.
        length_buckets: bool. Batches of one bucket each, cut to its length; False (the
            library default): [B, K, max_seq_length] in document order.
    """
    rows = windows.document.astype(np.int64)
    docs = {name: tf.RaggedTensor.from_value_rowids(value, rows, windows.num_documents)
            for name, value in windows.inputs().items()}  # [N, (K), T]
    ds = tf.data.Dataset.from_tensor_slices(docs)  # elements [K, T]
    if targets is not None:
        parts = (ds, tf.data.Dataset.from_tensor_slices(targets))
        if sample_weights is not None:
            parts += (tf.data.Dataset.from_tensor_slices(
                np.asarray(sample_weights, np.float32)),)
        ds = tf.data.Dataset.zip(parts)
    if length_buckets:
        return lb.batch_by_length(ds, batch_size, windows.input_ids.shape[1], shuffle=shuffle,
                                  seed=seed)
    if shuffle:
        ds = ds.shuffle(windows.num_documents, seed=seed, reshuffle_each_iteration=True)
    ds = ds.ragged_batch(batch_size)  # [B, (K), T]
    dense = lambda x: {name: v.to_tensor() for name, v in x.items()}  # [B, K, T], zero-padded
    ds = ds.map(lambda x, *rest: (dense(x), *rest) if rest else dense(x))
    return ds.prefetch(tf.data.AUTOTUNE)
