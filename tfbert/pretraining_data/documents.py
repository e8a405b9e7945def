"""Documents as instance making reads them: sentences, each with its words' spans and tokens.

Words are BERT's basic-tokenizer words (a word and all its `##` pieces), so cutting a segment at a
word boundary keeps the count of its WordPiece tokens exact (`tfbert.pretraining_data.instances`).
With whole-word masking each sentence also carries the start chars of its jieba words.

Example:

```python
from tfbert.data import corpora
from tfbert.pretraining_data import documents

spans = documents.bert_word_spans("vocab.txt")
for doc in documents.tokenize_documents(iter(corpora.chinese_documents()), spans):
    print(doc.index, [s.num_tokens for s in doc.sentences])
```
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import tensorflow as tf

from tfbert.text.tokenizer import BertTokenizer

# A word-spans function maps a batch of sentences to one int32 [W, 3] array per sentence:
# (start char, end char, number of WordPiece tokens) of each basic-tokenizer word, in order.
WordSpansFn = Callable[[Sequence[str]], list[np.ndarray]]


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
    import jieba  # slow to import, and only whole-word masking needs it

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
