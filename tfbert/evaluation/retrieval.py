"""Retrieval scores: rank a corpus for each query, then recall@k, MRR@10 and nDCG@10.

A ranking is, per query, the corpus indices best first; `relevant` is, per query, the set of
corpus indices that answer it (binary relevance). The definitions are BEIR's (as
sentence-transformers' InformationRetrievalEvaluator computes them):

    recall@k   |relevant ∩ top k| / |relevant|, averaged over queries
    MRR@10     1 / rank of the first relevant passage in the top 10 (0 if none), averaged
    nDCG@10    sum over the top 10 of rel_i / log2(i + 1), divided by the same sum for the ideal
               ranking (all relevant passages first), averaged

`bm25_rankings` is the lexical baseline every embedding score is reported beside: Okapi BM25
(the `bm25s` package, Lucene's variant, k1 = 1.5, b = 0.75) over `lexical_tokens`.

Example:
>>> scores = retrieval_metrics([[2, 0, 1], [1, 2, 0]], [{0}, {0, 2}], ks=(1, 2))
>>> scores["recall@1"], scores["recall@2"], round(scores["mrr@10"], 4)
(0.0, 0.75, 0.5)
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

KS = (1, 5, 10)
# A CJK character (ideographs, extension A, compatibility ideographs) or a run of other word
# characters.
_TOKEN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[^\W\u3400-\u4dbf\u4e00-\u9fff"
                    r"\uf900-\ufaff]+")


def lexical_tokens(text: str) -> list[str]:
    """BM25's terms of a text: lower-cased words, and for Chinese each character and each pair
    of adjacent characters (Chinese has no spaces; character bigrams are the usual index terms
    for it, and unigrams keep one-character words)."""
    tokens = [t.lower() for t in _TOKEN.findall(text)]
    cjk = [len(t) == 1 and "\u3400" <= t <= "\ufaff" for t in tokens]
    bigrams = [a + b for a, b, x, y in zip(tokens, tokens[1:], cjk, cjk[1:], strict=False)
               if x and y]
    return tokens + bigrams


def bm25_rankings(queries: Sequence[str], corpus: Sequence[str], k: int = 10) -> np.ndarray:
    """The top `k` corpus indices [Q, k] for each query by BM25 (ties in corpus order)."""
    import bm25s  # the retrieval baseline's own dependency: loaded only when it runs

    k = min(k, len(corpus))
    index = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    index.index([lexical_tokens(t) for t in corpus], show_progress=False)
    ranked, _ = index.retrieve([lexical_tokens(q) for q in queries], k=k, show_progress=False,
                               n_threads=1)
    return np.asarray(ranked, np.int64)


def vector_rankings(queries: np.ndarray, corpus: np.ndarray, k: int = 10,
                    chunk: int = 1024) -> np.ndarray:
    """The top `k` corpus indices [Q, k] for each query vector by dot product (cosine for
    normalised vectors), computed `chunk` queries at a time; ties in corpus order."""
    queries, corpus = np.asarray(queries, np.float32), np.asarray(corpus, np.float32)
    k = min(k, len(corpus))
    out = np.empty((len(queries), k), np.int64)
    for i in range(0, len(queries), chunk):
        scores = queries[i:i + chunk] @ corpus.T  # [q, N]
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        order = np.lexsort((top, -np.take_along_axis(scores, top, 1)), axis=1)
        out[i:i + chunk] = np.take_along_axis(top, order, 1)
    return out


def retrieval_metrics(rankings: Sequence[Sequence[int]], relevant: Sequence[set[int]],
                      ks: Sequence[int] = KS) -> dict[str, float]:
    """recall@k for each k, MRR@10, nDCG@10 and the number of queries (module docstring).

    Raises:
        ValueError: rankings and relevant differ in length, or a query has no relevant index.
    """
    if len(rankings) != len(relevant):
        raise ValueError(f"{len(rankings)} rankings for {len(relevant)} queries")
    recall = {k: 0.0 for k in ks}
    mrr = ndcg = 0.0
    for ranked, wanted in zip(rankings, relevant, strict=True):
        if not wanted:
            raise ValueError("a query without a relevant passage cannot be scored")
        ranked = [int(i) for i in ranked]
        hits = [i in wanted for i in ranked]
        for k in ks:
            recall[k] += sum(hits[:k]) / len(wanted)
        first = next((r for r, hit in enumerate(hits[:10], 1) if hit), None)
        mrr += 1.0 / first if first else 0.0
        dcg = sum(1.0 / math.log2(r + 1) for r, hit in enumerate(hits[:10], 1) if hit)
        ideal = sum(1.0 / math.log2(r + 1) for r in range(1, min(len(wanted), 10) + 1))
        ndcg += dcg / ideal
    n = len(rankings)
    scores = {f"recall@{k}": recall[k] / n for k in ks}
    scores.update({"mrr@10": mrr / n, "ndcg@10": ndcg / n, "num_queries": n})
    return scores
