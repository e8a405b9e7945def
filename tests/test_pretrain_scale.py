"""Pretraining at scale: a data position that is a pure function of (seed, step), each worker's
share of every global batch, resume at a late step, the tf.data service.

The fast tests pin the input stream itself (against a plain-Python model of its order, across
starts, workers and micro-batches, and through an in-process tf.data service); the slow ones run
run_pretraining.py processes (kill -9 at a late step, two MultiWorkerMirroredStrategy workers).
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from model_test_utils import REPO
from pretrain_test_utils import free_ports, pretrain_config, pretrain_flags, saved_weights

from tfbert.errors import UserError
from tfbert.pretraining_data import record_stream, records
from tfbert.pretraining_data.pipeline import pretraining_stream, worker_rows
from tfbert.training import data_service, resume
from tfbert.training.pretrain import PretrainConfig, run_pretraining

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
COUNTS = [7, 30, 1, 0, 12, 25, 3]  # an empty file, a one-record file, uneven sizes


@pytest.fixture(scope="module")
def numbered(tmp_path_factory) -> list[str]:
    """Files whose records say where they are: b"FILE:RECORD" (file 2 GZIP)."""
    root = tmp_path_factory.mktemp("numbered")
    files = []
    for i, count in enumerate(COUNTS):
        path = str(root / f"part-{i}.tfrecord")
        with tf.io.TFRecordWriter(path, "GZIP" if i == 2 else "") as writer:
            for j in range(count):
                writer.write(f"{i}:{j}".encode())
        files.append(path)
    return files


def expected_order(seed: int, epochs: int, cycle: int, window: int, first_epoch: int = 0
                   ) -> list[str]:
    """The stream as documented, from epoch `first_epoch` on: files in the (seed, epoch) order,
    groups of `cycle` read round robin, each window of the epoch permuted by (seed, epoch,
    window)."""
    out = []
    for epoch in range(first_epoch, first_epoch + epochs):
        order = record_stream._file_order(seed, epoch, len(COUNTS)).numpy().tolist()
        assert sorted(order) == list(range(len(COUNTS)))
        stream = []
        for g in range(0, len(order), cycle):
            for r in range(max(COUNTS)):
                stream += [f"{i}:{r}" for i in order[g:g + cycle] if COUNTS[i] > r]
        for j in range(0, len(stream), window):
            block = stream[j:j + window]
            perm = tf.random.experimental.index_shuffle(
                tf.range(len(block), dtype=tf.int64), record_stream._stream_key(seed, epoch,
                                                                         j // window + 1),
                tf.constant(len(block) - 1, tf.int64)).numpy()
            out += [block[k] for k in perm]
    return out


def test_positioned_records_start_anywhere(numbered):
    """A stream started at position p is the stream from 0 without its first p records: inside
    a round, at a group's and a window's edge, past the first epoch (N = 78)."""
    expected = expected_order(seed=5, epochs=2, cycle=3, window=16)
    assert sorted(expected[:78]) == sorted(f"{i}:{j}" for i, c in enumerate(COUNTS)
                                           for j in range(c))
    assert expected[:78] != expected[78:]  # every epoch has its own order
    for start in (13, 77 + 17):
        ds = record_stream.stream_from(numbered, COUNTS, 5, start, cycle_length=3, window=16)
        got = [r.decode() for r in ds.take(40).as_numpy_iterator()]
        assert got == expected[start:start + 40], start
    changed = record_stream.stream_from(numbered, [c + 1 if c else 0 for c in COUNTS], 5,
                                        cycle_length=3, window=16)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"part-\d\.tfrecord.{0,3} changed "
                       r"after the run started: from record 0 it holds \d+ readable records, "
                       r"the scan counted \d+"):
        list(changed.take(80))


@pytest.fixture(scope="module")
def text_records(tmp_path_factory, chinese_vocab_file) -> tuple[list[str], list[int]]:
    """Three shards of 120 pairs of 5-20 characters of the vocab (seeded), uneven in size."""
    with open(chinese_vocab_file, encoding="utf-8") as f:
        chars = [t for t in f.read().split("\n") if len(t) == 1]
    rng = np.random.default_rng(0)
    texts = ["".join(rng.choice(chars, size=rng.integers(5, 21))) for _ in range(240)]
    root = tmp_path_factory.mktemp("pairs")
    with records.ShardedWriter(str(root / "pairs.tfrecord"), num_shards=3) as writer:
        for i in range(0, 240, 2):
            writer.write(records.make_example(texts[i], texts[i + 1], int(i % 3 == 0)))
    return writer.paths, writer.counts


def _stream(files, counts, vocab, **kw) -> list[dict[str, np.ndarray]]:
    take = kw.pop("take")
    ds = pretraining_stream(files, counts, vocab, 32, 5, batch_size=8, seed=3,
                            shuffle_window=50, **kw)
    return list(ds.take(take).as_numpy_iterator())


@pytest.fixture(scope="module")
def whole(text_records, chinese_vocab_file) -> list[dict[str, np.ndarray]]:
    """One worker's first 16 steps (120 records: an epoch is 15 steps)."""
    files, counts = text_records
    return _stream(files, counts, chinese_vocab_file, take=16)


