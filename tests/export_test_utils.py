"""Tiny exported task models shared by the export, serving and export-safety tests.

`tiny_model(kind, vocab_size)` is a random-init task model with its fine-tuning metadata;
`exported(kind, root, vocab_file)` saves it with `tfbert.save_pretrained` and exports it once per
session (the classification export through the command line); `load_signatures(export_dir)` is
its loaded (serving_default, serve_ids) pair, also once per session.
"""

from __future__ import annotations

import json
import os

import keras
import tensorflow as tf
from model_test_utils import tiny_config

import tfbert
from tfbert.data import ner as ner_data
from tfbert.export import export_model
from tfbert.export.__main__ import main

SEQ = 32
NER_LABELS = list(ner_data.PEOPLE_DAILY_LABELS)
_EXPORTED: dict[str, tuple[str, str, dict]] = {}
_LOADED: dict[str, tuple] = {}


def tiny_model(kind: str, vocab_size: int):
    """(model, metadata): a random-init `kind` model ("classification", "ner" or "qa"), init
    range 0.2 so its logits are O(1), not ~0."""
    keras.utils.set_random_seed({"classification": 1, "ner": 2, "qa": 3}[kind])
    encoder = tfbert.BertEncoder(tiny_config(vocab_size=vocab_size, initializer_range=0.2))
    if kind == "classification":
        return tfbert.BertClassifier(encoder, num_classes=2), {
            "task": "classification", "labels": ["负面", "正面"], "max_seq_length": SEQ,
            "lower_case": True}
    if kind == "ner":
        return tfbert.BertTokenClassifier(encoder, num_classes=len(NER_LABELS)), {
            "task": "ner", "labels": NER_LABELS, "max_seq_length": SEQ, "lower_case": True,
            "token_separator": ""}
    return tfbert.BertSpanLabeler(encoder), {
        "task": "qa", "max_seq_length": SEQ, "max_query_length": 8, "doc_stride": 8,
        "max_answer_length": 6, "version_2_with_negative": False, "lower_case": True}


def exported(kind: str, root: str, vocab_file: str) -> tuple[str, str, dict]:
    """(model_dir, export_dir, export result) of a tiny `kind` model, built once per session
    (the first `root` asked for is used). The classification export goes through the command
    line."""
    if kind not in _EXPORTED:
        model_dir = os.path.join(root, kind, "model")
        export_dir = os.path.join(root, "saved_models", kind, "1")
        with open(vocab_file, encoding="utf-8") as f:
            vocab_size = sum(1 for _ in f)
        model, metadata = tiny_model(kind, vocab_size)
        tfbert.save_pretrained(model, model_dir, vocab_file=vocab_file, metadata=metadata)
        if kind == "classification":
            assert main([f"--model_dir={model_dir}", f"--export_dir={export_dir}"]) == 0
            with open(os.path.join(export_dir, "assets.extra", "tfbert_export.json"),
                      encoding="utf-8") as f:
                result = json.load(f)
        else:
            result = export_model(model_dir, export_dir)
        _EXPORTED[kind] = (model_dir, export_dir, result)
    return _EXPORTED[kind]


def load_signatures(export_dir: str):
    """(serving_default, serve_ids) of a loaded export, loaded once per session."""
    if export_dir not in _LOADED:
        loaded = tf.saved_model.load(export_dir)
        _LOADED[export_dir] = (loaded, loaded.signatures["serving_default"],
                               loaded.signatures["serve_ids"])
    return _LOADED[export_dir][1:]
