"""Retrieval scores (tfbert/evaluation/retrieval.py): nDCG@10 against scikit-learn's, recall@k
and MRR@10 on rankings worked by hand, vector top-k against a full sort, and the BM25 baseline."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import ndcg_score

from tfbert.evaluation.retrieval import (
    bm25_rankings,
    lexical_tokens,
    retrieval_metrics,
    vector_rankings,
)


def test_ndcg_equals_scikit_learns_and_top_k_equals_a_full_sort():
    rng = np.random.default_rng(0)
    queries, corpus = rng.normal(size=(40, 16)), rng.normal(size=(300, 16))
    scores = queries @ corpus.T
    ranked = vector_rankings(queries, corpus, k=10, chunk=7)  # several chunks
    np.testing.assert_array_equal(ranked, np.argsort(-scores, axis=1, kind="stable")[:, :10])
    relevant = [set(rng.choice(300, size=int(rng.integers(1, 12)), replace=False).tolist())
                for _ in range(40)]
    truth = np.zeros_like(scores)
    for i, wanted in enumerate(relevant):
        truth[i, sorted(wanted)] = 1
    got = retrieval_metrics(ranked, relevant)
    assert got["ndcg@10"] == pytest.approx(ndcg_score(truth, scores, k=10), abs=1e-12)
    assert got["num_queries"] == 40


def test_recall_and_mrr_by_hand():
    got = retrieval_metrics([[5, 1, 2, 3], [7, 8, 9, 4], [0, 1, 2, 3]],
                            [{1, 3}, {4}, {9}], ks=(1, 2, 4))
    # query 1: hits at ranks 2 and 4; query 2: rank 4; query 3: none in the ranking
    assert got["recall@1"] == 0.0
    assert got["recall@2"] == pytest.approx((0.5 + 0 + 0) / 3)
    assert got["recall@4"] == pytest.approx((1.0 + 1.0 + 0) / 3)
    assert got["mrr@10"] == pytest.approx((1 / 2 + 1 / 4 + 0) / 3)
    with pytest.raises(ValueError, match="without a relevant passage"):
        retrieval_metrics([[0]], [set()])


def test_lexical_tokens_and_bm25():
    assert lexical_tokens("北京天气 Is GOOD") == ["北", "京", "天", "气", "is", "good", "北京",
                                                  "京天", "天气"]
    corpus = ["上海经济发展很快", "北京的天气很好", "the cat sat on the mat", "北京新闻报道"]
    ranked = bm25_rankings(["北京天气", "a cat on a mat", "经济"], corpus, k=2)
    assert ranked.shape == (3, 2)
    assert ranked[0, 0] == 1 and ranked[0, 1] == 3  # both hold 北京; only one holds 天气
    assert ranked[1, 0] == 2 and ranked[2, 0] == 0
