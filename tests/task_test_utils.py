"""Task data the task tests share: small inputs a tiny model learns in a few steps."""

from __future__ import annotations

import numpy as np


def learnable_conll_lines(n: int = 96, seed: int = 0, longest: int | None = None
                          ) -> list[str]:
    """CoNLL lines of n sentences where "bert" is always an ORG and "model c" always a LOC,
    among 6 filler tokens (9 tokens each), or among 3 to `longest` of them (sentences of
    varied length; every token one word piece of the test vocab)."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n):
        size = 6 if longest is None else int(rng.integers(3, longest + 1))
        sentence = list(rng.choice(["the", "a", "b"], size=size))
        sentence.insert(int(rng.integers(0, size)), "bert")
        position = int(rng.integers(0, size))
        sentence[position:position] = ["model", "c"]
        tags = ["O"] * len(sentence)
        for i, w in enumerate(sentence):
            if w == "bert":
                tags[i] = "B-ORG"
            elif w == "model":
                tags[i], tags[i + 1] = "B-LOC", "I-LOC"
        lines += [f"{w}\t{t}" for w, t in zip(sentence, tags, strict=True)] + [""]
    return lines
