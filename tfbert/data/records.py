"""Pretraining TFRecords: the schema, the sharded writer, and a reader that checks every file.

One `tf.train.Example` per sentence pair:

| feature                | type          | meaning                                              |
|------------------------|---------------|------------------------------------------------------|
| `text_a`               | bytes         | segment A, UTF-8 text (re-tokenized by the pipeline)  |
| `text_b`               | bytes         | segment B                                            |
| `next_sentence_labels` | int64         | 0 = IsNext, 1 = NotNext (the reference's convention)  |
| `word_starts_a`        | int64 list    | whole-word masking: start char of each jieba word of A|
| `word_starts_b`        | int64 list    | same for B (both absent without `--whole_word_mask`)  |

Char offsets count Unicode code points, as `BertTokenizer.tokenize_with_offsets` does.

TensorFlow's own TFRecord reader stops SILENTLY at a truncated file (a cut in the middle of a
record reads as the end of the file), and names no file when it does raise (a corrupt CRC).
`read_records` therefore counts the bytes of every record it reads and compares them with the
file's size (for GZIP files, with the uncompressed size in the gzip trailer): a short file
raises an error naming the file, or with `skip_corrupt=True` logs a warning with what was lost
and goes on. All of this is in-graph (no Python in the input pipeline), so the warning is a
`tf.print` to stderr rather than a `logging` record.

`scan_records` reads every file once before a run builds its model (CRCs checked by TensorFlow's
reader, bytes counted as above), so a bad shard is a UserError at the start naming the file, the
record and its byte offset, not an error at step 96. It also tells the record format of each
file from the features of its first record (`record_layout`): tfbert's text pairs above, or
google-research/bert's token ids with stored masks (`tfbert.data.google_records`); an unknown
layout, a mix of formats or shapes that do not fit the run is a UserError naming the file.
A bad record ends what TensorFlow can read of a file (its reader moves on to the next file
after a checksum error), so with `skip_corrupt` the rest of that file is skipped; the scan
counts what is skipped (for plain files by walking the record headers after the bad record) and
tells `read_records` the bytes to expect, so the end-of-file check passes quietly for the known
loss.

`positioned_records` is the training order: an endless stream where each position is a pure
function of (files, record counts, seed), so it starts at any position without reading the
records before it; it reads each file up to the count the scan found readable and checks that
it holds that many.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import tensorflow as tf
from tqdm.auto import tqdm

from tfbert import ownership
from tfbert.data.google_records import GOOGLE_FEATURES
from tfbert.errors import UserError

logger = logging.getLogger(__name__)

FEATURE_SPEC = {
    "text_a": tf.io.FixedLenFeature([], tf.string),
    "text_b": tf.io.FixedLenFeature([], tf.string),
    "next_sentence_labels": tf.io.FixedLenFeature([], tf.int64),
    "word_starts_a": tf.io.RaggedFeature(tf.int64, row_splits_dtype=tf.int64),
    "word_starts_b": tf.io.RaggedFeature(tf.int64, row_splits_dtype=tf.int64),
}

TFBERT, GOOGLE = "tfbert", "google"
RECORD_FORMATS = {
    TFBERT: "tfbert's text pairs (text_a, text_b: bytes; next_sentence_labels: int64), from "
            "data_tools/create_pretraining_data.py",
    GOOGLE: "google-research/bert's token ids with stored masks (input_ids, input_mask, "
            "segment_ids, masked_lm_positions, masked_lm_ids, next_sentence_labels: int64; "
            "masked_lm_weights: float), from its create_pretraining_data.py or "
            "data_tools/create_pretraining_data.py --output_format=google",
}

_GZIP_MAGIC = b"\x1f\x8b"
_RECORD_OVERHEAD = 16  # uint64 length, uint32 length CRC, uint32 data CRC


def make_example(text_a: str, text_b: str, next_sentence_label: int,
                 word_starts_a: Sequence[int] | None = None,
                 word_starts_b: Sequence[int] | None = None) -> bytes:
    """Serializes one sentence pair as a `tf.train.Example`.

    Args:
        text_a: str. Segment A.
        text_b: str. Segment B.
        next_sentence_label: int. 0 IsNext, 1 NotNext.
        word_starts_a: sequence of int | None. Start chars of A's words (whole-word masking).
        word_starts_b: sequence of int | None. Start chars of B's words.
    """
    def b(value: str) -> tf.train.Feature:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode("utf-8")]))

    def i(values: Iterable[int]) -> tf.train.Feature:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    feature = {"text_a": b(text_a), "text_b": b(text_b),
               "next_sentence_labels": i([next_sentence_label])}
    if word_starts_a is not None and word_starts_b is not None:
        feature["word_starts_a"] = i(word_starts_a)
        feature["word_starts_b"] = i(word_starts_b)
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString()


def parse_examples(serialized: tf.Tensor) -> dict[str, tf.Tensor | tf.RaggedTensor]:
    """Parses a batch of serialized examples: tf.string [B] -> dict of FEATURE_SPEC
    (texts [B], labels int64 [B], word starts ragged int64 [B, (words)], empty when absent)."""
    return tf.io.parse_example(serialized, FEATURE_SPEC)


def shard_paths(output_file: str, num_shards: int) -> list[str]:
    """`output_file` itself for one shard, else `output_file-00000-of-0000K` names."""
    if num_shards < 1:
        raise ValueError(f"num_shards {num_shards} must be >= 1")
    if num_shards == 1:
        return [output_file]
    return [f"{output_file}-{i:05d}-of-{num_shards:05d}" for i in range(num_shards)]


class ShardedWriter:
    """Writes serialized examples round-robin to shards (a context manager).

    Args:
        output_file: str. Output path (shards get `-0000i-of-0000K` suffixes when K > 1).
        num_shards: int. Number of shards.
        gzip: bool. GZIP-compress the records (the reader detects it).
    """

    def __init__(self, output_file: str, num_shards: int = 1, gzip: bool = False):
        self.paths = shard_paths(output_file, num_shards)
        self.gzip = gzip
        self.counts = [0] * len(self.paths)
        self._writers: list[tf.io.TFRecordWriter] = []
        self._next = 0

    def __enter__(self) -> ShardedWriter:
        directory = os.path.dirname(self.paths[0])
        if directory:
            tf.io.gfile.makedirs(directory)
        options = tf.io.TFRecordOptions(compression_type="GZIP" if self.gzip else "")
        self._writers = [tf.io.TFRecordWriter(p, options) for p in self.paths]
        return self

    def write(self, serialized: bytes) -> None:
        self._writers[self._next].write(serialized)
        self.counts[self._next] += 1
        self._next = (self._next + 1) % len(self._writers)

    def __exit__(self, *exc) -> None:
        for w in self._writers:
            w.close()


def expand_file_pattern(file_pattern: str | Sequence[str]) -> list[str]:
    """Files matching one or more globs ("a*,b*" or a list), sorted within each glob; hidden
    files (tfbert's `.NAME.tfbert.json` records, temp files) only for a pattern naming them.

    Raises:
        FileNotFoundError: a glob that matches no file (named in the message).
    """
    patterns = file_pattern.split(",") if isinstance(file_pattern, str) else list(file_pattern)
    files: list[str] = []
    for pattern in (p.strip() for p in patterns):
        if not pattern:
            continue
        matched = sorted(ownership.visible_matches(pattern, tf.io.gfile.glob(pattern)))
        if not matched:
            raise FileNotFoundError(f"no file matches {pattern!r}")
        files.extend(m for m in matched if m not in files)
    if not files:
        raise FileNotFoundError(f"no file pattern given: {file_pattern!r}")
    return files


def _file_info(path: str) -> tuple[str, int]:
    """(compression type, bytes the records should add up to) of one TFRecord file."""
    size = tf.io.gfile.stat(path).length
    with tf.io.gfile.GFile(path, "rb") as f:
        head = f.read(2)
        if head != _GZIP_MAGIC:
            return "", size
        if size < 18:
            return "GZIP", -1  # not even a gzip header and trailer: certainly corrupt
        f.seek(size - 4)
        return "GZIP", int.from_bytes(f.read(4), "little")  # ISIZE: uncompressed size mod 2^32


def _checked_records(path: tf.Tensor, expected: tf.Tensor, compression: tf.Tensor,
                     skip_corrupt: bool, block: int = 256) -> tf.data.Dataset:
    """The records of one file, with an in-graph check at its end that all bytes were read.

    Records are counted in blocks of `block` (cheap per record); an empty block flagged as
    the end follows the file's last block and carries the check.
    """
    records = tf.data.TFRecordDataset(path, compression_type=compression,
                                      buffer_size=1 << 20).ignore_errors().batch(block)
    end = tf.data.Dataset.from_tensors((tf.zeros([0], tf.string), True))
    flagged = records.map(lambda r: (r, False)).concatenate(end)

    @tf.autograph.experimental.do_not_convert
    def count(state, item):
        num_bytes, num_records = state
        block_records, is_end = item
        num_bytes += tf.reduce_sum(tf.cast(tf.strings.length(block_records), tf.int64))
        num_bytes += _RECORD_OVERHEAD * tf.size(block_records, out_type=tf.int64)
        num_records += tf.size(block_records, out_type=tf.int64)
        return (num_bytes, num_records), (block_records, is_end, num_bytes, num_records)

    @tf.autograph.experimental.do_not_convert
    def check(block_records, is_end, num_bytes, num_records):
        # A gzip trailer holds the uncompressed size modulo 2^32.
        read = tf.where(tf.equal(compression, "GZIP"), num_bytes % (1 << 32), num_bytes)
        ok = tf.logical_or(tf.logical_not(is_end), tf.equal(read, expected))

        def fail():
            lost = tf.maximum(expected - read, 0)
            per_record = tf.maximum(num_bytes // tf.maximum(num_records, 1), 1)
            plain = tf.strings.format(
                "TFRecord file {} is corrupt or truncated: read {} records ({} bytes) of the {} "
                "bytes it holds; {} bytes (about {} records) lost",
                (path, num_records, read, expected, lost, (lost + per_record - 1) // per_record))
            gzip = tf.strings.format(
                "GZIP TFRecord file {} is corrupt or truncated: read {} records ({} "
                "uncompressed bytes), the rest of the file is lost (its gzip trailer gives {} "
                "bytes)", (path, num_records, read, expected))
            message = tf.where(tf.equal(compression, "GZIP"), gzip, plain)
            if skip_corrupt:
                report = tf.print("WARNING tfbert.data.records: skipping the rest of a bad file.",
                                  message, output_stream=sys.stderr)
            else:
                hint = " (pass skip_corrupt=True to skip the rest of such files with a warning)"
                report = tf.debugging.Assert(False, [message + hint])
            with tf.control_dependencies([report]):
                return tf.constant(True)

        done = tf.cond(ok, lambda: tf.constant(True), fail)
        with tf.control_dependencies([done]):
            return tf.identity(block_records)

    zero = tf.constant(0, tf.int64)
    return flagged.scan((zero, zero), count).map(check).unbatch()


def read_records(files: Sequence[str], *, shuffle_files: bool = False, seed: int | None = None,
                 skip_corrupt: bool = False, cycle_length: int = 8,
                 num_shards: int = 1, shard_index: int = 0,
                 readable_bytes: Mapping[str, int] | None = None) -> tf.data.Dataset:
    """Serialized examples from TFRecord files (plain or GZIP, detected per file), checked.

    Args:
        files: sequence of str. TFRecord files (see `expand_file_pattern`).
        shuffle_files: bool. Shuffle the file order (anew each epoch, seeded).
        seed: int | None. Seed for the file shuffle.
        skip_corrupt: bool. False: a corrupt or truncated file raises an error naming it.
            True: its remaining records are skipped with a warning that says how many bytes
            (and about how many records) were lost.
        cycle_length: int. Files read at once (interleaved record by record).
        num_shards: int. Input pipelines (tf.distribute workers) sharing the files.
        shard_index: int. This pipeline's index: it gets files `shard_index::num_shards` (when
            there are at least `num_shards` files) or records `shard_index::num_shards`.
        readable_bytes: path -> bytes, or None. What `scan_records` could read of damaged files
            (`ShardReport.bytes_read`): their end-of-file check expects that instead of the
            file's size (used with skip_corrupt, so a loss reported by the scan is not reported
            again on every pass).

    Returns:
        tf.data.Dataset of tf.string scalars.
    """
    files = list(files)
    if not files:
        raise ValueError("read_records needs at least one file")
    infos = [_file_info(f) for f in files]
    compressions, sizes = [c for c, _ in infos], [s for _, s in infos]
    for i, path in enumerate(files):
        if readable_bytes and path in readable_bytes:
            sizes[i] = readable_bytes[path] % (1 << 32) if compressions[i] else readable_bytes[path]
    ds = tf.data.Dataset.from_tensor_slices(
        (tf.constant(files), tf.constant(sizes, tf.int64), tf.constant(compressions)))
    shard_files = num_shards > 1 and len(files) >= num_shards
    if shard_files:
        ds = ds.shard(num_shards, shard_index)
    if shuffle_files:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    records = ds.interleave(
        lambda path, size, compression: _checked_records(path, size, compression, skip_corrupt),
        cycle_length=max(1, min(cycle_length, len(files))), block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if num_shards > 1 and not shard_files:
        records = records.shard(num_shards, shard_index)
    return records


# --------------------------------------------------------------------------- positioned reading


def _file_order(seed: int | tf.Tensor, epoch: int | tf.Tensor, num_files: int) -> tf.Tensor:
    """The files' order in `epoch`: a stateless permutation of range(num_files) (int64)."""
    return tf.random.experimental.index_shuffle(tf.range(num_files, dtype=tf.int64),
                                                _stream_key(seed, epoch, 0),
                                                tf.constant(num_files - 1, tf.int64))


