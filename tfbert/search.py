"""Semantic search over a text file: embed every line once into an index on disk, then answer
queries by cosine similarity; with a QA model, read the answer out of the passages found
(retrieve, then read).

    python -m tfbert.search index --model_dir=MODEL --input_file=passages.txt --index_dir=idx
    python -m tfbert.search query --index_dir=idx --query="..." --top_k=5 \\
        [--qa_export_dir=saved_models/qa/1]

An index folder holds `vectors.npy` (float32 [N, D], unit rows, written through a numpy memmap so
a corpus larger than memory streams to disk), `passages.jsonl` ({"line", "text"} per non-blank
line of the input, in order) and `index.json` (the model, the input file, counts). It is written
under a temporary name and renamed into place when complete; an existing `index_dir` is refused.
The embedding model is any directory tfbert reads as a `BertSentenceEncoder` (a
sentence-transformers directory, an embedding run's model/). The reader is a QA SavedModel
exported by `python -m tfbert.export` (its serving_default takes question and context); the
answer kept is the one with the highest score among the top passages.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from tfbert import textfiles
from tfbert.errors import UserError, run_cli
from tfbert.fileio import json_text, write_json

logger = logging.getLogger(__name__)

VECTORS, PASSAGES, RECORD = "vectors.npy", "passages.jsonl", "index.json"


def load_encoder(model_dir: str) -> tuple[Any, Any]:
    """(BertSentenceEncoder, BertPreprocessor at its max_seq_length and casing) of a model
    directory; UserError when it holds another kind of model."""
    # TensorFlow and the models load when an index is built or queried, not on `--help`.
    from tfbert import checkpoints
    from tfbert.models.pretrained import from_pretrained
    from tfbert.models.sentence_encoder import BertSentenceEncoder
    from tfbert.text.preprocessor import BertPreprocessor

    if checkpoints.detect_format(model_dir) == "tfbert":
        metadata, model = checkpoints.read_metadata(model_dir), checkpoints.load_model(model_dir)
    else:
        checkpoint = checkpoints.read_checkpoint(model_dir)
        metadata, model = checkpoint.metadata or {}, from_pretrained(checkpoint)
    if not isinstance(model, BertSentenceEncoder):
        raise UserError(f"{model_dir}: a {type(model).__name__}, not a sentence encoder (a "
                        "sentence-transformers directory or an embedding run's model/)")
    vocab_file = os.path.join(model_dir, "vocab.txt")
    textfiles.check_file(vocab_file, "vocab file")
    seq_length = int(metadata.get("max_seq_length", 128))
    lower_case = bool(metadata.get("lower_case", model.encoder.config.lower_case))
    return model, BertPreprocessor(vocab_file, seq_length, lower_case=lower_case)


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)


def embed(model: Any, preprocessor: Any, texts: Sequence[str], batch_size: int = 256,
          progress: bool = False) -> np.ndarray:
    """Unit-length embeddings [N, D] float32 of `texts`, `batch_size` at a time."""
    import tensorflow as tf

    out = []
    for i in tqdm(range(0, len(texts), batch_size), disable=not progress, unit="batch"):
        batch = preprocessor(tf.constant(list(texts[i:i + batch_size])))
        out.append(_unit_rows(np.asarray(model(batch, training=False), np.float32)))
    return np.concatenate(out) if out else np.zeros((0, 0), np.float32)


def build_index(model_dir: str, input_file: str, index_dir: str, batch_size: int = 256,
                encoding: str = textfiles.DEFAULT_ENCODING, progress: bool = True
                ) -> dict[str, Any]:
    """Embeds every non-blank line of `input_file` into a new index folder; returns index.json.

    Raises:
        UserError: index_dir exists, the input has no text, or the model is no sentence encoder.
    """
    if os.path.lexists(index_dir):
        raise UserError(f"{index_dir} exists; the index is written to a new folder (remove it "
                        "or give another --index_dir)")
    passages = [(n, line.rstrip("\r\n")) for n, line in
                enumerate(textfiles.read_lines(input_file, encoding), 1) if line.strip()]
    if not passages:
        raise UserError(f"{input_file}: no non-blank line to index")
    model, preprocessor = load_encoder(model_dir)
    parent = os.path.dirname(os.path.abspath(index_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(index_dir)}.tmp-", dir=parent)
    try:
        start = time.perf_counter()
        vectors = None
        for i in tqdm(range(0, len(passages), batch_size), disable=not progress, unit="batch",
                      desc="embedding"):
            chunk = embed(model, preprocessor, [t for _, t in passages[i:i + batch_size]],
                          batch_size)
            if vectors is None:
                vectors = np.lib.format.open_memmap(os.path.join(staging, VECTORS), mode="w+",
                                                    dtype=np.float32,
                                                    shape=(len(passages), chunk.shape[1]))
            vectors[i:i + len(chunk)] = chunk
        vectors.flush()
        dim = int(vectors.shape[1])
        del vectors
        with open(os.path.join(staging, PASSAGES), "w", encoding="utf-8") as f:
            f.writelines(json_text({"line": n, "text": t}, ensure_ascii=False) + "\n"
                         for n, t in passages)
        record = {"model_dir": os.path.abspath(model_dir),
                  "input_file": os.path.abspath(input_file), "passages": len(passages),
                  "dim": dim, "seconds": round(time.perf_counter() - start, 3)}
        write_json(os.path.join(staging, RECORD), record)
        os.rename(staging, index_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info("indexed %d passages of %s in %.1f s: %s", len(passages), input_file,
                record["seconds"], index_dir)
    return record


@dataclasses.dataclass
class Index:
    """An index folder opened for queries (its vectors memory-mapped)."""

    directory: str
    vectors: np.ndarray
    passages: list[dict[str, Any]]
    record: dict[str, Any]
    model: Any = None
    preprocessor: Any = None

    @classmethod
    def open(cls, directory: str, model_dir: str | None = None) -> Index:
        """The index in `directory`, with its model (or `model_dir`'s) for the queries."""
        record_path = os.path.join(directory, RECORD)
        if not os.path.isfile(record_path):
            raise UserError(f"{directory}: no {RECORD}; not an index written by "
                            "`python -m tfbert.search index`")
        with open(record_path, encoding="utf-8") as f:
            record = json.load(f)
        with open(os.path.join(directory, PASSAGES), encoding="utf-8") as f:
            passages = [json.loads(line) for line in f]
        vectors = np.load(os.path.join(directory, VECTORS), mmap_mode="r")
        model, preprocessor = load_encoder(model_dir or record["model_dir"])
        return cls(directory, vectors, passages, record, model, preprocessor)

    def search(self, queries: Sequence[str], top_k: int = 10) -> list[list[dict[str, Any]]]:
        """Per query, the `top_k` passages by cosine: {"score", "line", "text"}, best first."""
        from tfbert.evaluation.retrieval import vector_rankings

        q = embed(self.model, self.preprocessor, queries)
        ranked = vector_rankings(q, self.vectors, k=top_k)
        return [[{"score": float(np.dot(q[i], self.vectors[j])), **self.passages[j]}
                 for j in row] for i, row in enumerate(ranked)]


def read_answer(question: str, hits: Sequence[dict[str, Any]], qa_export_dir: str
                ) -> dict[str, Any]:
    """The best answer the QA SavedModel reads from the passages found: {"answer", "score",
    "line", "passage"} (answer "" when no passage holds one)."""
    import tensorflow as tf

    serving = tf.saved_model.load(qa_export_dir).signatures["serving_default"]
    out = serving(text=tf.constant([question] * len(hits)),
                  text_b=tf.constant([h["text"] for h in hits]))
    scores, answers = out["score"].numpy(), out["answer_text"].numpy()
    best = int(np.argmax(scores))
    return {"answer": answers[best].decode("utf-8"), "score": float(scores[best]),
            "line": hits[best]["line"], "passage": hits[best]["text"]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfbert.search", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    index = commands.add_parser("index", help="embed a text file into a new index folder")
    index.add_argument("--model_dir", required=True, help="the sentence encoder")
    index.add_argument("--input_file", required=True, help="one passage per line")
    index.add_argument("--index_dir", required=True, help="the new index folder")
    index.add_argument("--batch_size", type=int, default=256, help="texts per batch (256)")
    index.add_argument("--input_encoding", default=textfiles.DEFAULT_ENCODING,
                       help="the input file's encoding (utf-8)")
    query = commands.add_parser("query", help="the passages nearest each query")
    query.add_argument("--index_dir", required=True)
    query.add_argument("--query", action="append", required=True, help="repeat for several")
    query.add_argument("--top_k", type=int, default=5, help="passages per query (5)")
    query.add_argument("--qa_export_dir", help="a QA SavedModel: read an answer from them")
    args = parser.parse_args(argv)

    def run() -> int:
        if args.command == "index":
            print(json_text(build_index(args.model_dir, args.input_file, args.index_dir,
                                        args.batch_size, args.input_encoding), indent=2))
            return 0
        opened = Index.open(args.index_dir)
        for question, hits in zip(args.query, opened.search(args.query, args.top_k),
                                  strict=True):
            result: dict[str, Any] = {"query": question, "passages": hits}
            if args.qa_export_dir:
                result["answer"] = read_answer(question, hits, args.qa_export_dir)
            print(json_text(result, indent=2, ensure_ascii=False))
        return 0

    return run_cli(run, prog="python -m tfbert.search")


if __name__ == "__main__":
    sys.exit(main())
