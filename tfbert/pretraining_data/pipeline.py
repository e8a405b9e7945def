"""The pretraining input pipeline: TFRecords of text pairs -> masked-LM + NSP batches, in-graph.

Records of google-research/bert's format (token ids with stored masks) go the same way from the
parse on, through `tfbert.pretraining_data.google_records.GoogleRecordsTransform` instead of
tokenizing and packing: the format is told from the files' first records.

Shape legend: B = batch (per replica under tf.distribute), T = max_seq_length,
P = max_predictions_per_seq.

read + check shards (interleaved) -> shuffle -> repeat -> batch -> parse -> tokenize A and B ->
pack [CLS] A [SEP] B [SEP] -> dynamic masking -> prefetch. Every step is a TensorFlow op, so the
pipeline runs in tf.data's threads, inside SavedModels and under tf.distribute alike.

Masks are drawn per batch from a stateless seed taken from `tf.data.Dataset.random(seed,
rerandomize_each_iteration=True)`: the same `seed` gives the same masks run after run, and every
epoch (a new iterator, or the next pass of `repeat`) gets fresh ones.

`pretraining_stream` is the training form (what run_pretraining.py trains on): the same
transform over `record_stream.stream_from`, with the record order and the masks pure
functions of (seed, global step), so it starts at any step without reading what comes before,
and each tf.distribute worker makes only its rows of every global batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfbert.pretraining_data import record_formats, record_stream, records
from tfbert.pretraining_data.features import PretrainingTransform
from tfbert.pretraining_data.google_records import GoogleRecordsTransform, feature_spec
from tfbert.pretraining_data.masking import BatchRows
from tfbert.text.vocab import load_vocab

logger = logging.getLogger(__name__)

FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
            "masked_lm_weights", "next_sentence_labels")

# The training stream's record order (`record_stream.stream_from`): files read round robin at
# a time, records permuted together. `INPUT_ORDER` names it; a resume compares it
# (`tfbert.training.resume`), since other values give another stream.
CYCLE_LENGTH, SHUFFLE_WINDOW = 8, 10_000
INPUT_ORDER = (f"stateless by (seed, step): {CYCLE_LENGTH} files round robin, windows of "
               f"{SHUFFLE_WINDOW} records permuted")


def pretraining_dataset(
    file_pattern: str | Sequence[str],
    vocab_file: str,
    max_seq_length: int,
    max_predictions_per_seq: int,
    batch_size: int,
    masked_lm_prob: float = 0.15,
    whole_word_mask: bool = False,
    seed: int | None = None,
    lower_case: bool = True,
    *,
    repeat: bool = True,
    shuffle: bool = True,
    shuffle_buffer: int = 10_000,
    drop_remainder: bool = True,
    skip_corrupt: bool = False,
    readable_bytes: Mapping[str, int] | None = None,
    input_context: tf.distribute.InputContext | None = None,
    cycle_length: int = 8,
    static_masking: bool = False,
) -> tf.data.Dataset:
    """Batches of pretraining features from `create_pretraining_data.py` records (tfbert's
    text pairs, or google-research/bert's token ids: told from the files' first records).

    Each element is a dict: int32 `input_ids`, `input_mask`, `segment_ids` [B, T]; int32
    `masked_lm_positions`, `masked_lm_ids` and float32 `masked_lm_weights` [B, P]; int32
    `next_sentence_labels` [B] (0 IsNext, 1 NotNext) — what `tfbert.BertPretrainer.fit` reads.

    Args:
        file_pattern: str or list of str. TFRecord files: globs, comma-separated or a list
            (plain or GZIP, detected per file).
        vocab_file: str. WordPiece vocab (the records hold text; it is tokenized here).
        max_seq_length: int. T.
        max_predictions_per_seq: int. P (at most T).
        batch_size: int. Examples per batch; PER REPLICA when `input_context` is given (use
            `input_context.get_per_replica_batch_size(global_batch)`), else the whole batch.
        masked_lm_prob: float. Share of non-special tokens to predict.
        whole_word_mask: bool. Mask whole words (see `PretrainingTransform`); Chinese whole-word
            masking needs records made with `--whole_word_mask` (jieba word starts).
        seed: int | None. Makes file order, shuffling and masks deterministic; masks still
            differ from epoch to epoch. None: nondeterministic (and a little faster).
        lower_case: bool. As for `BertTokenizer`.
        repeat: bool. Repeat forever (training); False for one pass (evaluation).
        shuffle: bool. Shuffle files and records.
        shuffle_buffer: int. Records in the shuffle buffer.
        drop_remainder: bool. Static batch shapes (XLA, TPUs); False keeps the last short batch.
        skip_corrupt: bool. Skip the rest of a corrupt/truncated file with a warning instead of
            failing with an error naming it.
        readable_bytes: path -> bytes or None. For files `record_scan.scan_records` found damaged:
            the bytes it could read, which their end-of-file check then expects (no warning
            for a loss the scan reported already).
        input_context: tf.distribute.InputContext | None. From
            `strategy.distribute_datasets_from_function`: this pipeline reads its share of the
            files (or of the records when there are fewer files than pipelines).
        cycle_length: int. Files read in parallel.
        static_masking: bool. google-format records only: keep their stored masks (their
            max_predictions_per_seq must then be P). False: restore the original tokens and
            mask afresh, exactly as tfbert's own records are masked.

    Returns:
        tf.data.Dataset of feature dicts.

    Example:
    >>> ds = pretraining_dataset("data/pretrain.tfrecord-*", "vocab.txt", 128, 20, 32, seed=1)
    >>> batch = next(iter(ds))  # then: pretrainer.fit(ds, steps_per_epoch=..., epochs=...)
    >>> batch["input_ids"].shape.as_list(), batch["masked_lm_positions"].shape.as_list()
    ([32, 128], [32, 20])
    """
    if batch_size < 1:
        raise ValueError(f"batch_size {batch_size} must be >= 1")
    files = records.expand_file_pattern(file_pattern)
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline_id = input_context.input_pipeline_id if input_context else 0
    transform, describe = _batch_transform(files, vocab_file, max_seq_length,
                                           max_predictions_per_seq, masked_lm_prob,
                                           whole_word_mask, lower_case, static_masking)
    logger.info("pretraining_dataset: %d file(s) of %s, input pipeline %d of %d, batch %d",
                len(files), describe, pipeline_id + 1, num_pipelines, batch_size)
    file_seed = None if seed is None else seed + 1_000_003 * pipeline_id
    ds = records.read_records(files, shuffle_files=shuffle, seed=file_seed,
                                  skip_corrupt=skip_corrupt, cycle_length=cycle_length,
                                  num_shards=num_pipelines, shard_index=pipeline_id,
                                  readable_bytes=readable_bytes)
    if shuffle:
        ds = ds.shuffle(shuffle_buffer, seed=file_seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    mask_seeds = tf.data.Dataset.random(seed=None if seed is None else seed + 17,
                                        rerandomize_each_iteration=True)
    mask_seeds = mask_seeds.map(lambda x: tf.stack([x, tf.constant(pipeline_id, tf.int64)]))
    ds = tf.data.Dataset.zip((ds, mask_seeds))

    static_batch = batch_size if drop_remainder else None

    @tf.autograph.experimental.do_not_convert
    def make(serialized, mask_seed):
        return _with_shapes(transform(serialized, mask_seed), static_batch, max_seq_length,
                            max_predictions_per_seq)

    ds = ds.map(make, num_parallel_calls=tf.data.AUTOTUNE, deterministic=seed is not None)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.deterministic = seed is not None
    if input_context is not None:  # sharded here already
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.OFF)
    return ds.with_options(options)


def _batch_transform(files: Sequence[str], vocab_file: str, max_seq_length: int,
                     max_predictions_per_seq: int, masked_lm_prob: float, whole_word_mask: bool,
                     lower_case: bool, static_masking: bool
                     ) -> tuple[Callable[[tf.Tensor, Any], dict[str, tf.Tensor]], str]:
    """(serialized records [B], mask seed -> feature dict, a description for the log) for the
    files' record format (told from their first records)."""
    vocab = load_vocab(vocab_file)
    layout = record_formats.files_layout(
        files, max_seq_length=max_seq_length,
        max_predictions_per_seq=max_predictions_per_seq if static_masking else None,
        vocab_size=len(vocab))
    if layout.format == record_formats.GOOGLE:
        google = GoogleRecordsTransform(vocab, max_predictions_per_seq,
                                        masked_lm_prob, whole_word_mask, static_masking)
        spec = feature_spec(layout.seq_length, layout.predictions)

        def transform(serialized, seed):
            return google(tf.io.parse_example(serialized, spec), seed)
    else:
        text = PretrainingTransform(vocab_file, max_seq_length, max_predictions_per_seq,
                                    masked_lm_prob, whole_word_mask, lower_case)

        def transform(serialized, seed):
            return text(records.parse_examples(serialized), seed)
    masking = "stored" if static_masking and layout.format == record_formats.GOOGLE else (
        "whole-word" if whole_word_mask else "token")
    return transform, f"{layout.format} records, seq {max_seq_length}, {masking} masking"