def _stream_key(seed: int | tf.Tensor, epoch: int | tf.Tensor, part: int | tf.Tensor
                ) -> tf.Tensor:
    """The stateless seed [2] of one part of an epoch (0: the file order; j + 1: window j)."""
    key = tf.stack([tf.cast(seed, tf.int64), tf.cast(epoch, tf.int64)])
    return tf.random.experimental.stateless_fold_in(key, tf.cast(part, tf.int64))


def _exact_records(path: tf.Tensor, compression: tf.Tensor, start: tf.Tensor,
                   count: tf.Tensor, block: int = 256) -> tf.Tensor:
    """Records `start`..`count` - 1 of one file, checked to be exactly that many (an error
    naming the file otherwise: it changed after the scan that counted its records)."""
    want = count - start
    records = tf.data.TFRecordDataset(path, compression_type=compression,
                                      buffer_size=1 << 20).skip(start).take(want).ignore_errors()
    end = tf.data.Dataset.from_tensors((tf.zeros([0], tf.string), True))
    flagged = records.batch(block).map(lambda r: (r, False)).concatenate(end)

    @tf.autograph.experimental.do_not_convert
    def count_them(seen, item):
        block_records, is_end = item
        seen += tf.size(block_records, out_type=tf.int64)
        return seen, (block_records, is_end, seen)

    @tf.autograph.experimental.do_not_convert
    def check(block_records, is_end, seen):
        ok = tf.logical_or(tf.logical_not(is_end), tf.equal(seen, want))
        message = tf.strings.format(
            "TFRecord file {} changed after the run started: from record {} it holds {} "
            "readable records, the scan counted {}", (path, start, seen, want))
        with tf.control_dependencies([tf.debugging.Assert(ok, [message])]):
            return tf.identity(block_records)

    return flagged.scan(tf.constant(0, tf.int64), count_them).map(check).unbatch()


