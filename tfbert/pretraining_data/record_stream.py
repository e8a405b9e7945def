"""The training order of pretraining records: an endless stream that starts at any position.

Each position is a pure function of (files, record counts, seed), so a stream started at position p
yields exactly what one started at 0 yields from its p-th record on, without reading the records
before p (beyond skipping within the files being read at p). It reads each file up to the count the
scan found readable (`tfbert.pretraining_data.record_scan`) and checks that it holds that many.

    stream_start(counts, order, position)   where the round robin of one epoch stands
    stream_plans(files, counts, seed, ...)  those starts for several positions, as arrays
    stream_from_plan(files, counts, ...)    the stream from one plan (usable in a flat_map)
    stream_from(files, counts, seed, p)     the stream from position p
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import tensorflow as tf

from tfbert.pretraining_data.records import file_info


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
    """Where `stream_from` starts for each of `positions`: epoch, window, records to
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


def stream_from_plan(files: Sequence[str], counts: Sequence[int], seed: int,
                    plan: Mapping[str, tf.Tensor], cycle_length: int = 8,
                    window: int = 10_000) -> tf.data.Dataset:
    """The endless stream from one row of `stream_plans` (tensors: usable inside a
    `flat_map` over plans)."""
    compressions = [file_info(f)[0] for f in files]
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


def stream_from(files: Sequence[str], counts: Sequence[int], seed: int,
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
        raise ValueError(f"stream_from needs one count per file, got {len(files)} "
                         f"file(s) and {len(counts)} count(s)")
    if sum(counts) < 1:
        raise ValueError(f"the {len(files)} file(s) hold no records")
    if start < 0:
        raise ValueError(f"start {start} must be >= 0")
    plan = stream_plans(files, counts, seed, [start], cycle_length, window)
    return stream_from_plan(files, counts, seed, {k: tf.constant(v[0]) for k, v in plan.items()},
                           cycle_length, window)
