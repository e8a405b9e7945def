"""Text classification files: TSV / CSV / JSONL, read as `ClassificationExample`s.

A reader returns a list of `ClassificationExample` (text, label, optional text_b for sentence
pairs, and where it came from, "file:line", for error messages; a multi-label example has a
label set `labels` instead of `label`).

File formats:

    TSV/CSV   a header row, then text<TAB>label[<TAB>text_b] in any column order
    JSONL     {"text": "...", "label": "pos", "text_b": "..."}
  multi-label (`multi_label=True`):
    TSV/CSV   a `labels` column instead of `label`: comma-separated names, empty for no label
    JSONL     {"text": "...", "labels": ["A", "B"]} (a list, [] for no label)

Column names (the TSV/CSV header, the JSONL keys) are `text`, `label`, `text_b` and `id` (read
and ignored), and `labels` in a multi-label file, compared after stripping surrounding spaces
and case-folding: `Label` and ` TEXT ` are label and text. No other spelling stands for them
(`class`, `sentence` are other columns, and so is `labels` in a single-label file). The first
non-blank row of a TSV/CSV file must be that header: a first row with no `text` column is an
error naming the expected columns, as is a name given twice.

Other columns. In a file whose rows carry a `label` (`labels`) they are ignored, with one
warning naming them. In a file read with `labelled=False` (a test file) that has no such column
they are an error: such a column may be the labels under another name (`class`, `target`), and
reading the file as unlabelled would silently give predictions without test metrics. Rename the
column `label` (`labels`), or remove it.

Text is UTF-8 (a byte-order mark is dropped) unless `encoding` names another (gb18030, ...), and
any byte that does not decode is an error naming the file, line, byte offset and the
`--input_encoding` to pass (`tfbert.textfiles`). Blank lines are skipped and counted in a
warning; a row with a missing column, an empty text or a label the training data never had is
an error naming the file and line; so is an empty name in a `labels` cell ("A,,B"), and a label
set naming a label twice.

Values are read as written, never converted. A JSONL `text` / `text_b` is a string (a list, an
object, a number, true/false or null is an error naming the file, line, field and JSON type); a
`label` is a string or an integer (a list is a label set: an error pointing to `--multi_label`
and the `labels` field; so is a TSV/CSV label cell holding a JSON list). A label holding a
control or invisible format character (NUL, U+200B, ...) is an error, and so are training labels
that differ only in case, whitespace or Unicode form ("positive", "Positive", "posi tive",
"ｐｏｓｉｔｉｖｅ"): `label_list` names them and where each first occurs.

Field length. TSV has no quoting, so a field ends at the next tab or line end and may be of any
length (Python csv's 131,072-character `field_size_limit` is lifted while a TSV file is read).
CSV keeps the limit: there it stops an unclosed quote from swallowing the rest of the file, and
a longer field is an error naming the line and pointing to TSV or JSONL, which have no limit.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import logging
import os
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from tfbert import textfiles
from tfbert.errors import UserError

logger = logging.getLogger(__name__)

COLUMNS = ("text", "label", "text_b", "id")  # the column names a file may use (id is ignored)
MULTI_LABEL_COLUMNS = ("text", "labels", "text_b", "id")  # the same, for a multi-label file
_FORMATS = {".tsv": "tsv", ".txt": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}
_RULE = ("text, {} and optionally text_b and id, in any order; names are compared ignoring "
         "case and surrounding spaces")


def _rule(columns: Sequence[str]) -> str:
    return _RULE.format(columns[1])


@dataclasses.dataclass(frozen=True)
class ClassificationExample:
    """One example. label is None in unlabelled data; source is "path:line" for messages; id is
    the row's own id where the data has one (CLUE test files), written with its prediction.
    A multi-label example has label None and its label set in `labels` (a tuple, () for none;
    None when unlabelled)."""

    text: str
    label: str | None
    text_b: str | None = None
    source: str = ""
    id: str | None = None
    labels: tuple[str, ...] | None = None


def read_examples(path: str, labelled: bool = True,
                  encoding: str = textfiles.DEFAULT_ENCODING,
                  multi_label: bool = False) -> list[ClassificationExample]:
    """Reads a TSV, CSV or JSONL file (told by extension) with columns text, label[, text_b].

    Column names are `text`, `label`, `text_b` and `id` (ignored), compared after stripping
    spaces and case-folding (`Label` is label); the first non-blank TSV/CSV row must name them.
    Other columns are ignored with a warning, except in a file read with `labelled=False` that
    has no `label` column: there they are an error, since they may be the labels under another
    name (see the module docstring).

    Args:
        path: str. A .tsv/.txt, .csv or .jsonl/.json file with a header row (TSV/CSV), local or
            a `tf.io.gfile` path.
        labelled: bool. Whether every row must carry a label. With False a file without a label
            column is accepted (labels None); rows that have the column still need a value.
        encoding: str. The file's text encoding (`--input_encoding`).
        multi_label: bool. Read a `labels` column (label sets: a JSON list, or comma-separated
            names in a TSV/CSV cell, empty for none) instead of `label`.

    Raises:
        UserError: a malformed file (the message names the file and line).
        FileNotFoundError: no such file.

    Example:
    >>> examples = read_examples("train.tsv")  # doctest: +SKIP
    >>> examples[0].text, examples[0].label  # doctest: +SKIP
    ('这本书很好看', 'positive')
    """
    if "://" not in path and not os.path.exists(path):
        raise FileNotFoundError(f"classification data file not found: {path}")
    textfiles.check_file(path)
    fmt = _FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt is None:
        raise UserError(f"{path}: unknown file type; use one of {sorted(_FORMATS)}")
    lines = textfiles.read_lines(path, encoding)
    columns = MULTI_LABEL_COLUMNS if multi_label else COLUMNS
    rows, blank_lines, ignored = (_jsonl_rows(lines, path, labelled, columns) if fmt == "jsonl"
                                  else _table_rows(lines, path, fmt, labelled, columns))
    if blank_lines:
        shown = ", ".join(str(n) for n in blank_lines[:10])
        logger.warning("%s: skipped %d empty line(s) (lines %s%s)", path, len(blank_lines), shown,
                       ", ..." if len(blank_lines) > 10 else "")
    if ignored:
        logger.warning("%s: ignored column(s) %s: tfbert reads %s", path, ignored,
                       ", ".join(columns[:3]))
    read = _multi_label_example if multi_label else _example
    examples = [read(row, f"{path}:{line}", labelled) for line, row in rows]
    if not examples:
        raise UserError(f"{path}: no examples")
    return examples


def column_name(name: str) -> str:
    """The name a column is matched by: surrounding spaces stripped, case folded."""
    return name.strip().casefold()


def _check_columns(names: Sequence[str], where: str, labelled: bool,
                   columns: Sequence[str] = COLUMNS) -> list[str]:
    """The unknown column names (to ignore); a UserError for a name given twice, or for unknown
    names in an unlabelled file with no `label` column (they may be its labels)."""
    seen: dict[str, str] = {}
    for name in names:
        key = column_name(name)
        if key in seen:
            raise UserError(f"{where}: columns {seen[key]!r} and {name!r} are both {key!r} "
                            f"({_rule(columns)})")
        seen[key] = name
    unknown = [name for key, name in seen.items() if key not in columns]
    label = columns[1]
    if unknown and not labelled and label not in seen:
        raise UserError(
            f"{where}: column(s) {unknown} are none of {', '.join(columns)}; a file read "
            f"without required labels (a test file) has no {label!r} column, and these may be "
            "its labels under another name, which would give predictions without test "
            f"metrics: name the label column {label!r}, or remove the other column(s)")
    return unknown


@contextlib.contextmanager
def _field_size_limit(limit: int) -> Iterator[None]:
    """Python csv's (process-wide) field size limit set to `limit` for the block."""
    previous = csv.field_size_limit(limit)
    try:
        yield
    finally:
        csv.field_size_limit(previous)


