"""Makes a shipped model's folder from a finished pretraining run: `make tfbert-chinese`'s last
step (`tfbert.checkpoints.shipped` reads the folder).

    python -m tfbert.training.release --run_dir=output/tfbert-chinese \
        --output_dir=output/tfbert-chinese/release --wall_seconds=3100 --command="make ..."

Writes into --output_dir (a new folder): the run's model (config.json, vocab.txt, tfbert.json,
tokenizer_config.json) with model.safetensors stored in float16 (half the bytes; every weight
within float16's rounding of the run's float32), pretraining.json (the command, the versions,
the processor, wall time, tokens per second, the corpus sha256, the last held-out scores),
curve.json and curve.png (held-out masked-LM loss and accuracy by step) and SHA256SUMS. It
prints the sha256 of SHA256SUMS, which `shipped.SHIPPED` records.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save_file

from tfbert import cpuinfo
from tfbert._version import __version__
from tfbert.checkpoints import shipped
from tfbert.errors import UserError, run_cli
from tfbert.fileio import write_json
from tfbert.training.reports import plot_history

logger = logging.getLogger(__name__)

COPIED = ("config.json", "vocab.txt", "tfbert.json", "tokenizer_config.json")
CURVE_KEYS = ("step", "seq_length", "learning_rate", "val_mlm_loss", "val_masked_lm_accuracy",
              "val_next_sentence_accuracy", "mlm_loss", "masked_lm_accuracy")


def _read_json(path: str) -> Any:
    if not os.path.isfile(path):
        raise UserError(f"{path} is missing: is the pretraining run finished?")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def half_precision(source: str, target: str) -> int:
    """Writes `source`'s safetensors with every float32 tensor as float16; returns the largest
    absolute value seen (float16 holds up to 65504)."""
    tensors = load_file(source)
    largest = max(float(np.max(np.abs(t))) for t in tensors.values())
    if largest > 6e4:
        raise UserError(f"{source}: a weight of magnitude {largest:.3g} does not fit float16")
    save_file({k: v.astype(np.float16) if v.dtype == np.float32 else v
               for k, v in tensors.items()}, target)
    return largest


def tokens_trained(config: dict[str, Any], history: list[dict[str, Any]]) -> int:
    """Sequence positions trained on: each loop's steps x batch x its sequence length."""
    total, previous = 0, 0
    for entry in history:
        total += (entry["step"] - previous) * config["config"]["train_batch_size"] * \
            entry["seq_length"]
        previous = entry["step"]
    return total


def corpus_sha256(config: dict[str, Any]) -> str | None:
    """The corpus sha256 the built-in data's manifest records (None for other inputs)."""
    first = config["input_files"][0].rsplit(" (", 1)[0]
    manifest = os.path.join(os.path.dirname(first), "manifest.json")
    return _read_json(manifest).get("corpus_sha256") if os.path.isfile(manifest) else None


def release(run_dir: str, output_dir: str, name: str, command: str, wall_seconds: float
            ) -> dict[str, Any]:
    """Writes the shipped folder of run `run_dir` to `output_dir` (module docstring); returns
    pretraining.json's content plus "sums_sha256"."""
    if os.path.exists(output_dir):
        raise UserError(f"{output_dir} exists; the release folder must be new")
    model_dir = os.path.join(run_dir, "model")
    config = _read_json(os.path.join(run_dir, "pretrain_config.json"))
    history = _read_json(os.path.join(run_dir, "pretrain_history.json"))
    results = _read_json(os.path.join(run_dir, "pretrain_results.json"))
    tmp = f"{output_dir}.tmp-{os.getpid()}"
    os.makedirs(tmp)
    for file_name in COPIED:
        shutil.copyfile(os.path.join(model_dir, file_name), os.path.join(tmp, file_name))
    half_precision(os.path.join(model_dir, "model.safetensors"),
                   os.path.join(tmp, "model.safetensors"))
    curve = [{k: e[k] for k in CURVE_KEYS if k in e} for e in history]
    write_json(os.path.join(tmp, "curve.json"), curve)
    plot_history(history, os.path.join(tmp, "curve.png"))
    tokens = tokens_trained(config, history)
    cpu = cpuinfo.host_cpu()
    import keras  # the versions the run used (this is the same environment)
    import tensorflow as tf

    record = {
        "name": name,
        "command": command,
        "run_config": config["config"],
        "bert_config": config["bert_config"],
        "steps": history[-1]["step"] if history else 0,
        "tokens_trained": tokens,
        "wall_seconds": round(wall_seconds, 1),
        "tokens_per_second": round(tokens / wall_seconds, 1) if wall_seconds else None,
        "corpus_sha256": corpus_sha256(config),
        "held_out": {k: results.get(k) for k in ("mlm_loss", "masked_lm_accuracy",
                                                 "next_sentence_accuracy")},
        "processor": {"model_name": cpu.model_name, "kind": cpu.kind,
                      "cores": os.cpu_count()},
        "versions": {"tfbert": __version__, "tensorflow": tf.__version__,
                     "keras": keras.__version__, "python": platform.python_version()},
    }
    write_json(os.path.join(tmp, "pretraining.json"), record)
    write_sums(tmp)
    os.rename(tmp, output_dir)
    record["sums_sha256"] = shipped.file_sha256(os.path.join(output_dir, shipped.SUMS_FILE))
    return record


def write_sums(folder: str) -> str:
    """Writes SHA256SUMS (sha256sum's format) of every file in `folder`; returns its own
    sha256, the value `shipped.SHIPPED` records."""
    names = sorted(n for n in os.listdir(folder) if n != shipped.SUMS_FILE)
    for n in names:
        os.chmod(os.path.join(folder, n), 0o644)  # safetensors writes 0600
    path = os.path.join(folder, shipped.SUMS_FILE)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"{shipped.file_sha256(os.path.join(folder, n))}  {n}\n" for n in names)
    return shipped.file_sha256(path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parses the flags and writes the release folder; prints the SHA256SUMS sha256."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run_dir", required=True, help="the finished pretraining run's folder")
    p.add_argument("--output_dir", required=True, help="the release folder to create")
    p.add_argument("--name", default="tfbert-chinese", help="the model's name")
    p.add_argument("--command", required=True, help="the command that made the run")
    p.add_argument("--wall_seconds", type=float, required=True,
                   help="the run's wall time, data building included")
    args = p.parse_args(argv)
    record = release(args.run_dir, args.output_dir, args.name, args.command, args.wall_seconds)
    print(json.dumps({"output_dir": args.output_dir, "sums_sha256": record["sums_sha256"],
                      "tokens_per_second": record["tokens_per_second"]}))
    return record


if __name__ == "__main__":
    run_cli(main)