def _interleaved(paths: tf.Tensor, compressions: tf.Tensor, starts: tf.Tensor,
                 counts: tf.Tensor, cycle_length: int) -> tf.data.Dataset:
    """The records of consecutive groups of `cycle_length` files, each group read round-robin
    (one record of each of its files in turn, a file that ends leaving the cycle)."""
    files = tf.data.Dataset.from_tensor_slices((paths, compressions, starts, counts))
    return files.batch(cycle_length).flat_map(
        lambda p, c, s, n: tf.data.Dataset.from_tensor_slices((p, c, s, n)).interleave(
            _exact_records, cycle_length=cycle_length, block_length=1,
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True))


def _shuffled_windows(records: tf.data.Dataset, seed: int, epoch: int | tf.Tensor,
                      first_window: int, window: int) -> tf.data.Dataset:
    """Each `window` consecutive records of an epoch in a stateless permutation keyed by
    (seed, epoch, window index)."""
    def permute(index, block):
        n = tf.size(block, out_type=tf.int64)
        order = tf.random.experimental.index_shuffle(tf.range(n), _stream_key(seed, epoch,
                                                                             index + 1), n - 1)
        return tf.gather(block, order)

    return records.batch(window).enumerate(start=first_window).map(permute).unbatch()


def stream_start(counts: Sequence[int], order: Sequence[int], position: int,
                 cycle_length: int) -> tuple[list[int], list[int]]:
    """Where the round-robin reading of one epoch's files (in `order`) stands at record
    `position` of the epoch: (files in the order to read them on, first record of each).

    The epoch reads groups of `cycle_length` files; a group yields one record of each of its
    files in turn. At `position` the group holding it has finished `r` rounds and `m` files of
    round r + 1: those m continue at record r + 1, after the others (still at record r), which
    keeps the round-robin order (its ended files stay in the list, empty, so the groups after
    it keep their files); the groups after it start at record 0.
    """
    sizes = [counts[i] for i in order]
    group_start = 0
    for g in range(0, len(order), cycle_length):
        group = list(order[g:g + cycle_length])
        n = sizes[g:g + cycle_length]
        if position < group_start + sum(n):
            t = position - group_start
            low, high = 0, max(n)  # r: the last round count with sum(min(x, r)) <= t
            while low < high:
                mid = (low + high + 1) // 2
                low, high = (mid, high) if sum(min(x, mid) for x in n) <= t else (low, mid - 1)
            r = low
            m = t - sum(min(x, r) for x in n)
            live = [i for i, x in enumerate(n) if x > r]
            head, tail = live[:m], live[m:]
            done = [i for i, x in enumerate(n) if x <= r]  # kept (empty): groups stay aligned
            files = [group[i] for i in tail + head + done]
            starts = [r] * len(tail) + [r + 1] * len(head) + [n[i] for i in done]
            rest = list(order[g + cycle_length:])
            return files + rest, starts + [0] * len(rest)
        group_start += sum(n)
    raise ValueError(f"position {position} is past the epoch's {group_start} records")


