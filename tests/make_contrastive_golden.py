"""Makes tests/data/contrastive_golden.npz: sentence-transformers' own loss values on fixed
embeddings, the reference tests/test_contrastive.py holds tfbert's losses to.

Needs sentence-transformers and torch (CPU), not tfbert; run from the repo root with such an
environment, e.g.

    python -m venv /tmp/stenv && /tmp/stenv/bin/pip install torch sentence-transformers
    /tmp/stenv/bin/python tests/make_contrastive_golden.py

For seeded random embeddings (8 anchors, 8 positives, 8 hard negatives, dimension 16) and scores
with ties it records MultipleNegativesRankingLoss (with and without the negatives),
the symmetric form (MultipleNegativesRankingLoss with directions query_to_doc and doc_to_query,
partition_mode per_direction: MultipleNegativesSymmetricRankingLoss), CoSENTLoss and
CosineSimilarityLoss, each called through `compute_loss_from_embeddings` with its default scale,
and the versions that made them.
"""

from __future__ import annotations

import os

import numpy as np
import sentence_transformers
import torch
from sentence_transformers.sentence_transformer import losses

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "contrastive_golden.npz")


def main() -> None:
    rng = np.random.default_rng(7)
    anchors, positives, negatives = (rng.normal(size=(8, 16)).astype(np.float32)
                                     for _ in range(3))
    positives = (anchors + 0.8 * positives).astype(np.float32)  # related, not equal
    scores = np.array([0.0, 1.0, 2.5, 2.5, 4.0, 5.0, 1.0, 3.2], np.float32)
    cosine_targets = (scores / 5.0).astype(np.float32)
    t = torch.from_numpy

    def value(loss, embeddings, labels=None):
        with torch.no_grad():
            return float(loss.compute_loss_from_embeddings([t(e) for e in embeddings],
                                                           labels))

    model = None  # the losses' model is used only by forward(), not from embeddings
    mnrl = losses.MultipleNegativesRankingLoss(model)
    out = {
        "anchors": anchors, "positives": positives, "negatives": negatives, "scores": scores,
        "cosine_targets": cosine_targets,
        "mnrl": value(mnrl, [anchors, positives], t(np.arange(8))),
        "mnrl_negatives": value(mnrl, [anchors, positives, negatives], t(np.arange(8))),
        "mnrl_symmetric": value(losses.MultipleNegativesRankingLoss(
            model, directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction"),
            [anchors, positives], t(np.arange(8))),
        "cosent": value(losses.CoSENTLoss(model), [anchors, positives], t(scores)),
        "cosine": value(losses.CosineSimilarityLoss(model), [anchors, positives],
                        t(cosine_targets)),
        "versions": np.array([f"sentence-transformers {sentence_transformers.__version__}",
                              f"torch {torch.__version__}"]),
    }
    np.savez(OUT, **out)
    print({k: v for k, v in out.items() if np.ndim(v) == 0})


if __name__ == "__main__":
    main()
