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
  (no line is skipped), then split into lines. A file read as a byte-oriented encoding whose
  first bytes are UTF-16 without a byte-order mark (a NUL byte in every other position, where
  it decodes as UTF-16) is an error naming the encoding to pass (`--input_encoding=utf-16-le` or
  `utf-16-be`): it would otherwise be read as text with NULs between the characters.
- A directory where a file is expected is an error saying so (`check_file`).

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
import csv
import logging
import os
from collections.abc import Callable, Iterator

from tfbert.errors import UserError

logger = logging.getLogger(__name__)

__all__ = ["CORPUS_MAX_BAD_FRACTION", "DEFAULT_ENCODING", "TextDecodeError", "check_encoding",
           "check_file", "read_lines", "read_text", "utf16_without_bom"]

DEFAULT_ENCODING = "utf-8"
# Share of lines of a raw-text corpus that may hold undecodable bytes (dropped and counted): a
# stray bad line in a web crawl is tolerated, a file in the wrong encoding is not.
CORPUS_MAX_BAD_FRACTION = 1e-4
_BOM = codecs.BOM_UTF8
_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
# Encodings tried, in order, to suggest a flag when the bytes are not the one asked for.
_SUGGEST = ("utf-8", "gb18030", "big5", "utf-16")
_MIN_LINES_FOR_FRACTION = 10_000
_SNIFF_BYTES = 4096  # the start of a file looked at for UTF-16 without a byte-order mark


class TextDecodeError(UserError):
    """Bytes of a text file that are not valid in the encoding it is read with."""


def check_encoding(encoding: str) -> str:
    """The codec's canonical name; a UserError for a name Python does not know."""
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        raise UserError(f"unknown text encoding {encoding!r} (--input_encoding takes a Python "
                        "codec name such as utf-8, gb18030, gbk, big5)") from None


def check_file(path: str, what: str = "file") -> None:
    """Raises unless `path` is an existing file (a `tf.io.gfile` path is not checked here).

    Raises:
        FileNotFoundError: no such file ("no such {what}: PATH").
        UserError: `path` is a directory ("PATH is a directory, expected a {what}").
    """
    if "://" in path:
        return
    if os.path.isdir(path):
        raise UserError(f"{path} is a directory, expected a {what}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such {what}: {path}")


def utf16_without_bom(head: bytes) -> str | None:
    """"utf-16-le" or "utf-16-be" when `head`, the first bytes of a file, reads as UTF-16
    without a byte-order mark: NUL bytes on one side of the 2-byte units (the high byte of
    every ASCII character), at least 4 and 1 in 64 units, few on the other, and the bytes
    decode in that byte order. None otherwise (UTF-8 text holds no such NULs).

    Example:
    >>> utf16_without_bom("text\\tlabel\\n".encode("utf-16-le"))
    'utf-16-le'
    >>> utf16_without_bom("text\\tlabel\\n".encode("utf-8")) is None
    True
    """
    n = len(head) - len(head) % 2
    if n < 8 or head.startswith(_UTF16_BOMS):
        return None
    even, odd = head[0:n:2].count(0), head[1:n:2].count(0)
    for nuls, other, name in ((odd, even, "utf-16-le"), (even, odd, "utf-16-be")):
        if nuls >= max(4, n // 2 // 64) and other * 8 <= nuls:
            try:
                head[:n].decode(name)
            except UnicodeDecodeError as e:
                if e.start < n - 4:  # not just a character cut at the sample's end
                    return None
            return name
    return None


def _open_binary(path: str):
    if "://" in path:  # gs://, hdfs://, ...: TensorFlow's file systems
        import tensorflow as tf  # only for such paths: this module imports without TensorFlow

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
        UserError: `path` is a directory.
        TextDecodeError: undecodable bytes beyond `max_bad_fraction`; UTF-16 without a
            byte-order mark read as another encoding.
    """
    encoding = check_encoding(encoding)
    check_file(path)
    bad: list[tuple[int, str]] = []
    line_number = offset = 0
    with _open_binary(path) as f:
        if _is_wide(encoding):
            yield from _wide_lines(f, path, encoding)
            return
        wide = utf16_without_bom(f.read(_SNIFF_BYTES))
        if wide is not None:
            raise TextDecodeError(
                f"{path}: looks like UTF-16 without a byte-order mark (a NUL byte in every "
                f"other position), not {encoding}: convert it to UTF-8 or pass "
                f"--input_encoding={wide}")
        f.seek(0)
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


def tsv_rows(path: str, encoding: str = DEFAULT_ENCODING) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of every row of a tab-separated file read as google-research/bert
    reads one (`csv.reader(f, delimiter="\\t", quotechar=None)`: no quoting, a `"` is text),
    blank rows included. A row may be of any length: with no quoting there is no runaway field
    for Python csv's 131,072-character limit to stop, so the limit is lifted while the file is
    read.

    Raises:
        UserError: a row csv cannot read, naming the file and line.
    """
    reader = csv.reader(read_lines(path, encoding), delimiter="\t", quoting=csv.QUOTE_NONE)
    previous = csv.field_size_limit(2**31 - 1)  # process-wide: restored when the file is done
    try:
        for fields in reader:
            yield reader.line_num, fields
    except csv.Error as e:
        raise UserError(f"{path}:{reader.line_num}: {e}") from None
    finally:
        csv.field_size_limit(previous)