def stream_plans(files: Sequence[str], counts: Sequence[int], seed: int,
                 positions: Sequence[int], cycle_length: int = 8, window: int = 10_000
                 ) -> dict[str, np.ndarray]:
    """Where `positioned_records` starts for each of `positions`: epoch, window, records to
    skip in it, and the files (in reading order) with their first records, one row each."""
    total = sum(counts)
    rows: dict[str, list] = {"epoch": [], "window": [], "skip": [], "files": [], "starts": []}
    orders: dict[int, list[int]] = {}
    for position in positions:
        epoch, offset = divmod(int(position), total)
        first_window, skip = divmod(offset, window)
        if epoch not in orders:
            orders[epoch] = _file_order(seed, epoch, len(files)).numpy().tolist()
        read, starts = stream_start(counts, orders[epoch], first_window * window, cycle_length)
        for name, value in zip(rows, (epoch, first_window, skip, read, starts), strict=True):
            rows[name].append(value)
    return {name: np.asarray(value, np.int64) for name, value in rows.items()}


def planned_records(files: Sequence[str], counts: Sequence[int], seed: int,
                    plan: Mapping[str, tf.Tensor], cycle_length: int = 8,
                    window: int = 10_000) -> tf.data.Dataset:
    """The endless stream from one row of `stream_plans` (tensors: usable inside a
    `flat_map` over plans)."""
    compressions = [_file_info(f)[0] for f in files]
    paths_t, comp_t = tf.constant(list(files)), tf.constant(compressions)
    counts_t = tf.constant([int(c) for c in counts], tf.int64)
    read = plan["files"]
    first = _interleaved(tf.gather(paths_t, read), tf.gather(comp_t, read), plan["starts"],
                         tf.gather(counts_t, read), cycle_length)
    first = _shuffled_windows(first, seed, plan["epoch"], plan["window"], window)

    def whole_epoch(e):
        order_e = _file_order(seed, e, len(files))
        records = _interleaved(tf.gather(paths_t, order_e), tf.gather(comp_t, order_e),
                               tf.zeros([len(files)], tf.int64), tf.gather(counts_t, order_e),
                               cycle_length)
        return _shuffled_windows(records, seed, e, 0, window)

    later = tf.data.Dataset.range(plan["epoch"] + 1, tf.int64.max).flat_map(whole_epoch)
    return first.skip(plan["skip"]).concatenate(later)


