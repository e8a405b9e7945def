"""Entity-level NER metrics (exact match) and span decoding for BIO and BIOES tags.

Chunks are read the way conlleval (CoNLL-2000's perl script) and seqeval's default mode read them,
so the numbers match both: an `I-X` after `O` or after another type starts a new entity, a change
of type ends one, and `E-`/`S-` close an entity in BIOES. An entity counts as correct only when
its type, first and last token all match a gold entity.

Tags are strings: "O", or a prefix in B/I/E/S, a dash and a type ("B-PER", "S-LOC").
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any, NamedTuple

from tfbert.evaluation.classification import f1_from_counts

PREFIXES = ("B", "I", "E", "S")


class Entity(NamedTuple):
    """One entity: its type and the inclusive range of tokens it covers."""

    type: str
    start: int  # first token
    end: int  # last token (inclusive, as conlleval/seqeval report it)


def split_tag(tag: str) -> tuple[str, str]:
    """("B", "PER") for "B-PER", ("O", "") for "O". Raises ValueError for anything else."""
    if tag == "O":
        return "O", ""
    prefix, dash, entity_type = tag.partition("-")
    if not dash or prefix not in PREFIXES or not entity_type:
        raise ValueError(f"invalid NER tag {tag!r}: expected 'O' or one of "
                         f"{'/'.join(PREFIXES)} + '-' + type, e.g. 'B-PER'")
    return prefix, entity_type


def _end_of_chunk(prev_prefix: str, prefix: str, prev_type: str, entity_type: str) -> bool:
    if prev_prefix in ("E", "S"):
        return True
    if prev_prefix in ("B", "I") and prefix in ("B", "S", "O"):
        return True
    return prev_prefix != "O" and prev_type != entity_type


def _start_of_chunk(prev_prefix: str, prefix: str, prev_type: str, entity_type: str) -> bool:
    if prefix in ("B", "S"):
        return True
    if prev_prefix in ("E", "S", "O") and prefix in ("E", "I"):
        return True
    return prefix != "O" and prev_type != entity_type


def get_entities(tags: Sequence[str]) -> list[Entity]:
    """Decodes one sentence's BIO or BIOES tags into entities (conlleval's chunk rules).

    Args:
        tags: sequence of str. One tag per token.

    Example:
    >>> get_entities(["B-PER", "I-PER", "O", "I-LOC", "S-ORG"])
    [Entity(type='PER', start=0, end=1), Entity(type='LOC', start=3, end=3), \
Entity(type='ORG', start=4, end=4)]
    """
    entities = []
    prev_prefix, prev_type, begin = "O", "", 0
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, entity_type = split_tag(tag)
        if _end_of_chunk(prev_prefix, prefix, prev_type, entity_type):
            entities.append(Entity(prev_type, begin, i - 1))
        if _start_of_chunk(prev_prefix, prefix, prev_type, entity_type):
            begin = i
        prev_prefix, prev_type = prefix, entity_type
    return entities


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