def _table_rows(lines: Iterable[str], path: str, fmt: str, labelled: bool,
                columns: Sequence[str] = COLUMNS
                ) -> tuple[list[tuple[int, dict[str, str]]], list[int], list[str]]:
    if fmt == "tsv":  # GLUE-style TSV: no quoting, so quotes stay part of the text
        reader = csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)
        limit: Any = _field_size_limit(2**31 - 1)  # no quotes, so no runaway field to stop
    else:
        reader = csv.reader(lines)
        limit = contextlib.nullcontext()
    header: list[str] | None = None
    ignored: list[str] = []
    rows, blank = [], []
    try:
        with limit:
            for fields in reader:
                line = reader.line_num
                if not fields or all(not x.strip() for x in fields):
                    blank.append(line)
                    continue
                if header is None:
                    names = [x.strip() for x in fields]
                    header = [column_name(x) for x in names]
                    if "text" not in header:
                        raise UserError(_not_a_header(f"{path}:{line}", names, header, columns))
                    ignored = _check_columns(names, f"{path}:{line}", labelled, columns)
                    continue
                if len(fields) != len(header):
                    raise UserError(f"{path}:{line}: {len(fields)} fields but the header has "
                                    f"{len(header)} ({header})")
                rows.append((line, dict(zip(header, fields, strict=True))))
    except csv.Error as e:
        if "field larger than field limit" in str(e):
            raise UserError(
                f"{path}:{reader.line_num}: a field is longer than {csv.field_size_limit():,} "
                "characters, Python csv's limit for CSV (it stops an unclosed quote from "
                "swallowing the rest of the file): check the quotes, or write the data as TSV "
                "or JSONL, which have no such limit") from None
        raise UserError(f"{path}:{reader.line_num}: {e}") from None
    if header is None:
        raise UserError(f"{path}: empty file (expected a header row naming the columns "
                        f"{_rule(columns)})")
    return rows, blank, ignored


def _not_a_header(where: str, names: list[str], header: list[str],
                  columns: Sequence[str] = COLUMNS) -> str:
    if not set(header) & set(columns):
        return (f"{where}: the first row {names} is not a header row: expected the column "
                f"names {_rule(columns)}")
    return f"{where}: header {names} has no 'text' column (expected columns {_rule(columns)})"


