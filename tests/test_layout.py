"""The package's layout: each task in its own files (no task module imports another task's), no
module under tfbert/tasks imports the export (imports inside functions count), pretraining data
in tfbert/pretraining_data only, and the old module paths (tfbert/_moved.py) still import."""

from __future__ import annotations

import ast
import importlib
import pathlib
import sys

import pytest

import tfbert
from tfbert import _moved

TASKS_DIR = pathlib.Path(tfbert.__file__).parent / "tasks"
# not tasks: the declaration, the registry, and what every serving head builds on
INFRASTRUCTURE = ("base", "registry", "serving_")


def imported_modules(source: str, package: str = "tfbert.tasks") -> set[str]:
    """The dotted modules `source` (a module of `package`) imports, at module level or inside
    functions (`from tfbert.tasks import ner` gives tfbert.tasks.ner); imports under
    `if TYPE_CHECKING:` are annotations only and do not count."""
    tree = ast.parse(source)
    skipped = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
               and "TYPE_CHECKING" in ast.unparse(block.test)
               for node in ast.walk(block)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def owner(module: str) -> str:
    """The task a module of tfbert/tasks belongs to: `qa_predictions` and `qa_serving` are
    the qa task's files."""
    return module.split("_")[0]


def foreign_task_imports(source: str, module: str) -> list[str]:
    """The task modules (of tfbert/tasks) other than `module`'s own task's that it imports."""
    prefix = "tfbert.tasks."
    names = {m[len(prefix):].split(".")[0] for m in imported_modules(source)
             if m.startswith(prefix)}
    return sorted(n for n in names if not n.startswith(INFRASTRUCTURE)
                  and owner(n) != owner(module))


def task_modules() -> dict[str, str]:
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(TASKS_DIR.glob("*.py"))
            if p.stem != "__init__"}


def test_no_task_module_imports_another_task_module():
    offenders = {name: found for name, source in task_modules().items()
                 if (found := foreign_task_imports(source, name))}
    assert offenders == {}


def test_the_check_sees_imports_at_any_depth():
    inside = "def f():\n    from tfbert.tasks import ner, registry\n    return ner\n"
    assert foreign_task_imports(inside, "embedding") == ["ner"]
    assert foreign_task_imports("import tfbert.tasks.regression as r\n", "embedding") == [
        "regression"]
    assert foreign_task_imports("from .qa_predictions import write_predictions\n", "ner") == [
        "qa_predictions"]
    assert foreign_task_imports("from tfbert.tasks.qa_predictions import x\n", "qa") == []
    assert foreign_task_imports("from tfbert.tasks.base import Task\n", "ner") == []


def test_no_task_module_imports_the_export():
    offenders = {name: sorted(m for m in imported_modules(source)
                              if m == "tfbert.export" or m.startswith("tfbert.export."))
                 for name, source in task_modules().items()}
    assert {name: found for name, found in offenders.items() if found} == {}


def forget(old: str) -> None:
    """Makes the next import of `old` find it again (as in a fresh process)."""
    sys.modules.pop(old, None)
    parent, _, name = old.rpartition(".")
    if parent in sys.modules and name in vars(sys.modules[parent]):
        delattr(sys.modules[parent], name)


@pytest.mark.parametrize("old, new", sorted(_moved.MOVED.items()))
def test_old_paths_import_the_moved_module_and_warn(old, new):
    module = importlib.import_module(new)
    forget(old)  # a test before may have imported it
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        assert importlib.import_module(old) is module
    assert sys.modules[old] is module


def test_old_names_of_old_paths():
    forget("tfbert.tasks.squad")
    with pytest.warns(DeprecationWarning):
        from tfbert.tasks import squad
    from tfbert.tasks import qa

    assert squad is qa and squad.SquadConfig is qa.QAConfig


def test_tfbert_data_holds_no_pretraining_data():
    data = pathlib.Path(tfbert.__file__).parent / "data"
    moved = {old.rsplit(".", 1)[1] for old in _moved.MOVED if old.startswith("tfbert.data.")}
    assert moved and not {p.stem for p in data.rglob("*.py")} & moved
    pretraining = pathlib.Path(tfbert.__file__).parent / "pretraining_data"
    assert {new.rsplit(".", 1)[1] for old, new in _moved.MOVED.items()
            if old.startswith("tfbert.data.")} <= {p.stem for p in pretraining.glob("*.py")}

