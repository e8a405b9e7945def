"""Where and how a training run executes: precision, strategy, the output folder's lock, BERT's
optimizer on the model, fit verbosity.

Shared by pretraining and every fine-tuning task:

    with run_lock(config):                      # output_dir held for the whole run
        with build_scope(config) as strategy:   # dtype policy + strategy scope
            model = ...                         # variables made for that strategy
        model.fit(..., verbose=fit_verbosity(config.verbose))
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import keras
import tensorflow as tf

from tfbert import rundir
from tfbert.cpuinfo import host_cpu
from tfbert.training.distribute import get_strategy, tf_config_task
from tfbert.training.optimization import create_optimizer
from tfbert.training.schedules import DEFAULT_LR_SCHEDULE

PRECISIONS = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
# "auto": mixed bfloat16 where the hardware has bfloat16 matmul units, else float32.
PRECISION_CHOICES = (*PRECISIONS, "auto")
# The /proc/cpuinfo flags of CPUs whose bfloat16 dot products run at least twice the float32
# rate in oneDNN: AMX tiles (Xeon from Sapphire Rapids) and AVX512_BF16 (Xeon Cooper Lake, AMD
# from Zen 4). On a 2-core AMD EPYC with AVX512_BF16 the bfloat16 matmul probe reads 783 against
# 377 GFLOP/s float32 and the 4-layer benchmark model's step is 1.46x faster (docs/performance.md,
# "AVX-512 hosts without AMX").
BFLOAT16_CPU_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})


def resolve_precision(mixed_precision: str) -> str:
    """"auto" becomes "bfloat16" on a TPU, on GPUs of compute capability 8.0 or more (Ampere
    on), and on CPUs with bfloat16 dot-product instructions (BFLOAT16_CPU_FLAGS: AMX or
    AVX512_BF16; oneDNN then runs bfloat16 matmuls at two or more times the float32 rate), else
    "float32". Other names pass through."""
    if mixed_precision != "auto":
        return mixed_precision
    if tf.config.list_logical_devices("TPU"):
        return "bfloat16"
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        capabilities = [tf.config.experimental.get_device_details(g).get("compute_capability")
                        for g in gpus]
        return "bfloat16" if all(c and c >= (8, 0) for c in capabilities) else "float32"
    return "bfloat16" if BFLOAT16_CPU_FLAGS & _cpu_flags() else "float32"


def _cpu_flags() -> frozenset[str]:
    """This host's /proc/cpuinfo flags (none off Linux: no bfloat16 detection, float32)."""
    return host_cpu().flags


@contextlib.contextmanager
def dtype_policy(mixed_precision: str) -> Iterator[None]:
    """Sets Keras's global dtype policy for model building, restoring the previous one."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(PRECISIONS[resolve_precision(mixed_precision)])
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


@contextlib.contextmanager
def build_scope(config: Any, strategy: tf.distribute.Strategy | None = None
                ) -> Iterator[tf.distribute.Strategy]:
    """The dtype policy of `config.mixed_precision` and the strategy's scope, for building a
    model and its optimizer; yields the strategy (`config.distribution_strategy` when none is
    given)."""
    strategy = strategy or get_strategy(config.distribution_strategy, config.tpu)
    with dtype_policy(config.mixed_precision), strategy.scope():
        yield strategy


def run_lock(config: Any) -> rundir.RunLock:
    """The lock of `config.output_dir` for this task: the folder's own on the chief; a
    non-chief multi-worker task writes only scratch files and locks a file of its own. Read from
    $TF_CONFIG, so it can be taken before any TensorFlow work."""
    chief, worker = (tf_config_task() if config.distribution_strategy == "multi_worker"
                     else (True, 0))
    return (rundir.RunLock(config.output_dir) if chief else
            rundir.RunLock(config.output_dir, rundir.worker_lock_name(worker)))


def fit_verbosity(verbose: int | None) -> int:
    """Keras fit's `verbose`: as given, else a progress bar on a terminal and a line per epoch
    in a log file (a progress bar there is one line per update)."""
    if verbose is not None:
        return verbose
    return 1 if sys.stdout.isatty() else 2


def skip_symbolic_build(model: keras.Model) -> None:
    """Stops Keras's TF trainer from pulling a first batch in fit/evaluate to build the model.

    For a model made in a strategy scope, `fit` and `evaluate` take one batch from a fresh
    iterator and all-reduce it to build the model symbolically. That replays a pretraining
    resume's skip once more (the whole pipeline up to the resumed step), and under
    MultiWorkerMirroredStrategy it fails on dict inputs ("Attempt to convert a value
    ({'input_ids': PerReplica...}) ... to a Tensor"). Everything it would build is built already
    (model, metrics, optimizer), so it is skipped.

    Keras has no public switch for this: the one use of a Keras private in tfbert's training,
    an instance attribute over `Trainer._maybe_symbolic_build` (checked on keras 3.15.1,
    tensorflow 2.21.0; where a Keras lacks the method nothing is replaced, and fit still works,
    with the extra pass).
    """
    if not (model.built and model.optimizer.built and model.compiled):
        raise RuntimeError("build and compile the model (and build its optimizer) first")
    if hasattr(model, "_maybe_symbolic_build"):
        model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None


def compile_for_training(model: keras.Model, config: Any, num_train_steps: int,
                         num_warmup_steps: int, loss_scale: bool, clip_norm: float | None = 1.0,
                         lr_schedule: str | None = None,
                         **compile_kwargs: Any) -> keras.optimizers.Optimizer:
    """Compiles `model` with BERT's optimizer (`create_optimizer`) as `config` says
    (learning_rate, optimizer, lr_schedule, weight_decay, gradient_accumulation_steps,
    jit_compile); call it in the strategy scope the model was built in. Returns the optimizer.

    Args:
        model: keras.Model. Built.
        config: a RunConfig or FinetuneConfig.
        num_train_steps, num_warmup_steps: int. Optimizer updates in the run, and of warmup.
        loss_scale: bool. Dynamic loss scaling (a float16 model).
        clip_norm: float or None. Global gradient-norm clip.
        lr_schedule: str or None. The schedule, over config.lr_schedule (a resume's own);
            neither given: "polynomial".
        **compile_kwargs: other `model.compile` arguments (loss, metrics).
    """
    optimizer = create_optimizer(
        config.learning_rate, num_train_steps, num_warmup_steps, optimizer=config.optimizer,
        weight_decay=config.weight_decay, clip_norm=clip_norm,
        gradient_accumulation_steps=config.gradient_accumulation_steps, loss_scale=loss_scale,
        variables=model.trainable_variables,
        lr_schedule=lr_schedule or config.lr_schedule or DEFAULT_LR_SCHEDULE)
    model.compile(optimizer=optimizer, jit_compile=config.jit_compile, **compile_kwargs)
    return optimizer
