"""Cloze questions about People's Daily's named entities: the text of the built-in QA set.

The context is a paragraph (one line of the file), the question the clause around one entity
with the entity replaced by 谁 / 哪里 / 哪个机构, the answer the entity with its character offset;
one question per paragraph of 20-400 characters, deterministic. `tfbert.data.qa_builtin` splits
them into train/dev/test; `tfbert.data.splits` reads the questions with their paragraphs, since
questions of different paragraphs can share a run of characters.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence

from tfbert.data import corpora

_ENTITY_TAGS = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
WH_WORDS = {"PER": "谁", "LOC": "哪里", "ORG": "哪个机构"}
_CLAUSE_BREAKS = set("，,；;：:。！？!?")
_SENTENCE_BREAKS = set("。！？!?")
_TRIM = "，,；;：:。！？!?、“”‘’\"'（）()《》「」『』—… \u3000"
_MIN_QUESTION_CHARS = 6  # clause characters besides the entity
_MAX_SIDE_CHARS = 24  # question characters kept on each side of the entity
_MIN_PARAGRAPH, _MAX_PARAGRAPH = 20, 400  # characters


def paragraph_entities(pairs: Sequence[tuple[str, str]]) -> tuple[str, list[tuple[int, int, str]]]:
    """Plain text of a tagged paragraph and its entities as (start, end, type) character spans.

    A short `nr` word followed directly by another `nr` word (surname, given name: 江/nr 泽民/nr)
    is one person; a run like 江/nr 泽民/nr 李/nr 鹏/nr is two. A bracketed compound such as
    `[中央/n 人民/n 广播/vn 电台/n]nt` (first word starting with "[", last tag "n]nt") is one entity
    of its outer tag, and the entities inside it are not counted separately.
    """
    text: list[str] = []
    pos = 0
    entities: list[tuple[int, int, str]] = []
    compound_start: int | None = None
    compound_entities: list[tuple[int, int, str]] = []
    surname_end: int | None = None  # end of a lone `nr` word that a given name may follow
    for word, tag in pairs:
        if word.startswith("[") and len(word) > 1:
            compound_start, compound_entities, surname_end = pos, [], None
            word = word[1:]
        inner, _, outer = tag.partition("]")
        start, pos = pos, pos + len(word)
        text.append(word)
        target = compound_entities if compound_start is not None else entities
        kind = _ENTITY_TAGS.get(inner)
        if kind == "PER" and surname_end == start:
            target[-1] = (target[-1][0], pos, "PER")  # surname + given name
            surname_end = None
        elif kind:
            target.append((start, pos, kind))
            # A one- or two-character `nr` word may be a surname that the next `nr` completes.
            surname_end = pos if kind == "PER" and len(word) <= 2 else None
        else:
            surname_end = None
        if outer and compound_start is not None:
            if outer in _ENTITY_TAGS:
                entities.append((compound_start, pos, _ENTITY_TAGS[outer]))
            else:
                entities.extend(compound_entities)
            compound_start, surname_end = None, None
    if compound_start is not None:  # an unclosed bracket: keep what was inside
        entities.extend(compound_entities)
    return "".join(text), entities


def cloze_question(paragraph: str, start: int, end: int, kind: str) -> str:
    """The clause around paragraph[start:end] with the entity replaced by its question word.

    The clause runs between clause punctuation (，；：。！？), widened to neighbouring clauses of
    the same sentence while it has fewer than 6 characters besides the entity, and cut to 24
    characters on each side of the entity.
    """
    n = len(paragraph)

    def left_break(i: int) -> int:  # start of the clause holding position i - 1
        while i > 0 and paragraph[i - 1] not in _CLAUSE_BREAKS:
            i -= 1
        return i

    def right_break(i: int) -> int:  # index of the clause break at or after i
        while i < n and paragraph[i] not in _CLAUSE_BREAKS:
            i += 1
        return i

    left, right = left_break(start), right_break(end)
    while (right - left) - (end - start) < _MIN_QUESTION_CHARS:
        if right < n and paragraph[right] not in _SENTENCE_BREAKS:
            right = right_break(right + 1)
        elif left > 0 and paragraph[left - 1] not in _SENTENCE_BREAKS:
            left = left_break(left - 1)
        else:
            break
    left, right = max(left, start - _MAX_SIDE_CHARS), min(right, end + _MAX_SIDE_CHARS)
    before = paragraph[left:start].lstrip(_TRIM)
    after = paragraph[end:right].rstrip(_TRIM)
    return before + WH_WORDS[kind] + after + "？"


def hash_int(text: str) -> int:
    return int.from_bytes(hashlib.md5(text.encode("utf-8")).digest()[:8], "big")


@functools.lru_cache(maxsize=1)
def cloze_questions() -> tuple[tuple[str, str, str, str, int, int], ...]:
    """(id, question, paragraph, answer, answer_start, line): one cloze question per eligible
    People's Daily paragraph (20-400 characters, first occurrence), in file order; `line`
    indexes `corpora.people_daily_lines()`."""
    out = []
    seen: set[str] = set()
    for line, pairs in enumerate(corpora.people_daily_tagged()):
        paragraph, entities = paragraph_entities(pairs)
        if not (_MIN_PARAGRAPH <= len(paragraph) <= _MAX_PARAGRAPH) or paragraph in seen:
            continue
        seen.add(paragraph)
        questions = []
        for start, end, kind in entities:
            if end - start < 2:
                continue
            question = cloze_question(paragraph, start, end, kind)
            if len(question) - len(WH_WORDS[kind]) - 1 >= 4:
                questions.append((start, end, question))
        if questions:
            start, end, question = questions[hash_int(paragraph) % len(questions)]
            out.append((f"pd{line:05d}", question, paragraph, paragraph[start:end], start,
                        line))
    return tuple(out)
