"""Sentence-pair instances for BERT pretraining, created from a stream of documents.

The algorithm behind `data_tools/create_pretraining_data.py` (files:
`tfbert.pretraining_data.instance_files`). It follows Google's reference
`create_pretraining_data.py` (`create_instances_from_document`): a target length (`max_seq_length -
3`, or with probability `short_seq_prob` a random length in [2, that]), segment A from consecutive
sentences, segment B the actual continuation 50% of the time and a span of a different document
otherwise (the unused sentences are put back), `truncate_seq_pair` from a random end of the longer
segment, `dupe_factor` passes, deterministic for a seed.

An instance holds TEXT, not token ids: the tf.data pipeline re-tokenizes it and masks
dynamically (fresh masks every epoch), so ids and masks are not frozen into the records.
(`output_format="google"` freezes one masking of the same instances into google-research/bert's
record format instead, for trainers that read that: `tfbert.pretraining_data.google_records`.)
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

Example:

```python
from tfbert.data import corpora
from tfbert.pretraining_data import documents, instances

spans = documents.bert_word_spans("vocab.txt")
docs = documents.tokenize_documents(iter(corpora.chinese_documents()), spans)
for inst in instances.create_instances(docs, instances.InstanceOptions(max_seq_length=128)):
    print(inst.text_a, inst.text_b, inst.next_sentence_label)
```
"""

from __future__ import annotations

import dataclasses
import random
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from tfbert.errors import UserError
from tfbert.pretraining_data.documents import Document, Sentence


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


# --------------------------------------------------------------------------- joining sentences


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