def positioned_records(files: Sequence[str], counts: Sequence[int], seed: int,
                       start: int = 0, *, cycle_length: int = 8,
                       window: int = 10_000) -> tf.data.Dataset:
    """The endless, shuffled record stream of the files from record `start` on, where every
    position is a pure function of (files, counts, seed): a stream started at position p
    yields exactly what a stream started at 0 yields from its p-th record on, without reading
    the records before p (beyond skipping within the files being read at p).

    Order: epoch e = positions [e * N, (e + 1) * N) with N = sum(counts). Its files come in a
    stateless permutation keyed by (seed, e) and are read in groups of `cycle_length`, round
    robin (one record of each in turn); each `window` consecutive records of the epoch then
    come in a stateless permutation keyed by (seed, e, window index). Starting at p reads only
    the window holding p and what follows.

    Args:
        files: sequence of str. TFRecord files (plain or GZIP).
        counts: sequence of int. Records to read of each file (what `scan_records` found
            readable): a file is read up to there; one that then holds fewer is an error
            naming it.
        seed: int. Keys the file order and the windows' permutations.
        start: int. The first position (any integer >= 0: epochs repeat without end).
        cycle_length: int. Files read round robin at a time.
        window: int. Records permuted together.

    Returns:
        tf.data.Dataset of tf.string scalars, endless.
    """
    files, counts = list(files), [int(c) for c in counts]
    if len(files) != len(counts) or not files:
        raise ValueError(f"positioned_records needs one count per file, got {len(files)} "
                         f"file(s) and {len(counts)} count(s)")
    if sum(counts) < 1:
        raise ValueError(f"the {len(files)} file(s) hold no records")
    if start < 0:
        raise ValueError(f"start {start} must be >= 0")
    plan = stream_plans(files, counts, seed, [start], cycle_length, window)
    return planned_records(files, counts, seed, {k: tf.constant(v[0]) for k, v in plan.items()},
                           cycle_length, window)


