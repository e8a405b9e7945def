"""NER data: CoNLL files, the built-in People's Daily NER, and label alignment to word pieces.

An example is a sentence of tokens (words of a CoNLL file, or characters for Chinese) with one
BIO or BIOES tag each. The sentence text is the tokens joined by `separator` (" " for CoNLL words,
"" for Chinese characters), so every token has a character range in the text. The text is
tokenized in one go with offsets (as a served model would see it), and each token's label goes on
the first word piece that starts inside it; other pieces get IGNORE_INDEX (-100), masked out of
the loss. Going back, a word piece's predicted tag applies to its token, so predictions become
entities with character offsets into the text.

Counted, never silently dropped: sentences cut at max_seq_length (and the entities they lose),
and tokens no word piece starts in (a piece spanning several characters, or characters the
tokenizer removes).

CoNLL files are read through `tfbert.textfiles`: UTF-8 unless `encoding` names another
(gb18030, ...), a byte-order mark dropped (left in, it would glue itself to the first token),
and any byte that does not decode an error naming the file, line, byte offset and the
`--input_encoding` to pass.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfbert import textfiles
from tfbert.data import corpora
from tfbert.errors import UserError
from tfbert.evaluation.ner import PREFIXES, get_entities, split_tag

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100
# People's Daily POS tags that are entities.
PEOPLE_DAILY_TYPES = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
PEOPLE_DAILY_LABELS = ("O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER")
_SENTENCE_END = frozenset("。！？；!?;")
_CLOSERS = frozenset("”’」』）)")


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


def people_daily_ner(split: str) -> list[NerExample]:
    """The built-in NER corpus: People's Daily 1998-01 as character-level BIO sentences.

    Paragraphs are cut into sentences after 。！？；, and each sentence goes to train/dev/test by
    a hash of its text (`corpora.stable_split`). Entities: `ns` LOC, `nt` ORG, `nr` PER. The corpus
    splits Chinese names into surname/nr + given-name/nr, so consecutive `nr` words make one
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
    for line, paragraph in enumerate(corpora.people_daily_tagged(), start=1):
        for sentence in _split_sentences(_entity_words(paragraph, f"199801.txt:{line}")):
            chars = tuple(ch for word, _ in sentence for ch in word)
            tags = tuple(tag for word, entity in sentence for tag in _char_tags(word, entity))
            example = NerExample(chars, tags, f"199801.txt:{line}", separator="")
            out.append((example, corpora.stable_split(example.text)))
    return tuple(out)


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


def label_list(examples: Sequence[NerExample]) -> list[str]:
    """"O" then every tag of the examples, sorted by entity type and B, I, E, S."""
    tags = {t for e in examples for t in e.tags} - {"O"}
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


# --- alignment to word pieces -------------------------------------------------------------------


@dataclasses.dataclass
class NerFeatures:
    """Packed model inputs and labels for a list of examples.

    Attributes:
        input_ids, input_mask, segment_ids: int32 [N, T]. The model inputs.
        label_ids: int32 [N, T]. Tag id on each token's first word piece, IGNORE_INDEX elsewhere.
        token_pieces: per example, per token: the position in the packed sequence of the word
            piece that gives the token its tag (its first piece, or the piece that covers it when
            none starts inside it), -1 when the token was cut at max_seq_length or lost.
        stats: counts of what did not fit (see `encode_examples`).
    """

    input_ids: np.ndarray
    input_mask: np.ndarray
    segment_ids: np.ndarray
    label_ids: np.ndarray
    token_pieces: list[list[int]]
    stats: dict[str, int]

    def inputs(self) -> dict[str, np.ndarray]:
        return {"input_ids": self.input_ids, "input_mask": self.input_mask,
                "segment_ids": self.segment_ids}


