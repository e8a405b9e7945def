"""Step-0 global gradient norms of a tiny BertPretrainer and BertClassifier: what each clip sees.

A 2-layer, hidden-32 model (vocab 97, seed 0, dropout 0) on one batch of 16 x 32 tokens with
repeated ids, segment ids 0 and 1. Prints, per model, the sparse gradients (IndexedSlices) and
the global norm as `tf.clip_by_global_norm` (and Keras's `global_clipnorm`) counts it, each row
of a sparse gradient apart; the true norm (every gradient made dense); and the norm each tfbert
optimizer clips by ("adamw" and "lamb": the true one; "adamw_google": google-research/bert's,
its word table's rows apart, its one-hot token types summed).

    python -m experiments.clip_norms
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfbert import BertClassifier, BertConfig, BertEncoder, BertPretrainer  # noqa: E402
from tfbert.training import gradients, optimization  # noqa: E402


def _features(batch: int = 16, seq: int = 32, predictions: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    lengths = rng.integers(seq // 2, seq + 1, size=batch)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype("int32")
    return {
        "input_ids": (rng.integers(5, 97, (batch, seq)) * mask).astype("int32"),
        "input_mask": mask,
        "segment_ids": ((np.arange(seq)[None, :] >= lengths[:, None] // 2) * mask)
        .astype("int32"),
        "masked_lm_positions": np.stack([np.sort(rng.choice(np.arange(1, n), predictions,
                                                            replace=False))
                                         for n in lengths]).astype("int32"),
        "masked_lm_ids": rng.integers(5, 97, (batch, predictions)).astype("int32"),
        "masked_lm_weights": np.ones((batch, predictions), "float32"),
        "next_sentence_labels": (np.arange(batch)[:, None] % 2).astype("int32"),
    }


def norms(kind: str) -> dict[str, float]:
    """The step-0 norms of the tiny `kind` ("pretraining" or "classifier") model."""
    config = BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                        type_vocab_size=2, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    features = _features()
    keras.utils.set_random_seed(0)
    inputs = {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}
    if kind == "pretraining":
        model = BertPretrainer(BertEncoder(config))
        model(features)
    else:
        model = BertClassifier(BertEncoder(config), num_classes=3)
        model(inputs)
    with tf.GradientTape() as tape:
        if kind == "pretraining":
            loss = model.compute_loss(x=features, y=None, y_pred=model(features, training=True))
        else:
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
                np.arange(16) % 3, model(inputs, training=True))
    variables = model.trainable_variables
    grads = tape.gradient(loss, variables)
    true = float(tf.linalg.global_norm(gradients.dense_gradients(grads)))
    google = optimization.AdamWeightDecay(clip_norm=1e-9)  # clips always: scale = 1e-9 / norm
    google.build(variables)
    google_norm = 1e-9 / float(tf.linalg.global_norm(google._clip(grads, variables)) / true)
    sparse = [v.path for v, g in zip(variables, grads, strict=True)
              if isinstance(g, tf.IndexedSlices)]
    print(f"{kind}: sparse gradients {sparse}")
    result = {"rows apart (tf.clip_by_global_norm, Keras)": float(tf.linalg.global_norm(grads)),
              "true (adamw, lamb clip by)": true, "adamw_google clips by": google_norm}
    for name, value in result.items():
        print(f"  {name}: {value:.4f}")
    return result


if __name__ == "__main__":
    for kind in ("pretraining", "classifier"):
        norms(kind)
