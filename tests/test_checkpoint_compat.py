"""Models saved by the earlier BertSelfAttention (a keras.layers.MultiHeadAttention subclass)
load into today's layers with the same outputs: save_pretrained directories, the pretraining
tf.train.Checkpoint (model, optimizer, step, dropout seed states) and a `.keras` file.

The fixture tests/data/compat_mha/ was written by tests/make_compat_fixture.py run from that
commit (its docstring has the command)."""

from __future__ import annotations

import os

import keras
import numpy as np
import tensorflow as tf
from make_compat_fixture import CONFIG, seed_states

import tfbert
from tfbert.checkpoints import load_model
from tfbert.models.pretrainer import BertPretrainer

DATA = os.path.join(os.path.dirname(__file__), "data", "compat_mha")
GOLDEN = np.load(os.path.join(DATA, "golden.npz"))
INPUTS = {k: GOLDEN[k] for k in ("input_ids", "input_mask", "segment_ids")}


def close(actual, name: str) -> None:
    np.testing.assert_allclose(np.asarray(actual), GOLDEN[name], atol=1e-6, rtol=0)


def test_save_pretrained_directories_load():
    encoder = load_model(os.path.join(DATA, "encoder"))
    out = encoder(INPUTS, training=False)
    close(out["sequence_output"], "encoder_sequence_output")
    close(out["pooled_output"], "encoder_pooled_output")
    close(np.stack(out["attention_probs"]), "encoder_attention_probs")
    classifier = load_model(os.path.join(DATA, "classifier"))
    close(classifier(INPUTS, training=False), "classifier_logits")


def test_keras_file_loads():
    classifier = keras.saving.load_model(os.path.join(DATA, "classifier.keras"))
    assert isinstance(classifier, tfbert.BertClassifier)
    close(classifier(INPUTS, training=False), "classifier_logits")


def test_pretraining_checkpoint_restores():
    pretrainer = BertPretrainer(tfbert.BertEncoder(tfbert.BertConfig(**CONFIG)))
    optimizer = keras.optimizers.AdamW(1e-3)
    optimizer.build(pretrainer.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    checkpoint = tf.train.Checkpoint(model=pretrainer, optimizer=optimizer, global_step=step,
                                     rng=seed_states(pretrainer))
    status = checkpoint.read(os.path.join(DATA, "pretraining", "ckpt"))
    status.assert_existing_objects_matched()
    assert int(step.numpy()) == 7
    features = {k: GOLDEN[k] for k in (*INPUTS, "masked_lm_positions")}
    out = pretrainer(features, training=False)
    close(out["mlm_logits"], "pretrainer_mlm_logits")
    close(out["nsp_logits"], "pretrainer_nsp_logits")
