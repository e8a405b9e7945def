"""The pretraining input pipeline: TFRecords of text pairs -> masked-LM + NSP batches, in-graph.

Records of google-research/bert's format (token ids with stored masks) go the same way from
the parse on, through `tfbert.data.google_records.GoogleRecordsTransform` instead of tokenizing
and packing: the format is told from the files' first records.

Shape legend: B = batch (per replica under tf.distribute), T = max_seq_length,
P = max_predictions_per_seq.

read + check shards (interleaved) -> shuffle -> repeat -> batch -> parse -> tokenize A and B ->
pack [CLS] A [SEP] B [SEP] -> dynamic masking -> prefetch. Every step is a TensorFlow op, so the
pipeline runs in tf.data's threads, inside SavedModels and under tf.distribute alike.

Masks are drawn per batch from a stateless seed taken from `tf.data.Dataset.random(seed,
rerandomize_each_iteration=True)`: the same `seed` gives the same masks run after run, and every
epoch (a new iterator, or the next pass of `repeat`) gets fresh ones.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
import tensorflow as tf

from tfbert.data import records as records_lib
from tfbert.data.google_records import GoogleRecordsTransform, feature_spec
from tfbert.data.masking import DynamicMasker, continuation_flags, tokens_starting_words
from tfbert.text.vocab import load_vocab

logger = logging.getLogger(__name__)

FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
            "masked_lm_weights", "next_sentence_labels")

# Placeholder ids for packing token INDICES (see `_pack`).
_CLS, _SEP, _PAD, _FIRST = 0, 1, 2, 3


class PretrainingTransform:
    """Parsed text pairs -> the pretraining feature dict (one batch, in-graph).

    Args:
        vocab_file: str. WordPiece vocab.
        max_seq_length: int. T.
        max_predictions_per_seq: int. P.
        masked_lm_prob: float. Share of eligible tokens to predict.
        whole_word_mask: bool. Mask whole words: `##` pieces with their word, and with the
            records' jieba word starts (Chinese) all characters of a word together.
        lower_case: bool. As for `BertTokenizer`.
    """

    def __init__(self, vocab_file: str, max_seq_length: int, max_predictions_per_seq: int,
                 masked_lm_prob: float = 0.15, whole_word_mask: bool = False,
                 lower_case: bool = True):
        from tfbert.text.packer import BertPacker
        from tfbert.text.tokenizer import BertTokenizer

        if max_predictions_per_seq > max_seq_length:
            raise ValueError(f"max_predictions_per_seq {max_predictions_per_seq} is larger than "
                             f"max_seq_length {max_seq_length}")
        self.tokenizer = BertTokenizer(vocab_file, lower_case=lower_case)
        vocab = list(self.tokenizer.vocab)
        self.whole_word_mask = whole_word_mask
        self.max_seq_length = max_seq_length
        self.masker = DynamicMasker(vocab, max_predictions_per_seq, masked_lm_prob)
        self.continuation = tf.constant(continuation_flags(vocab))  # [V]
        self.specials = tf.constant([self.tokenizer.cls_id, self.tokenizer.sep_id,
                                     self.tokenizer.pad_id], tf.int32)
        # Packs token indices instead of ids, so the same truncation can be applied to the
        # ids and to the word-start flags (BertPacker is the one place that truncates).
        self.index_packer = BertPacker(max_seq_length, cls_id=_CLS, sep_id=_SEP, pad_id=_PAD)

    def _pack(self, ids_a: tf.RaggedTensor, ids_b: tf.RaggedTensor,
              flags_a: tf.RaggedTensor, flags_b: tf.RaggedTensor):
        """[CLS] A [SEP] B [SEP] packing of ids and of per-token word-start flags."""
        size_a = tf.size(ids_a.flat_values, out_type=tf.int32)
        size_b = tf.size(ids_b.flat_values, out_type=tf.int32)
        index_a = ids_a.with_flat_values(tf.range(size_a) + _FIRST)
        index_b = ids_b.with_flat_values(tf.range(size_b) + _FIRST + size_a)
        packed = self.index_packer((index_a, index_b))
        index = tf.cast(packed["input_ids"], tf.int32)  # [B, T]
        flat_ids = tf.concat([self.specials, tf.cast(ids_a.flat_values, tf.int32),
                              tf.cast(ids_b.flat_values, tf.int32)], axis=0)
        flat_flags = tf.concat([tf.ones([3], tf.bool), flags_a.flat_values,
                                flags_b.flat_values], axis=0)
        return (tf.gather(flat_ids, index), tf.cast(packed["input_mask"], tf.int32),
                tf.cast(packed["segment_ids"], tf.int32), tf.gather(flat_flags, index))

    def _tokenize(self, features: dict):
        """Token ids of A and B (one tokenizer call for both) and, per token, whether it
        starts a whole-masking word."""
        batch = tf.shape(features["text_a"])[0]
        texts = tf.concat([features["text_a"], features["text_b"]], axis=0)  # [2B]
        if not self.whole_word_mask:
            ids = self.tokenizer.tokenize(texts)  # [2B, (tokens)]
            flags = tf.ones_like(ids, tf.bool)
        else:
            ids, starts, _ = self.tokenizer.tokenize_with_offsets(texts)
            word_starts = tf.concat([features["word_starts_a"], features["word_starts_b"]], 0)
            new_word = tf.logical_not(tf.gather(self.continuation, ids.flat_values))
            in_words = tokens_starting_words(starts, word_starts)
            flags = ids.with_flat_values(tf.logical_and(new_word, in_words.flat_values))
        return ids[:batch], ids[batch:], flags[:batch], flags[batch:]

    def __call__(self, features: dict, seed: tf.Tensor) -> dict[str, tf.Tensor]:
        """features: parsed records (`records.parse_examples`) [B]; seed: int [2]."""
        ids_a, ids_b, flags_a, flags_b = self._tokenize(features)
        input_ids, input_mask, segment_ids, word_start = self._pack(ids_a, ids_b, flags_a,
                                                                    flags_b)
        masked = self.masker(input_ids, seed, word_start if self.whole_word_mask else None)
        return {
            "input_ids": masked["input_ids"],
            "input_mask": input_mask,
            "segment_ids": segment_ids,
            "masked_lm_positions": masked["masked_lm_positions"],
            "masked_lm_ids": masked["masked_lm_ids"],
            "masked_lm_weights": masked["masked_lm_weights"],
            "next_sentence_labels": tf.cast(features["next_sentence_labels"], tf.int32),
        }


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
        readable_bytes: path -> bytes or None. For files `records.scan_records` found damaged:
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
    files = records_lib.expand_file_pattern(file_pattern)
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline_id = input_context.input_pipeline_id if input_context else 0
    vocab = load_vocab(vocab_file)
    layout = records_lib.files_layout(
        files, max_seq_length=max_seq_length,
        max_predictions_per_seq=max_predictions_per_seq if static_masking else None,
        vocab_size=len(vocab))
    if layout.format == records_lib.GOOGLE:
        google = GoogleRecordsTransform(vocab, max_predictions_per_seq,
                                        masked_lm_prob, whole_word_mask, static_masking)
        spec = feature_spec(layout.seq_length, layout.predictions)

        def transform(serialized, seed):
            return google(tf.io.parse_example(serialized, spec), seed)
    else:
        text = PretrainingTransform(vocab_file, max_seq_length, max_predictions_per_seq,
                                    masked_lm_prob, whole_word_mask, lower_case)

        def transform(serialized, seed):
            return text(records_lib.parse_examples(serialized), seed)
    masking = "stored" if static_masking and layout.format == records_lib.GOOGLE else (
        "whole-word" if whole_word_mask else "token")
    logger.info("pretraining_dataset: %d file(s) of %s records, input pipeline %d of %d, batch "
                "%d, seq %d, %s masking", len(files), layout.format, pipeline_id + 1,
                num_pipelines, batch_size, max_seq_length, masking)
    file_seed = None if seed is None else seed + 1_000_003 * pipeline_id
    ds = records_lib.read_records(files, shuffle_files=shuffle, seed=file_seed,
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
        out = transform(serialized, mask_seed)
        for name, value in out.items():
            width = {"next_sentence_labels": [], "masked_lm_positions": [
                max_predictions_per_seq], "masked_lm_ids": [max_predictions_per_seq],
                "masked_lm_weights": [max_predictions_per_seq]}.get(name, [max_seq_length])
            value.set_shape([static_batch] + width)
        return out

    ds = ds.map(make, num_parallel_calls=tf.data.AUTOTUNE, deterministic=seed is not None)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.deterministic = seed is not None
    if input_context is not None:  # sharded here already
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.OFF)
    return ds.with_options(options)


def count_records(file_pattern: str | Sequence[str]) -> int:
    """Number of records in the files (a full read; for steps-per-epoch arithmetic)."""
    files = records_lib.expand_file_pattern(file_pattern)
    total = records_lib.read_records(files).reduce(np.int64(0), lambda n, _: n + 1)
    return int(total)