# --------------------------------------------------------------------------- the scan


@dataclasses.dataclass
class ShardReport:
    """What `scan_records` found in one file.

    Attributes:
        path: str. The file.
        compression: str. "" or "GZIP".
        records: int. Records read intact (before the problem, if any).
        bytes_read: int. Bytes those records take in the file (uncompressed, for GZIP).
        size: int. The file's bytes (for GZIP: the uncompressed size its trailer gives).
        problem: str or None. None for an intact file; else what is wrong, where.
        skipped_records: int or None. Records (or parts of records) after `records` that cannot
            be read: counted for plain files, None when unknown (GZIP, a corrupt length field).
        skipped_bytes: int or None. Bytes of the file after `bytes_read` (None for GZIP).
        layout: RecordLayout or None. The record format of its first record (None: no record,
            or the scan ran without check_schema).
    """

    path: str
    compression: str
    records: int
    bytes_read: int
    size: int
    problem: str | None = None
    skipped_records: int | None = 0
    skipped_bytes: int | None = 0
    layout: RecordLayout | None = None

    def summary(self) -> dict[str, object]:
        """JSON-ready: file, records read and skipped, bytes skipped, the problem."""
        return {"file": self.path, "records_read": self.records,
                "records_skipped": self.skipped_records, "bytes_skipped": self.skipped_bytes,
                "problem": self.problem}


