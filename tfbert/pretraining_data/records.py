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

The rest of the record files' life is beside this module: `record_scan` reads every file once
before a run (damage, with the record and byte offset), `record_formats` tells tfbert's records
from google-research/bert's, and `record_stream` is the training order, which starts at any
position without reading what comes before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence

import tensorflow as tf

from tfbert import ownership

FEATURE_SPEC = {
    "text_a": tf.io.FixedLenFeature([], tf.string),
    "text_b": tf.io.FixedLenFeature([], tf.string),
    "next_sentence_labels": tf.io.FixedLenFeature([], tf.int64),
    "word_starts_a": tf.io.RaggedFeature(tf.int64, row_splits_dtype=tf.int64),
    "word_starts_b": tf.io.RaggedFeature(tf.int64, row_splits_dtype=tf.int64),
}

_GZIP_MAGIC = b"\x1f\x8b"
RECORD_OVERHEAD = 16  # uint64 length, uint32 length CRC, uint32 data CRC


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


def file_info(path: str) -> tuple[str, int]:
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
        num_bytes += RECORD_OVERHEAD * tf.size(block_records, out_type=tf.int64)
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
                report = tf.print("WARNING tfbert.pretraining_data.records: skipping the rest of "
                                  "a bad file.", message, output_stream=sys.stderr)
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
    infos = [file_info(f) for f in files]
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


@contextlib.contextmanager
def quiet_deprecation() -> Iterator[None]:
    """Hides tf_record_iterator's deprecation notice (it points to tf.data, which is slower for
    a plain read-through)."""
    tf_logger = logging.getLogger("tensorflow")
    level = tf_logger.level
    tf_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        tf_logger.setLevel(level)
