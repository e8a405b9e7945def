"""The record formats a pretraining input may hold, told from the first record of each file.

    tfbert   tfbert's text pairs (`tfbert.pretraining_data.records`)
    google   google-research/bert's token ids with stored masks
             (`tfbert.pretraining_data.google_records`)

An unknown layout, a mix of formats or shapes, or shapes that do not fit the run is a UserError
naming the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence

import tensorflow as tf

from tfbert.errors import UserError
from tfbert.pretraining_data.google_records import GOOGLE_FEATURES
from tfbert.pretraining_data.records import file_info, parse_examples, quiet_deprecation

TFBERT, GOOGLE = "tfbert", "google"
RECORD_FORMATS = {
    TFBERT: "tfbert's text pairs (text_a, text_b: bytes; next_sentence_labels: int64), from "
            "data_tools/create_pretraining_data.py",
    GOOGLE: "google-research/bert's token ids with stored masks (input_ids, input_mask, "
            "segment_ids, masked_lm_positions, masked_lm_ids, next_sentence_labels: int64; "
            "masked_lm_weights: float), from its create_pretraining_data.py or "
            "data_tools/create_pretraining_data.py --output_format=google",
}


@dataclasses.dataclass(frozen=True)
class RecordLayout:
    """The format of a file's records, told from the features of its first record.

    Attributes:
        format: str. A RECORD_FORMATS key: "tfbert" or "google".
        seq_length: int or None. google: the length of input_ids (T); None for tfbert.
        predictions: int or None. google: the length of masked_lm_* (P); None for tfbert.
    """

    format: str
    seq_length: int | None = None
    predictions: int | None = None

    def describe(self) -> str:
        if self.format == GOOGLE:
            return (f"google format (input_ids [{self.seq_length}], masked_lm_positions "
                    f"[{self.predictions}])")
        return f"{self.format} format"


_KINDS = {"bytes_list": "bytes", "int64_list": "int64", "float_list": "float"}


def _features(first: bytes) -> dict[str, tuple[str, int]]:
    """name -> (kind, number of values) of a serialized tf.train.Example."""
    example = tf.train.Example.FromString(first)
    found = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        found[name] = (_KINDS.get(kind, "empty"), len(getattr(feature, kind).value) if kind else 0)
    return dict(sorted(found.items()))


def _unknown(path: str, what: str, index: int, found: str) -> UserError:
    formats = "; ".join(f"{name}: {text}" for name, text in RECORD_FORMATS.items())
    return UserError(f"{what} {path}: record {index} is not a tfbert pretraining example in "
                     f"any record format tfbert reads; its features are {found}. Formats "
                     f"supported: {formats}")


def record_layout(first: bytes, path: str, what: str = "input_file") -> RecordLayout:
    """The RecordLayout of a file, from its first (serialized) record.

    Raises:
        UserError: the record is not a tf.train.Example of a known format, or its google-format
            features disagree in length; the message names the file, the features found and
            the formats supported.
    """
    try:
        found = _features(first)
    except Exception:  # noqa: BLE001 - any parse failure means "not an Example"
        raise _unknown(path, what, 0, "unreadable (not a tf.train.Example)") from None
    listing = (", ".join(f"{n} ({k} x{c})" for n, (k, c) in found.items())
               or "none (an empty record, or not a tf.train.Example)")
    if all(found.get(name, ("", 0))[0] == kind for name, kind in GOOGLE_FEATURES.items()):
        seq = {found[n][1] for n in ("input_ids", "input_mask", "segment_ids")}
        pred = {found[n][1] for n in ("masked_lm_positions", "masked_lm_ids",
                                      "masked_lm_weights")}
        if len(seq) > 1 or len(pred) > 1 or found["next_sentence_labels"][1] != 1:
            raise UserError(f"{what} {path}: record 0 is a google-format record with "
                            f"inconsistent lengths: {listing} (input_ids, input_mask and "
                            "segment_ids must share one length, the masked_lm_* features "
                            "another, and next_sentence_labels hold 1 value)")
        return RecordLayout(GOOGLE, seq.pop(), pred.pop())
    if "text_a" in found and "text_b" in found:
        try:
            parse_examples(tf.constant([first]))
        except (tf.errors.InvalidArgumentError, ValueError):
            raise _unknown(path, what, 0, listing) from None
        return RecordLayout(TFBERT)
    raise _unknown(path, what, 0, listing)


def checked_layout(first: bytes, path: str, what: str, known: tuple[str, RecordLayout] | None,
                   max_seq_length: int | None, max_predictions_per_seq: int | None,
                   vocab_size: int | None) -> RecordLayout:
    """The RecordLayout of a file from its first record, checked: the same format (and for
    google records the same shape) as `known` (an earlier file's path and layout, or None),
    the shapes asked for, and (google records) token ids below `vocab_size`.

    Raises:
        UserError: as `record_layout`, or a check above failing; the message names the file.
    """
    layout = record_layout(first, path, what)
    if known is not None and known[1] != layout:
        before_path, before = known
        kind = "formats" if before.format != layout.format else "shapes"
        raise UserError(f"{what}: mixed record {kind}: {before_path} holds "
                        f"{before.describe()} records, {path} holds "
                        f"{layout.describe()} records; one input reads one format and shape")
    if layout.format != GOOGLE:
        return layout
    wrong = []
    if max_seq_length is not None and layout.seq_length != max_seq_length:
        wrong.append(f"input_ids/input_mask/segment_ids hold {layout.seq_length} values, "
                     f"max_seq_length is {max_seq_length}")
    if max_predictions_per_seq is not None and layout.predictions != max_predictions_per_seq:
        wrong.append(f"masked_lm_positions/ids/weights hold {layout.predictions} values, "
                     f"max_predictions_per_seq is {max_predictions_per_seq}")
    if wrong:
        raise UserError(f"{what} {path}: google-format records made for other shapes: "
                        f"{'; '.join(wrong)}. Pass the records' max_seq_length and "
                        "max_predictions_per_seq, or remake them with those values")
    if vocab_size is not None:
        features = tf.train.Example.FromString(first).features.feature
        largest = max(max(features[n].int64_list.value, default=0)
                      for n in ("input_ids", "masked_lm_ids"))
        if largest >= vocab_size:
            raise UserError(f"{what} {path}: record 0 holds token id {largest}, but the vocab "
                            f"has {vocab_size} tokens; the records were made with another "
                            "vocab (pass the vocab_file they were made with)")
    return layout


def first_record(path: str) -> bytes | None:
    """The first record of a TFRecord file (plain or GZIP), or None for an empty file."""
    options = tf.io.TFRecordOptions(compression_type=file_info(path)[0])
    with quiet_deprecation(), contextlib.suppress(tf.errors.DataLossError):
        for record in tf.compat.v1.io.tf_record_iterator(path, options):
            return record
    return None  # empty, or damaged from the start (the reader's own check reports that)


def files_layout(files: Sequence[str], what: str = "input_file",
                 max_seq_length: int | None = None,
                 max_predictions_per_seq: int | None = None,
                 vocab_size: int | None = None) -> RecordLayout:
    """The one RecordLayout of the files (first record of each; see `checked_layout` for the
    checks and errors). Files without records are passed over; none at all reads as tfbert's."""
    known: tuple[str, RecordLayout] | None = None
    for path in files:
        first = first_record(path)
        if first is None:
            continue
        layout = checked_layout(first, path, what, known, max_seq_length,
                                max_predictions_per_seq, vocab_size)
        known = known or (path, layout)
    return known[1] if known else RecordLayout(TFBERT)
