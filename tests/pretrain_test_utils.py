"""Pretraining helpers shared by the run_pretraining, interrupt, scale and run-safety tests.

`make_tiny_data` writes the tiny pretraining records that the `tiny_data` fixture (conftest.py)
hands out; `pretrain_config` / `pretrain_flags` are one run over them as a PretrainConfig and as
run_pretraining.py's flags.
"""

from __future__ import annotations

import importlib.util
import os
import socket

import numpy as np
from model_test_utils import REPO, tiny_config
from safetensors.numpy import load_file

from tfbert.data import corpora
from tfbert.pretraining_data import instances
from tfbert.pretraining_data.instance_files import create_pretraining_data
from tfbert.training.pretrain import PretrainConfig

CREATE_PRETRAINING_DATA = os.path.join(REPO, "data_tools", "create_pretraining_data.py")


def run_create_pretraining_data(argv: list[str]) -> instances.Stats:
    """`python data_tools/create_pretraining_data.py ARGV`, in this process."""
    spec = importlib.util.spec_from_file_location("create_pretraining_data",
                                                  CREATE_PRETRAINING_DATA)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv)


def make_tiny_data(root, vocab_file: str) -> dict:
    """Pretraining records (max_seq_length 32) from 400 People's Daily documents in 2 shards,
    40 more held out for eval, and a tiny bert_config.json under `root` (a pathlib.Path).

    Returns {"train": comma-joined shards, "eval", "vocab", "config", "vocab_size"}.
    """
    docs = [d for d in corpora.people_daily_documents() if len(d) >= 2]
    options = instances.InstanceOptions(max_seq_length=32, dupe_factor=1)
    _, train = create_pretraining_data(str(root / "train.tfrecord"), vocab_file,
                                       documents=docs[:400], options=options,
                                       num_shards=2, progress=False)
    stats, evaluation = create_pretraining_data(str(root / "eval.tfrecord"), vocab_file,
                                                documents=docs[400:440],
                                                options=options, progress=False)
    assert stats.instances >= 16
    config = tiny_config(vocab_file)
    config.to_json_file(str(root / "bert_config.json"))
    return {"train": ",".join(train), "eval": evaluation[0], "vocab": vocab_file,
            "config": str(root / "bert_config.json"), "vocab_size": config.vocab_size}


def pretrain_config(data: dict, output_dir, **overrides) -> PretrainConfig:
    """A 40-step run over `data` (make_tiny_data's dict), checkpoints every 20 steps."""
    values = dict(input_file=data["train"], eval_input_file=data["eval"],
                  vocab_file=data["vocab"], bert_config_file=data["config"],
                  output_dir=str(output_dir), max_seq_length=32, max_predictions_per_seq=5,
                  train_batch_size=8, eval_batch_size=8, num_train_steps=40,
                  num_warmup_steps=4, learning_rate=1e-2, save_checkpoints_steps=20,
                  max_eval_steps=2, log_steps=10, distribution_strategy="one_device",
                  mixed_precision="float32", verbose=0)
    values.update(overrides)
    return PretrainConfig(**values)


def pretrain_flags(config: PretrainConfig) -> list[str]:
    """run_pretraining.py's flags for `config`, the input files first (a lock message shows the
    start of the holder's command line)."""
    skip = {"verbose", "cache_dir", "default_num_shards"}
    out = []
    for name, value in sorted(vars(config).items(), key=lambda item: item[0] != "input_file"):
        if value is None or name in skip:
            continue
        if isinstance(value, bool):
            out.append(f"--{name}" if value else f"--no{name}")
        else:
            out.append(f"--{name}={value}")
    return out


def saved_weights(model_dir: str) -> dict[str, np.ndarray]:
    """The arrays of `model_dir`/model.safetensors by name."""
    return load_file(os.path.join(model_dir, "model.safetensors"))


def free_ports(n: int) -> list[int]:
    """`n` localhost ports free at the moment of asking."""
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports
