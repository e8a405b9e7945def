"""NER features: each token's label aligned to word pieces, long sentences as windows, and back.

The text of an example (`tfbert.data.ner.readers`) is tokenized in one go with offsets (as a served
model would see it), and each token's label goes on the first word piece that starts inside it
(label_alignment "first"), or is spread over all of its pieces ("all": B-X I-X ...); other pieces
get IGNORE_INDEX (-100), masked out of the loss. Going back, the predicted tag of a token's first
piece applies to the token, so predictions become entities with character offsets into the text.

A sentence longer than max_seq_length - 2 pieces is read as overlapping windows (long_input
"windows", tfbert.data.windows): every window is a training example, and each piece is read
from the window where it has the most context. In the cross-entropy a label counts only in that
window (each token once, with the context it is predicted with); a CRF scores every window's
labelled pieces as one sequence. Evaluation takes each piece's logits from its max-context
window and (with a CRF) runs Viterbi over the whole sentence. long_input "truncate" keeps the
first window only.

Counted, never silently dropped: windows, sentences cut by truncation (and the entities they
lose), tokens no word piece starts in (a piece spanning several characters), and tokens without
a prediction (cut by truncation, or only characters the tokenizer removes).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfbert.data import length_buckets as lb
from tfbert.data import windows
from tfbert.data.ner.readers import NerExample, tag_ids
from tfbert.data.tags import get_entities, spread
from tfbert.errors import UserError

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100

LABEL_ALIGNMENTS = ("first", "all")


@dataclasses.dataclass
class NerFeatures:
    """Packed model inputs and labels for a list of examples: one row per window.

    A sentence that fits T - 2 pieces is one window; a longer one is several (`long_input`
    "windows") or its first T - 2 pieces ("truncate"). Each piece is read from the window where
    it has the most context (tfbert.data.windows.is_max_context).

    Attributes:
        input_ids, input_mask, segment_ids: int32 [W, T]. The model inputs.
        label_ids: int32 [W, T]. Tag ids on the labelled pieces (each token's first piece, or
            every piece of it with label_alignment "all"), IGNORE_INDEX elsewhere.
        max_context: bool [W, T]. The window is the one where the piece at that position has
            the most context (False off the text).
        window_example: int32 [W]. The example each window comes from.
        piece_rows: per example: int [n, 2], (window row, packed position) of each of its n
            pieces in its max-context window (n = the pieces kept: all of them with windows).
        read_pieces: per example, per token: index of the piece that gives the token its tag
            (its first piece, or the piece that covers it when none starts inside it), -1
            when no kept piece does (cut by truncation, or no piece at all).
        chain_pieces: per example: indexes of the pieces a CRF chains (the read pieces with
            label_alignment "first", every piece with "all"), in order.
        stats: counts (see `encode_examples`).
    """

    input_ids: np.ndarray
    input_mask: np.ndarray
    segment_ids: np.ndarray
    label_ids: np.ndarray
    max_context: np.ndarray
    window_example: np.ndarray
    piece_rows: list[np.ndarray]
    read_pieces: list[list[int]]
    chain_pieces: list[np.ndarray]
    stats: dict[str, int]

    def inputs(self) -> dict[str, np.ndarray]:
        return {"input_ids": self.input_ids, "input_mask": self.input_mask,
                "segment_ids": self.segment_ids}

    @property
    def token_pieces(self) -> list[list[int]]:
        """Per example, per token: the packed position of the piece its tag comes from (in the
        window where that piece has the most context), -1 without one."""
        return [[int(rows[p, 1]) if p >= 0 else -1 for p in read]
                for rows, read in zip(self.piece_rows, self.read_pieces, strict=True)]

    @property
    def token_windows(self) -> list[list[int]]:
        """Per example, per token: the window row its tag comes from, -1 without one."""
        return [[int(rows[p, 0]) if p >= 0 else -1 for p in read]
                for rows, read in zip(self.piece_rows, self.read_pieces, strict=True)]


def check_windows(max_seq_length: int, doc_stride: int | None, long_input: str = "windows",
                  label_alignment: str = "first") -> int:
    """The window stride for T = max_seq_length (default T // 2); UserError for a stride that is
    not in [1, T - 2) (windows of T - 2 pieces would not overlap) or an unknown option."""
    if long_input not in windows.LONG_INPUT:
        raise UserError(f"long_input must be one of {windows.LONG_INPUT}, got {long_input!r}")
    if label_alignment not in LABEL_ALIGNMENTS:
        raise UserError(f"label_alignment must be one of {LABEL_ALIGNMENTS}, got "
                        f"{label_alignment!r}")
    if max_seq_length < 3:
        raise UserError(f"max_seq_length must be at least 3, got {max_seq_length}")
    body = max_seq_length - 2
    stride = max_seq_length // 2 if doc_stride is None else doc_stride
    if long_input == "windows" and not 1 <= stride < body:
        raise UserError(f"doc_stride {stride} must be in [1, {body}): windows hold "
                        f"max_seq_length - 2 = {body} pieces, and a window stride >= that "
                        "leaves no overlap (pieces at a window's edge would be read without "
                        "context)")
    return stride


def encode_examples(examples: Sequence[NerExample], tokenizer: Any, max_seq_length: int,
                    labels: Sequence[str], batch_size: int = 512, long_input: str = "truncate",
                    doc_stride: int | None = None, label_alignment: str = "first"
                    ) -> NerFeatures:
    """Tokenizes sentences with offsets, packs `[CLS] pieces [SEP]` windows and aligns the tags.

    Args:
        examples: sequence of NerExample.
        tokenizer: a `tfbert.BertTokenizer` (tokenize_with_offsets, cls_id, sep_id, pad_id).
        max_seq_length: int. T; a window holds T - 2 pieces.
        labels: sequence of str. Tag names in label-id order.
        batch_size: int. Sentences tokenized per call.
        long_input: str. "windows": a sentence longer than T - 2 pieces is read as windows of
            T - 2 pieces every `doc_stride` pieces (run_ner's default); "truncate": its first
            T - 2 pieces only (the rest get no prediction).
        doc_stride: int or None. Pieces between window starts, in [1, T - 2); default T // 2.
        label_alignment: str. "first": a token's tag on its first piece only; "all": on every
            piece of it, spread as one entity (B-X on the first, I-X on the others; the last
            piece of an E-X or S-X token gets E-X). Predictions read the first piece either way.

    Returns:
        NerFeatures. stats: "examples", "windows", "long_examples" (more than T - 2 pieces),
        "truncated_examples" / "truncated_entities" (gold entities not wholly inside the kept
        pieces; 0 with windows), "uncovered_tokens" (tokens no piece starts in; their tag comes
        from the piece covering them), "lost_tokens" (tokens no piece covers at all, e.g. only
        characters the tokenizer drops; tagged O) and "unpredicted_tokens" (tokens without a
        prediction: the lost ones and those cut by truncation; equal to lost_tokens with
        windows).

    Raises:
        UserError: a tag not among `labels` (naming the example's file and line), a bad
            doc_stride or option.
    """
    stride = check_windows(max_seq_length, doc_stride, long_input, label_alignment)
    index = {name: i for i, name in enumerate(labels)}
    t, body = max_seq_length, max_seq_length - 2
    rows_ids: list[np.ndarray] = []
    rows_labels: list[np.ndarray] = []
    rows_best: list[np.ndarray] = []
    rows_length: list[int] = []
    window_example: list[int] = []
    piece_rows: list[np.ndarray] = []
    read_pieces: list[list[int]] = []
    chain_pieces: list[np.ndarray] = []
    stats = {"examples": len(examples), "windows": 0, "long_examples": 0,
             "truncated_examples": 0, "truncated_entities": 0, "uncovered_tokens": 0,
             "lost_tokens": 0, "unpredicted_tokens": 0}
    for begin in range(0, len(examples), batch_size):
        chunk = examples[begin:begin + batch_size]
        ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant([e.text for e in chunk]))
        for row, (example, piece_ids, piece_starts, piece_ends) in enumerate(zip(
                chunk, ids.to_list(), starts.to_list(), ends.to_list(), strict=True)):
            try:
                tag_id = tag_ids(example, labels, index)
            except ValueError as e:
                raise UserError(str(e)) from None
            n = len(piece_ids)
            spans = (windows.window_spans(n, body, stride) if long_input == "windows"
                     else [(0, min(n, body))])
            kept = spans[-1][0] + spans[-1][1]
            read, first, owner = _align(example.token_offsets(), piece_starts, piece_ends)
            piece_label = _piece_labels(example, tag_id, read, first, owner, label_alignment,
                                        index)
            best = _best_windows(spans, kept)  # [kept]: window of each piece
            first_row = len(window_example)
            for w, (s, length) in enumerate(spans):
                packed = np.full(t, tokenizer.pad_id, np.int32)
                packed[0], packed[1:length + 1] = tokenizer.cls_id, piece_ids[s:s + length]
                packed[length + 1] = tokenizer.sep_id
                label_row = np.full(t, IGNORE_INDEX, np.int32)
                label_row[1:length + 1] = piece_label[s:s + length]
                best_row = np.zeros(t, bool)
                best_row[1:length + 1] = best[s:s + length] == w
                rows_ids.append(packed)
                rows_labels.append(label_row)
                rows_best.append(best_row)
                rows_length.append(length + 2)
                window_example.append(begin + row)
            starts_of = np.array([s for s, _ in spans], np.int64)
            piece_rows.append(np.stack([first_row + best, 1 + np.arange(kept) - starts_of[best]],
                                       axis=1).astype(np.int64))
            cut = [p >= kept for p in read]
            read = [p if 0 <= p < kept else -1 for p in read]
            read_pieces.append(read)
            chain = (sorted({p for p in read if p >= 0}) if label_alignment == "first"
                     else list(range(kept)))
            chain_pieces.append(np.array(chain, np.int64))
            stats["windows"] += len(spans)
            stats["long_examples"] += n > body
            if kept < n:
                stats["truncated_examples"] += 1
                stats["truncated_entities"] += sum(
                    1 for e in get_entities(example.tags) if any(cut[e.start:e.end + 1]))
            stats["uncovered_tokens"] += sum(1 for p, f in zip(read, first, strict=True)
                                             if p >= 0 and not f)
            lost = sum(1 for p, c in zip(read, cut, strict=True) if p < 0 and not c)
            stats["lost_tokens"] += lost
            stats["unpredicted_tokens"] += sum(1 for p in read if p < 0)
    input_ids = np.stack(rows_ids) if rows_ids else np.zeros((0, t), np.int32)
    lengths = np.array(rows_length, np.int64)
    input_mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.int32)
    return NerFeatures(
        input_ids, input_mask, np.zeros_like(input_ids),
        np.stack(rows_labels) if rows_labels else np.zeros((0, t), np.int32),
        np.stack(rows_best) if rows_best else np.zeros((0, t), bool),
        np.array(window_example, np.int32), piece_rows, read_pieces, chain_pieces, stats)


def _best_windows(spans: list[tuple[int, int]], kept: int) -> np.ndarray:
    """The window where each of the first `kept` pieces has the most context: int [kept]
    (tfbert.data.windows.is_max_context's rule, in integers: ties to the earlier window)."""
    p = np.arange(kept)[None, :]
    s = np.array([s for s, _ in spans])[:, None]
    n = np.array([n for _, n in spans])[:, None]
    e = s + n - 1
    score = np.where((p >= s) & (p <= e), 100 * np.minimum(p - s, e - p) + n, -1)
    return score.argmax(axis=0) if kept else np.zeros(0, np.int64)


def _align(token_offsets: list[tuple[int, int]], piece_starts: list[int], piece_ends: list[int]
           ) -> tuple[list[int], list[bool], list[int]]:
    """(read piece index or -1, is-first-piece) per token, and the token each piece starts in.

    A token's tag goes on the first piece starting inside it; a token with no piece of its own
    takes the piece that covers its first character.
    """
    text_length = token_offsets[-1][1] if token_offsets else 0
    owner = np.full(text_length + 1, -1, np.int64)  # char -> token
    for token, (start, end) in enumerate(token_offsets):
        owner[start:end] = token
    covering = np.full(text_length + 1, -1, np.int64)  # char -> piece index
    read = [-1] * len(token_offsets)
    first = [False] * len(token_offsets)
    piece_owner = []
    for j, (start, end) in enumerate(zip(piece_starts, piece_ends, strict=True)):
        covering[start:end] = j
        token = int(owner[min(start, text_length)])
        piece_owner.append(token)
        if token >= 0 and read[token] < 0:
            read[token], first[token] = j, True
    for token, (start, _) in enumerate(token_offsets):
        if read[token] < 0 and covering[start] >= 0:
            read[token] = int(covering[start])
    return read, first, piece_owner


def _piece_labels(example: NerExample, tag_id: list[int], read: list[int], first: list[bool],
                  owner: list[int], alignment: str, index: dict[str, int]) -> np.ndarray:
    """The label id of every piece: the token's tag on its first piece ("first"), or its tag
    spread over all of its pieces ("all"); IGNORE_INDEX elsewhere."""
    out = np.full(len(owner), IGNORE_INDEX, np.int32)
    if alignment == "first":
        for token, (p, f) in enumerate(zip(read, first, strict=True)):
            if f:
                out[p] = tag_id[token]
        return out
    pieces: dict[int, list[int]] = collections.defaultdict(list)
    for j, token in enumerate(owner):
        if token >= 0:
            pieces[token].append(j)
    for token, js in pieces.items():
        for j, tag in zip(js, spread(example.tags[token], len(js)), strict=True):
            if tag not in index:
                raise UserError(f"{example.source}: label_alignment 'all' puts {tag!r} on a "
                                f"word piece of {example.tokens[token]!r}, and it is not among "
                                f"the labels {sorted(index)}")
            out[j] = index[tag]
    return out


def piece_logits(features: NerFeatures, logits: np.ndarray) -> list[np.ndarray]:
    """Per example, the logits of each of its pieces, from the window where the piece has the
    most context: [n, C] from the windows' logits [W, T, C]."""
    return [logits[rows[:, 0], rows[:, 1]] for rows in features.piece_rows]


def decode_logits(features: NerFeatures, logits: np.ndarray, labels: Sequence[str],
                  viterbi: Any = None) -> list[list[str]]:
    """Token-level tags from the windows' logits [W, T, C].

    Each piece's logits come from its max-context window (`piece_logits`); a token takes the
    tag of its read piece. Without `viterbi` that is the piece's argmax; with it (a CRF model's
    `decode`), Viterbi over each sentence's chain pieces (`NerFeatures.chain_pieces`), across
    window boundaries.

    Args:
        features: NerFeatures.
        logits: float [W, T, C]. The model's outputs for features.inputs().
        labels: sequence of str. Tag names in id order.
        viterbi: callable(emissions [N, L, C], mask [N, L]) -> tag ids [N, L], or None.
    """
    pieces = piece_logits(features, np.asarray(logits))
    if viterbi is None:
        ids = [p.argmax(-1) if len(p) else np.zeros(0, np.int64) for p in pieces]
    else:
        chains = features.chain_pieces
        width = max([len(c) for c in chains] + [1])
        num_tags = np.asarray(logits).shape[-1]
        emissions = np.zeros((len(pieces), width, num_tags), np.float32)
        mask = np.zeros((len(pieces), width), bool)
        for i, (p, chain) in enumerate(zip(pieces, chains, strict=True)):
            emissions[i, :len(chain)], mask[i, :len(chain)] = p[chain], True
        decoded = np.asarray(viterbi(emissions, mask))
        ids = []
        for i, (p, chain) in enumerate(zip(pieces, chains, strict=True)):
            row = np.zeros(len(p), np.int64)
            row[chain] = decoded[i, :len(chain)]
            ids.append(row)
    return _token_tags(features.read_pieces, ids, labels)


def decode_predictions(features: NerFeatures, predicted_ids: np.ndarray, labels: Sequence[str]
                       ) -> list[list[str]]:
    """Token-level tags from piece-level predictions [W, T] (argmax ids), each piece read from
    its max-context window.

    A token takes the tag of its piece; when one piece covers several tokens, its tag spreads
    over them as one entity (B-X becomes B-X I-X ..., S-X becomes B-X ... E-X). Tokens without
    a piece (cut by truncation, or dropped by the tokenizer) get "O".
    """
    predicted_ids = np.asarray(predicted_ids)
    ids = [predicted_ids[rows[:, 0], rows[:, 1]] for rows in features.piece_rows]
    return _token_tags(features.read_pieces, ids, labels)


def _token_tags(read_pieces: list[list[int]], piece_ids: list[np.ndarray],
                labels: Sequence[str]) -> list[list[str]]:
    out = []
    for read, ids in zip(read_pieces, piece_ids, strict=True):
        tags = ["O"] * len(read)
        token = 0
        while token < len(read):
            piece = read[token]
            last = token
            while last + 1 < len(read) and read[last + 1] == piece >= 0:
                last += 1
            if piece >= 0:
                tags[token:last + 1] = spread(labels[int(ids[piece])], last - token + 1)
            token = last + 1
        out.append(tags)
    return out


def make_dataset(features: NerFeatures, batch_size: int, shuffle: bool = False,
                 seed: int | None = None, crf: bool = False, length_buckets: bool = False
                 ) -> Any:
    """A tf.data.Dataset of (input dict, label ids [B, T], sample weights [B, T]); every window
    is an example.

    With `length_buckets` (False: the library default) every batch holds windows of one bucket,
    inputs, labels and weights cut to its length L ([B, L]; `tfbert.data.length_buckets`: the
    cut drops padding only, whose weights are 0); the dataset's cardinality is the number of
    batches, and without shuffle each input dict carries `example_index`.

    Label ids of IGNORE_INDEX become class 0 with weight 0, so they never reach the loss. Where
    windows overlap, a piece's label has weight 1 only in the window where the piece has the
    most context, so each token counts once in the cross-entropy, read with the context it
    is predicted with. With `crf`, every labelled piece of a window has weight 1: the CRF
    scores each window's tag sequence as a whole (CrfLoss).
    """
    labelled = features.label_ids != IGNORE_INDEX
    weights = (labelled if crf else labelled & features.max_context).astype(np.float32)
    labels = np.where(features.label_ids == IGNORE_INDEX, 0, features.label_ids).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((features.inputs(), labels, weights))
    if length_buckets:
        return lb.batch_by_length(
            ds, batch_size, features.input_ids.shape[1], shuffle=shuffle, seed=seed,
            per_token_targets=True, lengths=features.input_mask.sum(axis=1))
    if shuffle:
        ds = ds.shuffle(len(labels), seed=seed, reshuffle_each_iteration=True)
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)
