"""Entity-level NER metrics (exact match) and entities as character spans, for BIO and BIOES tags;
run_ner's test predictions (`write_predictions`).

Entities are decoded from tags by `tfbert.data.tags.get_entities` (conlleval's and seqeval's chunk
rules), so the numbers match both. An entity counts as correct only when its type, first and
last token all match a gold entity.
"""

from __future__ import annotations

import collections
import logging
import os
from collections.abc import Sequence
from typing import Any

from tfbert.data.ner import NerExample
from tfbert.data.tags import Entity, get_entities
from tfbert.evaluation.classification import f1_from_counts
from tfbert.fileio import json_text

logger = logging.getLogger(__name__)


def entity_metrics(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]
                   ) -> dict[str, Any]:
    """Entity-level precision, recall and F1 (exact match), overall and per entity type.

    Args:
        gold: sequence of tag sequences, one per sentence.
        predicted: sequence of tag sequences, same lengths as `gold`.

    Returns:
        {"precision", "recall", "f1", "num_gold", "num_predicted", "num_correct",
         "per_type": {type: {"precision", "recall", "f1", "support"}}}

    Example:
    >>> m = entity_metrics([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]])
    >>> m["f1"], m["num_correct"]
    (0.0, 0)
    """
    if len(gold) != len(predicted):
        raise ValueError(f"entity_metrics: {len(gold)} gold sentences but "
                         f"{len(predicted)} predicted")
    gold_set: set[tuple[int, Entity]] = set()
    pred_set: set[tuple[int, Entity]] = set()
    for i, (g, p) in enumerate(zip(gold, predicted, strict=True)):
        if len(g) != len(p):
            raise ValueError(f"entity_metrics: sentence {i} has {len(g)} gold tags but "
                             f"{len(p)} predicted tags")
        gold_set.update((i, e) for e in get_entities(g))
        pred_set.update((i, e) for e in get_entities(p))
    correct = gold_set & pred_set
    count = lambda items: collections.Counter(e.type for _, e in items)
    gold_by_type, pred_by_type, correct_by_type = count(gold_set), count(pred_set), count(correct)
    per_type = {
        t: {**f1_from_counts(correct_by_type[t], pred_by_type[t], gold_by_type[t]),
            "support": gold_by_type[t]}
        for t in sorted(set(gold_by_type) | set(pred_by_type))
    }
    return {**f1_from_counts(len(correct), len(pred_set), len(gold_set)),
            "num_gold": len(gold_set), "num_predicted": len(pred_set),
            "num_correct": len(correct), "per_type": per_type}


def entity_spans(tags: Sequence[str], offsets: Sequence[tuple[int, int]], text: str
                 ) -> list[dict[str, Any]]:
    """Maps one sentence's token tags to entities with character offsets into `text`.

    Args:
        tags: sequence of str. One tag per token.
        offsets: sequence of (start, end). Each token's characters in `text` (end exclusive).
        text: str. The sentence the offsets index.

    Returns:
        [{"type": str, "start": int, "end": int, "text": str}], end exclusive.

    Example:
    >>> entity_spans(["B-PER", "I-PER", "O"], [(0, 1), (1, 2), (2, 3)], "江泽民")
    [{'type': 'PER', 'start': 0, 'end': 2, 'text': '江泽'}]
    """
    if len(tags) != len(offsets):
        raise ValueError(f"entity_spans: {len(tags)} tags but {len(offsets)} token offsets")
    spans = []
    for e in get_entities(tags):
        start, end = offsets[e.start][0], offsets[e.end][1]
        spans.append({"type": e.type, "start": start, "end": end, "text": text[start:end]})
    return spans


def write_predictions(output_dir: str, examples: Sequence[NerExample],
                      predicted: Sequence[Sequence[str]]) -> None:
    """test_predictions.jsonl (entities with character offsets) and test_predictions.conll."""
    jsonl = os.path.join(output_dir, "test_predictions.jsonl")
    conll = os.path.join(output_dir, "test_predictions.conll")
    with open(jsonl, "w", encoding="utf-8") as fj, open(conll, "w", encoding="utf-8") as fc:
        for i, (example, tags) in enumerate(zip(examples, predicted, strict=True)):
            offsets, text = example.token_offsets(), example.text
            fj.write(json_text({"index": i, "text": text,
                                 "entities": entity_spans(tags, offsets, text),
                                 "gold_entities": entity_spans(example.tags, offsets, text)},
                                ensure_ascii=False) + "\n")
            for token, gold, pred in zip(example.tokens, example.tags, tags, strict=True):
                fc.write(f"{token}\t{gold}\t{pred}\n")
            fc.write("\n")
    logger.info("wrote %s and %s", jsonl, conll)
