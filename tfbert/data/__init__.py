"""Data: the built-in corpora, pretraining records and the pretraining input pipeline, and
the length buckets of the fine-tuning pipelines (`tfbert.data.length_buckets`).

`tfbert.data.corpora` is plain Python; `pretraining_dataset` and the length-bucket functions
(TensorFlow) are loaded on first use, so `from tfbert.data import corpora` stays cheap.
"""

from __future__ import annotations

from tfbert._lazy import lazy_names
from tfbert.data import corpora

_LAZY = {
    "pretraining_dataset": "tfbert.data.pretraining",
    "PretrainingTransform": "tfbert.data.text_pairs",
    "DynamicMasker": "tfbert.data.masking",
    "batch_by_length": "tfbert.data.length_buckets",
    "bucket_lengths": "tfbert.data.length_buckets",
    "predict_in_order": "tfbert.data.length_buckets",
}

__all__ = ["corpora", *sorted(_LAZY)]

__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)
