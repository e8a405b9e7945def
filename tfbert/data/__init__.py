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
    # pretraining's names, at tfbert.pretraining_data now; kept here for one release, like the
    # old module paths in tfbert/_moved.py
    "pretraining_dataset": "tfbert.pretraining_data.pipeline",
    "PretrainingTransform": "tfbert.pretraining_data.features",
    "DynamicMasker": "tfbert.pretraining_data.masking",
}

__all__ = ["batch_by_length", "bucket_lengths", "corpora", "predict_in_order"]

__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)
