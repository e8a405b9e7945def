"""The pretraining run's tf.data inputs: one worker's training stream (local, or through a
tf.data service) and the eval set, each placed by the strategy; and what the input did.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from tfbert.pretraining_data.pipeline import (
    CYCLE_LENGTH,
    SHUFFLE_WINDOW,
    InputMeter,
    pretraining_dataset,
    pretraining_stream,
)
from tfbert.training import callbacks as cb
from tfbert.training import data_service
from tfbert.training.distribute import num_workers
from tfbert.training.pretrain_config import PretrainConfig

logger = logging.getLogger(__name__)


def _pipeline_args(config: PretrainConfig, vocab_file: str, lower_case: bool,
                   readable_bytes: dict[str, int] | None) -> dict[str, Any]:
    return dict(vocab_file=vocab_file, max_seq_length=config.max_seq_length,
                max_predictions_per_seq=config.max_predictions_per_seq,
                masked_lm_prob=config.masked_lm_prob, whole_word_mask=config.whole_word_mask,
                lower_case=lower_case, skip_corrupt=config.skip_corrupt,
                readable_bytes=readable_bytes, static_masking=config.static_masking)


def _distribute_options(multi_worker: bool) -> tf.data.Options:
    options = tf.data.Options()
    # The eval set under multi-worker: every worker reads the (small, cached) set and keeps its
    # share of each batch. One worker has nothing to shard (its replicas split each batch).
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA if multi_worker
        else tf.data.experimental.AutoShardPolicy.OFF)
    return options


# tf.data service: steps per chunk handed to a service worker (DYNAMIC sharding).
SERVICE_CHUNK_STEPS = 64


def train_dataset(config: PretrainConfig, files: Sequence[str], record_counts: Sequence[int],
                  vocab_file: str, lower_case: bool, start_step: int = 0, workers: int = 1,
                  worker: int = 0, input_context: tf.distribute.InputContext | None = None,
                  meter: InputMeter | None = None, end_step: int | None = None
                  ) -> tf.data.Dataset:
    """One worker's training micro-batches from global step `start_step` on
    (`tfbert.pretraining_data.pipeline.pretraining_stream`): its rows of each global batch of
    `train_batch_size`, in `gradient_accumulation_steps` micro-batches per step.

    Under `distribute_datasets_from_function`, `input_context` gives the worker and the
    replicas: the micro-batches are then split into per-replica batches. With
    `config.data_service` the stream is read from that tf.data service
    (`tfbert.training.data_service`).

    Args:
        config: PretrainConfig.
        files: list of str. The training TFRecords.
        record_counts: list of int. Readable records of each (`record_scan.scan_records`).
        vocab_file: str. WordPiece vocab.
        lower_case: bool. As for `BertTokenizer`.
        start_step: int. The first global step (a resume's checkpointed step).
        workers: int. Input pipelines (multi-worker workers).
        worker: int. This one's index.
        input_context: tf.distribute.InputContext or None. Overrides workers and worker.
        meter: InputMeter or None. Counts this worker's input work (local pipelines).
        end_step: int or None. The step the stream is read to with data_service (default
            num_train_steps).

    Returns:
        tf.data.Dataset of feature dicts, endless (with data_service: up to num_train_steps).
    """
    if input_context is not None:
        workers, worker = input_context.num_input_pipelines, input_context.input_pipeline_id
    k = config.gradient_accumulation_steps
    stream = dict(files=files, record_counts=record_counts, vocab_file=vocab_file,
                  max_seq_length=config.max_seq_length,
                  max_predictions_per_seq=config.max_predictions_per_seq,
                  batch_size=config.train_batch_size, seed=config.seed,
                  masked_lm_prob=config.masked_lm_prob, whole_word_mask=config.whole_word_mask,
                  lower_case=lower_case, static_masking=config.static_masking,
                  start_step=start_step, micro_batches=k, num_workers=workers,
                  worker_index=worker, cycle_length=CYCLE_LENGTH,
                  shuffle_window=SHUFFLE_WINDOW)
    if config.data_service:
        ds = data_service.read(
            pretraining_stream(**stream, chunk_steps=SERVICE_CHUNK_STEPS,
                               end_step=end_step or config.num_train_steps),
            config.data_service, data_service.job_name(config, start_step, worker))
        ds = data_service.without_step(ds)
        if k > 1:
            ds = ds.rebatch(config.train_batch_size // (k * workers), drop_remainder=True)
    else:
        ds = pretraining_stream(**stream, meter=meter)
    if input_context is not None:
        per_replica = input_context.get_per_replica_batch_size(config.train_batch_size // k)
        if per_replica != config.train_batch_size // (k * workers):
            ds = ds.rebatch(per_replica, drop_remainder=True)
    return ds


def input_report(strategy: tf.distribute.Strategy, config: PretrainConfig,
                  progress: cb.TrainingProgress, meter: InputMeter) -> dict[str, Any]:
    """The input work of each worker next to the step rate: `workerI_input_examples`, the
    examples its pipeline made (prefetched ones included), and
    `workerI_input_examples_per_core_second`, their rate per busy CPU-second of its parse/
    tokenize/pack/mask stage (None with a data service, whose workers do that work)."""
    mine = [float(meter.examples), meter.examples_per_core_second or float("nan")]
    if num_workers(strategy) > 1:  # every worker's numbers, gathered to each
        local = strategy.extended.worker_devices
        gathered = strategy.gather(strategy.run(lambda: tf.constant([mine], tf.float32)),
                                   axis=0).numpy()
        per_worker = gathered[::len(local)].tolist()
    else:
        per_worker = [mine]
    speed = progress.examples_per_second
    report: dict[str, Any] = {
        "steps_per_second": speed / config.train_batch_size if math.isfinite(speed) else None,
        "input_workers": len(per_worker)}
    for i, (examples, rate) in enumerate(per_worker):  # flat keys: one number per key
        local = not config.data_service
        report[f"worker{i}_input_examples"] = int(examples) if local else None
        report[f"worker{i}_input_examples_per_core_second"] = (
            rate if local and math.isfinite(rate) else None)
    return report


def eval_dataset(config: PretrainConfig, files: str | Sequence[str], vocab_file: str,
                 lower_case: bool, multi_worker: bool = False, num_batches: int | None = None,
                 readable_bytes: dict[str, int] | None = None) -> tf.data.Dataset:
    """`max_eval_steps` fixed eval batches, cached so every evaluation sees the same masks
    (`num_batches`, when known, declares how many there are)."""
    ds = pretraining_dataset(files, batch_size=config.eval_batch_size, seed=config.seed + 1,
                             repeat=False, shuffle=False,
                             **_pipeline_args(config, vocab_file, lower_case, readable_bytes))
    ds = ds.take(config.max_eval_steps).cache()
    if num_batches:
        ds = ds.apply(tf.data.experimental.assert_cardinality(
            min(num_batches, config.max_eval_steps)))
    return ds.with_options(_distribute_options(multi_worker))
