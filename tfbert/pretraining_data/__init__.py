"""Pretraining data, one module per stage, in pipeline order:

    vocab_corpus.py    text files or the built-in corpus -> vocab.txt (with its held-out [UNK] rate)
    documents.py       raw text -> documents: sentences with their words' spans and tokens
    instances.py       documents -> sentence-pair instances (google-research/bert's algorithm)
    instance_files.py  text files -> documents -> instances -> TFRecord shards (the writer's run)
    builtin.py         the built-in pretraining data: vocab and TFRecords from tfbert.data.corpora
    records.py         tfbert's TFRecord schema (text pairs), the sharded writer, the checked reader
    google_records.py  google-research/bert's records (token ids, stored masks): read and write
    record_formats.py  which format a file holds, told from its first record
    record_scan.py     every record read once before a run (bad shards found at the start)
    record_stream.py   the training order: an endless stream that starts at any position
    masking.py         in-graph dynamic masked-LM masking, token-level or whole-word
    features.py        tfbert's records -> the pretraining feature dict (tokenize, pack, mask)
    pipeline.py        TFRecords -> masked-LM + NSP batches (`pretraining_dataset`)

The pretraining run places these batches on its strategy (tfbert/training/pretrain_inputs.py).
The built-in texts themselves (`tfbert.data.corpora`) stay in tfbert.data: the fine-tuning
readers use them too. Names load on first use (the stages import TensorFlow).
"""

from __future__ import annotations

from tfbert._lazy import lazy_names

_LAZY = {
    "pretraining_dataset": "tfbert.pretraining_data.pipeline",
    "PretrainingTransform": "tfbert.pretraining_data.features",
    "DynamicMasker": "tfbert.pretraining_data.masking",
    "default_data": "tfbert.pretraining_data.builtin",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)
