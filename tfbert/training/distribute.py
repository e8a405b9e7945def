"""Choosing a tf.distribute strategy by name, and the per-worker facts training needs.

`get_strategy("auto")` picks a TPU if one is configured, else MirroredStrategy over all GPUs
(OneDeviceStrategy on a single GPU), else the CPU. "multi_worker" is
MultiWorkerMirroredStrategy configured from the `TF_CONFIG` environment variable; create it
before any other TensorFlow op runs (TensorFlow sets up the collectives at startup).

Launching N workers: start the same command on every worker with `TF_CONFIG` set, e.g. worker 0
of two on one host:
    TF_CONFIG='{"cluster": {"worker": ["localhost:12345", "localhost:12346"]},
                "task": {"type": "worker", "index": 0}}' python run_pretraining.py \
        --distribution_strategy=multi_worker ...
Worker 0 is the chief: it writes checkpoints, TensorBoard logs and results.
"""

from __future__ import annotations

import json
import logging
import os

import tensorflow as tf

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")

logger = logging.getLogger(__name__)


class MultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """tf.distribute.MultiWorkerMirroredStrategy that Keras 3's `fit` can report metrics with.

    Under this strategy Keras reduces every logged value with `reduce("MEAN", v, axis=0)`,
    which fails for scalar metrics ("Invalid reduction dimension 0 for input with 0
    dimensions", tensorflow/tensorflow#72388). Scalars are reduced without an axis here (the
    mean over the replicas, which is what `axis=0` means for per-replica scalars).
    """

    def reduce(self, reduce_op, value, axis):
        if axis is not None and all(
                getattr(v, "shape", None) is not None and v.shape.rank == 0
                for v in self.experimental_local_results(value)):
            axis = None
        return super().reduce(reduce_op, value, axis)


def tpu_configured(tpu: str | None = None) -> bool:
    """True if a TPU is named (`tpu` or $TPU_NAME) or attached to this host (a TPU VM)."""
    return bool(tpu or os.environ.get("TPU_NAME") or tf.config.list_physical_devices("TPU"))


def _tpu_strategy(tpu: str | None) -> tf.distribute.Strategy:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu=tpu or os.environ.get("TPU_NAME") or "local")
    if tpu or os.environ.get("TPU_NAME"):
        tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def get_strategy(name: str = "auto", tpu: str | None = None) -> tf.distribute.Strategy:
    """The tf.distribute strategy called `name`.

    Args:
        name: str. "auto" (TPU if configured, else all GPUs, else the CPU), "one_device" (the
            first GPU, else the CPU), "mirrored" (all GPUs; all logical CPUs when there is no
            GPU), "multi_worker" (MultiWorkerMirroredStrategy from $TF_CONFIG) or "tpu".
        tpu: str or None. TPU name or grpc:// address for TPUClusterResolver ($TPU_NAME, or the
            local TPU VM, when None).

    Returns:
        The strategy. Build models and optimizers inside `strategy.scope()`.

    Example:
    >>> get_strategy("one_device").num_replicas_in_sync
    1
    """
    if name not in STRATEGIES:
        raise ValueError(f"distribution_strategy must be one of {STRATEGIES}, got {name!r}")
    gpus = tf.config.list_physical_devices("GPU")
    if name == "auto":
        if tpu_configured(tpu):
            name = "tpu"
        elif len(gpus) > 1:
            name = "mirrored"
        else:
            name = "one_device"
    if name == "tpu":
        strategy = _tpu_strategy(tpu)
    elif name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise ValueError("distribution_strategy=multi_worker needs the TF_CONFIG environment "
                             "variable (cluster and task); see tfbert/training/distribute.py")
        strategy = MultiWorkerMirroredStrategy()
    elif name == "mirrored":
        devices = ([f"/gpu:{i}" for i in range(len(gpus))] if gpus else
                   [d.name for d in tf.config.list_logical_devices("CPU")])
        strategy = tf.distribute.MirroredStrategy(devices=devices)
    else:
        strategy = tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
    logger.info("distribution strategy: %s with %d replica(s)", type(strategy).__name__,
                strategy.num_replicas_in_sync)
    return strategy


def is_chief(strategy: tf.distribute.Strategy | None = None) -> bool:
    """True on the worker that writes files (always, except on non-chief multi-worker tasks)."""
    strategy = strategy or tf.distribute.get_strategy()
    resolver = getattr(strategy, "cluster_resolver", None)
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type in (None, "chief"):
        return True
    cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    return task_type == "worker" and task_id == 0 and "chief" not in cluster


def tf_config_task() -> tuple[bool, int]:
    """(whether this task is the chief, its index) from $TF_CONFIG, before any strategy exists
    (what `is_chief` and `worker_index` say once MultiWorkerMirroredStrategy is made)."""
    spec = json.loads(os.environ.get("TF_CONFIG", "{}"))
    task = spec.get("task", {})
    task_type, index = task.get("type"), int(task.get("index", 0))
    chief = task_type in (None, "chief") or (
        task_type == "worker" and index == 0 and "chief" not in spec.get("cluster", {}))
    return chief, index


def num_workers(strategy: tf.distribute.Strategy | None = None) -> int:
    """Hosts feeding the strategy (MultiWorkerMirroredStrategy workers, TPU pod hosts); 1 else."""
    strategy = strategy or tf.distribute.get_strategy()
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    spec = resolver.cluster_spec().as_dict()
    return max(1, len(spec.get("worker", [])) + len(spec.get("chief", [])))


def worker_index(strategy: tf.distribute.Strategy | None = None) -> int:
    """This worker's task index (0 outside multi-worker training)."""
    strategy = strategy or tf.distribute.get_strategy()
    resolver = getattr(strategy, "cluster_resolver", None)
    return int(resolver.task_id or 0) if resolver is not None else 0
