"""Builds a WordPiece vocab from text, laid out like Google's BERT vocabs.

Layout: [PAD], [unused1] ... [unused99], [UNK], [CLS], [SEP], [MASK] (so the specials get the
familiar ids 0, 100, 101, 102, 103), then every character of the text, most frequent first
(letters and digits also as "##" continuations), then multi-character word pieces in the order
they were learned.

Words are counted after `tfbert.BertTokenizer`'s own normalization and splitting (the
reference's), so the pieces are exactly the strings WordPiece will look for. Pieces are learned
by byte-pair-style merges of the most frequent adjacent pair, as the `tokenizers` WordPiece
trainer does, but deterministically (that trainer breaks ties by hash-map order, so two runs on
the same text give different vocabs); on the built-in corpus the two give the same held-out
[UNK] rate and token counts within 0.1%. TF Text's `bert_vocab_from_dataset` counts words with
TF Text's NFKC case folding, which learns "," where the reference tokenizer sees "，".

Chinese text yields far fewer pieces than BERT's 21,128 slots (one character is one word). The
remaining slots go to the characters of GB2312 (the 6,763 common hanzi), then of GBK, then of the
CJK Unified Ideographs block, so held-out text rarely meets [UNK]; a corpus with little CJK text
gets further [unusedN] slots instead.

Input files are read through `tfbert.textfiles` as the pretraining corpus is: UTF-8 unless
`encoding` names another (gb18030, ...), a BOM dropped, and a line with undecodable bytes dropped
and counted (`lines_skipped` in the summary) while such lines stay within one in 10,000 of a
file's lines; beyond that it is an error naming the file, line, byte offset and the flag to pass.
"""

from __future__ import annotations

import collections
import functools
import heapq
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from tqdm.auto import tqdm

from tfbert import fileio, ownership, textfiles
from tfbert.text import vocab as vocab_lib
from tfbert.text.tokenizer import BertTokenizer

logger = logging.getLogger(__name__)

DEFAULT_VOCAB_SIZE = 21128  # bert-base-chinese
NUM_UNUSED = 99  # [unused1] ... [unused99], as in bert-base-chinese
CJK_FILL_SHARE = 0.1  # fill spare slots with hanzi when at least this share of characters is CJK
_CJK_RE = re.compile("[\u4e00-\u9fff]")
_SPLITTER_VOCAB = [*vocab_lib.SPECIAL_TOKENS, "a"]  # split_words looks nothing up; any vocab does


def reserved_tokens(num_unused: int = NUM_UNUSED) -> list[str]:
    """[PAD], [unused1..num_unused], [UNK], [CLS], [SEP], [MASK]."""
    return ([vocab_lib.PAD] + [f"[unused{i}]" for i in range(1, num_unused + 1)]
            + [vocab_lib.UNK, vocab_lib.CLS, vocab_lib.SEP, vocab_lib.MASK])


def build_vocab(texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB_SIZE,
                lower_case: bool = True, min_frequency: int = 2, num_unused: int = NUM_UNUSED,
                cjk_fill: bool | None = None, show_progress: bool = True) -> list[str]:
    """Learns a WordPiece vocab of exactly `vocab_size` tokens (deterministic).

    Args:
        texts: iterable of str. Training text, one sentence or paragraph per item.
        vocab_size: int. Tokens in the result, specials and [unusedN] slots included.
        lower_case: bool. Build an uncased vocab (for `BertTokenizer(lower_case=True)`).
        min_frequency: int. Least count of a pair merged into a piece.
        num_unused: int. [unusedN] slots before [UNK].
        cjk_fill: bool or None. Fill slots the pieces leave empty with common hanzi; None:
            when at least 10% of the text's characters are CJK ideographs.
        show_progress: bool. A progress bar over the texts.

    Returns:
        The tokens in id order.
    """
    reserved = reserved_tokens(num_unused)
    if vocab_size < len(reserved) + 1:
        raise ValueError(f"vocab_size {vocab_size} leaves no room next to the {len(reserved)} "
                         f"special and [unused] tokens")
    budget = vocab_size - len(reserved)
    word_counts, cjk_share = count_words(texts, lower_case=lower_case,
                                         show_progress=show_progress)
    tokens = learn_wordpieces(word_counts, budget, min_frequency=min_frequency)

    if cjk_fill is None:
        cjk_fill = cjk_share >= CJK_FILL_SHARE
    if len(tokens) < budget and cjk_fill:
        present = set(tokens)
        extra = [c for c in _common_hanzi() if c not in present]
        logger.info("%d tokens learned; filling %d slots with common hanzi", len(tokens),
                    min(budget - len(tokens), len(extra)))
        tokens += extra[:budget - len(tokens)]
    if len(tokens) < budget:
        logger.warning("the text supports %d tokens; %d more [unusedN] slots fill vocab_size "
                       "%d", len(tokens) + len(reserved), budget - len(tokens), vocab_size)
        tokens += [f"[unused{i}]" for i in range(num_unused + 1,
                                                  num_unused + 1 + budget - len(tokens))]
    return vocab_lib.check_vocab(reserved + tokens, source="built vocab")


