"""Task data the task tests share: small inputs a tiny model learns in a few steps."""

from __future__ import annotations

import numpy as np


def learnable_conll_lines() -> list[str]:
    """CoNLL lines (token<TAB>tag, a blank line after each of 96 sentences) a tiny model learns:
    "bert" is always an ORG, "model c" always a LOC, among 6 filler tokens (9 tokens each)."""
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(96):
        sentence = list(rng.choice(["the", "a", "b"], size=6))
        sentence.insert(int(rng.integers(0, 6)), "bert")
        position = int(rng.integers(0, 6))
        sentence[position:position] = ["model", "c"]
        tags = ["O"] * len(sentence)
        for i, w in enumerate(sentence):
            if w == "bert":
                tags[i] = "B-ORG"
            elif w == "model":
                tags[i], tags[i + 1] = "B-LOC", "I-LOC"
        lines += [f"{w}\t{t}" for w, t in zip(sentence, tags, strict=True)] + [""]
    return lines
