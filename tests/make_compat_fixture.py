"""Writes tests/data/compat_mha/: tiny tfbert models saved in every format tfbert writes, by the
code of the commit it is run in, with their inputs and outputs (tests/test_checkpoint_compat.py
loads them with today's code).

Made with the BertSelfAttention that subclassed keras.layers.MultiHeadAttention (commit 31b7723)
by checking that commit out beside this tree and running this file from it:

    git worktree add /tmp/tfbert_base 31b7723
    cd /tmp/tfbert_base && PYTHONPATH=/tmp/tfbert_base /work/main/.venv/bin/python \\
        /work/main/tests/make_compat_fixture.py /work/main/tests/data/compat_mha

(PYTHONPATH: an editable install of tfbert would otherwise import the main tree's code; the
script prints the tfbert it imported.)

Contents: encoder/ and classifier/ (save_pretrained), pretraining/ (a tf.train.Checkpoint of
model, optimizer, global_step and the dropout seed states, as tfbert.training.pretrain writes
it), classifier.keras (model.save), golden.npz (inputs and each model's outputs).
"""

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

import tfbert
from tfbert.models.pretrainer import BertPretrainer

CONFIG = dict(vocab_size=30, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=16, max_position_embeddings=16)


def features() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 30, (2, 10)).astype("int32")
    mask = (np.arange(10)[None] < np.array([10, 6])[:, None]).astype("int32")
    return {"input_ids": ids * mask, "input_mask": mask,
            "segment_ids": (np.arange(10)[None] >= 5).astype("int32").repeat(2, 0),
            "masked_lm_positions": np.array([[1, 3], [2, 4]], "int32")}


def seed_states(model: keras.Model) -> list:
    weights = {id(w) for w in model.weights}
    return [v for v in model.variables if id(v) not in weights]


def main(out: str) -> None:
    print(f"tfbert from {os.path.dirname(tfbert.__file__)}")
    keras.utils.set_random_seed(1)
    config = tfbert.BertConfig(**CONFIG)
    x = features()
    inputs = {k: x[k] for k in ("input_ids", "input_mask", "segment_ids")}
    encoder = tfbert.BertEncoder(config, output_attention_probs=True)
    classifier = tfbert.BertClassifier(tfbert.BertEncoder(config), num_classes=3)
    pretrainer = BertPretrainer(tfbert.BertEncoder(config))
    for model in (encoder, classifier, pretrainer):  # non-zero biases and LayerNorm betas
        model.set_weights([w + np.random.default_rng(2).normal(0, 0.1, w.shape)
                           for w in model.get_weights()])
    tfbert.save_pretrained(encoder, os.path.join(out, "encoder"))
    tfbert.save_pretrained(classifier, os.path.join(out, "classifier"))
    classifier.save(os.path.join(out, "classifier.keras"))
    optimizer = keras.optimizers.AdamW(1e-3)
    optimizer.build(pretrainer.trainable_variables)
    step = tf.Variable(7, dtype=tf.int64, trainable=False, name="global_step")
    checkpoint = tf.train.Checkpoint(model=pretrainer, optimizer=optimizer, global_step=step,
                                     rng=seed_states(pretrainer))
    checkpoint.write(os.path.join(out, "pretraining", "ckpt"))
    out_encoder = encoder(inputs, training=False)
    out_pretrainer = pretrainer(x, training=False)
    np.savez(os.path.join(out, "golden.npz"), **x,
             encoder_sequence_output=out_encoder["sequence_output"],
             encoder_pooled_output=out_encoder["pooled_output"],
             encoder_attention_probs=np.stack(out_encoder["attention_probs"]),
             classifier_logits=classifier(inputs, training=False),
             pretrainer_mlm_logits=out_pretrainer["mlm_logits"],
             pretrainer_nsp_logits=out_pretrainer["nsp_logits"])


if __name__ == "__main__":
    main(sys.argv[1])
