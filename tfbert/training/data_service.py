"""Pretraining's input pipeline on a tf.data service cluster: for runs whose accelerators wait
for the tokenize/pack/mask work of their own host's CPUs.

A cluster is one dispatcher and any number of workers (`tf.data.experimental.service`), each
started with this module, on hosts that can read the training files:

    python -m tfbert.training.data_service dispatcher --port=5050
    python -m tfbert.training.data_service worker --dispatcher=HOST:5050 --port=5051

and `run_pretraining.py --data_service=grpc://HOST:5050 ...` sends its stream there: each
training worker registers its share of the stream (`pretraining_stream` with `chunk_steps`) as
one job, and the service's workers run it, reading the files, tokenizing, packing and masking.

Which batches. The job is sharded `ShardingPolicy.DYNAMIC`: its source is the list of chunks
of `chunk_steps` steps, and the dispatcher hands the next chunk to whichever service worker
asks, so work spreads over however many workers there are (and they may come and go). Every
step's batch is computed from its own position, so it is bit for bit the batch the local
pipeline makes for that step (same examples, same masks), whichever worker made it. What the
service does not keep is the order between chunks: two workers' chunks arrive interleaved, so
the run trains on the same batches in a different order than a local run, and a resume from
step N restarts at step N of the stream although some steps past N may have been trained
before the checkpoint and some before N not (at most the chunks in flight). The static
policies, which would keep the order, need every client to read from a tf.data worker on its
own host (tf.data's `ShardingPolicy` documentation), which is not the point of the service;
`ShardingPolicy.OFF` makes every service worker produce the whole stream (each batch once per
worker).

Example (a cluster in this process, as the tests run one):
>>> import tensorflow as tf
>>> dispatcher = tf.data.experimental.service.DispatchServer()
>>> address = dispatcher.target.split("://")[1]
>>> worker = tf.data.experimental.service.WorkerServer(
...     tf.data.experimental.service.WorkerConfig(dispatcher_address=address))
>>> ds = read(tf.data.Dataset.range(3).map(lambda i: {"step": i}), dispatcher.target, "demo")
>>> sorted(int(x["step"]) for x in ds)
[0, 1, 2]
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import signal
import sys

import tensorflow as tf

logger = logging.getLogger(__name__)

STEP = "step"  # the feature that carries each element's global step through the service


def job_name(config, start_step: int, worker: int) -> str:
    """The service job of one training worker's stream: one per run folder, start step and
    worker (a resume gets a new job; two workers never share one)."""
    folder = os.path.abspath(config.output_dir or "")
    digest = hashlib.sha1(folder.encode("utf-8")).hexdigest()[:12]
    return f"tfbert-pretrain-{digest}-step{start_step}-worker{worker}"


def read(dataset: tf.data.Dataset, service: str, job: str) -> tf.data.Dataset:
    """`dataset` run on the tf.data service at `service` (grpc://host:port) as job `job`,
    sharded dynamically by its source's elements (see the module docstring)."""
    return dataset.apply(tf.data.experimental.service.distribute(
        processing_mode=tf.data.experimental.service.ShardingPolicy.DYNAMIC, service=service,
        job_name=job))


def without_step(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """The elements without their STEP feature (what the model reads)."""
    return dataset.map(lambda out: {k: v for k, v in out.items() if k != STEP},
                       num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _serve(server) -> None:
    logger.info("serving; stop with Ctrl-C or SIGTERM")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.join()
    except KeyboardInterrupt:
        pass


def main(argv: list[str] | None = None) -> None:
    """`dispatcher --port=P [--work_dir=D]` or `worker --dispatcher=HOST:P [--port=Q]`."""
    parser = argparse.ArgumentParser(
        prog="python -m tfbert.training.data_service",
        description="A tf.data service dispatcher or worker for run_pretraining.py "
                    "--data_service=grpc://HOST:PORT.")
    roles = parser.add_subparsers(dest="role", required=True)
    dispatcher = roles.add_parser("dispatcher", help="the cluster's dispatcher")
    dispatcher.add_argument("--port", type=int, default=5050)
    dispatcher.add_argument("--work_dir", default=None,
                            help="journal folder: a restarted dispatcher recovers its jobs")
    worker = roles.add_parser("worker", help="a worker that runs the pipelines")
    worker.add_argument("--dispatcher", required=True, help="HOST:PORT of the dispatcher")
    worker.add_argument("--port", type=int, default=0, help="0: any free port")
    worker.add_argument("--worker_address", default=None,
                        help="HOST:PORT clients reach this worker at (default: this host)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    service = tf.data.experimental.service
    if args.role == "dispatcher":
        server = service.DispatchServer(service.DispatcherConfig(
            port=args.port, work_dir=args.work_dir,
            fault_tolerant_mode=args.work_dir is not None))
        logger.info("dispatcher at %s", server.target)
    else:
        address = {"worker_address": args.worker_address} if args.worker_address else {}
        server = service.WorkerServer(service.WorkerConfig(
            dispatcher_address=args.dispatcher.split("://")[-1], port=args.port, **address))
        logger.info("worker of dispatcher %s", args.dispatcher)
    _serve(server)


if __name__ == "__main__":
    main()
