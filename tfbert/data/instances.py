"""Sentence-pair instances for BERT pretraining, created from a stream of documents.

This is the library behind `data_tools/create_pretraining_data.py`. It follows Google's
reference `create_pretraining_data.py` (`create_instances_from_document`): a target length
(`max_seq_length - 3`, or with probability `short_seq_prob` a random length in [2, that]),
segment A from consecutive sentences, segment B the actual continuation 50% of the time and a
span of a different document otherwise (the unused sentences are put back), `truncate_seq_pair`
from a random end of the longer segment, `dupe_factor` passes, deterministic for a seed.

An instance holds TEXT, not token ids: the tf.data pipeline re-tokenizes it and masks
dynamically (fresh masks every epoch), so ids and masks are not frozen into the records.
(`output_format="google"` freezes one masking of the same instances into google-research/bert's
record format instead, for trainers that read that: `tfbert.data.google_records`.)
Truncation therefore cuts the text at word boundaries of BERT's basic tokenizer (a CJK
character, a punctuation mark, or a whitespace-separated word with all its `##` pieces), which
guarantees that re-tokenizing the stored text gives exactly the counted tokens, so A and B
always fit `max_seq_length - 3` tokens.

Deviations from the reference, and why:
- Streaming. The reference loads every document into memory, shuffles them and then shuffles
  all instances. Here documents are read one at a time (a corpus larger than RAM works), and
  three bounded buffers replace the global state: a document shuffle buffer (documents are
  processed in a shuffled order), a reservoir sample of the documents read so far (the pool
  the "random document" of a NotNext pair is drawn from; uniform over everything read so far,
  as the reference draws uniformly over the corpus) and an instance shuffle buffer before the
  shards. Memory is bounded by the three buffer sizes, not by the corpus.
- Balanced NSP. The reference makes every chunk of one sentence a NotNext pair (there is no
  continuation to use), so corpora with many one-sentence documents (reviews, tweets) get far
  more than 50% NotNext. With `balance_next_sentence=True` (the default) a multi-sentence chunk
  is made NotNext with probability (0.5 - f) / (1 - f), f the running share of forced NotNext
  chunks, so the overall share stays at 50% whenever f < 0.5. With False it is exactly the
  reference's 50% per multi-sentence chunk.
- The "random document" is never the current document (identified by its position in the
  input, so a later `dupe_factor` pass cannot draw the same document again); the reference
  retries 10 times and may, rarely, use the same document.

Nothing lost, nothing silent (`create_pretraining_data`):
- Text files are read through `tfbert.textfiles` (a UTF-8 BOM is dropped, `encoding` such as
  gb18030 decodes strictly). A line with undecodable bytes is dropped and counted while such
  lines stay within one in 10,000 of a file's lines; beyond that (a file in another encoding)
  it is an error naming the file, the first bad line, its byte offset and the flag to pass.
- An input with no document, or only one (NSP draws NotNext segments from another document),
  is an error before anything is written. Shards are written under temporary names and
  renamed when complete: no empty or partial shard is ever left under the final name.
- An output path is never an input (a text file, the vocab), and an existing file is replaced
  only if tfbert wrote it (`.NAME.tfbert.json` beside it says so) or with `overwrite`
  (`tfbert.ownership`).
- A sentence longer than a pair holds (`max_seq_length - 3` tokens) is not split: it is cut
  to fit like any long segment and the rest of it is lost; such sentences are counted.
- `Stats.summary()` states documents, sentences, instances and the NotNext share, with the
  long sentences, the chunks that found no pair and the lines dropped for bad bytes.

Example:

```python
from tfbert.data import corpora, instances

spans = instances.bert_word_spans("vocab.txt")
docs = instances.tokenize_documents(iter(corpora.chinese_documents()), spans)
for inst in instances.create_instances(docs, instances.InstanceOptions(max_seq_length=128)):
    print(inst.text_a, inst.text_b, inst.next_sentence_label)
```
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import random
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from tfbert import ownership, textfiles
from tfbert.errors import UserError

logger = logging.getLogger(__name__)

# A word-spans function maps a batch of sentences to one int32 [W, 3] array per sentence:
# (start char, end char, number of WordPiece tokens) of each basic-tokenizer word, in order.
WordSpansFn = Callable[[Sequence[str]], list[np.ndarray]]


@dataclasses.dataclass(frozen=True)
class InstanceOptions:
    """How instances are made (the reference's flags plus the streaming buffer sizes).

    Args:
        max_seq_length: int. Sequence length the pairs are sized for; A + B get at most
            `max_seq_length - 3` tokens ([CLS] A [SEP] B [SEP]).
        short_seq_prob: float. Probability of a shorter random target length (the reference's
            way to reduce the mismatch between pretraining and short fine-tuning inputs).
        dupe_factor: int. Passes over the input, each with different pairs and cuts.
        balance_next_sentence: bool. Keep the NotNext share at 50% although one-sentence
            chunks are always NotNext (see the module docstring); False is the reference rule.
        shuffle_buffer_documents: int. Documents held to shuffle the processing order.
        random_pool_documents: int. Documents held as the pool of NotNext B segments.
        shuffle_buffer_instances: int. Instances held to shuffle before writing.
    """

    max_seq_length: int = 128
    short_seq_prob: float = 0.1
    dupe_factor: int = 10
    balance_next_sentence: bool = True
    shuffle_buffer_documents: int = 1000
    random_pool_documents: int = 10000
    shuffle_buffer_instances: int = 10000

    def __post_init__(self):
        if self.max_seq_length < 5:
            raise UserError(f"max_seq_length {self.max_seq_length} is too small: a pair needs "
                             "[CLS] A [SEP] B [SEP] with at least one token in A and in B (>= 5)")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise UserError(f"short_seq_prob {self.short_seq_prob} is not in [0, 1]")
        if self.dupe_factor < 1:
            raise UserError(f"dupe_factor {self.dupe_factor} must be >= 1")
        for name in ("shuffle_buffer_documents", "random_pool_documents",
                     "shuffle_buffer_instances"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} {getattr(self, name)} must be >= 1")


@dataclasses.dataclass
class Sentence:
    """One tokenized sentence.

    Args:
        text: str. The sentence as read.
        spans: np.ndarray. int32 [W, 3]: start char, end char, token count of each word.
        word_starts: np.ndarray | None. int32 [J], start chars of the jieba words (whole-word
            masking), or None.
    """

    text: str
    spans: np.ndarray
    word_starts: np.ndarray | None = None

    @property
    def num_tokens(self) -> int:
        return int(self.spans[:, 2].sum())


@dataclasses.dataclass
class Document:
    """A document: its position in the input (stable across passes) and its sentences."""

    index: int
    sentences: list[Sentence]


@dataclasses.dataclass(frozen=True)
class Instance:
    """One sentence pair, as written to the records.

    Args:
        text_a: str. Segment A (consecutive sentences of one document, possibly cut).
        text_b: str. Segment B: the continuation of A, or a span of another document.
        is_random_next: bool. True when B comes from another document (label 1, NotNext).
        num_tokens_a: int. WordPiece tokens of A.
        num_tokens_b: int. WordPiece tokens of B.
        word_starts_a: tuple[int, ...] | None. Start chars of the jieba words of A.
        word_starts_b: tuple[int, ...] | None. Same for B.
        document_a: int. Input position of A's document.
        document_b: int. Input position of B's document.
    """

    text_a: str
    text_b: str
    is_random_next: bool
    num_tokens_a: int
    num_tokens_b: int
    word_starts_a: tuple[int, ...] | None = None
    word_starts_b: tuple[int, ...] | None = None
    document_a: int = -1
    document_b: int = -1

    @property
    def next_sentence_label(self) -> int:
        """0 = IsNext, 1 = NotNext (the reference's convention)."""
        return int(self.is_random_next)


# --------------------------------------------------------------------------- tokenization


# CJK ideographs as BERT's tokenizer has them (tfbert.text.tokenizer; `tokenizers` starts
# Extension E at U+2B920).
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _is_split_alone(ch: str) -> bool:
    """True for characters BERT's basic tokenizer always makes a word of their own (CJK
    ideographs, punctuation) or drops (whitespace): text may be joined there without a space."""
    cp = ord(ch)
    if ch.isspace():
        return True
    if any(lo <= cp <= hi for lo, hi in _CJK_RANGES):
        return True
    if (33 <= cp <= 47) or (58 <= cp <= 64) or (91 <= cp <= 96) or (123 <= cp <= 126):
        return True
    return unicodedata.category(ch).startswith("P")


def joiner(left: str, right: str) -> str:
    """The separator that keeps two sentences' tokens apart when joined: "" between Chinese
    sentences (or at punctuation), " " where two letters/digits would otherwise merge."""
    if not left or not right or _is_split_alone(left[-1]) or _is_split_alone(right[0]):
        return ""
    return " "


def join_sentences(sentences: Sequence[str]) -> str:
    """Sentences joined as segments are (see `joiner`)."""
    out = ""
    for s in sentences:
        out += joiner(out, s) + s
    return out


def bert_word_spans(vocab_file: str, lower_case: bool = True) -> WordSpansFn:
    """A word-spans function backed by `tfbert.BertTokenizer` (the same tokenizer the
    pipeline re-tokenizes with, so the counts match exactly).

    Args:
        vocab_file: str. WordPiece vocab.
        lower_case: bool. As for `BertTokenizer`.

    Returns:
        A function: list of sentences -> one int32 [W, 3] array (start char, end char,
        tokens) per sentence; a word is a token not starting with "##" plus its "##" pieces.
    """
    import tensorflow as tf

    from tfbert.text.tokenizer import BertTokenizer

    tokenizer = BertTokenizer(vocab_file, lower_case=lower_case)
    continuation = np.array([t.startswith("##") for t in tokenizer.vocab], dtype=bool)

    def spans(texts: Sequence[str]) -> list[np.ndarray]:
        if not texts:
            return []
        ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(list(texts)))
        row_splits = ids.row_splits.numpy()
        flat_ids = ids.flat_values.numpy()
        flat_starts = starts.flat_values.numpy().astype(np.int64)
        flat_ends = ends.flat_values.numpy().astype(np.int64)
        new_word = ~continuation[flat_ids]
        new_word[row_splits[:-1][row_splits[:-1] < len(flat_ids)]] = True  # row starts
        word_index = np.cumsum(new_word) - 1  # [N] word of each token
        num_words = int(word_index[-1]) + 1 if len(flat_ids) else 0
        word_start = np.zeros(num_words, np.int64)
        word_end = np.zeros(num_words, np.int64)
        word_tokens = np.bincount(word_index, minlength=num_words) if num_words else word_start
        word_start[word_index[new_word]] = flat_starts[new_word]
        np.maximum.at(word_end, word_index, flat_ends)
        table = np.stack([word_start, word_end, word_tokens], axis=1).astype(np.int32)
        word_splits = np.concatenate([[0], np.cumsum(new_word)])[row_splits]
        return [table[word_splits[i]:word_splits[i + 1]] for i in range(len(texts))]

    return spans


@functools.cache
def _jieba():
    import jieba

    jieba.setLogLevel(logging.WARNING)  # no "Building prefix dict..." chatter
    return jieba


def jieba_word_starts(text: str) -> np.ndarray:
    """Start chars of the jieba words of `text` (int32 [J]); Chinese words for whole-word
    masking (jieba splits English at spaces and punctuation, so it works there too)."""
    return np.fromiter((start for _, start, _ in _jieba().tokenize(text)), dtype=np.int32)


def tokenize_documents(documents: Iterable[list[str]], word_spans: WordSpansFn,
                       whole_word_mask: bool = False,
                       batch_sentences: int = 2048) -> Iterator[Document]:
    """Tokenizes a stream of documents (lists of sentences) in batches, keeping order.

    Sentences without tokens and documents without sentences are dropped (as the reference
    does); document indices count the input documents, so they are stable across passes.

    Args:
        documents: iterable of list[str]. Documents in input order.
        word_spans: WordSpansFn. E.g. `bert_word_spans(vocab_file)`.
        whole_word_mask: bool. Also segment every sentence with jieba.
        batch_sentences: int. Sentences per tokenizer call.
    """
    pending: list[tuple[int, list[str]]] = []
    pending_sentences = 0

    def flush() -> Iterator[Document]:
        texts = [s for _, doc in pending for s in doc]
        tables = word_spans(texts)
        if len(tables) != len(texts):
            raise ValueError(f"word_spans returned {len(tables)} results for {len(texts)} "
                             "sentences")
        k = 0
        for index, doc in pending:
            sentences = []
            for text in doc:
                table = tables[k]
                k += 1
                if len(table) and int(table[:, 2].sum()) > 0:
                    starts = jieba_word_starts(text) if whole_word_mask else None
                    sentences.append(Sentence(text, np.asarray(table, np.int32), starts))
            if sentences:
                yield Document(index, sentences)

    for index, doc in enumerate(documents):
        doc = [s for s in (s.strip() for s in doc) if s]
        if not doc:
            continue
        pending.append((index, doc))
        pending_sentences += len(doc)
        if pending_sentences >= batch_sentences:
            yield from flush()
            pending, pending_sentences = [], 0
    if pending:
        yield from flush()


# --------------------------------------------------------------------------- segments


@dataclasses.dataclass
class _Segment:
    """Joined sentences: text, word table [W, 3] in text chars, jieba word starts."""

    text: str
    spans: np.ndarray
    word_starts: np.ndarray | None
    lo: int = 0  # kept words are spans[lo:hi]
    hi: int = 0
    num_tokens: int = 0

    @classmethod
    def join(cls, sentences: Sequence[Sentence]) -> _Segment:
        parts: list[str] = []
        tables: list[np.ndarray] = []
        starts: list[np.ndarray] = []
        pos = 0
        for s in sentences:
            if parts:
                sep = joiner(parts[-1], s.text)
                if sep:
                    parts.append(sep)
                    pos += len(sep)
            tables.append(s.spans + np.array([pos, pos, 0], np.int32))
            if s.word_starts is not None:
                starts.append(s.word_starts + pos)
            parts.append(s.text)
            pos += len(s.text)
        spans = np.concatenate(tables) if tables else np.zeros((0, 3), np.int32)
        word_starts = np.concatenate(starts) if starts else None
        return cls("".join(parts), spans, word_starts, 0, len(spans),
                   int(spans[:, 2].sum()))

    def drop(self, front: bool) -> None:
        """Removes the first or last word (with all its tokens)."""
        if front:
            self.num_tokens -= int(self.spans[self.lo, 2])
            self.lo += 1
        else:
            self.hi -= 1
            self.num_tokens -= int(self.spans[self.hi, 2])

    def cut(self) -> tuple[str, tuple[int, ...] | None]:
        """The kept text and its jieba word starts (relative to the kept text)."""
        start, end = int(self.spans[self.lo, 0]), int(self.spans[self.hi - 1, 1])
        if self.word_starts is None:
            return self.text[start:end], None
        inside = self.word_starts[(self.word_starts > start) & (self.word_starts < end)]
        return self.text[start:end], (0,) + tuple(int(x) - start for x in inside)


def truncate_pair(a: _Segment, b: _Segment, max_num_tokens: int, rng: random.Random) -> bool:
    """The reference's `truncate_seq_pair` at word granularity: drop a word from a random end
    of the longer segment until both fit. False when a segment would become empty."""
    while a.num_tokens + b.num_tokens > max_num_tokens:
        longer = a if a.num_tokens > b.num_tokens else b
        if longer.hi - longer.lo <= 1:
            return False
        longer.drop(front=rng.random() < 0.5)
    return a.num_tokens >= 1 and b.num_tokens >= 1


# --------------------------------------------------------------------------- instances


class _Pool:
    """Reservoir sample of the documents read so far (the NotNext pool)."""

    def __init__(self, size: int, rng: random.Random):
        self.size, self.rng, self.seen, self.docs = size, rng, 0, []

    def add(self, doc: Document) -> None:
        self.seen += 1
        if len(self.docs) < self.size:
            self.docs.append(doc)
        else:
            j = self.rng.randrange(self.seen)
            if j < self.size:
                self.docs[j] = doc

    def other_than(self, index: int) -> Document | None:
        """A uniformly drawn pooled document whose input position is not `index`."""
        candidates = len(self.docs)
        for _ in range(10):
            doc = self.docs[self.rng.randrange(candidates)]
            if doc.index != index:
                return doc
        others = [d for d in self.docs if d.index != index]
        return others[self.rng.randrange(len(others))] if others else None


@dataclasses.dataclass
class Stats:
    """Counts for the summary line.

    Of the input (one pass): documents, sentences, long_sentences (more tokens than a pair
    holds, `max_seq_length - 3`: only a part of them reaches the records, the rest is cut off)
    and bad_lines (lines dropped for undecodable bytes). Of all `passes`: chunks, instances,
    tokens, not_next, forced_not_next (one-sentence chunks, always NotNext) and dropped (chunks
    that gave no pair).
    """

    documents: int = 0
    sentences: int = 0
    long_sentences: int = 0
    bad_lines: int = 0
    passes: int = 0
    pair_tokens: int = 0  # max_seq_length - 3: the most tokens A + B hold
    chunks: int = 0
    instances: int = 0
    tokens: int = 0
    not_next: int = 0
    forced_not_next: int = 0
    dropped: int = 0

    @property
    def not_next_share(self) -> float:
        """NotNext instances / instances (0 when there are none)."""
        return self.not_next / max(1, self.instances)

    def summary(self) -> str:
        """One line: what was read, what was made, and everything that was cut or skipped."""
        return (f"{self.documents:,} documents, {self.sentences:,} sentences -> "
                f"{self.instances:,} instances over {self.passes} pass(es), {self.tokens:,} "
                f"tokens (without [CLS]/[SEP]), NotNext share {self.not_next_share:.2%} "
                f"({self.not_next:,} of {self.instances:,}); "
                f"{self.long_sentences:,} sentences longer than {self.pair_tokens} tokens (cut "
                f"to fit), {self.dropped:,} chunks without a pair (a word longer than the room, "
                f"or no other document), {self.bad_lines:,} lines skipped for undecodable bytes")


class InstanceMaker:
    """The reference's `create_instances_from_document`, over a bounded pool of documents.

    Args:
        options: InstanceOptions.
        rng: random.Random. The single source of randomness (determinism for a seed).
    """

    def __init__(self, options: InstanceOptions, rng: random.Random):
        self.options, self.rng = options, rng
        self.pool = _Pool(options.random_pool_documents, rng)
        self.stats = Stats()

    def _random_next(self, chunk_len: int) -> bool:
        """Whether this chunk's B comes from another document."""
        self.stats.chunks += 1
        if chunk_len == 1:
            self.stats.forced_not_next += 1
            return True
        p = 0.5
        if self.options.balance_next_sentence:
            forced = self.stats.forced_not_next / self.stats.chunks
            p = max(0.0, (0.5 - forced) / (1.0 - forced)) if forced < 0.5 else 0.0
        return self.rng.random() < p

    def from_document(self, doc: Document) -> Iterator[Instance]:
        """Instances from one document (the pool must already hold the documents read)."""
        rng, options = self.rng, self.options
        max_num_tokens = options.max_seq_length - 3
        target_seq_length = max_num_tokens
        if rng.random() < options.short_seq_prob:
            target_seq_length = rng.randint(2, max_num_tokens)
        sentences = doc.sentences
        chunk: list[Sentence] = []
        chunk_length = 0
        i = 0
        while i < len(sentences):
            chunk.append(sentences[i])
            chunk_length += sentences[i].num_tokens
            if i == len(sentences) - 1 or chunk_length >= target_seq_length:
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                a = _Segment.join(chunk[:a_end])
                random_doc = None
                if self._random_next(len(chunk)):
                    random_doc = self.pool.other_than(doc.index)
                if random_doc is not None:
                    target_b_length = target_seq_length - a.num_tokens
                    start = rng.randint(0, len(random_doc.sentences) - 1)
                    b_sentences, b_length = [], 0
                    for s in random_doc.sentences[start:]:
                        b_sentences.append(s)
                        b_length += s.num_tokens
                        if b_length >= target_b_length:
                            break
                    b = _Segment.join(b_sentences)
                    i -= len(chunk) - a_end  # put the unused sentences back
                    document_b = random_doc.index
                elif len(chunk) >= 2:
                    b = _Segment.join(chunk[a_end:])
                    document_b = doc.index
                else:  # one sentence and no other document anywhere: no pair possible
                    chunk, chunk_length = [], 0
                    i += 1
                    self.stats.dropped += 1
                    continue
                if truncate_pair(a, b, max_num_tokens, rng):
                    text_a, starts_a = a.cut()
                    text_b, starts_b = b.cut()
                    yield Instance(text_a, text_b, random_doc is not None, a.num_tokens,
                                   b.num_tokens, starts_a, starts_b, doc.index, document_b)
                else:
                    self.stats.dropped += 1
                chunk, chunk_length = [], 0
            i += 1


def create_instances(documents: Iterable[Document], options: InstanceOptions,
                     seed: int = 12345,
                     on_document: Callable[[Document], None] | None = None
                     ) -> Iterator[Instance]:
    """Streams instances from tokenized documents, for ONE pass over the input.

    For `dupe_factor` passes call `create_instances_multi_pass` (which re-reads the input).

    Args:
        documents: iterable of Document. E.g. `tokenize_documents(...)`.
        options: InstanceOptions.
        seed: int. Random seed; the same input and seed give the same instances.
        on_document: optional callback, called once per document read (progress bars).
    """
    yield from create_instances_multi_pass(lambda: documents, options, seed, on_document,
                                           passes=1)


def _count_input(stats: Stats, doc: Document) -> None:
    stats.documents += 1
    stats.sentences += len(doc.sentences)
    stats.long_sentences += sum(s.num_tokens > stats.pair_tokens for s in doc.sentences)


def create_instances_multi_pass(read_documents: Callable[[], Iterable[Document]],
                                options: InstanceOptions, seed: int = 12345,
                                on_document: Callable[[Document], None] | None = None,
                                passes: int | None = None,
                                stats: Stats | None = None) -> Iterator[Instance]:
    """Streams shuffled instances over `options.dupe_factor` passes of `read_documents()`.

    Args:
        read_documents: callable returning a fresh iterable of Document (one pass).
        options: InstanceOptions.
        seed: int. Random seed.
        on_document: optional callback per document read.
        passes: int | None. Overrides `options.dupe_factor`.
        stats: Stats | None. Filled with the counts as instances are produced.
    """
    rng = random.Random(seed)
    maker = InstanceMaker(options, rng)
    if stats is not None:
        maker.stats = stats
    maker.stats.pair_tokens = options.max_seq_length - 3
    instance_buffer: list[Instance] = []

    def emit(instance: Instance) -> Iterator[Instance]:
        # Shuffle buffer: keep `shuffle_buffer_instances`, emit a random one when full.
        if len(instance_buffer) < options.shuffle_buffer_instances:
            instance_buffer.append(instance)
            return
        j = rng.randrange(len(instance_buffer))
        instance_buffer[j], instance = instance, instance_buffer[j]
        yield instance

    def count(instance: Instance) -> Instance:
        s = maker.stats
        s.instances += 1
        s.tokens += instance.num_tokens_a + instance.num_tokens_b
        s.not_next += instance.is_random_next
        return instance

    for pass_index in range(options.dupe_factor if passes is None else passes):
        maker.stats.passes += 1
        doc_buffer: list[Document] = []
        for doc in read_documents():
            if pass_index == 0:
                _count_input(maker.stats, doc)
            maker.pool.add(doc)
            if on_document is not None:
                on_document(doc)
            if len(doc_buffer) < options.shuffle_buffer_documents:
                doc_buffer.append(doc)
                continue
            j = rng.randrange(len(doc_buffer))
            doc_buffer[j], doc = doc, doc_buffer[j]
            for instance in maker.from_document(doc):
                yield from emit(count(instance))
        rng.shuffle(doc_buffer)
        for doc in doc_buffer:
            for instance in maker.from_document(doc):
                yield from emit(count(instance))
    rng.shuffle(instance_buffer)
    yield from instance_buffer


# --------------------------------------------------------------------------- files


def read_text_documents(files: Sequence[str], on_bytes: Callable[[int], None] | None = None,
                        encoding: str = textfiles.DEFAULT_ENCODING,
                        max_bad_fraction: float = textfiles.CORPUS_MAX_BAD_FRACTION,
                        on_skip: Callable[[str, int, str], None] | None = None
                        ) -> Iterator[list[str]]:
    """Documents in the reference's input format: one sentence per line, a blank line between
    documents (a new file also starts a new document). Reads one line at a time.

    Bytes are read through `tfbert.textfiles`: a UTF-8 byte-order mark is dropped, `encoding`
    decodes strictly, and a line whose bytes do not decode is dropped and counted as long as
    such lines stay within `max_bad_fraction` of the file's lines (by default one in 10,000,
    checked from 10,000 lines on); beyond that it is a `TextDecodeError` naming the file, the
    first bad line, its byte offset and the `--input_encoding` to pass.

    Args:
        files: sequence of str. Text files (local or any `tf.io.gfile` path).
        on_bytes: optional callback with the bytes read for each document (progress bars).
        encoding: str. The files' text encoding (`--input_encoding`).
        max_bad_fraction: float. Share of lines that may be dropped for undecodable bytes.
        on_skip: optional callback (path, line number, message) for each dropped line; without
            it each file with dropped lines logs one warning.
    """
    for path in files:
        document: list[str] = []
        read = 0
        skip = None if on_skip is None else functools.partial(on_skip, path)
        for text in textfiles.read_lines(path, encoding, max_bad_fraction, skip):
            if on_bytes is not None:
                read += len(text.encode(encoding, errors="replace"))
            line = text.strip()
            if line:
                document.append(line)
                continue
            if document:
                yield document
                document = []
            if on_bytes is not None:
                on_bytes(read)
                read = 0
        if document:
            yield document
        if on_bytes is not None and read:
            on_bytes(read)


def _describe_files(files: Sequence[str]) -> str:
    shown = ", ".join(files[:3])
    return shown + (f" (and {len(files) - 3} more files)" if len(files) > 3 else "")


def check_documents(documents: Iterable[list[str]], source: str) -> None:
    """A UserError unless `documents` holds two documents with text (next-sentence prediction
    draws the NotNext segment B from another document). Reads only as far as it needs to.

    Args:
        documents: iterable of list[str]. E.g. `read_text_documents(files)`.
        source: str. What the documents are, for the message (file names).
    """
    found: list[list[str]] = []
    try:
        for doc in documents:
            if any(s.strip() for s in doc):
                found.append(doc)
            if len(found) == 2:
                return
    finally:
        close = getattr(documents, "close", None)
        if close is not None:
            close()
    if not found:
        raise UserError(f"{source}: no documents (no line holds text; expected one sentence per "
                        "line and a blank line between documents)")
    sentences = sum(1 for s in found[0] if s.strip())
    raise UserError(f"{source}: only one document ({sentences} sentence(s)); next-sentence "
                    "prediction needs at least two, to draw NotNext segments from another "
                    "document: put a blank line between documents (a new input file also "
                    "starts one)")


def create_pretraining_data(output_file: str, vocab_file: str,
                            input_files: Sequence[str] | None = None,
                            options: InstanceOptions | None = None, seed: int = 12345,
                            num_shards: int = 1, whole_word_mask: bool = False,
                            gzip: bool = False, lower_case: bool = True,
                            progress: bool = True,
                            documents: Sequence[list[str]] | None = None,
                            encoding: str = textfiles.DEFAULT_ENCODING,
                            max_bad_fraction: float = textfiles.CORPUS_MAX_BAD_FRACTION,
                            output_format: str = "tfbert", max_predictions_per_seq: int = 20,
                            masked_lm_prob: float = 0.15, do_whole_word_mask: bool = False,
                            overwrite: bool = False) -> tuple[Stats, list[str]]:
    """Writes pretraining TFRecords (see `tfbert.data.records`) from text files, from
    in-memory `documents`, or (neither given) from the built-in Chinese corpus.

    In-memory documents (and the built-in corpus) are shuffled whole with `seed` first, as the
    reference does: a corpus in source order (the built-in one has People's Daily articles
    first, one-sentence reviews after) would otherwise drift from 50% NotNext (about 60%).

    Nothing is written for an input that cannot make pretraining data: no documents, or only
    one (a `UserError` before the tokenizer is even built). Shards are written under temporary
    names beside `output_file` and renamed only when all are complete, so an error or a kill
    never leaves a partial shard under the final name. Lines dropped for undecodable bytes and
    sentences longer than a pair holds (`max_seq_length - 3` tokens: cut to fit, the rest is
    lost) are counted in the returned `Stats` and reported in a warning.

    Args:
        output_file: str. Output path; with `num_shards` K > 1 the shards are
            `output_file-0000i-of-0000K`.
        vocab_file: str. WordPiece vocab (token counts must match the training tokenizer).
        input_files: sequence of str | None. Text files (one sentence per line, blank line
            between documents); None for the built-in corpus.
        options: InstanceOptions | None. Lengths, dupe factor, buffer sizes.
        seed: int. Random seed: the same input and seed give the same files.
        num_shards: int. Output shards (instances are dealt round-robin).
        whole_word_mask: bool. Store jieba word starts for whole-word masking.
        gzip: bool. GZIP-compressed records.
        lower_case: bool. As for `BertTokenizer` (use the training setting).
        progress: bool. Show a progress bar.
        documents: sequence of list[str] | None. Documents of sentences (instead of files).
        encoding: str. Text encoding of `input_files` (`--input_encoding`; the vocab is
            UTF-8, as tfbert writes it).
        max_bad_fraction: float. Share of a file's lines that may be dropped for undecodable
            bytes (see `read_text_documents`).
        output_format: str. "tfbert": text pairs, masked when read (`tfbert.data.records`).
            "google": google-research/bert's token ids with static masks, drawn here
            (`tfbert.data.google_records`); the instances are the same for the same input,
            options and seed.
        max_predictions_per_seq: int. google format: masked positions per record (P).
        masked_lm_prob: float. google format: share of non-special tokens masked.
        do_whole_word_mask: bool. google format: mask a token with its `##` pieces (and,
            with `whole_word_mask`, whole jieba words).
        overwrite: bool. Replace existing output files that tfbert did not write (ones it
            wrote, unchanged since, are replaced anyway: each gets a record
            `.NAME.tfbert.json` beside it, `tfbert.ownership`).

    Returns:
        (Stats, the shard paths written).

    Raises:
        UserError: no or one document, no instances, an unknown encoding, undecodable bytes
            beyond `max_bad_fraction`, bad options; an output path that is an input (a text
            file, the vocab) or an existing file tfbert did not write (without overwrite),
            refused before anything is read.
        FileNotFoundError: an input file does not exist.
    """
    import tensorflow as tf
    import tqdm

    from tfbert.data import corpora
    from tfbert.data import records as records_lib

    options = options or InstanceOptions()
    encoding = textfiles.check_encoding(encoding)
    if output_format not in records_lib.RECORD_FORMATS:
        raise UserError(f"output_format {output_format!r} is not one of "
                        f"{sorted(records_lib.RECORD_FORMATS)}")
    if output_format == records_lib.GOOGLE and not (
            1 <= max_predictions_per_seq <= options.max_seq_length):
        raise UserError(f"max_predictions_per_seq {max_predictions_per_seq} must be in "
                        f"[1, max_seq_length={options.max_seq_length}]")
    if output_format == records_lib.GOOGLE and not 0 < masked_lm_prob <= 1:
        raise UserError(f"masked_lm_prob {masked_lm_prob} is not in (0, 1]")
    if input_files and documents is not None:
        raise ValueError("pass input_files or documents, not both")
    final_paths = records_lib.shard_paths(output_file, num_shards)
    ownership.claim_files(final_paths, {"input_file": input_files, "vocab_file": vocab_file},
                          overwrite, "output_file")
    skipped: list[tuple[str, int, str]] = []
    reads = 0
    if input_files:
        source = _describe_files(input_files)
        check_documents(read_text_documents(input_files, encoding=encoding,
                                            max_bad_fraction=max_bad_fraction,
                                            on_skip=lambda *_: None), source)
        total = sum(tf.io.gfile.stat(f).length for f in input_files) * options.dupe_factor
        bar = tqdm.tqdm(total=total, unit="B", unit_scale=True, disable=not progress,
                        desc="pretraining data")

        def on_skip(path: str, line: int, message: str) -> None:
            if reads == 1:  # count the first pass only
                skipped.append((path, line, message))

        def read_texts() -> Iterator[list[str]]:
            nonlocal reads
            reads += 1
            return read_text_documents(input_files, on_bytes=bar.update, encoding=encoding,
                                       max_bad_fraction=max_bad_fraction, on_skip=on_skip)
    else:
        in_memory = list(corpora.chinese_documents() if documents is None else documents)
        source = "the built-in corpus" if documents is None else "documents"
        check_documents(in_memory, source)
        random.Random(seed).shuffle(in_memory)  # in memory anyway: shuffle whole
        bar = tqdm.tqdm(total=len(in_memory) * options.dupe_factor, unit="doc",
                        disable=not progress, desc=f"pretraining data ({source})")

        def read_texts() -> Iterator[list[str]]:
            for doc in in_memory:
                yield doc
                bar.update(1)

    spans = bert_word_spans(vocab_file, lower_case=lower_case)
    encoder = None
    if output_format == records_lib.GOOGLE:
        from tfbert.data.google_records import GoogleRecordEncoder

        encoder = GoogleRecordEncoder(vocab_file, options.max_seq_length,
                                      max_predictions_per_seq, masked_lm_prob,
                                      do_whole_word_mask, lower_case, seed=seed)
    stats = Stats()
    directory, name = os.path.split(output_file)
    writer = records_lib.ShardedWriter(os.path.join(directory, f".{name}.tmp-{os.getpid()}"),
                                       num_shards, gzip=gzip)
    try:
        with writer:
            for inst in create_instances_multi_pass(
                    lambda: tokenize_documents(read_texts(), spans, whole_word_mask), options,
                    seed, stats=stats):
                if encoder is None:
                    writer.write(records_lib.make_example(inst.text_a, inst.text_b,
                                                          inst.next_sentence_label,
                                                          inst.word_starts_a, inst.word_starts_b))
                else:
                    for record in encoder.add(inst):
                        writer.write(record)
                bar.set_postfix(instances=f"{stats.instances:,}", refresh=False)
            for record in encoder.flush() if encoder is not None else ():
                writer.write(record)
        stats.bad_lines = len(skipped)
        if stats.documents < 2 or stats.instances == 0:
            raise UserError(f"{source}: {stats.documents} document(s) with tokens made "
                            f"{stats.instances} instances; pretraining data needs at least two "
                            f"documents and one instance ({stats.summary()})")
        for temp, path in zip(writer.paths, final_paths, strict=True):
            tf.io.gfile.rename(temp, path, overwrite=True)
            ownership.record_file(path)  # .NAME.tfbert.json: a rerun may replace it
    except BaseException:
        for temp in writer.paths:
            with contextlib.suppress(Exception):
                tf.io.gfile.remove(temp)
        raise
    finally:
        bar.close()
    _warn(stats, options, skipped)
    return stats, final_paths


def _warn(stats: Stats, options: InstanceOptions, skipped: list[tuple[str, int, str]]) -> None:
    """One warning for each thing that was lost or went off balance."""
    if skipped:
        logger.warning("skipped %d line(s) with undecodable bytes (first: %s)", len(skipped),
                       skipped[0][2])
    if stats.long_sentences:
        logger.warning("%d of %d sentences are longer than the %d tokens a pair holds "
                       "(max_seq_length - 3): each is cut to fit and the rest of it is lost; "
                       "put one sentence per line", stats.long_sentences, stats.sentences,
                       stats.pair_tokens)
    share = stats.not_next_share
    noise = 3 * 0.5 / max(1, stats.instances) ** 0.5  # 3 binomial standard deviations
    if not options.balance_next_sentence or abs(share - 0.5) <= max(0.03, noise):
        return
    forced = stats.forced_not_next / max(1, stats.chunks)
    if forced > 0.5:
        reason = (f"{forced:.0%} of the chunks are one sentence long and so always NotNext: "
                  "the input is mostly one-sentence documents")
    elif stats.dropped > 0.05 * max(1, stats.chunks):
        reason = (f"{stats.dropped:,} of {stats.chunks:,} chunks found no pair (too few "
                  "documents, or words longer than the room)")
    else:
        reason = (f"the input has runs of one-sentence documents the document shuffle buffer "
                  f"({options.shuffle_buffer_documents}) cannot mix; a larger "
                  "shuffle_buffer_documents or interleaved input files help")
    logger.warning("NotNext share is %.1f%% (not 50%%): %s", 100 * share, reason)


__all__ = [
    "Document", "Instance", "InstanceMaker", "InstanceOptions", "Sentence", "Stats",
    "WordSpansFn", "bert_word_spans", "create_instances", "create_instances_multi_pass",
    "check_documents", "create_pretraining_data", "jieba_word_starts", "join_sentences",
    "joiner", "read_text_documents", "tokenize_documents", "truncate_pair",
]
