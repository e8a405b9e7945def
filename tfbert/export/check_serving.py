"""Checks that a SavedModel only uses ops the TF Serving model server can run.

TF Serving's `tensorflow_model_server` registers core TensorFlow ops plus the TF Text ops of the
release it bundles (2.12.1 in TF Serving 2.12-2.19, 2.20.0 in 2.20). This module reads every op a
SavedModel's graphs and functions use, lists the ones that are not core TensorFlow ops, and says
per TF Serving version whether the model server provides them. It also checks the core ops
against the recorded registries of TF 2.12.1 / 2.20.0 (names and attribute names), so an op or a
non-default attribute newer than the serving release is caught before deployment. A missing op
fails the check; an unknown attribute is a warning, because TensorFlow 2.12 and later load such
nodes and ignore the attribute (they log "NodeDef mentions attribute ... which is not in the op
definition ... Unknown attributes will be ignored"; checked by loading an export in TF 2.12.1).
Ignoring is harmless for informational attributes such as VarHandleOp's `debug_name` (set on
every variable by TF >= 2.13), but could change the meaning of others, so they are listed.

    python -m tfbert.export.check_serving saved_models/NAME/1 [--serving_versions=2.12,2.20]

Exit status 0 when every requested version can serve the model, 1 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import sys

from tfbert.errors import UserError, run_cli
from tfbert.export.tf_core_ops import CHANGED_ATTRS, CORE_OPS
from tfbert.export.tf_text_ops import (
    ALL_TF_TEXT_OPS,
    TF_TEXT_OPS,
    registered_ops,
    tf_text_release_for_serving,
)

DEFAULT_SERVING_VERSIONS = ("2.12", "2.20")


def _core_release_for_serving(serving_version: str) -> str:
    """TF core op registry used for a serving version: the recorded release at or below it."""
    major, minor = (int(p) for p in serving_version.split(".")[:2])
    return "2.20.0" if (major, minor) >= (2, 20) else "2.12.1"


@dataclasses.dataclass
class ServingReport:
    """Result of `check_saved_model`.

    Args:
        export_dir: str. The SavedModel directory checked.
        op_counts: dict. {op name: number of nodes} over all graphs and functions.
        non_core_ops: list. Ops that are not core TensorFlow ops, sorted.
        availability: dict. {serving version: {non-core op: True/False}}.
        problems: dict. {serving version: [human-readable problem, ...]}; empty lists mean OK.
        warnings: dict. {serving version: [attributes that release ignores, XLA-compiled
            functions (they need the server's --xla_cpu_compilation_enabled=true), ...]}.
    """

    export_dir: str
    op_counts: dict[str, int]
    non_core_ops: list[str]
    availability: dict[str, dict[str, bool]]
    problems: dict[str, list[str]]
    warnings: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when every checked serving version can run the model."""
        return not any(self.problems.values())

    def format(self) -> str:
        """The report as text, one line per op and version."""
        lines = [f"SavedModel: {self.export_dir}",
                 f"ops used: {len(self.op_counts)} distinct, {sum(self.op_counts.values())} nodes"]
        if not self.non_core_ops:
            lines.append("non-core ops: none")
        else:
            lines.append("non-core ops (not in core TensorFlow):")
            for op in self.non_core_ops:
                kind = "TF Text" if op in ALL_TF_TEXT_OPS else "unknown library"
                cells = []
                for version, table in self.availability.items():
                    release = tf_text_release_for_serving(version)
                    cells.append(f"TF Serving {version} (TF Text {release}): "
                                 f"{'yes' if table[op] else 'NO'}")
                lines.append(f"  {op} [{kind}, {self.op_counts[op]} nodes] " + "; ".join(cells))
        for version, problems in self.problems.items():
            for warning in self.warnings.get(version, []):
                lines.append(f"TF Serving {version}: warning: {warning}")
            if problems:
                lines.append(f"TF Serving {version}: FAIL")
                lines.extend(f"  - {p}" for p in problems)
            else:
                lines.append(f"TF Serving {version}: OK")
        return "\n".join(lines)


def _read_saved_model(export_dir: str):
    # The SavedModel proto: TensorFlow loads only to read one; the op tables need none.
    from tensorflow.core.protobuf import saved_model_pb2

    path = os.path.join(export_dir, "saved_model.pb")
    if not os.path.exists(path):
        raise FileNotFoundError(f"check_serving.py: no saved_model.pb in {export_dir!r}")
    proto = saved_model_pb2.SavedModel()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    return proto


def _export_record(export_dir: str) -> dict:
    """assets.extra/tfbert_export.json of a tfbert export ({} for other SavedModels)."""
    path = os.path.join(export_dir, "assets.extra", "tfbert_export.json")
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _iter_nodes(proto):
    """Yields every NodeDef of every meta graph: top-level graph and function bodies."""
    for meta_graph in proto.meta_graphs:
        graph = meta_graph.graph_def
        yield from graph.node
        for function in graph.library.function:
            yield from function.node_def


def _function_names(proto) -> set[str]:
    return {f.signature.name for mg in proto.meta_graphs for f in mg.graph_def.library.function}


def _running_core_ops() -> set[str]:
    """Ops in this process's TensorFlow registry that no recorded TF Text release registers."""
    return set(registered_ops()) - ALL_TF_TEXT_OPS


def check_saved_model(export_dir: str,
                      serving_versions: tuple[str, ...] = DEFAULT_SERVING_VERSIONS
                      ) -> ServingReport:
    """Lists the ops a SavedModel uses and checks them against TF Serving releases.

    Args:
        export_dir: str. A SavedModel directory (the one holding saved_model.pb).
        serving_versions: tuple of str. TF Serving versions to check ("2.12" ... "2.20").

    Returns:
        A `ServingReport`; `.ok` is True when every version can serve the model.

    Example:
        >>> report = check_saved_model("saved_models/sentiment/1")
        >>> report.ok
        True
    """
    proto = _read_saved_model(export_dir)
    functions = _function_names(proto)
    op_counts: collections.Counter[str] = collections.Counter()
    # {op: {non-underscore attr names seen on its nodes}}
    node_attrs: dict[str, set[str]] = collections.defaultdict(set)
    for node in _iter_nodes(proto):
        if node.op in functions:  # a direct call of a library function, not an op
            continue
        op_counts[node.op] += 1
        node_attrs[node.op].update(a for a in node.attr if not a.startswith("_"))

    xla = sorted(f.signature.name for mg in proto.meta_graphs
                 for f in mg.graph_def.library.function
                 if f.attr["_XlaMustCompile"].b)  # from tf.function(jit_compile=True)
    streams = _export_record(export_dir).get("cpu_streams", 1)
    core_now = _running_core_ops()
    all_core = core_now.union(*CORE_OPS.values())
    non_core = sorted(op for op in op_counts if op not in all_core)

    availability: dict[str, dict[str, bool]] = {}
    problems: dict[str, list[str]] = {}
    warnings: dict[str, list[str]] = {}
    for version in serving_versions:
        text_release = tf_text_release_for_serving(version)
        core_release = _core_release_for_serving(version)
        text_ops, core_ops = TF_TEXT_OPS[text_release], CORE_OPS[core_release]
        availability[version] = {op: op in text_ops for op in non_core}
        found, ignored = [], []
        for op in sorted(op_counts):
            if op in non_core:
                if op not in text_ops:
                    where = ("added to TF Text after " + text_release if op in ALL_TF_TEXT_OPS
                             else "not a core TensorFlow or TF Text op")
                    found.append(f"op {op} ({where}) is not registered in TF Serving {version} "
                                 f"(TF Text {text_release})")
            elif op not in core_ops:
                found.append(f"core op {op} does not exist in TF {core_release} "
                             f"(TF Serving {version})")
            elif op in CHANGED_ATTRS and core_release in CHANGED_ATTRS[op]:
                extra = sorted(node_attrs[op] - set(CHANGED_ATTRS[op][core_release]))
                if extra:
                    ignored.append(f"{op} sets attribute(s) {extra} that TF {core_release} does "
                                   "not define; it loads and ignores them")
        if xla:
            ignored.append(f"XLA-compiled function(s) {xla}: the CPU model server runs them "
                           "only when started with --xla_cpu_compilation_enabled=true")
        if streams > 1:
            ignored.append(f"exported with cpu_streams={streams}: it is fast only when the "
                           "model server runs with --tensorflow_intra_op_parallelism=1 "
                           f"--tensorflow_inter_op_parallelism={streams}")
        problems[version] = found
        warnings[version] = ignored
    return ServingReport(os.fspath(export_dir), dict(op_counts), non_core, availability,
                         problems, warnings)


def main(argv: list[str] | None = None) -> int:
    """The command line; a user's mistake (no SavedModel there, an unknown version) is one line
    on stderr and exit status 2."""
    return run_cli(_main, argv, prog="python -m tfbert.export.check_serving")


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tfbert.export.check_serving",
        description="List a SavedModel's non-core ops and check TF Serving compatibility.")
    parser.add_argument("export_dir", help="SavedModel directory, e.g. saved_models/NAME/1")
    parser.add_argument("--serving_versions", default=",".join(DEFAULT_SERVING_VERSIONS),
                        help="comma-separated TF Serving versions (2.12 ... 2.20)")
    args = parser.parse_args(argv)
    versions = tuple(v.strip() for v in args.serving_versions.split(",") if v.strip())
    for version in versions:
        try:
            tf_text_release_for_serving(version)
        except ValueError as e:
            raise UserError(f"--serving_versions: {e}") from None
    report = check_saved_model(args.export_dir, versions)
    sys.stdout.write(report.format() + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
