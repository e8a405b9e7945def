"""Data for distillation: unlabelled in-domain text, its augmentation, and the teacher's outputs
cached in a TFRecord file.

Unlabelled text (the teacher labels it; the student learns from the teacher's outputs only):

    texts = read_unlabelled("reviews.txt", pair=False)        # one example per line
    texts = read_unlabelled("pairs.txt", pair=True)           # text<TAB>text_b per line
    texts = builtin_unlabelled("reviews", exclude=dev_and_test_texts)

A file holds one example per UTF-8 line (`--input_encoding` for another); blank lines are
skipped and counted; for a sentence-pair teacher a tab separates the two texts, and a line
without exactly one tab, or with an empty side, is a UserError naming file:line. The built-in
sources are the built-in corpus (`tfbert.data.corpora`) cut the way the built-in tasks cut it,
and only the part those tasks train on, so none of it is dev or test text: "reviews" is every
review in the sentiment task's train split (whole reviews: the sentiment task's examples),
"people_daily" every People's Daily sentence of the NER corpus's train split (the NER and
people_daily_types examples). Texts in `exclude` (the run's own dev/test and labelled training
texts) are left out as well.

Augmentation (`augment_texts`, off unless asked for) is TinyBERT's recipe (Jiao et al., 2020:
N copies of each training text, each word replaced with probability p, the teacher labelling
every copy) with a replacement that works for character-level Chinese, which has no word
vectors or word-level MLM in tfbert: jieba segments the text and tags each word's part of
speech; a Chinese noun, name, verb or adjective is replaced by a word of the same part of speech
and the same number of characters drawn uniformly from the 500 most frequent such words of
jieba's own dictionary (349,046 words with frequencies and POS tags, shipped in the jieba
package; words counted under 50 times left out). The text keeps its
length and its grammatical frame; the words change, so the teacher's labels on the copies show
the student how the teacher responds to the content. Non-Chinese words are kept as they are.

The teacher cache (`teacher_outputs`) holds the teacher's logits for the exact rows a run
trains on, so a rerun does not run the teacher. Its first record is a JSON header with the key:
a fingerprint of the teacher's weights, a fingerprint of the packed inputs (input_ids,
input_mask, segment_ids: the data, the augmentation, the vocab, the casing and the
max_seq_length all change it), max_seq_length and the row count. A cache with another key is
never used: a cache tfbert wrote is recomputed and replaced (a warning says what changed);
any other file is refused. Writes go to a temporary file renamed over the target, with
tfbert's record beside it (`tfbert.ownership.record_file`).

Example:
>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "unlabelled.txt")
>>> _ = open(path, "w", encoding="utf-8").write("质量很好\\n\\n物流太慢了\\n")
>>> [(t.text, t.source.rsplit("/", 1)[-1]) for t in read_unlabelled(path, pair=False)]
[('质量很好', 'unlabelled.txt:1'), ('物流太慢了', 'unlabelled.txt:3')]
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfbert import ownership, textfiles
from tfbert.data import corpora, splits
from tfbert.data.ner.readers import people_daily_ner
from tfbert.errors import UserError

logger = logging.getLogger(__name__)

BUILTIN_SOURCES = ("reviews", "people_daily")
CACHE_FORMAT = "tfbert-teacher-logits"
CACHE_VERSION = 1
# The key entries a cache must match (the others describe it for messages).
CACHE_KEY_FIELDS = ("teacher", "inputs", "max_seq_length", "rows")
# Augmentation: candidates per (part of speech, length) bucket of jieba's dictionary: content
# words only (nouns and names, verbs, adjectives: jieba tags starting n, v, a), at least
# MIN_FREQUENCY in its counts (rarer ones are mostly archaic characters), the most frequent
# REPLACEMENT_POOL of each bucket.
REPLACED_TAGS = ("n", "v", "a")
MIN_FREQUENCY = 50
REPLACEMENT_POOL = 500


@dataclasses.dataclass(frozen=True)
class UnlabelledText:
    """One unlabelled example: a text (and its pair's second text), and where it came from."""

    text: str
    text_b: str | None = None
    source: str = ""


# --- unlabelled text -----------------------------------------------------------------------------


def read_unlabelled(path: str, pair: bool, encoding: str = textfiles.DEFAULT_ENCODING
                    ) -> list[UnlabelledText]:
    """The examples of an unlabelled text file (module docstring).

    Raises:
        UserError: a pair line without exactly one tab or with an empty side, undecodable
            bytes, a file with no example (each naming the file and line).
        FileNotFoundError: no such file.
    """
    textfiles.check_file(path, "unlabelled_file")
    out, blank = [], 0
    for number, line in enumerate(textfiles.read_lines(path, encoding), 1):
        line = line.rstrip("\r\n")
        if not line.strip():
            blank += 1
            continue
        source = f"{path}:{number}"
        if not pair:
            out.append(UnlabelledText(line.strip(), None, source))
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            found = (f"{len(parts) - 1} tabs" if len(parts) != 2 else "an empty side")
            raise UserError(f"{source}: the teacher takes sentence pairs, so a line is "
                            f"text<TAB>text_b (one tab, two non-empty texts); this one has "
                            f"{found}")
        out.append(UnlabelledText(parts[0].strip(), parts[1].strip(), source))
    if not out:
        raise UserError(f"{path}: no unlabelled examples (every line is blank)")
    if blank:
        logger.info("%s: %d examples, %d blank lines skipped", path, len(out), blank)
    return out


def builtin_unlabelled(source: str, exclude: Iterable[str] = ()) -> list[UnlabelledText]:
    """The built-in unlabelled text `source` ("reviews" or "people_daily"; module docstring),
    without the texts in `exclude`, in a fixed pseudo-random order (a hash of the text)."""
    if source not in BUILTIN_SOURCES:
        raise UserError(f"unlabelled_builtin must be one of {BUILTIN_SOURCES}, got {source!r}")
    if source == "reviews":
        texts = [text for text, _ in corpora.reviews() if splits.review_split(text) == "train"]
    else:
        texts = [e.text for e in people_daily_ner("train")]
    skip = set(exclude)
    kept = sorted({t for t in texts if t not in skip},
                  key=lambda t: hashlib.sha1(t.encode("utf-8")).digest())
    return [UnlabelledText(t, None, f"builtin:{source}") for t in kept]


# --- augmentation --------------------------------------------------------------------------------


def _is_chinese(word: str) -> bool:
    return bool(word) and all("\u4e00" <= ch <= "\u9fff" for ch in word)


@functools.lru_cache(maxsize=1)
def _replacement_words() -> dict[tuple[str, int], list[str]]:
    """(part of speech, length) -> the REPLACEMENT_POOL most frequent Chinese words of jieba's
    dictionary with that tag and length (REPLACED_TAGS, MIN_FREQUENCY)."""
    import jieba  # slow to import; only augmentation needs it here

    buckets: dict[tuple[str, int], list[tuple[int, str]]] = {}
    with jieba.get_dict_file() as f:
        for raw in f:
            parts = raw.decode("utf-8").split()
            if (len(parts) == 3 and parts[2].startswith(REPLACED_TAGS) and _is_chinese(parts[0])
                    and int(parts[1]) >= MIN_FREQUENCY):
                buckets.setdefault((parts[2], len(parts[0])), []).append((int(parts[1]),
                                                                          parts[0]))
    return {key: [w for _, w in sorted(words, reverse=True)[:REPLACEMENT_POOL]]
            for key, words in buckets.items()}


def _tagger() -> Callable[[str], list[tuple[str, str]]]:
    import jieba
    import jieba.posseg

    jieba.setLogLevel(logging.WARNING)  # no "Building prefix dict..." chatter
    return lambda text: [(p.word, p.flag) for p in jieba.posseg.lcut(text)]


def augment_texts(texts: Sequence[str], copies: int, replace_prob: float, seed: int
                  ) -> list[list[str]]:
    """`copies` augmented versions of each text (module docstring): per text a list of at
    most `copies` distinct texts that differ from it (a draw that replaced nothing, or repeats
    one, is dropped).

    Args:
        texts: the texts to augment.
        copies: int. Versions drawn per text (TinyBERT: 20).
        replace_prob: float. Chance that a Chinese word with candidates is replaced
            (TinyBERT's p = 0.4).
        seed: int. The draws follow it.
    """
    if copies < 1:
        return [[] for _ in texts]
    if not 0 < replace_prob <= 1:
        raise UserError(f"augment_replace_prob must be in (0, 1], got {replace_prob}")
    pools, tag, rng = _replacement_words(), _tagger(), random.Random(seed)
    out = []
    for text in texts:
        words = tag(text)
        made: list[str] = []
        for _ in range(copies):
            pieces = []
            for word, flag in words:
                pool = pools.get((flag, len(word))) if _is_chinese(word) else None
                if pool and rng.random() < replace_prob:
                    word = pool[rng.randrange(len(pool))]
                pieces.append(word)
            new = "".join(pieces)
            if new != text and new not in made:
                made.append(new)
        out.append(made)
    return out


# --- the teacher cache ---------------------------------------------------------------------------


def fingerprint(arrays: Iterable[Any]) -> str:
    """sha256 over the dtype, shape and bytes of each array, in order (16 hex digits)."""
    digest = hashlib.sha256()
    for array in arrays:
        array = np.ascontiguousarray(np.asarray(array))
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()[:16]


def cache_key(teacher_weights: Sequence[Any], inputs: dict[str, np.ndarray],
              **described: Any) -> dict[str, Any]:
    """The key of the teacher's outputs on `inputs`: the fingerprints of the teacher's weights
    and of the packed inputs, max_seq_length and the row count, plus `described` entries
    (teacher_dir, data: shown in messages, not compared)."""
    names = ("input_ids", "input_mask", "segment_ids")
    ids = np.asarray(inputs["input_ids"])
    return {"teacher": fingerprint(teacher_weights),
            "inputs": fingerprint(inputs[n] for n in names),
            "max_seq_length": int(ids.shape[1]), "rows": int(ids.shape[0]), **described}


def read_cache(path: str) -> tuple[dict[str, Any], np.ndarray]:
    """(header, logits) of a teacher cache file.

    Raises:
        UserError: the file is not a complete teacher cache tfbert wrote.
    """
    try:
        records = [r.numpy() for r in tf.data.TFRecordDataset(path)]
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
        raise UserError(f"teacher_cache {path} is not a TFRecord file tfbert wrote "
                        f"({e.message.splitlines()[0]})") from None
    header = _header(records[0] if records else b"")
    if header is None:
        raise UserError(f"teacher_cache {path} is not a teacher cache (its first record is "
                        f"not a {CACHE_FORMAT} header); move it away or choose another path")
    shape = tuple(header["shape"])
    if len(records) - 1 != shape[0]:
        raise UserError(f"teacher_cache {path} holds {len(records) - 1} rows, its header "
                        f"{shape[0]}: it is incomplete; delete it to recompute it")
    row = np.dtype(np.float32).itemsize * int(np.prod(shape[1:], dtype=np.int64))
    if any(len(r) != row for r in records[1:]):
        raise UserError(f"teacher_cache {path} has rows of the wrong size: delete it to "
                        "recompute it")
    logits = np.frombuffer(b"".join(records[1:]), "<f4").reshape(shape)
    return header, logits.astype(np.float32)


def _header(record: bytes) -> dict[str, Any] | None:
    try:
        header = json.loads(record.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(header, dict) or header.get("format") != CACHE_FORMAT:
        return None
    return header


def write_cache(path: str, key: dict[str, Any], logits: np.ndarray) -> None:
    """Writes the cache (a temporary file renamed over `path`, then tfbert's record of it)."""
    logits = np.asarray(logits, "<f4")
    header = {"format": CACHE_FORMAT, "version": CACHE_VERSION, "key": key,
              "shape": list(logits.shape), "dtype": "float32"}
    directory, name = os.path.split(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    temp = os.path.join(directory, f".{name}.tmp-{os.getpid()}")
    try:
        with tf.io.TFRecordWriter(temp) as writer:
            writer.write(json.dumps(header, sort_keys=True).encode("utf-8"))
            for row in logits:
                writer.write(row.tobytes())
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.remove(temp)
        raise
    ownership.record_file(path)  # .NAME.tfbert.json: a later run may replace it


def key_difference(cached: dict[str, Any], key: dict[str, Any]) -> str | None:
    """What differs between a cache's key and the run's (None: they match)."""
    differences = []
    for field in CACHE_KEY_FIELDS:
        if cached.get(field) != key.get(field):
            what = {"teacher": "the teacher's weights", "inputs": "the packed inputs (data, "
                    "augmentation, vocab, casing or max_seq_length)"}.get(field, field)
            extra = "" if field in ("teacher", "inputs") else \
                f" ({cached.get(field)} there, {key.get(field)} here)"
            differences.append(what + extra)
    if not differences:
        return None
    made = ", ".join(f"{k} {cached[k]}" for k in ("teacher_dir", "data") if k in cached)
    return "; ".join(differences) + (f" (it was made for {made})" if made else "")


def teacher_outputs(path: str | None, key: dict[str, Any],
                    compute: Callable[[], np.ndarray]) -> tuple[np.ndarray, str]:
    """The teacher's logits on the run's rows: from the cache at `path` when its key matches,
    else `compute()`d (and written to `path` when given).

    Returns:
        (logits, what happened: "computed", "cache written", "cache reused" or "cache
        recomputed: <what differed>").

    Raises:
        UserError: `path` is a folder, or a file tfbert did not write whose key does not match
            (or that is no cache at all).
    """
    if path is None:
        return compute(), "computed"
    if os.path.isdir(path):
        raise UserError(f"teacher_cache {path} is a folder; it names a file")
    if not os.path.exists(path):
        logits = compute()
        write_cache(path, key, logits)
        logger.info("teacher outputs written to %s", path)
        return logits, "cache written"
    owned = ownership.is_owned_file(path)
    try:
        header, logits = read_cache(path)
        difference = key_difference(header.get("key", {}), key)
    except UserError:
        if not owned:
            raise
        header, difference = {}, "it is damaged or incomplete"
    if difference is None:
        logger.info("teacher outputs read from %s (the same teacher and inputs)", path)
        return logits, "cache reused"
    if not owned:
        raise UserError(f"teacher_cache {path} was made for other settings ({difference}), "
                        "and tfbert did not write this file (or it changed since), so it is "
                        "not replaced: choose another path, or move it away")
    logger.warning("teacher_cache %s does not fit this run: %s; recomputing it", path,
                   difference)
    logits = compute()
    write_cache(path, key, logits)
    return logits, f"cache recomputed: {difference}"
