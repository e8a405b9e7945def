"""Train/dev/test splits of the built-in tasks that keep near-copies together.

The rule: two texts that share a run of `NEAR_COPY_CHARS` (12) or more characters, whitespace
removed, are near-copies, and near-copies are chained into groups (if A shares a run with B and
B with C, A, B and C are one group). A whole group goes to one split, by a stable hash of its
first text (`corpora.stable_split`: 10% dev, 10% test). A group holding more than
`MAX_HELD_OUT_GROUP_SHARE` of all texts goes to train: such a group is chained by shared
phrases (long organisation names, wire-service bylines) rather than by copies, and as a
held-out split it would be one topic.

Why: the built-in texts repeat themselves. Reviews come in templates ("优点：... 缺点：...") and
near-copies of one review; People's Daily repeats bylines, titles and whole sentences across
articles. Split by a hash of each text alone, 1.1% of the dev/test texts shared a 12-character
run with a training text of the same task, so part of every dev/test score was memorisation.
Under this rule no dev/test text shares such a run with any training text, of its task or of
another built-in task, and the built-in pretraining corpus (`pretraining_documents`) is made of
training texts only, so it holds no dev/test text either (tests/test_splits.py counts both).

The units are the texts the built-in tasks are made of: each deduplicated review
(`corpora.reviews`) and each People's Daily line, a paragraph (`corpora.people_daily_lines`;
NER sentences, the QA paragraphs and the headline/lead pairs are cut from lines, and each takes
its line's split). An article's headline lines and its lead line are one group as well, since
the retrieval task pairs them.

    split = splits.review_split("这本书很好看")        # "train", "dev" or "test"
    line_splits = splits.people_daily_line_splits()  # one per corpora.people_daily_lines()
    docs = splits.pretraining_documents()            # the clean pretraining corpus
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Sequence

from tfbert.data import corpora, qa_cloze

NEAR_COPY_CHARS = 12
MAX_HELD_OUT_GROUP_SHARE = 0.01
_WHITESPACE = re.compile(r"\s+")


def near_copy_groups(texts: Sequence[str], extra_links: Iterable[tuple[int, int]] = (),
                     min_chars: int = NEAR_COPY_CHARS) -> list[int]:
    """The group of each text: texts sharing a run of `min_chars` characters (whitespace
    removed), chained, identical texts, and pairs in `extra_links`, are one group.

    Args:
        texts: sequence of str.
        extra_links: (i, j) index pairs that belong together whatever their text.
        min_chars: int. The shortest shared run that joins two texts.

    Returns:
        A list of group ids, one per text: the smallest index of the text's group.
    """
    parent = list(range(len(texts)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(i: int, j: int) -> None:
        a, b = root(i), root(j)
        if a != b:
            parent[max(a, b)] = min(a, b)

    first_seen: dict[str, int] = {}
    for i, text in enumerate(texts):
        flat = _WHITESPACE.sub("", text)
        # A text shorter than the run joins the texts identical to it.
        pieces = ((flat[s:s + min_chars] for s in range(len(flat) - min_chars + 1))
                  if len(flat) >= min_chars else (flat,) if flat else ())
        for piece in pieces:
            j = first_seen.setdefault(piece, i)
            if j != i:
                join(i, j)
    for i, j in extra_links:
        join(i, j)
    return [root(i) for i in range(len(texts))]


def group_splits(texts: Sequence[str], groups: Sequence[int],
                 max_group_share: float = MAX_HELD_OUT_GROUP_SHARE) -> list[str]:
    """The split of each text under the module's rule, given its group (`near_copy_groups`):
    a group's split is `corpora.stable_split` of its first text, and a group holding more than
    `max_group_share` of the texts is train."""
    sizes: dict[int, int] = {}
    for g in groups:
        sizes[g] = sizes.get(g, 0) + 1
    limit = max_group_share * len(texts)
    by_group = {g: "train" if n > limit else corpora.stable_split(texts[g])
                for g, n in sizes.items()}
    return [by_group[g] for g in groups]


@functools.lru_cache(maxsize=1)
def _unit_splits() -> tuple[tuple[str, ...], dict[str, str]]:
    lines = corpora.people_daily_lines()
    reviews = [text for text, _ in corpora.reviews()]
    links = [(head, lead) for heads, lead in corpora.people_daily_article_heads()
             for head in heads]
    # A line's unit holds its cloze question too: questions of two paragraphs can share a run
    # ("谁在人民大会堂会见了...") that their paragraphs do not.
    units = list(lines)
    for _, question, _, _, _, line in qa_cloze.cloze_questions():
        units[line] += "\n" + question
    units += reviews
    split = group_splits(units, near_copy_groups(units, links))
    return tuple(split[:len(lines)]), dict(zip(reviews, split[len(lines):], strict=True))


def people_daily_line_splits() -> tuple[str, ...]:
    """The split of each People's Daily line (`corpora.people_daily_lines()`, same order)."""
    return _unit_splits()[0]


def review_split(text: str) -> str:
    """The split of a built-in review (a text of `corpora.reviews()`)."""
    splits = _unit_splits()[1]
    if text not in splits:
        raise KeyError(f"not a built-in review: {text[:40]!r}")
    return splits[text]


def pretraining_documents() -> list[list[str]]:
    """The built-in pretraining corpus: documents of sentences made of training texts only.

    People's Daily articles (`corpora.people_daily_documents`'s article rule) keep their
    training lines; each training review is a document. No dev/test text of a built-in task,
    nor a text sharing a 12-character run with one, is in it. The text the sentiment and NER
    tasks train on stays in: pretraining on a task's own unlabelled text is task-adaptive
    pretraining (Gururangan et al., 2020).
    """
    line_splits = people_daily_line_splits()
    documents = []
    for article in corpora.people_daily_articles():
        doc = [s for i in article if line_splits[i] == "train"
               for s in corpora.split_sentences(corpora.people_daily_lines()[i])]
        if doc:
            documents.append(doc)
    review_splits = _unit_splits()[1]
    for text, _ in corpora.reviews():
        if review_splits[text] == "train":
            doc = corpora.split_sentences(text)
            if doc:
                documents.append(doc)
    return documents


def corpus_text(documents: Sequence[Sequence[str]]) -> str:
    """Documents in google-research/bert's text format: a sentence a line, a blank line after
    each document. The exact text whose sha256 a model pretrained on it records."""
    return "".join("".join(f"{s}\n" for s in doc) + "\n" for doc in documents)


def corpus_sha256(documents: Sequence[Sequence[str]]) -> str:
    """sha256 (hex) of `corpus_text(documents)` encoded as UTF-8."""
    return hashlib.sha256(corpus_text(documents).encode("utf-8")).hexdigest()
