"""all-MiniLM-L6-v2 served: `python -m tfbert.export` straight from the sentence-transformers
directory gives a SavedModel whose serving_default (raw text in) returns sentence-transformers'
vectors (tests/data/minilm_st_golden.npz, made by tests/make_st_golden.py) within 1e-5, and float
TFLite models (ids in; text in, tokenizer inside) within 1e-5 of them."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from tfbert.export import export_model, tflite

HERE = os.path.dirname(os.path.abspath(__file__))
TOLERANCE = 1e-5


@pytest.mark.slow  # ~2 minutes: a 22M-parameter SavedModel and its TFLite conversion
def test_minilm_saved_model_and_tflite_equal_sentence_transformers(minilm_dir, tmp_path):
    golden = np.load(os.path.join(HERE, "data", "minilm_st_golden.npz"))
    sentences = golden["sentences"].tolist()
    result = export_model(minilm_dir, str(tmp_path / "saved_models" / "minilm" / "1"),
                          tflite=("float32",))
    assert result["max_seq_length"] == 256 and result["task"] == "embedding"
    serving = tf.saved_model.load(result["export_dir"]).signatures["serving_default"]
    served = serving(text=tf.constant(sentences))["embeddings"].numpy()
    assert served.shape == golden["embeddings"].shape
    assert np.max(np.abs(served - golden["embeddings"])) <= TOLERANCE

    ids_model = next(info for name, info in result["tflite"].items() if "ids" in name)
    interpreter = tflite.make_interpreter(ids_model["path"], text_ops=False)
    lengths = golden["lengths"]
    mask = (np.arange(golden["input_ids"].shape[1])[None] < lengths[:, None]).astype(np.int32)
    ids = tflite.run_tflite(interpreter, {"input_ids": golden["input_ids"], "input_mask": mask,
                                          "segment_ids": np.zeros_like(mask)})["embeddings"]
    assert np.max(np.abs(ids - golden["embeddings"])) <= TOLERANCE

    # The text-in model's tokenizer keeps accents (tfbert/export/tflite_text.py says which texts
    # it reads differently): the accented sentence is left out here.
    text_model = next(info for name, info in result["tflite"].items() if "text" in name)
    interpreter = tflite.make_interpreter(text_model["path"], text_ops=True)
    plain = [i for i, group in enumerate(golden["groups"]) if group != "accents"]
    vectors = np.concatenate([tflite.run_tflite(interpreter, {"text": np.array([sentences[i]])})[
        "embeddings"] for i in plain])
    want = golden["embeddings"][plain]
    cosine = np.sum(vectors * want, -1) / (np.linalg.norm(vectors, axis=-1)
                                           * np.linalg.norm(want, axis=-1))
    assert cosine.min() >= 0.9999, cosine
    assert np.max(np.abs(vectors - want)) <= TOLERANCE