def encode_examples(examples: Sequence[NerExample], tokenizer: Any, max_seq_length: int,
                    labels: Sequence[str], batch_size: int = 512) -> NerFeatures:
    """Tokenizes sentences with offsets, packs `[CLS] pieces [SEP]` and aligns the tags.

    Args:
        examples: sequence of NerExample.
        tokenizer: a `tfbert.BertTokenizer` (tokenize_with_offsets, cls_id, sep_id, pad_id).
        max_seq_length: int. T; sentences with more than T - 2 word pieces are cut.
        labels: sequence of str. Tag names in label-id order.
        batch_size: int. Sentences tokenized per call.

    Returns:
        NerFeatures. stats holds "examples", "truncated_examples", "truncated_entities" (gold
        entities not wholly inside the kept pieces) and "uncovered_tokens" (tokens no word piece
        starts in; their tag comes from the piece covering them) and "lost_tokens" (tokens no
        piece covers at all, within the kept length).
    """
    import tensorflow as tf

    if max_seq_length < 3:
        raise ValueError(f"max_seq_length must be at least 3, got {max_seq_length}")
    index = {name: i for i, name in enumerate(labels)}
    n, t = len(examples), max_seq_length
    input_ids = np.full((n, t), tokenizer.pad_id, np.int32)
    label_ids = np.full((n, t), IGNORE_INDEX, np.int32)
    lengths = np.zeros(n, np.int32)
    token_pieces: list[list[int]] = []
    stats = {"examples": n, "truncated_examples": 0, "truncated_entities": 0,
             "uncovered_tokens": 0, "lost_tokens": 0}
    for begin in range(0, n, batch_size):
        chunk = examples[begin:begin + batch_size]
        ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant([e.text for e in chunk]))
        for row, (example, piece_ids, piece_starts, piece_ends) in enumerate(zip(
                chunk, ids.to_list(), starts.to_list(), ends.to_list(), strict=True)):
            i = begin + row
            tag_id = tag_ids(example, labels, index)
            kept = min(len(piece_ids), t - 2)
            truncated = kept < len(piece_ids)
            pieces, cut = _align(example.token_offsets(), piece_starts[:kept], piece_ends[:kept],
                                 truncated)
            input_ids[i, 0], input_ids[i, 1:kept + 1] = tokenizer.cls_id, piece_ids[:kept]
            input_ids[i, kept + 1] = tokenizer.sep_id
            lengths[i] = kept + 2
            for token, (position, first) in enumerate(pieces):
                if first:
                    label_ids[i, position] = tag_id[token]
            token_pieces.append([position for position, _ in pieces])
            if truncated:
                stats["truncated_examples"] += 1
                stats["truncated_entities"] += sum(
                    1 for e in get_entities(example.tags) if e.end >= cut)
            within = pieces[:cut]
            stats["uncovered_tokens"] += sum(1 for p, first in within if p >= 0 and not first)
            stats["lost_tokens"] += sum(1 for p, _ in within if p < 0)
    input_mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.int32)
    return NerFeatures(input_ids, input_mask, np.zeros((n, t), np.int32), label_ids,
                       token_pieces, stats)


def _align(token_offsets: list[tuple[int, int]], piece_starts: list[int], piece_ends: list[int],
           truncated: bool) -> tuple[list[tuple[int, bool]], int]:
    """(packed position or -1, is-first-piece) per token, and the number of tokens before the cut.

    A token's tag goes on the first piece starting inside it; a token with no piece of its own
    takes the piece that covers its first character. Positions count the [CLS] in front.
    """
    text_length = token_offsets[-1][1] if token_offsets else 0
    owner = np.full(text_length + 1, -1, np.int64)  # char -> token
    for token, (start, end) in enumerate(token_offsets):
        owner[start:end] = token
    covering = np.full(text_length + 1, -1, np.int64)  # char -> packed position of its piece
    result: list[tuple[int, bool]] = [(-1, False)] * len(token_offsets)
    for j, (start, end) in enumerate(zip(piece_starts, piece_ends, strict=True)):
        covering[start:end] = j + 1
        token = owner[min(start, text_length)]
        if token >= 0 and result[token][0] < 0:
            result[token] = (j + 1, True)
    cut = len(token_offsets)
    if truncated:
        last_end = piece_ends[-1] if piece_ends else 0
        cut = sum(1 for start, _ in token_offsets if start < last_end)
    for token, (start, _) in enumerate(token_offsets[:cut]):
        if result[token][0] < 0 and covering[start] >= 0:
            result[token] = (int(covering[start]), False)
    return result, cut


def decode_predictions(features: NerFeatures, predicted_ids: np.ndarray, labels: Sequence[str]
                       ) -> list[list[str]]:
    """Token-level tags from piece-level predictions [N, T] (argmax ids).

    A token takes the tag of its piece; when one piece covers several tokens, its tag spreads
    over them as one entity (B-X becomes B-X I-X ..., S-X becomes B-X ... E-X). Tokens cut at
    max_seq_length get "O".
    """
    out = []
    for i, positions in enumerate(features.token_pieces):
        tags = ["O"] * len(positions)
        token = 0
        while token < len(positions):
            position = positions[token]
            last = token
            while last + 1 < len(positions) and positions[last + 1] == position >= 0:
                last += 1
            if position >= 0:
                tags[token:last + 1] = _spread(labels[int(predicted_ids[i, position])],
                                               last - token + 1)
            token = last + 1
        out.append(tags)
    return out


def _spread(tag: str, count: int) -> list[str]:
    """The tags of `count` tokens that one word piece tagged `tag` covers."""
    if count == 1 or tag == "O":
        return [tag] * count
    prefix, entity = split_tag(tag)
    first = {"B": "B", "I": "I", "E": "I", "S": "B"}[prefix]
    last = {"B": "I", "I": "I", "E": "E", "S": "E"}[prefix]
    return [f"{first}-{entity}"] + [f"I-{entity}"] * (count - 2) + [f"{last}-{entity}"]


def make_dataset(features: NerFeatures, batch_size: int, shuffle: bool = False,
                 seed: int | None = None) -> Any:
    """A tf.data.Dataset of (input dict, label ids [B, T], sample weights [B, T]).

    Label ids of IGNORE_INDEX become class 0 with weight 0, so they never reach the loss.
    """
    import tensorflow as tf

    weights = (features.label_ids != IGNORE_INDEX).astype(np.float32)
    labels = np.where(features.label_ids == IGNORE_INDEX, 0, features.label_ids).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((features.inputs(), labels, weights))
    if shuffle:
        ds = ds.shuffle(len(labels), seed=seed, reshuffle_each_iteration=True)
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)
