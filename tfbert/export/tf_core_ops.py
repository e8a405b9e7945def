"""Core TensorFlow op names (and changed attributes) of the TF releases inside TF Serving.

Data for `tfbert.export.check_serving`: a SavedModel written by this project's TensorFlow (2.21)
loads in TF Serving X only if every op it uses is registered in TF X (or in the TF Text bundled
there, see `tf_text_ops.py`) and every non-default attribute on its nodes exists in TF X's op
definition (`tf.saved_model.save` strips default-valued attributes, so only values that differ
from the default matter; attributes starting with "_" are never checked by TensorFlow).

The tables are package data, tfbert/export/data/tf_core_ops.txt and tf_changed_attrs.txt,
written by data_tools/make_serving_op_tables.py from the op registries that
`python tfbert/export/tf_text_ops.py` (`dump_registered_ops`) reads in clean venvs with
`tensorflow-cpu==2.12.1` and `tensorflow-cpu==2.20.0`, and in this project's venv (TF 2.21.0).
`CORE_OPS["2.12.1"]` has 1838 ops, `CORE_OPS["2.20.0"]` 1907, TF 2.21.0 has 1910.
`CHANGED_ATTRS` lists, for every op whose attribute names differ between 2.12.1, 2.20.0 and
2.21.0, the attribute names in each release; every other op has the same attribute names in all
three.
"""

from __future__ import annotations

import collections
from importlib import resources


def _data_lines(name: str) -> list[list[str]]:
    """The fields of each line of tfbert/export/data/NAME, comment lines left out."""
    text = resources.files("tfbert.export").joinpath("data", name).read_text(encoding="utf-8")
    return [line.split() for line in text.splitlines() if line and not line.startswith("#")]


def _core_ops() -> dict[str, frozenset[str]]:
    names: dict[str, set[str]] = collections.defaultdict(set)
    for op, *releases in _data_lines("tf_core_ops.txt"):
        for release in releases:
            names[release].add(op)
    return {release: frozenset(ops) for release, ops in sorted(names.items())}


def _changed_attrs() -> dict[str, dict[str, tuple[str, ...]]]:
    attrs: dict[str, dict[str, tuple[str, ...]]] = collections.defaultdict(dict)
    for op, release, *names in _data_lines("tf_changed_attrs.txt"):
        attrs[op][release] = tuple(names)
    return dict(attrs)


# {TF release: core op names}
CORE_OPS: dict[str, frozenset[str]] = _core_ops()
# {op: {TF release: attribute names}} for ops whose attributes changed between releases.
CHANGED_ATTRS: dict[str, dict[str, tuple[str, ...]]] = _changed_attrs()
