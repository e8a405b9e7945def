"""Search at 10k and 100k passages: index time, query time and recall, beside BM25.

Queries: the built-in QA set's test questions (1,077); the relevant passage: each question's
paragraph. The corpus: the test paragraphs plus distractors up to N passages, taken from the
built-in corpus outside those paragraphs (People's Daily paragraphs, their sentences and runs of two
and three consecutive sentences, and the reviews), in a fixed shuffled order. Each N is indexed with
`tfbert.search.build_index` (the vectors on disk) and queried with `Index.search`; BM25 ranks
the same corpus (`tfbert.evaluation.retrieval.bm25_rankings`).

    python -m experiments.search_scale --model_dir=output/embedding_study/qa_default/model \\
        --sizes=10000,100000 --output=bench/results/search_scale-HOST-DATE.json
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

import numpy as np

from tfbert import search
from tfbert.data import corpora
from tfbert.data.qa_builtin import builtin_qa_examples
from tfbert.evaluation.retrieval import bm25_rankings, retrieval_metrics
from tfbert.fileio import write_json


def corpus(size: int, paragraphs: list[str], seed: int = 0) -> list[str]:
    """The test paragraphs and distractors up to `size` texts (module docstring)."""
    held = set(paragraphs)
    pool: dict[str, None] = {}
    for line in corpora.people_daily_lines():
        if line in held:
            continue
        sentences = corpora.split_sentences(line)
        runs = [sentences[i:i + n] for n in (2, 3) for i in range(len(sentences) - n + 1)]
        for text in [line, *sentences, *("".join(run) for run in runs)]:
            pool.setdefault(text, None)
    for text, _ in corpora.reviews():
        pool.setdefault(text, None)
    distractors = [t for t in pool if t not in held and t.strip()]
    order = np.random.default_rng(seed).permutation(len(distractors))
    needed = size - len(paragraphs)
    if needed > len(distractors):
        raise SystemExit(f"only {len(distractors)} distractors for size {size}")
    return paragraphs + [distractors[i] for i in order[:needed]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    if os.path.exists(args.output):
        raise SystemExit(f"{args.output} exists")
    examples = builtin_qa_examples("test")
    paragraphs = list(dict.fromkeys(e.context for e in examples))
    position = {p: i for i, p in enumerate(paragraphs)}
    queries = [e.question for e in examples]
    relevant = [{position[e.context]} for e in examples]
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        texts = corpus(size, paragraphs)
        with tempfile.TemporaryDirectory() as work:
            source = os.path.join(work, "passages.txt")
            with open(source, "w", encoding="utf-8") as f:
                f.write("\n".join(t.replace("\n", " ") for t in texts) + "\n")
            index_dir = os.path.join(work, "index")
            record = search.build_index(args.model_dir, source, index_dir, progress=False)
            opened = search.Index.open(index_dir)
            start = time.perf_counter()
            hits = opened.search(queries, top_k=10)
            query_seconds = time.perf_counter() - start
            lines = [[h["line"] - 1 for h in row] for row in hits]  # line n is texts[n - 1]
            start = time.perf_counter()
            bm25 = bm25_rankings(queries, texts)
            bm25_seconds = time.perf_counter() - start
        rows.append({"passages": size, "index_seconds": record["seconds"],
                     "passages_per_second": round(size / record["seconds"], 1),
                     "query_ms": round(1000 * query_seconds / len(queries), 3),
                     "model": retrieval_metrics(lines, relevant),
                     "bm25": retrieval_metrics(bm25, relevant),
                     "bm25_seconds": round(bm25_seconds, 3)})
        print(rows[-1], flush=True)
    write_json(args.output, {"model_dir": args.model_dir, "queries": len(queries),
                             "machine": platform.processor() or platform.machine(),
                             "rows": rows})


if __name__ == "__main__":
    main()