def _jsonl_rows(lines: Iterable[str], path: str, labelled: bool,
                columns: Sequence[str] = COLUMNS
                ) -> tuple[list[tuple[int, dict[str, Any]]], list[int], list[str]]:
    rows, blank = [], []
    ignored: dict[str, None] = {}
    for line, raw in enumerate(lines, start=1):
        if not raw.strip():
            blank.append(line)
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{line}: not valid JSON ({e})") from None
        if not isinstance(row, dict):
            raise UserError(f"{path}:{line}: expected a JSON object, got {type(row).__name__}")
        ignored.update(dict.fromkeys(_check_columns(list(row), f"{path}:{line}", labelled,
                                                    columns)))
        rows.append((line, {column_name(k): v for k, v in row.items()}))
    return rows, blank, list(ignored)


def _example(row: dict[str, Any], source: str, labelled: bool) -> ClassificationExample:
    text = _text(row, source)
    label = _label(row.get("label"), source)
    if label is None and (labelled or "label" in row):
        if "label" in row:
            raise UserError(f"{source}: missing label")
        hint = ("; a 'labels' field holds label sets: pass --multi_label" if "labels" in row
                else "")
        raise UserError(f"{source}: no 'label' field (has {sorted(row)}){hint}")
    return ClassificationExample(text, label, _text_b(row, source), source)


def _json_type(value: Any) -> str:
    """How a JSON value reads in a message: its JSON type and (the start of) the value."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    kind = {list: "a list", dict: "an object"}.get(type(value), "a number")
    shown = json.dumps(value, ensure_ascii=False)
    return f"{kind} {shown[:80]}{'...' if len(shown) > 80 else ''}"


def _string(row: dict[str, Any], key: str, source: str) -> str:
    value = row[key]
    if not isinstance(value, str):
        raise UserError(f"{source}: {key!r} must be a string, got {_json_type(value)}")
    return value.strip()


def _text(row: dict[str, Any], source: str) -> str:
    if "text" not in row:
        raise UserError(f"{source}: no 'text' field (has {sorted(row)})")
    text = _string(row, "text", source)
    if not text:
        raise UserError(f"{source}: empty text")
    return text


def _text_b(row: dict[str, Any], source: str) -> str | None:
    if row.get("text_b") is None:
        return None
    text_b = _string(row, "text_b", source)
    if text_b == "":
        raise UserError(f"{source}: empty text_b")
    return text_b


_MULTI_LABEL_HINT = ("a label set is read with --multi_label, from a 'labels' field (a JSON list; "
                     "in a TSV/CSV file, comma-separated names)")


def _label(value: Any, source: str) -> str | None:
    """A row's label as a name (a string, or an integer written as one); None when absent or
    blank. A list, object, true/false or fractional number is an error, and so is a label
    name holding a control character."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        hint = f"; {_MULTI_LABEL_HINT}" if isinstance(value, list) else ""
        raise UserError(f"{source}: 'label' must be one label name (a string or an integer), "
                        f"got {_json_type(value)}{hint}")
    name = str(value).strip()
    if name.startswith("[") and name.endswith("]"):
        try:
            names = json.loads(name)
        except json.JSONDecodeError:
            names = None
        if isinstance(names, list):
            raise UserError(f"{source}: label {name!r} is a list of labels; {_MULTI_LABEL_HINT}")
    _check_label_name(name, source)
    return name or None


def _check_label_name(name: str, source: str) -> None:
    """UserError for a label holding control or invisible format characters (NUL, U+200B)."""
    bad = sorted({c for c in name if unicodedata.category(c) in ("Cc", "Cf")})
    if bad:
        codes = ", ".join(f"U+{ord(c):04X}" for c in bad)
        raise UserError(f"{source}: label {name!r} holds the control or invisible character(s) "
                        f"{codes}; a label is a visible name: remove them")


def _multi_label_example(row: dict[str, Any], source: str, labelled: bool
                         ) -> ClassificationExample:
    """An example of a multi-label file: `labels` a JSON list of names or a comma-separated
    cell (TSV/CSV); [] or an empty cell is the empty set."""
    text = _text(row, source)
    if "labels" not in row:
        if labelled:
            raise UserError(f"{source}: no 'labels' field (has {sorted(row)})")
        return ClassificationExample(text, None, _text_b(row, source), source)
    value = row["labels"]
    if isinstance(value, str):
        names = [x.strip() for x in value.split(",")] if value.strip() else []
    elif isinstance(value, list) and all(isinstance(x, str) for x in value):
        names = [x.strip() for x in value]
    else:
        raise UserError(f"{source}: 'labels' must be a list of label names (or, in a TSV/CSV "
                        f"file, comma-separated names), got {value!r}")
    if any(not x for x in names):
        raise UserError(f"{source}: empty label name in labels {value!r}")
    for name in names:
        _check_label_name(name, source)
    twice = sorted({x for x in names if names.count(x) > 1})
    if twice:
        raise UserError(f"{source}: labels {value!r} name {twice} more than once")
    return ClassificationExample(text, None, _text_b(row, source), source,
                                 labels=tuple(names))