def scan_records(files: Sequence[str], what: str = "input_file", skip_corrupt: bool = False,
                 progress: bool | None = None, check_schema: bool = True,
                 max_seq_length: int | None = None,
                 max_predictions_per_seq: int | None = None,
                 vocab_size: int | None = None) -> list[ShardReport]:
    """Reads every record of every file once: checksums, truncation, and (first record of each
    file) the record format and its shapes. Takes about as long as reading the files from disk.

    Args:
        files: sequence of str. TFRecord files (plain or GZIP).
        what: str. What the files are, for messages ("input_file", "eval_input_file").
        skip_corrupt: bool. False: the first damaged file is a UserError. True: damaged files
            are reported (a log warning each) and returned with their problem.
        progress: bool or None. A progress bar (tqdm, on stderr); None: for inputs of 256 MB
            or more on a terminal.
        check_schema: bool. Tell the format of each file from its first record
            (`record_layout`) and check that all files share one format and shape.
        max_seq_length: int or None. For google-format records: the input_ids length they must
            have (None: any).
        max_predictions_per_seq: int or None. For google-format records: the masked_lm_* length
            they must have (None: any).
        vocab_size: int or None. For google-format records: the token ids of each file's first
            record must be below it (records made with another vocab are refused).

    Returns:
        One ShardReport per file, in order.

    Raises:
        UserError: a damaged file (without skip_corrupt), records that are not pretraining
            examples of a known format, files of different formats or shapes, or shapes other
            than the ones asked for, naming the file (and the record index and byte offset).
    """
    infos = [_file_info(f) for f in files]
    total = sum(tf.io.gfile.stat(f).length for f in files)
    disable = (total < 256 << 20) if progress is None else not progress
    reports: list[ShardReport] = []
    with tqdm(total=total, unit="B", unit_scale=True, desc=f"checking {what}",
              disable=disable or None, leave=False) as bar:
        for path, (compression, size) in zip(files, infos, strict=True):
            on_disk = tf.io.gfile.stat(path).length
            done = bar.n
            report, first = _scan_file(path, compression, size,
                                       bar.update if not compression else lambda n: None)
            bar.update(done + on_disk - bar.n)
            if check_schema and first is not None:
                report.layout = record_layout(first, path, what)
                _check_layout(report, reports, what, max_seq_length, max_predictions_per_seq)
                _check_ids(first, report, what, vocab_size)
            if report.problem:
                if not skip_corrupt:
                    raise UserError(f"{what} {path}: {report.problem}. Regenerate the file, or "
                                    "pass --skip_corrupt to go on without the unreadable rest "
                                    f"of it ({_skipped(report)})")
                logger.warning("%s %s: %s; with skip_corrupt the rest of the file is skipped: "
                               "%s", what, path, report.problem, _skipped(report))
            reports.append(report)
    return reports


def _skipped(report: ShardReport) -> str:
    records = ("an unknown number of records" if report.skipped_records is None
               else f"{report.skipped_records} record(s)")
    if report.skipped_bytes is not None:
        records += f", {report.skipped_bytes} bytes"
    return f"{records}; the {report.records} records before are intact"


def _scan_file(path: str, compression: str, size: int, advance: Callable[[int], object]
               ) -> tuple[ShardReport, bytes | None]:
    """Reads one file with TensorFlow's record iterator (the fastest public reader from
    Python: ~4x tf.data's per-element rate on short records); returns its report and its
    first record."""
    records = num_bytes = pending = 0
    first, error = None, None
    options = tf.io.TFRecordOptions(compression_type=compression)
    try:
        with _quiet_deprecation():
            for record in tf.compat.v1.io.tf_record_iterator(path, options):
                first = record if first is None else first
                step = len(record) + _RECORD_OVERHEAD
                records, num_bytes, pending = records + 1, num_bytes + step, pending + step
                if pending >= 1 << 22:
                    advance(pending)
                    pending = 0
    except tf.errors.DataLossError as e:
        error = e.message.strip()
    advance(pending)
    report = ShardReport(path, compression, records, num_bytes, size)
    if error is None and (num_bytes % (1 << 32) if compression else num_bytes) == size:
        return report, first
    if compression:  # deflate cannot resynchronise: the rest of the stream is lost
        report.problem = (f"GZIP stream unreadable after record {records} (uncompressed byte "
                          f"offset {num_bytes}): {error or 'it ends early'}")
        report.skipped_records = report.skipped_bytes = None
        return report, first
    report.problem, report.skipped_records = _walk_damage(path, num_bytes, size, records)
    report.skipped_bytes = size - num_bytes
    return report, first


@contextlib.contextmanager
def _quiet_deprecation() -> Iterator[None]:
    """Hides tf_record_iterator's deprecation notice (it points to tf.data, which is slower for
    a plain read-through)."""
    tf_logger = logging.getLogger("tensorflow")
    level = tf_logger.level
    tf_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        tf_logger.setLevel(level)


