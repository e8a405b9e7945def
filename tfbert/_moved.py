"""Old module paths of tfbert, kept working for one release: each old dotted path imports the
module now at its new path (the same module object), with a DeprecationWarning naming the new
path. The next release removes this module and the old paths with it.

`import tfbert` installs the finder (`install()`); it imports nothing until an old path is asked
for, so `import tfbert` stays cheap.

    >>> import warnings
    >>> with warnings.catch_warnings(record=True):
    ...     import tfbert.data.masking as old  # doctest: +SKIP
    >>> import tfbert.pretraining_data.masking as new  # doctest: +SKIP
    >>> old is new  # doctest: +SKIP
    True
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

# old dotted path -> new dotted path
MOVED: dict[str, str] = {
    # the tasks' older names (tfbert/tasks/ holds one module per task)
    "tfbert.tasks.classifier": "tfbert.tasks.classification",
    "tfbert.tasks.squad": "tfbert.tasks.qa",
    "tfbert.tasks.squad_predictions": "tfbert.tasks.qa_predictions",
    "tfbert.tasks.classifier_outputs": "tfbert.evaluation.classification_outputs",
    "tfbert.tasks.classification_outputs": "tfbert.evaluation.classification_outputs",
    # the serving heads beside their tasks (the export finds them through the task registry)
    "tfbert.export.heads.base": "tfbert.tasks.serving_base",
    "tfbert.export.heads.classification": "tfbert.tasks.classification_serving",
    "tfbert.export.heads.embedding": "tfbert.tasks.embedding_serving",
    "tfbert.export.heads.encoder": "tfbert.tasks.pretraining_serving",
    "tfbert.export.heads.ner": "tfbert.tasks.ner_serving",
    "tfbert.export.heads.qa": "tfbert.tasks.qa_serving",
    "tfbert.export.heads.regression": "tfbert.tasks.regression_serving",
    "tfbert.export.graph_ops": "tfbert.tasks.serving_ops",
    "tfbert.export.windows": "tfbert.tasks.serving_windows",
    # pretraining data as one package, a module per stage (tfbert.data keeps fine-tuning data)
    "tfbert.data.documents": "tfbert.pretraining_data.documents",
    "tfbert.data.instances": "tfbert.pretraining_data.instances",
    "tfbert.data.instance_files": "tfbert.pretraining_data.instance_files",
    "tfbert.data.vocab_corpus": "tfbert.pretraining_data.vocab_corpus",
    "tfbert.data.records": "tfbert.pretraining_data.records",
    "tfbert.data.google_records": "tfbert.pretraining_data.google_records",
    "tfbert.data.record_formats": "tfbert.pretraining_data.record_formats",
    "tfbert.data.record_scan": "tfbert.pretraining_data.record_scan",
    "tfbert.data.record_stream": "tfbert.pretraining_data.record_stream",
    "tfbert.data.masking": "tfbert.pretraining_data.masking",
    "tfbert.data.text_pairs": "tfbert.pretraining_data.features",
    "tfbert.data.pretraining": "tfbert.pretraining_data.pipeline",
    "tfbert.training.builtin_data": "tfbert.pretraining_data.builtin",
}

# names an old path offered beside the module's own (old path -> {old name: name in the module})
OLD_NAMES: dict[str, dict[str, str]] = {
    "tfbert.tasks.classifier": {"ClassifierConfig": "ClassificationConfig",
                                "run_classifier": "run_classification"},
    "tfbert.tasks.squad": {"SquadConfig": "QAConfig", "run_squad": "run_qa"},
}


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new path."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # a placeholder; exec_module puts the new module in its place

    def exec_module(self, module: ModuleType) -> None:
        old = module.__name__
        warnings.warn(f"{old} moved to {self.new}; the old path works for one release",
                      DeprecationWarning, stacklevel=2)
        target = importlib.import_module(self.new)
        for name, current in OLD_NAMES.get(old, {}).items():
            if not hasattr(target, name):
                setattr(target, name, getattr(target, current))
        sys.modules[old] = target  # the import system returns what sys.modules holds


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the old paths of `MOVED` (and nothing else: one dict lookup per import)."""

    def find_spec(self, fullname: str, path: object = None, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


_FINDER = _Finder()


def install() -> None:
    """Puts the finder on sys.meta_path (once)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_FINDER)
