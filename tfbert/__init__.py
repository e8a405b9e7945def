"""tfbert: BERT for TensorFlow 2 / Keras 3, from raw text to a served model.

Names are loaded on first use, so `import tfbert` stays cheap and the model code can run under
Keras's JAX backend without TensorFlow's text ops being imported.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "BertConfig": "tfbert.config",
    "PRESETS": "tfbert.config",
    "count_parameters": "tfbert.params",
    "BertEncoder": "tfbert.models.encoder",
    "BertPretrainer": "tfbert.models.pretrainer",
    "BertClassifier": "tfbert.models.classifier",
    "BertTokenClassifier": "tfbert.models.token_classifier",
    "BertSpanLabeler": "tfbert.models.span_labeler",
    "BertTokenizer": "tfbert.text.tokenizer",
    "BertPacker": "tfbert.text.packer",
    "BertPreprocessor": "tfbert.text.preprocessor",
    "from_pretrained": "tfbert.checkpoints",
    "save_pretrained": "tfbert.checkpoints",
}

# Subpackages and modules reachable as attributes (`tfbert.data.pretraining_dataset(...)`),
# imported on first use like the names above.
_SUBMODULES = ("checkpoints", "config", "data", "errors", "evaluation", "export", "fileio",
               "layers", "models", "ops", "params", "tasks", "text", "textfiles", "training")

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"tfbert.{name}")
    if name not in _LAZY:
        raise AttributeError(f"module 'tfbert' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY) + list(_SUBMODULES))
