"""Reading users' text files: bytes are checked, never guessed.

Every tfbert reader of a user's text (pretraining corpus, vocab, TSV/CSV/JSONL, CoNLL, SQuAD
JSON) goes through this module, so they all behave the same way:

- A UTF-8 byte-order mark at the start of a file is dropped (Windows editors write one; left in,
  it becomes part of the first header or token).
- The encoding is UTF-8 unless the caller passes another (`--input_encoding=gb18030` for GBK /
  GB2312 text; any name Python's codecs know).
- Bytes that do not decode are an error naming the file, the line, the byte offset and the flag
  to use. Structured files (tables, CoNLL, JSON, vocab) allow none. A pretraining corpus may
  allow a tiny share (`max_bad_fraction`): those lines are dropped, not patched with U+FFFD,
  counted, and reported once per file with the first one's place. The corpus readers (pretraining
  data, vocab building) allow `CORPUS_MAX_BAD_FRACTION` = 1e-4: at most one line in 10,000.
- UTF-16 / UTF-32 files (whose line break is not the byte 0x0A) are decoded whole, strictly
  (no line is skipped), then split into lines.

Example:
>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "a.txt")
>>> _ = open(path, "wb").write("\\ufefftext\\tlabel\\n好\\t1\\n".encode("utf-8"))
>>> [line.rstrip("\\n") for line in read_lines(path)]
['text\\tlabel', '好\\t1']
>>> _ = open(path, "wb").write("好\\n".encode("gbk"))
>>> list(read_lines(path))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
tfbert.textfiles.TextDecodeError: ...a.txt:1: bytes b'\\xba\\xc3' at byte offset 0 are not
valid utf-8 (they decode as gb18030: pass --input_encoding=gb18030)
"""

from __future__ import annotations

import codecs
import logging
import os
from collections.abc import Callable, Iterator

from tfbert.errors import UserError

logger = logging.getLogger(__name__)

__all__ = ["CORPUS_MAX_BAD_FRACTION", "DEFAULT_ENCODING", "TextDecodeError", "check_encoding",
           "read_lines", "read_text"]

DEFAULT_ENCODING = "utf-8"
# Share of lines of a raw-text corpus that may hold undecodable bytes (dropped and counted): a
# stray bad line in a web crawl is tolerated, a file in the wrong encoding is not.
CORPUS_MAX_BAD_FRACTION = 1e-4
_BOM = codecs.BOM_UTF8
_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
# Encodings tried, in order, to suggest a flag when the bytes are not the one asked for.
_SUGGEST = ("utf-8", "gb18030", "big5", "utf-16")
_MIN_LINES_FOR_FRACTION = 10_000


class TextDecodeError(UserError):
    """Bytes of a text file that are not valid in the encoding it is read with."""


def check_encoding(encoding: str) -> str:
    """The codec's canonical name; a UserError for a name Python does not know."""
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        raise UserError(f"unknown text encoding {encoding!r} (--input_encoding takes a Python "
                        "codec name such as utf-8, gb18030, gbk, big5)") from None


def _open_binary(path: str):
    if "://" in path:  # gs://, hdfs://, ...: TensorFlow's file systems
        import tensorflow as tf

        return tf.io.gfile.GFile(path, "rb")
    return open(path, "rb")


def _describe(path: str, line: int, offset: int, raw: bytes, error: UnicodeDecodeError,
              encoding: str) -> str:
    bad = raw.rstrip(b"\r\n")[error.start:error.end + 3][:8]
    if line == 1 and offset == 0 and raw.startswith(_UTF16_BOMS) and not _is_wide(encoding):
        hint = "the file starts with a UTF-16 byte-order mark: pass --input_encoding=utf-16"
    else:
        hint = next((f"they decode as {e}: pass --input_encoding={e}" for e in _SUGGEST
                     if codecs.lookup(e).name != codecs.lookup(encoding).name
                     and _decodes(raw, e)),
                    "pass --input_encoding=NAME with the file's encoding, or convert it to UTF-8")
    return (f"{path}:{line}: bytes {bad!r} at byte offset {offset + error.start} are not valid "
            f"{encoding} ({hint})")