def count_words(texts: Iterable[str], lower_case: bool = True, batch_size: int = 4096,
                show_progress: bool = True) -> tuple[collections.Counter, float]:
    """Counts the words `BertTokenizer` hands to WordPiece (normalized, split).

    Returns:
        (Counter word -> count, share of CJK ideographs among the characters read).
    """
    split = _word_splitter(lower_case)
    counts: collections.Counter = collections.Counter()
    chars = cjk = 0
    batch: list[str] = []
    bar = tqdm(desc="vocab: counting words", unit=" lines", disable=not show_progress,
               mininterval=1.0)

    def flush() -> None:
        counts.update(w.decode("utf-8") for w in split(tf.constant(batch)).numpy())
        bar.update(len(batch))
        batch.clear()

    for text in texts:
        chars += len(text)
        cjk += len(_CJK_RE.findall(text))
        batch.append(text)
        if len(batch) == batch_size:
            flush()
    if batch:
        flush()
    bar.close()
    return counts, cjk / max(chars, 1)


def learn_wordpieces(word_counts: dict[str, int], budget: int,
                     min_frequency: int = 2) -> list[str]:
    """WordPiece tokens from word counts, by byte-pair-style merges (as the `tokenizers`
    WordPiece trainer learns them, but deterministic: equal counts merge in string order).

    Characters come first, most frequent first, each also as a "##" continuation unless the
    tokenizer always makes it a word of its own (punctuation, CJK); then the merged pieces in
    the order they were learned, while the count of the best pair is at least min_frequency.

    Args:
        word_counts: dict word -> count. Normalized words.
        budget: int. Most tokens to return.
        min_frequency: int. Least pair count to merge.

    Returns:
        At most `budget` tokens.
    """
    char_counts: collections.Counter = collections.Counter()
    for word, count in word_counts.items():
        for ch in word:
            char_counts[ch] += count
    chars = sorted(char_counts, key=lambda c: (-char_counts[c], c))
    alone = _split_alone(chars)
    tokens: list[str] = []
    for ch in chars:  # by frequency, each with its continuation form
        tokens += [ch] if alone[ch] else [ch, "##" + ch]
    tokens = tokens[:budget]
    known = set(tokens)

    # Words as symbol lists: "word" -> ["w", "##o", "##r", "##d"].
    words: list[list[str]] = []
    counts: list[int] = []
    for word, count in sorted(word_counts.items()):
        symbols = [word[0]] + ["##" + ch for ch in word[1:]]
        if len(symbols) > 1 and all(x in known for x in symbols):
            words.append(symbols)
            counts.append(count)
    pair_count: collections.Counter = collections.Counter()
    pair_words: dict[tuple[str, str], set[int]] = collections.defaultdict(set)
    for i, symbols in enumerate(words):
        for pair in zip(symbols, symbols[1:], strict=False):
            pair_count[pair] += counts[i]
            pair_words[pair].add(i)
    heap = [(-n, _merge(*pair), pair) for pair, n in pair_count.items()]
    heapq.heapify(heap)
    while heap and len(tokens) < budget:
        negative, merged, pair = heapq.heappop(heap)
        current = pair_count.get(pair, 0)
        if current != -negative:  # stale entry
            if current > 0:
                heapq.heappush(heap, (-current, merged, pair))
            continue
        if current < min_frequency:
            break
        del pair_count[pair]
        if merged not in known:
            tokens.append(merged)
            known.add(merged)
        touched: set[tuple[str, str]] = set()
        for i in sorted(pair_words.pop(pair, ())):
            old = words[i]
            new = _merge_word(old, pair, merged)
            if new is old:
                continue
            for p in zip(old, old[1:], strict=False):
                if p != pair:
                    pair_count[p] -= counts[i]
                    touched.add(p)
            for p in zip(new, new[1:], strict=False):
                pair_count[p] += counts[i]
                pair_words[p].add(i)
                touched.add(p)
            words[i] = new
        for p in touched:
            if pair_count.get(p, 0) > 0:
                heapq.heappush(heap, (-pair_count[p], _merge(*p), p))
    return tokens


def write_vocab(tokens: Sequence[str], path: str) -> None:
    """Writes one token per line (UTF-8), after checking the vocab, atomically."""
    tokens = vocab_lib.check_vocab(tokens, source=path)
    bad = [t for t in tokens if "\n" in t or "\r" in t]
    if bad:
        raise ValueError(f"tokens with line breaks cannot be written to {path}: {bad[:3]}")
    fileio.write_text(path, "\n".join(tokens) + "\n")  # temp + rename: never half a vocab