def _with_shapes(out: dict[str, tf.Tensor], batch: int | None, max_seq_length: int,
                 max_predictions_per_seq: int) -> dict[str, tf.Tensor]:
    for name, value in out.items():
        width = {"next_sentence_labels": [], "masked_lm_positions": [max_predictions_per_seq],
                 "masked_lm_ids": [max_predictions_per_seq],
                 "masked_lm_weights": [max_predictions_per_seq]}.get(name, [max_seq_length])
        value.set_shape([batch] + width)
    return out


class InputMeter:
    """What a `pretraining_stream` worker's parse/tokenize/pack/mask stage did: examples
    made and the seconds its calls took, summed over tf.data's threads (so examples per busy
    second is the rate of one CPU core). Local pipelines only (a tf.data service cannot
    carry the variable).
    """

    def __init__(self) -> None:
        with tf.init_scope(), tf.device("/cpu:0"):
            self.totals = tf.Variable([0.0, 0.0], dtype=tf.float64, trainable=False,
                                      name="input_meter")

    def record(self, out: dict[str, tf.Tensor], started: tf.Tensor, examples: int
               ) -> dict[str, tf.Tensor]:
        """`out` made to wait for the count of its `examples` and their time since `started`."""
        with tf.control_dependencies(list(out.values())):
            took = tf.timestamp() - started
        update = self.totals.assign_add(tf.stack([tf.constant(examples, tf.float64), took]))
        with tf.control_dependencies([update]):
            return {name: tf.identity(value) for name, value in out.items()}

    @property
    def examples(self) -> int:
        return int(self.totals[0].numpy())

    @property
    def examples_per_core_second(self) -> float | None:
        examples, seconds = self.totals.numpy().tolist()
        return examples / seconds if seconds > 0 else None