def _decodes(raw: bytes, encoding: str) -> bool:
    try:
        raw.decode(encoding)
    except UnicodeDecodeError:
        return False
    return True


def _is_wide(encoding: str) -> bool:
    """True for codecs whose line break is not the single byte 0x0A (UTF-16, UTF-32)."""
    return codecs.lookup(encoding).name.startswith(("utf-16", "utf-32"))


def _wide_lines(f, path: str, encoding: str) -> Iterator[str]:
    """The lines of a UTF-16/32 file, decoded whole (no per-line byte offsets to keep)."""
    data = f.read()
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as e:
        line = data[:e.start].decode(encoding, errors="replace").count("\n") + 1
        raise TextDecodeError(_describe(path, line, 0, data[:e.end], e, encoding)) from None
    lines = text.split("\n")
    yield from (x + "\n" for x in lines[:-1])
    if lines[-1]:
        yield lines[-1]


def read_lines(path: str, encoding: str = DEFAULT_ENCODING, max_bad_fraction: float = 0.0,
               on_skip: Callable[[int, str], None] | None = None) -> Iterator[str]:
    """The decoded lines of a text file, each with its line ending, BOM dropped.

    Args:
        path: str. A local path or any `tf.io.gfile` path (gs://...).
        encoding: str. The file's text encoding.
        max_bad_fraction: float. Share of lines allowed to hold undecodable bytes; such lines
            are skipped and counted. 0 (tables, CoNLL, vocab): the first one is an error. Above
            0 the share is checked once 10,000 lines are read and at the end of the file.
        on_skip: callable or None. Called with (line number, message) for each skipped line;
            when given, the caller reports the skipped lines (no warning is logged here).

    Yields:
        str lines (line numbers are their 1-based position in the file, skipped lines included).

    Raises:
        FileNotFoundError: no such file.
        TextDecodeError: undecodable bytes beyond `max_bad_fraction`.
    """
    encoding = check_encoding(encoding)
    if "://" not in path and not os.path.isfile(path):
        raise FileNotFoundError(f"no such file: {path}")
    bad: list[tuple[int, str]] = []
    line_number = offset = 0
    with _open_binary(path) as f:
        if _is_wide(encoding):
            yield from _wide_lines(f, path, encoding)
            return
        for raw in f:
            line_number += 1
            if line_number == 1 and raw.startswith(_BOM) and encoding == "utf-8":
                raw, offset = raw[len(_BOM):], len(_BOM)
            try:
                text = raw.decode(encoding)
            except UnicodeDecodeError as e:
                message = _describe(path, line_number, offset, raw, e, encoding)
                bad.append((line_number, message))
                if len(bad) > max_bad_fraction * max(line_number, _MIN_LINES_FOR_FRACTION):
                    raise TextDecodeError(_too_many(bad, line_number, max_bad_fraction)) from None
                if on_skip is not None:
                    on_skip(line_number, message)
                offset += len(raw)
                continue
            offset += len(raw)
            yield text
    if bad and len(bad) > max_bad_fraction * line_number:
        raise TextDecodeError(_too_many(bad, line_number, max_bad_fraction))
    if bad and on_skip is None:
        logger.warning("%s: skipped %d of %d lines with bytes that are not valid %s (first: %s)",
                       path, len(bad), line_number, encoding, bad[0][1])


def _too_many(bad: list[tuple[int, str]], lines: int, max_bad_fraction: float) -> str:
    """The error: the first bad line's message, then how many there were and how many may be."""
    message = bad[0][1]
    if len(bad) > 1:
        message += f"; {len(bad)} bad lines of the first {lines}"
    if max_bad_fraction > 0:
        message += (f" (such lines are skipped only up to one in "
                    f"{round(1 / max_bad_fraction):,} lines)")
    return message


def read_text(path: str, encoding: str = DEFAULT_ENCODING) -> str:
    """A whole text file decoded strictly (BOM dropped); see `read_lines`."""
    return "".join(read_lines(path, encoding))
