"""tfbert: BERT for TensorFlow 2 / Keras 3, from raw text to a served model.

Names are loaded on first use, so `import tfbert` stays cheap and the model code can run under
Keras's JAX backend without TensorFlow's text ops being imported.
"""

from __future__ import annotations

from tfbert import _moved
from tfbert._lazy import lazy_names
from tfbert._version import __version__ as __version__

_moved.install()  # old module paths keep working for one release (tfbert/_moved.py)

_LAZY = {
    "BertConfig": "tfbert.config",
    "PRESETS": "tfbert.config",
    "count_parameters": "tfbert.params",
    "BertEncoder": "tfbert.models.encoder",
    "BertPretrainer": "tfbert.models.pretrainer",
    "BertClassifier": "tfbert.models.classifier",
    "BertTokenClassifier": "tfbert.models.token_classifier",
    "BertSpanLabeler": "tfbert.models.span_labeler",
    "Distiller": "tfbert.models.distiller",
    "BertTokenizer": "tfbert.text.tokenizer",
    "BertPacker": "tfbert.text.packer",
    "BertPreprocessor": "tfbert.text.preprocessor",
    "from_pretrained": "tfbert.models.pretrained",
    "save_pretrained": "tfbert.models.pretrained",
}

# Subpackages and modules reachable as attributes
# (`tfbert.pretraining_data.pretraining_dataset(...)`), imported on first use like the names above.
_SUBMODULES = ("checkpoints", "config", "data", "errors", "evaluation", "export", "fileio",
               "layers", "models", "ops", "params", "pretraining_data", "tasks", "text",
               "textfiles", "training")

__all__ = sorted(_LAZY)


def _task_model_class(name: str) -> type | None:
    """The model class of a task declared in tfbert/tasks/ (`tfbert.BertRegressor`), so a new
    task's model is a top-level name without a line here; the registry loads on first use."""
    if not name.startswith("Bert"):
        return None
    from tfbert.tasks import registry  # the task modules load TensorFlow: only when asked

    task = registry.find(name)
    return task.model_class if task else None


__getattr__, __dir__ = lazy_names(
    __name__, globals(), {**_LAZY, **{name: f"tfbert.{name}" for name in _SUBMODULES}},
    fallback=_task_model_class)
