"""Data for fine-tuning: the built-in corpora (`tfbert.data.corpora`, which pretraining reads
too), their splits, the task readers, and the length buckets of the fine-tuning pipelines
(`tfbert.data.length_buckets`). Pretraining data is `tfbert.pretraining_data`.

`tfbert.data.corpora` is plain Python; the length-bucket functions (TensorFlow) are loaded on
first use, so `from tfbert.data import corpora` stays cheap.
"""

from __future__ import annotations

from tfbert._lazy import lazy_names
from tfbert.data import corpora

_LAZY = {
    "batch_by_length": "tfbert.data.length_buckets",
    "bucket_lengths": "tfbert.data.length_buckets",
    "predict_in_order": "tfbert.data.length_buckets",
}

__all__ = ["corpora", *sorted(_LAZY)]

__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)