def worker_rows(batch_size: int, micro_batches: int = 1, num_workers: int = 1,
                worker_index: int = 0) -> np.ndarray:
    """The rows of each global batch that worker `worker_index` of `num_workers` masks and
    trains on, in its order: its 1/W of each of the `micro_batches` consecutive micro-batches
    (so micro-batch j of every worker together is micro-batch j of a single worker's run).

    Example:
    >>> worker_rows(8, micro_batches=2, num_workers=2, worker_index=1).tolist()
    [2, 3, 6, 7]
    """
    if batch_size % (micro_batches * num_workers):
        raise ValueError(f"batch_size {batch_size} is not a multiple of micro_batches x "
                         f"num_workers = {micro_batches} x {num_workers}")
    if not 0 <= worker_index < num_workers:
        raise ValueError(f"worker_index {worker_index} is not in [0, {num_workers})")
    rows = np.arange(batch_size).reshape(micro_batches, num_workers, -1)
    return rows[:, worker_index].reshape(-1).astype(np.int32)


def pretraining_stream(
    files: Sequence[str],
    record_counts: Sequence[int],
    vocab_file: str,
    max_seq_length: int,
    max_predictions_per_seq: int,
    batch_size: int,
    seed: int,
    masked_lm_prob: float = 0.15,
    whole_word_mask: bool = False,
    lower_case: bool = True,
    static_masking: bool = False,
    *,
    start_step: int = 0,
    micro_batches: int = 1,
    num_workers: int = 1,
    worker_index: int = 0,
    cycle_length: int = CYCLE_LENGTH,
    shuffle_window: int = SHUFFLE_WINDOW,
    chunk_steps: int | None = None,
    end_step: int | None = None,
    meter: InputMeter | None = None,
) -> tf.data.Dataset:
    """The training batches of one worker from global step `start_step` on, where every batch
    is a pure function of (files, seed, step): a stream started at step N yields what one
    started at 0 yields from its N-th step on, without reading or masking what comes before.

    Global step s is the `batch_size` records at positions [s * B, (s + 1) * B) of
    `record_stream.stream_from` (seeded file order, round-robin reading, windows permuted
    statelessly); its masks are drawn for the whole global batch from the stateless seed
    (seed, s). Worker w of W parses, tokenizes and masks only its rows (`worker_rows`), so its
    input work is 1/W of the total and its masks are those the rows get in a one-worker run:
    the global batches do not depend on W, and a resume may re-shard them over another
    number of workers. Each element is one micro-batch of the worker's share
    (B / (micro_batches x W) examples); `micro_batches` consecutive elements make one step.

    Args:
        files: sequence of str. TFRecord files.
        record_counts: sequence of int. Readable records of each file (`record_scan.scan_records`).
        vocab_file: str. WordPiece vocab.
        max_seq_length: int. T.
        max_predictions_per_seq: int. P.
        batch_size: int. B, the global batch (all workers, all micro-batches).
        seed: int. Keys the record order and the masks.
        masked_lm_prob: float. Share of non-special tokens to predict.
        whole_word_mask: bool. Mask whole words (see `PretrainingTransform`).
        lower_case: bool. As for `BertTokenizer`.
        static_masking: bool. google-format records: keep their stored masks.
        start_step: int. The first global step.
        micro_batches: int. Gradient accumulation steps k.
        num_workers: int. W, the input pipelines sharing each global batch.
        worker_index: int. This pipeline's w.
        cycle_length: int. Files read round robin at a time.
        shuffle_window: int. Records permuted together.
        chunk_steps: int or None. Build the stream from chunks of this many steps up to
            `end_step`, each read from its own start (`record_stream.stream_plans`), the chunks
            a `from_tensor_slices` source: what a tf.data service under
            `ShardingPolicy.DYNAMIC` hands out to its workers one at a time
            (`tfbert.training.data_service`). Each element then carries its global step as
            `"step"` [b] (int64), since the chunks may arrive in any order.
        end_step: int or None. With chunk_steps: the stream ends at the first chunk boundary
            at or after this step.
        meter: InputMeter or None. Counts the examples made and the time it took.

    Returns:
        tf.data.Dataset of feature dicts (see `pretraining_dataset`), endless without
        chunk_steps.

    Example:
    >>> from tfbert.pretraining_data import record_scan
    >>> files = records.expand_file_pattern("data/pretrain.tfrecord-*")
    >>> counts = [r.records for r in record_scan.scan_records(files)]
    >>> ds = pretraining_stream(files, counts, "vocab.txt", 128, 20, 32, seed=1,
    ...                         start_step=500_000)  # as quick to start as step 0
    >>> next(iter(ds))["input_ids"].shape.as_list()
    [32, 128]
    """
    rows = worker_rows(batch_size, micro_batches, num_workers, worker_index)
    transform, describe = _batch_transform(files, vocab_file, max_seq_length,
                                           max_predictions_per_seq, masked_lm_prob,
                                           whole_word_mask, lower_case, static_masking)
    logger.info("pretraining_stream: %d file(s) of %s, from step %d, worker %d of %d: %d of "
                "each %d examples", len(files), describe, start_step, worker_index + 1,
                num_workers, len(rows), batch_size)
    if chunk_steps is None:
        raw = record_stream.stream_from(files, record_counts, seed,
                                             start_step * batch_size, cycle_length=cycle_length,
                                             window=shuffle_window)
        steps = raw.batch(batch_size, drop_remainder=True).enumerate(start=start_step)
    else:
        firsts = list(range(start_step, max(end_step or 0, start_step + 1), chunk_steps))
        plans = record_stream.stream_plans(files, record_counts, seed,
                                         [f * batch_size for f in firsts], cycle_length,
                                         shuffle_window)
        plans["step"] = np.asarray(firsts, np.int64)

        def chunk(plan):
            raw = record_stream.stream_from_plan(files, record_counts, seed, plan, cycle_length,
                                              shuffle_window)
            return raw.take(chunk_steps * batch_size).batch(batch_size).enumerate(
                start=plan["step"])

        steps = tf.data.Dataset.from_tensor_slices(plans).flat_map(chunk)
    rows_t = tf.constant(rows)

    @tf.autograph.experimental.do_not_convert
    def make(step, serialized):
        started = tf.timestamp()
        with tf.control_dependencies([started]):
            mine = tf.gather(serialized, rows_t)
        mask_seed = BatchRows(tf.stack([tf.constant(seed + 17, tf.int64), step]), rows_t,
                              batch_size)
        out = _with_shapes(transform(mine, mask_seed), len(rows), max_seq_length,
                           max_predictions_per_seq)
        if meter is not None:
            out = meter.record(out, started, len(rows))
        if chunk_steps is not None:
            out["step"] = tf.fill([len(rows)], step)
        return out

    ds = steps.map(make, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if micro_batches > 1 and chunk_steps is None:  # chunks: whole steps, split after the service
        ds = ds.rebatch(len(rows) // micro_batches, drop_remainder=True)
    options = tf.data.Options()
    options.deterministic = True
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return ds.prefetch(tf.data.AUTOTUNE).with_options(options)


def count_records(file_pattern: str | Sequence[str]) -> int:
    """Number of records in the files (a full read; for steps-per-epoch arithmetic)."""
    files = records.expand_file_pattern(file_pattern)
    total = records.read_records(files).reduce(np.int64(0), lambda n, _: n + 1)
    return int(total)
