"""Where a train step's time goes between `train_on_batch` and `run_pretraining`'s `fit`,
interleaved in one process: the built-in default pretraining step (`experiments.
ab_pretrain_builtin`'s model, 32 tokens, batch 32, float32), XLA on and off, fed these ways:

- on_batch: `model.train_on_batch(batch)` (the bare step the A/B probes time);
- iterator: `model.train_function(iterator)` over the strategy's distributed dataset of that
  batch repeated, the loss read back every step (fit's feed without fit's loop);
- fit: `model.fit` of that dataset for one chunk of steps, a callback reading the loss back
  every step (as tfbert's own callbacks do) and taking the time between steps;
- with --run, three fit feeds that take in turn what `run_pretraining` adds: run_optimizer (the
  model compiled by `runtime.compile_for_training`: BERT's schedule, clipping and weight decay,
  Keras's symbolic build skipped), run_stream (that, fed the live built-in-data stream
  `pretrain.train_dataset` instead of one batch), and run (that, with tfbert's step callbacks:
  TrainingProgress keeping the global step variable, StopOnNaN, TensorBoardScalars writing
  into a temporary folder); and run_stream under two tf.data settings (`_stream_options`).

Every model is built under a OneDeviceStrategy on the CPU, as `run_pretraining` builds it on a
one-device host; with --default_strategy, also the fit feed of a model built and fitted under
TensorFlow's default strategy. One chunk of each system in turn per round, so that machine load
hits every system alike (`experiments.fit_loop` compares whole runs, one process each, and
cannot). Prints (and with --results writes) each system's median step time and quartiles.

    python -m experiments.fit_feed [--rounds 8] [--chunk 40] [--default_strategy] [--run]
        [--only NAMES] [--cache_dir cache] [--results FILE]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from bench.bench_pretrain import synthetic_batch  # noqa: E402
from bench.common import isa_record, load_average, report, step_stats  # noqa: E402
from experiments.ab_pretrain_builtin import VOCAB  # noqa: E402

SEQ, PREDICTIONS = 32, 5  # phase 1 of the default run
Chunk = Callable[[], list[float]]  # runs one chunk of steps, returns each step's seconds


def _model(jit_compile: bool, run_config=None):
    """The default run's model, compiled with a plain AdamW, or as `run_pretraining` compiles
    it for `run_config` (its optimizer; the symbolic build skipped)."""
    from tfbert import BertConfig, BertEncoder, BertPretrainer
    from tfbert.training import runtime
    from tfbert.training.optimization import AdamW
    from tfbert.training.pretrain import DEFAULT_MODEL

    model = BertPretrainer(BertEncoder(BertConfig(vocab_size=VOCAB, **DEFAULT_MODEL)))
    if run_config is None:
        model.compile(optimizer=AdamW(learning_rate=1e-3), jit_compile=jit_compile)
        return model
    runtime.compile_for_training(model, run_config, run_config.num_train_steps,
                                 run_config.num_warmup_steps, loss_scale=False)
    model.optimizer.build(model.trainable_variables)
    runtime.skip_symbolic_build(model)
    return model


def _fitted(model, dataset, chunk: int, callbacks=()) -> Chunk:
    """One `fit` of `chunk` steps per call; the step times from a callback that reads the loss
    back (the first gap, which holds fit's set-up, dropped)."""
    import keras

    class Gaps(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.stamps = [time.perf_counter()]

        def on_train_batch_end(self, batch, logs=None):
            float(logs["loss"])
            self.stamps.append(time.perf_counter())

    def run() -> list[float]:
        gaps = Gaps()
        model.fit(dataset, epochs=1, steps_per_epoch=chunk + 1, verbose=0,
                  callbacks=[*callbacks, gaps])
        stamps = gaps.stamps[1:]
        return [b - a for a, b in zip(stamps[:-1], stamps[1:], strict=True)]
    return run


def feeds(batch: dict, jit_compile: bool, strategy, chunk: int, default_strategy: bool
          ) -> dict[str, Chunk]:
    """The on_batch, iterator and fit systems (and fit-default_strategy) of one XLA setting."""
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensors(batch).repeat()
    with strategy.scope():
        on_batch_model, iterator_model, fit_model = (_model(jit_compile) for _ in range(3))
    for model in (on_batch_model, iterator_model, fit_model):
        model.train_on_batch(batch)  # builds model, optimizer and metrics
    iterator_model.make_train_function()
    iterator = iter(strategy.experimental_distribute_dataset(dataset))

    def timed(step: Callable[[], object]) -> list[float]:
        times = []
        for _ in range(chunk):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        return times

    name = "xla" if jit_compile else "no-xla"
    systems = {
        f"{name}-on_batch": lambda: timed(lambda: on_batch_model.train_on_batch(batch)),
        f"{name}-iterator": lambda: timed(
            lambda: float(iterator_model.train_function(iterator)["loss"])),
        f"{name}-fit": _fitted(fit_model, dataset, chunk),
    }
    if default_strategy:
        model = _model(jit_compile)
        model.train_on_batch(batch)
        systems[f"{name}-fit-default_strategy"] = _fitted(model, dataset, chunk)
    return systems


def run_feeds(batch: dict, jit_compile: bool, strategy, chunk: int, cache_dir: str,
              log_dir: str) -> dict[str, Chunk]:
    """The run_optimizer, run_stream and run systems of one XLA setting."""
    import tensorflow as tf

    from tfbert.pretraining_data import record_scan, records
    from tfbert.pretraining_data.builtin import default_data
    from tfbert.training import callbacks as cb
    from tfbert.training import pretrain

    config = pretrain.PretrainConfig(output_dir=log_dir, jit_compile=jit_compile,
                                     mixed_precision="float32", cache_dir=cache_dir)
    phase = config.phase1()
    data = default_data(cache_dir, phase.max_seq_length)
    paths = records.expand_file_pattern(data.train_files)
    counts = [r.records for r in record_scan.scan_records(paths)]

    def stream() -> tf.data.Dataset:
        return pretrain.train_dataset(phase, paths, counts, data.vocab_file, data.lower_case)

    dataset = tf.data.Dataset.from_tensors(batch).repeat()
    with strategy.scope():
        models = [_model(jit_compile, config) for _ in range(3)]
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
    progress = cb.TrainingProgress(0, 1, phase.train_batch_size, global_step)
    step_callbacks = [progress, cb.StopOnNaN(progress),
                      cb.TensorBoardScalars(progress, os.path.join(log_dir, "logs"),
                                            phase.log_steps)]
    name = "xla" if jit_compile else "no-xla"
    systems = {f"{name}-run_optimizer": _fitted(models[0], dataset, chunk),
               f"{name}-run_stream": _fitted(models[1], stream(), chunk),
               f"{name}-run": _fitted(models[2], stream(), chunk, step_callbacks)}
    for variant, options in _stream_options().items():
        with strategy.scope():
            model = _model(jit_compile, config)
        systems[f"{name}-run_stream-{variant}"] = _fitted(model, stream().with_options(options),
                                                          chunk)
    return systems


def _stream_options() -> dict:
    """tf.data settings tried on the live stream: a one-thread private pool; the autotuner's
    CPU budget at one core."""
    import tensorflow as tf

    one_thread, budget = tf.data.Options(), tf.data.Options()
    one_thread.threading.private_threadpool_size = 1
    budget.autotune.cpu_budget = 1
    return {"onethread": one_thread, "cpu_budget1": budget}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--chunk", type=int, default=40, help="steps per system per round")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--default_strategy", action="store_true",
                        help="add the fit feed under TensorFlow's default strategy")
    parser.add_argument("--run", action="store_true",
                        help="add the fit feeds with run_pretraining's optimizer, stream and "
                             "callbacks")
    parser.add_argument("--only", default=None,
                        help="time only the systems whose names contain one of these "
                             "comma-separated strings")
    parser.add_argument("--cache_dir", default="cache", help="the built-in data's cache")
    parser.add_argument("--results", default=None, help="write the figures (JSON) here")
    args = parser.parse_args()
    import tensorflow as tf

    batch = synthetic_batch(seq=SEQ, batch=args.batch, predictions=PREDICTIONS, vocab=VOCAB)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    systems: dict[str, Chunk] = {}
    with tempfile.TemporaryDirectory() as log_dir:
        for jit in (True, False):
            systems.update(feeds(batch, jit, strategy, args.chunk, args.default_strategy))
            if args.run:
                systems.update(run_feeds(batch, jit, strategy, args.chunk, args.cache_dir,
                                         os.path.join(log_dir, str(jit))))
        if args.only:
            systems = {name: run for name, run in systems.items()
                       if any(part in name for part in args.only.split(","))}
        for run in systems.values():  # warm-up: traces, compiles, fills the pipelines
            run()
        load_before = load_average()
        times: dict[str, list[float]] = {name: [] for name in systems}
        for _ in range(args.rounds):
            for name, run in systems.items():
                times[name].extend(run())
    result: dict = step_stats(times)
    for feed in [name.removeprefix("xla-") for name in times if name.startswith("xla-")]:
        if f"no-xla-{feed}" not in result:
            continue
        result[f"{feed} no-xla/xla"] = round(result[f"no-xla-{feed}"]["step_ms"]
                                             / result[f"xla-{feed}"]["step_ms"], 3)
    result.update(rounds=args.rounds, chunk=args.chunk, batch=args.batch, seq=SEQ,
                  isa=isa_record(),
                  load_average={"before": load_before, "after": load_average()})
    report(result, args.results)


if __name__ == "__main__":
    main()