def unk_rate(vocab_file: str, texts: Sequence[str], lower_case: bool = True,
             batch_size: int = 1024) -> dict[str, float]:
    """Share of [UNK] among the tokens `BertTokenizer` makes of `texts`.

    Returns:
        {"unk_rate": float, "tokens": int, "unk_tokens": int, "lines": int}.
    """
    tokenizer = BertTokenizer(vocab_file, lower_case=lower_case)
    total = unknown = 0
    for start in range(0, len(texts), batch_size):
        ids = tokenizer.tokenize(tf.constant(list(texts[start:start + batch_size])))
        flat = ids.flat_values.numpy()
        total += flat.size
        unknown += int(np.sum(flat == tokenizer.unk_id))
    return {"unk_rate": unknown / max(total, 1), "tokens": total, "unk_tokens": unknown,
            "lines": len(texts)}


def read_text_files(patterns: str | Sequence[str], encoding: str = textfiles.DEFAULT_ENCODING,
                    max_bad_fraction: float = textfiles.CORPUS_MAX_BAD_FRACTION,
                    on_skip: Callable[[str, int, str], None] | None = None) -> Iterator[str]:
    """Non-empty lines (stripped) of the files matching comma-separated glob patterns.

    Args:
        patterns: str or sequence of str. Globs (local or `tf.io.gfile` paths); each must match.
        encoding: str. The files' text encoding.
        max_bad_fraction: float. Share of a file's lines that may be dropped for undecodable
            bytes (see `tfbert.textfiles.read_lines`).
        on_skip: optional callback (path, line number, message) for each dropped line; without
            it each file with dropped lines logs one warning.

    Raises:
        FileNotFoundError: a pattern that matches no file.
        TextDecodeError: undecodable bytes beyond `max_bad_fraction`.
    """
    textfiles.check_encoding(encoding)
    if isinstance(patterns, str):
        patterns = [p for p in patterns.split(",") if p.strip()]
    files: set[str] = set()
    for pattern in (p.strip() for p in patterns):
        matched = ownership.visible_matches(pattern, tf.io.gfile.glob(pattern))
        if not matched:
            raise FileNotFoundError(f"no file matches {pattern!r}")
        files.update(matched)
    if not files:
        raise FileNotFoundError(f"no file matches {list(patterns)}")
    for name in sorted(files):
        skip = None if on_skip is None else functools.partial(on_skip, name)
        for line in textfiles.read_lines(name, encoding, max_bad_fraction, skip):
            line = line.strip()
            if line:
                yield line


# --- helpers ---------------------------------------------------------------------------------

def _merge(left: str, right: str) -> str:
    return left + right.removeprefix("##")


def _merge_word(symbols: list[str], pair: tuple[str, str], merged: str) -> list[str]:
    """symbols with every (left, right) occurrence of pair replaced by merged (same list if
    the pair is not there)."""
    out: list[str] = []
    i, changed = 0, False
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == pair[0] and symbols[i + 1] == pair[1]:
            out.append(merged)
            i += 2
            changed = True
        else:
            out.append(symbols[i])
            i += 1
    return out if changed else symbols


@functools.cache
def _word_splitter(lower_case: bool) -> Any:
    """texts tf.string [B] -> their words, flat tf.string [W] (one traced function per mode)."""
    splitter = BertTokenizer(_SPLITTER_VOCAB, lower_case=lower_case)
    return tf.function(lambda x: splitter.split_words(x).flat_values,
                       input_signature=[tf.TensorSpec([None], tf.string)])


def _split_alone(chars: Sequence[str]) -> dict[str, bool]:
    """Whether the tokenizer makes each character a word of its own (punctuation, CJK)."""
    if not chars:
        return {}
    splitter = BertTokenizer(_SPLITTER_VOCAB, lower_case=False)
    words = splitter.split_words(tf.constant([f"a{c}a" for c in chars])).row_lengths().numpy()
    return {c: n != 1 for c, n in zip(chars, words, strict=True)}


def is_cjk(ch: str) -> bool:
    """A CJK Unified Ideograph (the block or its Extension A)."""
    return "\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf"


def _common_hanzi() -> list[str]:
    """GB2312 hanzi (level 1 then 2), then the rest of GBK's, then the CJK Unified Ideographs
    block, each in its encoding's order (no duplicates)."""
    out: list[str] = []
    for codec, lead_bytes, trail_bytes in (
            ("gb2312", range(0xB0, 0xF8), range(0xA1, 0xFF)),
            ("gbk", range(0x81, 0xFF), range(0x40, 0xFF))):
        for lead in lead_bytes:
            for trail in trail_bytes:
                try:
                    ch = bytes([lead, trail]).decode(codec)
                except UnicodeDecodeError:
                    continue
                if len(ch) == 1 and is_cjk(ch):
                    out.append(ch)
    out += [chr(c) for c in range(0x4E00, 0xA000)]
    return _unique(out)


def _unique(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    return [x for x in items if not (x in seen or seen.add(x))]