def test_workers_and_micro_batches_split_the_same_global_batches(text_records,
                                                                 chinese_vocab_file, whole):
    """2 workers x 2 micro-batches together are the one-worker batches row for row (masks
    included), each worker masking only its rows."""
    files, counts = text_records
    assert all(b["input_ids"].shape == (8, 32) for b in whole)
    assert not np.array_equal(whole[0]["masked_lm_positions"], whole[15]["masked_lm_positions"])
    for workers, k in ((2, 2),):
        shares = [_stream(files, counts, chinese_vocab_file, take=6 * k, num_workers=workers,
                          worker_index=w, micro_batches=k) for w in range(workers)]
        for step in range(6):
            rebuilt = {}
            for w in range(workers):
                rows = worker_rows(8, k, workers, w)
                part = {n: np.concatenate([shares[w][step * k + j][n] for j in range(k)])
                        for n in whole[0]}
                for n, value in part.items():
                    rebuilt.setdefault(n, np.zeros_like(whole[step][n]))[rows] = value
            for n in whole[0]:
                np.testing.assert_array_equal(rebuilt[n], whole[step][n], err_msg=f"{n} {step}")
    with pytest.raises(ValueError, match="batch_size 8 is not a multiple of micro_batches x "
                       "num_workers = 3 x 1"):
        worker_rows(8, 3)


def test_start_at_a_late_position_costs_what_position_0_costs(numbered):
    """Record 78 million and 13 (a million epochs in) is reached as record 13 is: the plan is
    the epoch's number, a window and a skip within it (< window), so the stream reads nothing
    of the million epochs before it; and its first record is the documented one."""
    total = sum(COUNTS)
    late = 10**6 * total + 13
    plan = record_stream.stream_plans(numbered, COUNTS, 5, [13, late], cycle_length=3,
                                      window=16)
    assert plan["epoch"].tolist() == [0, 10**6]
    assert plan["window"].tolist() == [0, 0] and plan["skip"].tolist() == [13, 13]
    ds = record_stream.stream_from(numbered, COUNTS, 5, late, cycle_length=3, window=16)
    assert next(iter(ds)).numpy().decode() == expected_order(
        seed=5, epochs=1, cycle=3, window=16, first_epoch=10**6)[13]


def test_data_service_gives_each_step_the_local_batch(text_records, chinese_vocab_file, whole):
    """One dispatcher and two workers in this process (DYNAMIC sharding of chunks of steps,
    each chunk read from its own start): every step from 2 arrives once, bit-equal to the
    local pipeline's batch for that step."""
    files, counts = text_records
    service = tf.data.experimental.service
    dispatcher = service.DispatchServer()
    address = dispatcher.target.split("://")[1]
    workers = [service.WorkerServer(service.WorkerConfig(dispatcher_address=address))
               for _ in range(2)]
    stream = pretraining_stream(files, counts, chinese_vocab_file, 32, 5, 8, seed=3,
                                shuffle_window=50, start_step=2, chunk_steps=3, end_step=14)
    served = list(data_service.read(stream, dispatcher.target, "test").as_numpy_iterator())
    steps = [int(b[data_service.STEP][0]) for b in served]
    assert sorted(steps) == list(range(2, 14))  # chunks of 3 steps from step 2 up to 14
    for batch in served:
        step = int(batch.pop(data_service.STEP)[0])
        for n, value in batch.items():
            np.testing.assert_array_equal(value, whole[step][n], err_msg=f"{n} {step}")
    assert workers  # kept alive until here
    with pytest.raises(UserError, match="data_service must be a dispatcher address "
                       "grpc://HOST:PORT, got 'localhost:5050'"):
        PretrainConfig(data_service="localhost:5050").validate()


