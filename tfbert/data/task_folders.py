"""Benchmark classification tasks read by name from their own folders: GLUE's CoLA, MNLI and MRPC,
XNLI, and CLUE's AFQMC, TNEWS, IFLYTEK, CMNLI and OCNLI.

`read_task(name, data_dir, split)` gives the task's `ClassificationExample`s as the task's
reference code reads them: google-research/bert's run_classifier.py processors for the GLUE
and XNLI tasks (same files, same columns, same rows kept, same label order, so class ids agree
with a checkpoint fine-tuned there), CLUE's baseline (CLUEbenchmark/CLUE,
baselines/models/classifier_utils.py and baselines/models_pytorch/classifier_pytorch/processors/
clue.py) for the CLUE tasks. `TASKS[name].labels` is the label list in class-id order.

Each split's file must have the task's layout (header row, columns); a file that does not is
an error naming the file, the header or first line found, and the layout expected. The layouts
are listed in docs/tasks.md.

Test splits are read without labels (the reference code puts a placeholder label there), except
XNLI's xnli.test.tsv, which carries its gold labels. CLUE test rows keep their `id` (the
example's `id`) for predictions.

Example:
>>> TASKS["mrpc"].labels
('0', '1')
>>> examples = read_task("mrpc", "glue_data/MRPC", "dev")  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable
from typing import Any

from tfbert import textfiles
from tfbert.data.classification.readers import ClassificationExample
from tfbert.errors import UserError

logger = logging.getLogger(__name__)

NLI_LABELS = ("contradiction", "entailment", "neutral")
# CLUE baseline labels (CLUEbenchmark/CLUE, baselines/models/classifier_utils.py, get_labels of
# AFQMCProcessor, TnewsProcessor, iFLYTEKDataProcessor, CMNLIProcessor; OCNLI's from
# baselines/models_pytorch/classifier_pytorch/processors/clue.py OcnliProcessor).
AFQMC_LABELS = ("0", "1")
TNEWS_LABELS = tuple(str(100 + i) for i in range(17) if i not in (5, 11))  # no 105, no 111
IFLYTEK_LABELS = tuple(str(i) for i in range(119))

Reader = Callable[[str, str, "Task", str, str], list[ClassificationExample]]


@dataclasses.dataclass(frozen=True)
class Task:
    """One benchmark task.

    Args:
        name: str. The --task_name (lower case).
        labels: tuple of str. Label names in class-id order (the reference code's order).
        files: dict split -> file path inside data_dir (`{language}` filled in for XNLI).
        layouts: dict split -> the layout that file must have, in words.
        reader: callable(path, split, task, encoding, language) -> examples.
        language: bool. Whether rows are filtered by --xnli_language.
    """

    name: str
    labels: tuple[str, ...]
    files: dict[str, str]
    layouts: dict[str, str]
    reader: Reader
    language: bool = False

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.files)


# --- TSV (GLUE, XNLI) -----------------------------------------------------------------------------


def _tsv_rows(path: str, encoding: str) -> list[tuple[int, list[str]]]:
    """(line number, fields) of every non-blank row; tab-separated, no quoting (as
    google-research/bert's `csv.reader(f, delimiter="\\t", quotechar=None)`)."""
    rows, blank = [], 0
    for line, fields in textfiles.tsv_rows(path, encoding):
        if not fields or all(not x.strip() for x in fields):
            blank += 1
            continue
        rows.append((line, fields))
    if blank:
        logger.warning("%s: skipped %d empty line(s)", path, blank)
    if not rows:
        raise UserError(f"{path}: empty file")
    return rows


def _layout_error(path: str, task: Task, split: str, found: str) -> UserError:
    return UserError(f"{path}: {found} matches no {task.name} {split} layout; expected "
                     f"{task.layouts[split]}")


def _check_header(path: str, task: Task, split: str, header: list[str],
                  required: dict[int, str]) -> None:
    if any(i >= len(header) or header[i].strip() != name for i, name in required.items()):
        raise _layout_error(path, task, split, f"header {header}")


def _field(path: str, line: int, fields: list[str], i: int) -> str:
    if i >= len(fields) or -i > len(fields):
        raise UserError(f"{path}:{line}: {len(fields)} fields, expected at least "
                        f"{(i if i >= 0 else -i - 1) + 1}")
    return fields[i]


def _label(path: str, line: int, label: str, task: Task) -> str:
    if label not in task.labels:
        raise UserError(f"{path}:{line}: label {label!r} is not one of the {task.name} labels "
                        f"{list(task.labels)}")
    return label


def _examples(path: str, rows: list[tuple[int, list[str]]], task: Task, text: int,
              text_b: int | None, label: int | None, mapping: dict[str, str] | None = None
              ) -> list[ClassificationExample]:
    examples = []
    for line, f in rows:
        value = None
        if label is not None:
            value = _field(path, line, f, label)
            value = _label(path, line, (mapping or {}).get(value, value), task)
        examples.append(ClassificationExample(
            _field(path, line, f, text), value,
            None if text_b is None else _field(path, line, f, text_b), f"{path}:{line}"))
    return examples


def _read_mrpc(path: str, split: str, task: Task, encoding: str, language: str = ""
               ) -> list[ClassificationExample]:
    rows = _tsv_rows(path, encoding)
    first = "index" if split == "test" else "Quality"
    _check_header(path, task, split, rows[0][1], {0: first, 3: "#1 String", 4: "#2 String"})
    return _examples(path, rows[1:], task, 3, 4, None if split == "test" else 0)


def _read_cola(path: str, split: str, task: Task, encoding: str, language: str = ""
               ) -> list[ClassificationExample]:
    rows = _tsv_rows(path, encoding)
    if split == "test":  # only the test file has a header
        _check_header(path, task, split, rows[0][1], {0: "index", 1: "sentence"})
        return _examples(path, rows[1:], task, 1, None, None)
    line, first = rows[0]
    if len(first) != 4 or first[1] not in task.labels:
        raise _layout_error(path, task, split, f"first line {first}")
    return _examples(path, rows, task, 3, None, 1)


def _read_mnli(path: str, split: str, task: Task, encoding: str, language: str = ""
               ) -> list[ClassificationExample]:
    rows = _tsv_rows(path, encoding)
    header = rows[0][1]
    _check_header(path, task, split, header, {0: "index", 8: "sentence1", 9: "sentence2"})
    if split != "test" and header[-1].strip() != "gold_label":
        raise _layout_error(path, task, split, f"header {header}")
    return _examples(path, rows[1:], task, 8, 9, None if split == "test" else -1)


_CONTRADICTORY = {"contradictory": "contradiction"}  # XNLI's MultiNLI translations say this


def _read_xnli(path: str, split: str, task: Task, encoding: str, language: str = "zh"
               ) -> list[ClassificationExample]:
    rows = _tsv_rows(path, encoding)
    if split == "train":
        _check_header(path, task, split, rows[0][1], {0: "premise", 1: "hypo", 2: "label"})
        return _examples(path, rows[1:], task, 0, 1, 2, _CONTRADICTORY)
    _check_header(path, task, split, rows[0][1],
                  {0: "language", 1: "gold_label", 6: "sentence1", 7: "sentence2"})
    kept = [(line, f) for line, f in rows[1:] if f[0] == language]
    if not kept:
        languages = sorted({f[0] for _, f in rows[1:]})
        raise UserError(f"{path}: no rows in language {language!r} (--xnli_language); the "
                        f"file has {languages}")
    return _examples(path, kept, task, 6, 7, 1, _CONTRADICTORY)


# --- JSON lines (CLUE) ----------------------------------------------------------------------------


def _json_rows(path: str, encoding: str) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for line, raw in enumerate(textfiles.read_lines(path, encoding), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError:
            row = None
        if not isinstance(row, dict):
            if not rows:
                raise UserError(f"{path}: first line {raw.strip()[:200]!r} is not a JSON "
                                "object; expected JSON lines")
            raise UserError(f"{path}:{line}: not a JSON object")
        rows.append((line, row))
    if not rows:
        raise UserError(f"{path}: empty file")
    return rows


def _clue_reader(text: str, text_b: str | None) -> Reader:
    """A CLUE JSON-lines reader: fields `text` (and `text_b`), `label` outside test, `id` in
    test; rows labelled "-" (NLI pairs without a majority label) are skipped in train/dev."""

    def read(path: str, split: str, task: Task, encoding: str, language: str = ""
             ) -> list[ClassificationExample]:
        rows = _json_rows(path, encoding)
        keys = [k for k in (text, text_b, None if split == "test" else "label") if k]
        first = rows[0][1]
        if any(k not in first for k in keys):
            raise _layout_error(path, task, split, f"first line keys {sorted(first)}")
        examples, skipped = [], 0
        for i, (line, row) in enumerate(rows):
            missing = [k for k in keys if k not in row]
            if missing:
                raise UserError(f"{path}:{line}: no {missing} (has {sorted(row)})")
            label = None
            if split != "test":
                label = str(row["label"]).strip()
                if label == "-" and task.labels == NLI_LABELS:
                    skipped += 1
                    continue
                label = _label(path, line, label, task)
            examples.append(ClassificationExample(
                str(row[text]), label, None if text_b is None else str(row[text_b]),
                f"{path}:{line}", str(row.get("id", i)) if split == "test" else None))
        if skipped:
            logger.info("%s: skipped %d row(s) labelled '-' (no majority label)", path, skipped)
        return examples

    return read


# --- the tasks ------------------------------------------------------------------------------------

_MNLI_DEV = ("a header row starting index, promptID, pairID, genre, with sentence1 in column 9, "
             "sentence2 in column 10 and gold_label last (GLUE's MNLI)")
_PAIRS = "JSON lines with sentence1, sentence2, label"
_PAIRS_TEST = "JSON lines with id, sentence1, sentence2"
_SINGLE = "JSON lines with sentence, label (label_desc, keywords ignored)"
_SINGLE_TEST = "JSON lines with id, sentence"


def _clue(name: str, labels: tuple[str, ...], pairs: bool) -> Task:
    train, test = (_PAIRS, _PAIRS_TEST) if pairs else (_SINGLE, _SINGLE_TEST)
    return Task(name, labels, {"train": "train.json", "dev": "dev.json", "test": "test.json"},
                {"train": train, "dev": train, "test": test},
                _clue_reader(*(("sentence1", "sentence2") if pairs else ("sentence", None))))


TASKS: dict[str, Task] = {task.name: task for task in (
    Task("cola", ("0", "1"), {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"},
         {"train": "no header; 4 tab-separated columns: source, label (0/1), original label, "
                   "sentence (GLUE's CoLA)",
          "dev": "no header; 4 tab-separated columns: source, label (0/1), original label, "
                 "sentence (GLUE's CoLA)",
          "test": "a header row index<TAB>sentence, then index<TAB>sentence rows"},
         _read_cola),
    Task("mnli", NLI_LABELS, {"train": "train.tsv", "dev": "dev_matched.tsv",
                              "dev_mismatched": "dev_mismatched.tsv",
                              "test": "test_matched.tsv"},
         {"train": _MNLI_DEV, "dev": _MNLI_DEV, "dev_mismatched": _MNLI_DEV,
          "test": "a header row starting index, promptID, pairID, genre, with sentence1 in "
                  "column 9 and sentence2 in column 10 (GLUE's MNLI test_matched.tsv)"},
         _read_mnli),
    Task("mrpc", ("0", "1"), {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"},
         {"train": "a header row Quality, #1 ID, #2 ID, #1 String, #2 String (GLUE's MRPC)",
          "dev": "a header row Quality, #1 ID, #2 ID, #1 String, #2 String (GLUE's MRPC)",
          "test": "a header row index, #1 ID, #2 ID, #1 String, #2 String (GLUE's MRPC)"},
         _read_mrpc),
    Task("xnli", NLI_LABELS, {"train": "multinli/multinli.train.{language}.tsv",
                              "dev": "xnli.dev.tsv", "test": "xnli.test.tsv"},
         {"train": "a header row premise, hypo, label (XNLI-MT's multinli.train.LANG.tsv)",
          "dev": "a header row starting language, gold_label, with sentence1 in column 7 and "
                 "sentence2 in column 8 (XNLI 1.0's xnli.dev.tsv)",
          "test": "a header row starting language, gold_label, with sentence1 in column 7 and "
                  "sentence2 in column 8 (XNLI 1.0's xnli.test.tsv)"},
         _read_xnli, language=True),
    _clue("afqmc", AFQMC_LABELS, pairs=True),
    _clue("tnews", TNEWS_LABELS, pairs=False),
    _clue("iflytek", IFLYTEK_LABELS, pairs=False),
    _clue("cmnli", NLI_LABELS, pairs=True),
    _clue("ocnli", NLI_LABELS, pairs=True),
)}


def task_file(name: str, data_dir: str, split: str, language: str = "zh") -> str:
    """The path of a task's split file inside data_dir."""
    task = _task(name)
    if split not in task.files:
        raise ValueError(f"{name} has no split {split!r} (has {task.splits})")
    return os.path.join(data_dir, task.files[split].format(language=language))


def read_task(name: str, data_dir: str, split: str, language: str = "zh",
              encoding: str = textfiles.DEFAULT_ENCODING) -> list[ClassificationExample]:
    """The examples of one split of a benchmark task, read from its file in data_dir.

    Args:
        name: str. A key of TASKS (case-insensitive).
        data_dir: str. The task's folder (the layout of docs/tasks.md).
        split: str. "train", "dev", "test", or for MNLI "dev_mismatched".
        language: str. XNLI only: the language kept (train file multinli.train.LANG.tsv,
            dev/test rows whose language column is LANG).
        encoding: str. The files' text encoding.

    Raises:
        UserError: a missing file, or one that matches no layout of the task.
    """
    task = _task(name)
    path = task_file(task.name, data_dir, split, language)
    if "://" not in path and not os.path.exists(path):
        raise UserError(f"{task.name}: {path} not found (--data_dir {data_dir}); the {split} "
                        f"file is {task.files[split]}: {task.layouts[split]}")
    examples = task.reader(path, split, task, encoding, language)
    if not examples:
        raise UserError(f"{path}: no {task.name} examples")
    return examples


def _task(name: str) -> Task:
    task = TASKS.get(name.lower())
    if task is None:
        raise UserError(f"unknown benchmark task {name!r}; tasks: {sorted(TASKS)}")
    return task
