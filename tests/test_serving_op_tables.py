"""tfbert/export/data/*.txt (read by tf_core_ops): the tables equal what
data_tools/make_serving_op_tables.py writes for the registries they record, and agree with this
process's TensorFlow."""

from __future__ import annotations

import os
import sys
from importlib import resources

import tensorflow as tf

from tfbert.export import tf_core_ops, tf_text_ops

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "data_tools"))

import make_serving_op_tables  # noqa: E402


def _data(name: str) -> str:
    return resources.files("tfbert.export").joinpath("data", name).read_text(encoding="utf-8")


def test_tables_are_what_the_generator_writes():
    names = {release: sorted(ops) for release, ops in tf_core_ops.CORE_OPS.items()}
    assert make_serving_op_tables.render_core_ops(names) == _data("tf_core_ops.txt")
    releases = {r for attrs in tf_core_ops.CHANGED_ATTRS.values() for r in attrs}
    registries = {r: dict.fromkeys(tf_core_ops.CORE_OPS["2.20.0"], ()) for r in releases}
    for op, attrs in tf_core_ops.CHANGED_ATTRS.items():
        for release, attr_names in attrs.items():
            registries[release][op] = attr_names
    assert make_serving_op_tables.render_changed_attrs(registries) == _data(
        "tf_changed_attrs.txt")


def test_tables_agree_with_this_tensorflow():
    assert len(tf_core_ops.CORE_OPS["2.12.1"]) == 1838
    assert len(tf_core_ops.CORE_OPS["2.20.0"]) == 1907
    assert tf.__version__.startswith("2.21.")
    registry = tf_text_ops.registered_ops()
    for op, attrs in tf_core_ops.CHANGED_ATTRS.items():
        assert tuple(registry[op]) == attrs["2.21.0"], op
    core = set(registry) - tf_text_ops.ALL_TF_TEXT_OPS
    assert len(core - tf_core_ops.CORE_OPS["2.20.0"]) < 20  # a few ops newer than 2.20