def test_resume_refuses_a_checkpoint_of_the_replayed_order(tmp_path):
    """A run folder written before the stateless order (no input_order) is not resumed
    silently on another stream."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[MASK]\na\n")
    config = PretrainConfig(output_dir=str(tmp_path), vocab_file=str(vocab))
    settings = resume.run_settings(config, [str(vocab)], str(vocab), True, None)
    old = {k: v for k, v in settings.items() if k != "input_order"}
    (tmp_path / resume.RUN_CONFIG_FILE).write_text(json.dumps(old))
    with pytest.raises(UserError, match="input_order was 'tf.data shuffle buffer, resumed by "
                       "replaying the pipeline', now 'stateless by"):
        resume.check_resume(str(tmp_path), config, settings, str(tmp_path / "ckpt-7"))
    allowed = PretrainConfig(output_dir=str(tmp_path), vocab_file=str(vocab),
                             allow_changed_settings=True)
    assert set(resume.check_resume(str(tmp_path), allowed, settings,
                                   str(tmp_path / "ckpt-7"))) == {"input_order"}


# --------------------------------------------------------------------------- processes


class FirstStepClock(keras.callbacks.Callback):
    """Wall and CPU seconds (this process, all threads: what other load on the host does not
    inflate) from its creation to the end of the first training batch."""

    def __init__(self) -> None:
        super().__init__()
        self.started = time.perf_counter(), time.process_time()
        self.seconds = None

    def on_train_batch_end(self, batch, logs=None):
        if self.seconds is None:
            self.seconds = (time.perf_counter() - self.started[0],
                            time.process_time() - self.started[1])


def _timed_run(config: PretrainConfig) -> tuple[dict, tuple[float, float]]:
    clock = FirstStepClock()
    results = run_pretraining(config, callbacks=[clock])
    return results, clock.seconds


def _assert_same_weights(a: str, b: str) -> None:
    expected, actual = saved_weights(a), saved_weights(b)
    assert expected.keys() == actual.keys()
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)


@pytest.mark.slow
def test_kill_9_at_a_late_step_resumes_at_once(tiny_data, tmp_path):
    """A run killed after step 1,000 (8,000 examples in: 22 epochs of the tiny data) takes the
    CPU time a fresh run takes to its first step (within a second), and ends with the
    uninterrupted run's weights."""
    settings = dict(num_train_steps=1010, save_checkpoints_steps=500, eval_input_file=None,
                    log_steps=500, num_warmup_steps=10, learning_rate=1e-3)
    _, fresh = _timed_run(pretrain_config(tiny_data, tmp_path / "uninterrupted", **settings))
    out = tmp_path / "killed"
    command = [sys.executable, os.path.join(REPO, "run_pretraining.py"),
               *pretrain_flags(pretrain_config(tiny_data, out, **settings))]
    proc = subprocess.Popen(command, cwd=REPO, env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 900
        while not glob.glob(str(out / "checkpoints" / "ckpt-1000.index")):
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.time() < deadline
            time.sleep(0.05)
        time.sleep(0.5)  # let the save finish (the manager writes the index last)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert tf.train.latest_checkpoint(str(out / "checkpoints")).endswith("ckpt-1000")
    results, resumed = _timed_run(pretrain_config(tiny_data, out, **settings))
    print(f"to the first step: fresh run {fresh[0]:.2f} s wall, {fresh[1]:.2f} s CPU; resumed "
          f"at step 1000 {resumed[0]:.2f} s wall, {resumed[1]:.2f} s CPU")
    assert results["global_step"] == 1010 and results["examples_trained"] == 80
    assert resumed[1] < fresh[1] + 1.0, (fresh, resumed)
    _assert_same_weights(str(tmp_path / "uninterrupted" / "model"), str(out / "model"))


def _workers(config: PretrainConfig, ports: list[int]) -> list[subprocess.Popen]:
    command = [sys.executable, os.path.join(REPO, "run_pretraining.py"), *pretrain_flags(config)]
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    procs = []
    for index in range(len(ports)):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        procs.append(subprocess.Popen(command, cwd=REPO, env=dict(ENV, TF_CONFIG=tf_config),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    return procs


def _finish(procs: list[subprocess.Popen]) -> list[dict]:
    outputs = [p.communicate(timeout=900) for p in procs]
    for p, (_, stderr) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, stderr[-3000:]
    return [json.loads(stdout[stdout.index("{"):]) for stdout, _ in outputs]


@pytest.mark.slow
def test_two_workers_share_the_input_and_resume_after_kill_9(tiny_data, tmp_path):
    """Two MultiWorkerMirroredStrategy workers on localhost: each makes about half the
    examples; a kill -9 of both after a checkpoint, then the same command, gives the weights of
    the uninterrupted run (itself equal to a second uninterrupted run)."""
    settings = dict(num_train_steps=12, save_checkpoints_steps=4, eval_input_file=None,
                    distribution_strategy="multi_worker")
    runs = {}
    for name in ("a", "b"):
        out = tmp_path / name
        runs[name] = _finish(_workers(pretrain_config(tiny_data, out, **settings), free_ports(2)))
    for results in runs["a"]:
        assert results["global_step"] == 12 and results["input_workers"] == 2
        made = [results[f"worker{i}_input_examples"] for i in range(2)]
        # 12 steps x 4 of each 8 examples, plus what each pipeline had prefetched
        assert all(48 <= m <= 48 + 4 * 12 for m in made), made
    _assert_same_weights(str(tmp_path / "a" / "model"), str(tmp_path / "b" / "model"))

    out = tmp_path / "killed"
    config = pretrain_config(tiny_data, out, **settings)
    procs = _workers(config, free_ports(2))
    try:
        deadline = time.time() + 900
        while not glob.glob(str(out / "checkpoints" / "ckpt-8.index")):
            assert all(p.poll() is None for p in procs), procs[0].stderr.read()[-3000:]
            assert time.time() < deadline
            time.sleep(0.05)
        time.sleep(0.5)
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
    finally:
        for p in procs:
            p.wait(timeout=60)
    saved = tf.train.latest_checkpoint(str(out / "checkpoints"))
    resumed = _finish(_workers(config, free_ports(2)))
    killed_at = int(saved.rsplit("-", 1)[1])
    assert [r["global_step"] for r in resumed] == [12, 12]
    assert resumed[0]["examples_trained"] == (12 - killed_at) * 8
    _assert_same_weights(str(tmp_path / "a" / "model"), str(out / "model"))
