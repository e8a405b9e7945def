"""NER data: CoNLL files and the built-in People's Daily NER, as examples with one tag a token.

An example is a sentence of tokens (words of a CoNLL file, or characters for Chinese) with one
BIO or BIOES tag each. The sentence text is the tokens joined by `separator` (" " for CoNLL words,
"" for Chinese characters), so every token has a character range in the text.

CoNLL files are read through `tfbert.textfiles`: UTF-8 unless `encoding` names another
(gb18030, ...), a byte-order mark dropped (left in, it would glue itself to the first token),
and any byte that does not decode an error naming the file, line, byte offset and the
`--input_encoding` to pass.

One character per line is the usual Chinese NER layout, and its text is written without spaces:
it is read with separator "" (run_ner's `--char_level`). Read as words (" "), every sentence's
text would put a space between its characters, and a model trained so reads text as written
(without spaces) as one word per sentence. `check_char_level` refuses that reading of a file
whose tokens are almost all (`CHAR_LEVEL_SHARE`) single Chinese characters.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from collections.abc import Sequence

from tfbert import textfiles
from tfbert.data import corpora, splits
from tfbert.data.tags import PREFIXES, split_tag, spread
from tfbert.errors import UserError
from tfbert.text.char_tables import CJK_RANGES

logger = logging.getLogger(__name__)

# People's Daily POS tags that are entities.
PEOPLE_DAILY_TYPES = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
PEOPLE_DAILY_LABELS = ("O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER")
_SENTENCE_END = frozenset("。！？；!?;")
_CLOSERS = frozenset("”’」』）)")
# Share of single-CJK-character tokens above which a CoNLL file is one character per line.
CHAR_LEVEL_SHARE = 0.9
# CJK symbols and punctuation, full-width forms: single characters of such files besides
# ideographs.
_CJK_PUNCTUATION = ((0x3000, 0x303F), (0xFF00, 0xFFEF))


@dataclasses.dataclass(frozen=True)
class NerExample:
    """One sentence: tokens, one tag per token, and where it came from ("path:line").

    separator joins the tokens into the sentence text: " " for words, "" for Chinese characters.
    """

    tokens: tuple[str, ...]
    tags: tuple[str, ...]
    source: str = ""
    separator: str = " "

    @property
    def text(self) -> str:
        return self.separator.join(self.tokens)

    def token_offsets(self) -> list[tuple[int, int]]:
        """(start, end) of each token in `text`, in characters, end exclusive."""
        offsets, position = [], 0
        for token in self.tokens:
            offsets.append((position, position + len(token)))
            position += len(token) + len(self.separator)
        return offsets


# --- readers ----------------------------------------------------------------------------------


def read_conll(path: str, separator: str = " ",
               encoding: str = textfiles.DEFAULT_ENCODING) -> list[NerExample]:
    """Reads a CoNLL-style file: one `token<TAB>tag` per line, a blank line between sentences.

    Extra middle columns (CoNLL-2003's POS and chunk tags) are allowed: the first column is the
    token and the last the tag. `-DOCSTART-` lines are skipped.

    Args:
        path: str. The file.
        separator: str. Joins tokens into the sentence text: " " for words, "" for files with one
            Chinese character per line.
        encoding: str. The file's text encoding (`--input_encoding`).

    Raises:
        UserError: a malformed line or undecodable bytes (the message names the file and line).
        FileNotFoundError: no such file.
    """
    if "://" not in path and not os.path.exists(path):
        raise FileNotFoundError(f"NER data file not found: {path}")
    examples: list[NerExample] = []
    tokens: list[str] = []
    tags: list[str] = []
    first_line = 0

    def flush() -> None:
        if tokens:
            examples.append(NerExample(tuple(tokens), tuple(tags), f"{path}:{first_line}",
                                       separator))
            tokens.clear()
            tags.clear()

    for line_number, raw in enumerate(textfiles.read_lines(path, encoding), start=1):
        line = raw.rstrip("\r\n")
        if not line.strip():
            flush()
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        if fields[0].startswith("-DOCSTART-"):
            flush()
            continue
        if len(fields) < 2 or not fields[0].strip():
            raise UserError(f"{path}:{line_number}: expected 'token<TAB>tag', got {line!r}")
        try:
            split_tag(fields[-1].strip())
        except ValueError as e:
            raise UserError(f"{path}:{line_number}: {e}") from None
        if not tokens:
            first_line = line_number
        tokens.append(fields[0].strip())
        tags.append(fields[-1].strip())
    flush()
    if not examples:
        raise UserError(f"{path}: no sentences")
    return examples


def _is_cjk_character(token: str) -> bool:
    return len(token) == 1 and any(lo <= ord(token) <= hi
                                   for lo, hi in CJK_RANGES + _CJK_PUNCTUATION)


def check_char_level(examples: Sequence[NerExample], path: str, char_level: bool) -> None:
    """UserError when a file of one Chinese character per line is read as words.

    Args:
        examples: sequence of NerExample. The file's sentences.
        path: str. The file (for the message).
        char_level: bool. Whether the tokens join without spaces (separator "").

    Raises:
        UserError: without char_level, more than CHAR_LEVEL_SHARE of the tokens are single
            CJK characters (ideographs or CJK punctuation) and some sentence has two or more.

    Example:
    >>> rows = [NerExample(tuple("北京很美"), ("B-LOC", "I-LOC", "O", "O"))]
    >>> check_char_level(rows, "train.txt", char_level=True)
    >>> check_char_level(rows, "train.txt", char_level=False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tfbert.errors.UserError: train.txt: 100% of its 4 tokens are single Chinese characters...
    """
    if char_level or not any(len(e.tokens) > 1 for e in examples):
        return
    tokens = sum(len(e.tokens) for e in examples)
    single = sum(_is_cjk_character(t) for e in examples for t in e.tokens)
    if single > CHAR_LEVEL_SHARE * tokens:
        raise UserError(
            f"{path}: {single / tokens:.0%} of its {tokens:,} tokens are single Chinese "
            "characters (one character per line, text written without spaces): pass "
            "--char_level. Read as words, each sentence's text would put a space between its "
            "characters, and the model (and its export) would read text as written as one "
            "word per sentence")


def people_daily_ner(split: str) -> list[NerExample]:
    """The built-in NER corpus: People's Daily 1998-01 as character-level BIO sentences.

    Paragraphs are cut into sentences after 。！？；, and each sentence goes to the split of its
    paragraph (`tfbert.data.splits`: near-copies in one split). Entities: `ns` LOC, `nt` ORG,
    `nr` PER. The corpus splits Chinese names into surname/nr + given-name/nr, so consecutive
    `nr` words make one
    person; a run that holds several names side by side (江/nr 泽民/nr 李/nr 鹏/nr) starts a
    new person at each one-character surname that follows a complete name. A bracketed compound
    `[中央/n 人民/n 广播/vn 电台/n]nt` is one entity of its outer tag, brackets stripped.

    Args:
        split: str. "train", "dev" or "test".
    """
    if split not in ("train", "dev", "test"):
        raise ValueError(f"split must be 'train', 'dev' or 'test', got {split!r}")
    return [e for e, s in _people_daily_sentences() if s == split]


@functools.lru_cache(maxsize=1)
def _people_daily_sentences() -> tuple[tuple[NerExample, str], ...]:
    out = []
    line_splits = splits.people_daily_line_splits()
    for line, paragraph in enumerate(corpora.people_daily_tagged(), start=1):
        for sentence in _split_sentences(_entity_words(paragraph, f"199801.txt:{line}")):
            chars = tuple(ch for word, _ in sentence for ch in word)
            tags = tuple(tag for word, entity in sentence for tag in _char_tags(word, entity))
            example = NerExample(chars, tags, f"199801.txt:{line}", separator="")
            out.append((example, line_splits[line - 1]))
    # A short sentence (under the 12-character run) can repeat in lines of different splits:
    # a dev/test sentence identical to a training one goes to train.
    train = {e.text for e, split in out if split == "train"}
    return tuple((e, "train" if e.text in train else split) for e, split in out)


def _entity_words(pairs: Sequence[tuple[str, str]], source: str
                  ) -> list[tuple[str, str | None]]:
    """(text, entity type or None) pieces of one paragraph, compounds and names merged."""
    words: list[tuple[str, str | None]] = []
    compound: list[tuple[str, str]] | None = None
    previous_nr: list[str] = []  # the words of the person being built
    for word, tag in pairs:
        if compound is None and word.startswith("[") and len(word) > 1:
            compound, word = [], word[1:]
        if compound is not None:
            inner, bracket, outer = tag.partition("]")
            compound.append((word, inner))
            if bracket:
                entity = PEOPLE_DAILY_TYPES.get(outer)
                if entity is not None:
                    words.append(("".join(w for w, _ in compound), entity))
                else:  # not an entity as a whole: its words count on their own
                    words.extend((w, PEOPLE_DAILY_TYPES.get(t)) for w, t in compound)
                compound = None
            previous_nr = []
            continue
        entity = PEOPLE_DAILY_TYPES.get(tag)
        if entity == "PER" and previous_nr and not (len(previous_nr) >= 2 and len(word) == 1):
            previous_nr.append(word)
            words[-1] = (words[-1][0] + word, "PER")
            continue
        previous_nr = [word] if entity == "PER" else []
        words.append((word, entity))
    if compound is not None:
        raise ValueError(f"{source}: bracketed compound opened but not closed")
    return words


def _split_sentences(words: list[tuple[str, str | None]]) -> list[list[tuple[str, str | None]]]:
    """Cuts after sentence-final punctuation, keeping closing quotes with their sentence."""
    sentences, current = [], []
    ended = False
    for i, (word, entity) in enumerate(words):
        current.append((word, entity))
        ended = word in _SENTENCE_END or (ended and word in _CLOSERS)
        following = words[i + 1][0] if i + 1 < len(words) else ""
        if ended and following not in _CLOSERS:
            sentences.append(current)
            current, ended = [], False
    if current:
        sentences.append(current)
    return sentences


def _char_tags(word: str, entity: str | None) -> list[str]:
    if entity is None:
        return ["O"] * len(word)
    return [f"B-{entity}"] + [f"I-{entity}"] * (len(word) - 1)


# --- labels -----------------------------------------------------------------------------------


def label_list(examples: Sequence[NerExample], label_alignment: str = "first") -> list[str]:
    """"O" then every tag of the examples, sorted by entity type and B, I, E, S; with
    label_alignment "all" also the tags a token's later pieces get (I-X, and E-X for BIOES)."""
    tags = {t for e in examples for t in e.tags} - {"O"}
    if label_alignment == "all":
        tags |= {part for t in tags for part in spread(t, 3)}
    order = {p: i for i, p in enumerate(PREFIXES)}
    return ["O"] + sorted(tags, key=lambda t: (split_tag(t)[1], order[split_tag(t)[0]]))


def tag_ids(example: NerExample, labels: Sequence[str], index: dict[str, int] | None = None
            ) -> list[int]:
    """Label ids of one example's tags; an unknown tag names the example's file and line."""
    index = index or {name: i for i, name in enumerate(labels)}
    unknown = sorted({t for t in example.tags if t not in index})
    if unknown:
        raise ValueError(f"{example.source}: tags {unknown} are not among the training labels "
                         f"{list(labels)}")
    return [index[t] for t in example.tags]
