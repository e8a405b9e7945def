"""The probe tasks' data: People's Daily characters with word position, POS and entity labels,
reviews with their sentiment, and the control tasks (Hewitt & Liang, 2019).

Probe-train is built from `people_daily_ner("dev")` and the sentiment task's dev reviews,
probe-test from the test splits: no built-in pretraining corpus holds either, and the two are
disjoint by construction (`tfbert.data.splits`).

Character tasks (one label per character of an NER sentence):

  segmentation  (lexical)    the character's place in its word: B (first of several), M
                             (inside), E (last), S (a one-character word)
  pos           (syntactic)  the first letter of its word's People's Daily POS tag, lower-cased:
                             `POS_NAMES` (so nr/ns/nt/nz/Ng are n, vn/vd/Vg are v, ...)
  entity        (semantic)   PER / LOC / ORG from the sentence's BIO tags, or O
  sentiment     (semantic)   one label per review: positive / negative

Words and POS come from `tfbert.data.corpora.people_daily_tagged()`: an NER example from source
"199801.txt:L" is a contiguous run of words of that list's item L-1 (brackets of compounds
such as `[中央/n 人民/n 广播/vn 电台/n]nt` stripped, the inner tags kept). A sentence that is
not found there, or does not start and end on word boundaries, is skipped and counted.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

import numpy as np

__all__ = ["CHAR_TASKS", "LEVELS", "POS_NAMES", "TASKS", "CharSentence", "TaskData",
           "char_sentences", "char_task_data", "control_labels", "hashed_labels", "metric_of",
           "sentiment_data", "word_labels"]

CHAR_TASKS = ("segmentation", "pos", "entity")
TASKS = (*CHAR_TASKS, "sentiment")
LEVELS = {"segmentation": "lexical", "pos": "syntactic", "entity": "semantic",
          "sentiment": "semantic"}
POS_NAMES = {
    "a": "adjective", "b": "distinguishing word", "c": "conjunction", "d": "adverb",
    "e": "interjection", "f": "locality word", "h": "prefix", "i": "idiom",
    "j": "abbreviation", "k": "suffix", "l": "fixed expression", "m": "numeral", "n": "noun",
    "o": "onomatopoeia", "p": "preposition", "q": "measure word", "r": "pronoun",
    "s": "place word", "t": "time word", "u": "auxiliary", "v": "verb", "w": "punctuation",
    "x": "other", "y": "modal particle", "z": "descriptive word"}
ENTITY_LABELS = ("O", "PER", "LOC", "ORG")


@dataclasses.dataclass(frozen=True)
class CharSentence:
    """One NER sentence: its text (one character per label) and the labels of each task."""

    text: str
    labels: dict[str, tuple[str, ...]]
    source: str = ""


@dataclasses.dataclass
class TaskData:
    """One task's labelled examples: per example (character or review) the int label, the
    label names, and for character tasks the character (the control task's unit)."""

    labels: np.ndarray  # int [n]
    names: list[str]
    units: list[str]  # the character of each example, or the review text


def metric_of(task: str, names: Sequence[str]) -> tuple[str, list[int]]:
    """A task's probe metric and the label ids it averages: "entity_macro_f1" over PER, LOC and
    ORG for the entity task, else "accuracy" (no classes).

    Example:
    >>> metric_of("entity", ENTITY_LABELS)
    ('entity_macro_f1', [1, 2, 3])
    """
    if task == "entity":
        return "entity_macro_f1", [list(names).index(c) for c in ENTITY_LABELS[1:]]
    return "accuracy", []


def word_labels(words: Sequence[tuple[str, str]]) -> tuple[str, list[str], list[str]]:
    """The text of a tagged line and, per character, its B/M/E/S position and POS letter.

    Args:
        words: (word, tag) pairs of `people_daily_tagged()`; "[" opens a compound and its last
            tag reads "inner]outer".

    Returns:
        (text, segmentation labels, pos labels), one label per character of text.

    Example:
    >>> word_labels([("[中央", "n"), ("电台", "n]nt"), ("说", "v")])
    ('中央电台说', ['B', 'E', 'B', 'E', 'S'], ['n', 'n', 'n', 'n', 'v'])
    """
    text, seg, pos = [], [], []
    for word, tag in words:
        if word.startswith("[") and len(word) > 1:
            word = word[1:]
        letter = tag.partition("]")[0][:1].lower()
        letter = letter if letter in POS_NAMES else "x"
        text.append(word)
        seg.extend(["S"] if len(word) == 1 else ["B"] + ["M"] * (len(word) - 2) + ["E"])
        pos.extend([letter] * len(word))
    return "".join(text), seg, pos


def char_sentences(split: str, limit: int | None = None) -> tuple[list[CharSentence], int]:
    """The first `limit` NER sentences of `split` that align with their tagged line.

    Args:
        split: str. "dev" (probe-train) or "test" (probe-test).
        limit: int or None. How many aligned sentences to keep (None: all).

    Returns:
        (sentences, how many were skipped because they did not align).
    """
    from tfbert.data import corpora
    from tfbert.data.ner.readers import people_daily_ner

    tagged = corpora.people_daily_tagged()
    lines: dict[int, tuple[str, list[str], list[str], set[int]]] = {}
    cursor: dict[int, int] = {}
    out, skipped = [], 0
    for example in people_daily_ner(split):
        if limit is not None and len(out) >= limit:
            break
        line = int(example.source.rpartition(":")[2])
        if line not in lines:
            text, seg, pos = word_labels(tagged[line - 1])
            lines[line] = (text, seg, pos, {i for i, s in enumerate(seg) if s in "BS"})
        text, seg, pos, starts = lines[line]
        sentence = example.text
        at = text.find(sentence, cursor.get(line, 0))
        if at < 0:
            at = text.find(sentence)
        end = at + len(sentence)
        if not sentence or at < 0 or at not in starts or (end < len(text) and end not in starts):
            skipped += 1
            continue
        cursor[line] = end
        entity = tuple(t.partition("-")[2] or "O" for t in example.tags)
        out.append(CharSentence(sentence, {"segmentation": tuple(seg[at:end]),
                                           "pos": tuple(pos[at:end]), "entity": entity},
                                example.source))
    return out, skipped


def char_task_data(sentences: Sequence[CharSentence], kept: Sequence[np.ndarray], task: str,
                   names: Sequence[str]) -> TaskData:
    """The labels of the characters `kept` (per sentence, the indices of the characters that
    have features: `features.CharAlignment`), in sentence order.

    Args:
        sentences: the sentences.
        kept: per sentence, int indices of its probed characters.
        task: str. One of CHAR_TASKS.
        names: the task's label names (index = label id).
    """
    index = {name: i for i, name in enumerate(names)}
    labels, units = [], []
    for sentence, chars in zip(sentences, kept, strict=True):
        task_labels = sentence.labels[task]
        for i in chars:
            labels.append(index[task_labels[i]])
            units.append(sentence.text[i])
    return TaskData(np.asarray(labels, np.int64), list(names), units)


def sentiment_data(split: str, limit: int | None = None) -> tuple[list[str], TaskData]:
    """The first `limit` reviews of the built-in sentiment task's `split` and their labels.

    Args:
        split: str. "dev" (probe-train) or "test" (probe-test).
        limit: int or None. How many reviews (None: all).
    """
    from tfbert.data.classification.builtin import builtin_examples

    examples = builtin_examples("sentiment", split)[:limit]
    names = sorted({e.label for e in examples} | {"negative", "positive"})
    texts = [e.text for e in examples]
    labels = np.asarray([names.index(e.label) for e in examples], np.int64)
    return texts, TaskData(labels, names, texts)


def control_labels(train: TaskData, test: TaskData, seed: int = 0
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Hewitt & Liang's control task: every character type gets one fixed random label, drawn
    with the real task's label distribution on probe-train; a probe can only learn it by
    memorising characters, so task - control (selectivity) is what the features add beyond
    character identity.

    Args:
        train: TaskData. Probe-train of the real task (its `units` are characters).
        test: TaskData. Probe-test.
        seed: int. Fixes the draw.

    Returns:
        (train control labels, test control labels), int arrays.

    Example:
    >>> data = TaskData(np.array([0, 1, 1, 1]), ["a", "b"], ["甲", "乙", "甲", "丙"])
    >>> a, b = control_labels(data, data)
    >>> bool(a[0] == a[2]), a.tolist() == b.tolist()
    (True, True)
    """
    prior = np.bincount(train.labels, minlength=len(train.names)) / max(len(train.labels), 1)
    types = sorted(set(train.units) | set(test.units))
    drawn = np.random.default_rng(seed).choice(len(prior), size=len(types), p=prior)
    label = dict(zip(types, drawn.tolist(), strict=True))
    return (np.asarray([label[u] for u in train.units], np.int64),
            np.asarray([label[u] for u in test.units], np.int64))


def hashed_labels(texts: Sequence[str], prior: np.ndarray, seed: int = 0) -> np.ndarray:
    """The sentence-level control: each text's label from a salted hash of the text (sha256 of
    "probe-control/{seed}/" + text, as a number in [0, 1), against the cumulative `prior`), so
    it is random but fixed. The salt matters: the built-in splits order and assign texts by
    unsalted hashes, so an unsalted hash of a split's texts is not uniform.

    Args:
        texts: the texts.
        prior: float [C]. Label distribution to draw with.
        seed: int. Part of the salt: another seed, another labelling.

    Example:
    >>> hashed_labels(["好", "差", "好", "一般"], np.array([0.5, 0.5])).tolist()
    [1, 1, 1, 0]
    """
    cumulative = np.cumsum(prior) / np.sum(prior)
    salt = f"probe-control/{seed}/"
    values = [int.from_bytes(hashlib.sha256((salt + t).encode("utf-8")).digest()[:8], "big")
              / 2 ** 64 for t in texts]
    return np.minimum(np.searchsorted(cumulative, values, side="right"),
                      len(prior) - 1).astype(np.int64)
