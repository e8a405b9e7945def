"""Data: the built-in corpora, pretraining records and the pretraining input pipeline.

`tfbert.data.corpora` is plain Python; `pretraining_dataset` (TensorFlow) is loaded on first use,
so `from tfbert.data import corpora` stays cheap.
"""

from __future__ import annotations

from tfbert._lazy import lazy_names
from tfbert.data import corpora

_LAZY = {
    "pretraining_dataset": "tfbert.data.pretraining",
    "PretrainingTransform": "tfbert.data.text_pairs",
    "DynamicMasker": "tfbert.data.masking",
}

__all__ = ["corpora", *sorted(_LAZY)]

__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)
