"""NER tags (BIO and BIOES): a tag's parts, and the entities a sentence's tags spell.

Chunks are read the way conlleval (CoNLL-2000's perl script) and seqeval's default mode read them:
an `I-X` after `O` or after another type starts a new entity, a change of type ends one, and
`E-`/`S-` close an entity in BIOES.

Tags are strings: "O", or a prefix in B/I/E/S, a dash and a type ("B-PER", "S-LOC").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

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


def spread(tag: str, count: int) -> list[str]:
    """The tags of `count` tokens that one tag covers as one entity (a word piece tagged `tag`
    over several characters): ("B-PER", 3) -> B-PER I-PER I-PER, ("S-PER", 3) -> B-PER I-PER
    E-PER."""
    if count == 1 or tag == "O":
        return [tag] * count
    prefix, entity = split_tag(tag)
    first = {"B": "B", "I": "I", "E": "I", "S": "B"}[prefix]
    last = {"B": "I", "I": "I", "E": "E", "S": "E"}[prefix]
    return [f"{first}-{entity}"] + [f"I-{entity}"] * (count - 2) + [f"{last}-{entity}"]
