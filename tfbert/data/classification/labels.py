"""Classification labels: the label list of training data (near-duplicate names refused), label
ids and multi-label matrices, and class weights.
"""

from __future__ import annotations

import itertools
import json
import os
import unicodedata
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfbert import textfiles
from tfbert.data.classification.readers import ClassificationExample, column_name
from tfbert.errors import UserError


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