def _walk_damage(path: str, offset: int, size: int, index: int) -> tuple[str, int | None]:
    """(what is wrong with record `index` at byte `offset` of a plain file, how many records
    from it to the end of the file), by reading the record headers (length + its CRC)."""
    records, problem = 0, None
    with tf.io.gfile.GFile(path, "rb") as f:
        while offset < size:
            f.seek(offset)
            head = f.read(12)
            where = f"record {index + records} (byte offset {offset})"
            if len(head) < 12:
                problem = problem or f"truncated: the file ends inside the header of {where}"
                return problem, records + 1
            length = int.from_bytes(head[:8], "little")
            if masked_crc32c(head[:8]) != int.from_bytes(head[8:], "little"):
                if offset == 0:
                    return ("not a TFRecord file (or corrupt from its first byte): the length "
                            "field of record 0 fails its checksum"), None
                problem = problem or f"corrupt: the length field of {where} fails its checksum"
                return problem, None
            end = offset + length + _RECORD_OVERHEAD
            if end > size:
                problem = problem or (f"truncated: the file ends {size - offset} bytes into "
                                      f"{where}, a record of {length + _RECORD_OVERHEAD} bytes")
                return problem, records + 1
            problem = problem or f"corrupt: {where} fails its checksum"
            records, offset = records + 1, end
    return problem or f"unreadable from byte offset {offset}", records


# --------------------------------------------------------------------------- record formats


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


def _check_layout(report: ShardReport, earlier: Sequence[ShardReport], what: str,
                  max_seq_length: int | None, max_predictions_per_seq: int | None) -> None:
    """One format (and for google records one shape) across the files, fitting the flags."""
    layout, path = report.layout, report.path
    before = next((r for r in earlier if r.layout is not None), None)
    if before is not None and before.layout != layout:
        kind = "formats" if before.layout.format != layout.format else "shapes"
        raise UserError(f"{what}: mixed record {kind}: {before.path} holds "
                        f"{before.layout.describe()} records, {path} holds "
                        f"{layout.describe()} records; one input reads one format and shape")
    if layout.format != GOOGLE:
        return
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


def _check_ids(first: bytes, report: ShardReport, what: str, vocab_size: int | None) -> None:
    """google-format records hold token ids: those of the first record must fit the vocab."""
    if vocab_size is None or report.layout is None or report.layout.format != GOOGLE:
        return
    features = tf.train.Example.FromString(first).features.feature
    largest = max(max(features[n].int64_list.value, default=0)
                  for n in ("input_ids", "masked_lm_ids"))
    if largest >= vocab_size:
        raise UserError(f"{what} {report.path}: record 0 holds token id {largest}, but the vocab "
                        f"has {vocab_size} tokens; the records were made with another vocab "
                        "(pass the vocab_file they were made with)")


def first_record(path: str) -> bytes | None:
    """The first record of a TFRecord file (plain or GZIP), or None for an empty file."""
    options = tf.io.TFRecordOptions(compression_type=_file_info(path)[0])
    with _quiet_deprecation(), contextlib.suppress(tf.errors.DataLossError):
        for record in tf.compat.v1.io.tf_record_iterator(path, options):
            return record
    return None  # empty, or damaged from the start (the reader's own check reports that)


def files_layout(files: Sequence[str], what: str = "input_file",
                 max_seq_length: int | None = None,
                 max_predictions_per_seq: int | None = None,
                 vocab_size: int | None = None) -> RecordLayout:
    """The one RecordLayout of the files (first record of each; see `scan_records` for the
    checks and errors). Files without records are passed over; none at all reads as tfbert's."""
    reports: list[ShardReport] = []
    for path in files:
        first = first_record(path)
        if first is None:
            continue
        report = ShardReport(path, "", 0, 0, 0, layout=record_layout(first, path, what))
        _check_layout(report, reports, what, max_seq_length, max_predictions_per_seq)
        _check_ids(first, report, what, vocab_size)
        reports.append(report)
    return reports[0].layout if reports else RecordLayout(TFBERT)


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """The masked CRC-32C that TFRecord framing stores (pure Python: for headers, not data)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
