"""Contrastive training (tfbert/models/contrastive.py): the losses against sentence-transformers'
own values (tests/data/contrastive_golden.npz, made by tests/make_contrastive_golden.py), the
trainer under model.fit, and 2 replicas of MirroredStrategy against one device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

from tfbert.models.contrastive import (
    ContrastiveTrainer,
    cosent_loss,
    cosine_loss,
    mnrl_loss,
)

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = np.load(os.path.join(HERE, "data", "contrastive_golden.npz"))


def test_losses_equal_sentence_transformers():
    a, p, n = GOLDEN["anchors"], GOLDEN["positives"], GOLDEN["negatives"]
    got = {"mnrl": float(np.mean(mnrl_loss(a, p))),
           "mnrl_negatives": float(np.mean(mnrl_loss(a, p, n))),
           "mnrl_symmetric": float(np.mean(mnrl_loss(a, p, symmetric=True))),
           "cosent": float(cosent_loss(a, p, GOLDEN["scores"])),
           "cosine": float(np.mean(cosine_loss(a, p, GOLDEN["cosine_targets"])))}
    for name, value in got.items():
        assert value == pytest.approx(float(GOLDEN[name]), rel=1e-5, abs=1e-6), name


# A tiny embedder: token embeddings, masked mean, a dense layer (no BERT: the trainer is what is
# tested, and the sentence encoder has tests of its own).
_EMBEDDER = textwrap.dedent("""
    def embedder(seed=0):
        import keras
        from keras import ops
        keras.utils.set_random_seed(seed)
        ids = keras.Input((6,), dtype="int32", name="input_ids")
        mask = keras.Input((6,), dtype="int32", name="input_mask")
        segments = keras.Input((6,), dtype="int32", name="segment_ids")
        x = keras.layers.Embedding(50, 8)(ids)
        m = ops.expand_dims(ops.cast(mask, "float32"), -1)
        pooled = ops.sum(x * m, 1) / ops.maximum(ops.sum(m, 1), 1e-9)
        out = keras.layers.Dense(8)(pooled)
        return keras.Model({"input_ids": ids, "input_mask": mask, "segment_ids": segments}, out)

    def pairs(n=16, seed=1):
        import numpy as np
        rng = np.random.default_rng(seed)
        def feats():
            ids = rng.integers(1, 50, size=(n, 6)).astype("int32")
            mask = (np.arange(6)[None] < rng.integers(2, 7, size=(n, 1))).astype("int32")
            return {"input_ids": ids * mask, "input_mask": mask,
                    "segment_ids": np.zeros((n, 6), "int32")}
        return feats(), feats(), feats(), rng.uniform(0, 5, size=n).astype("float32")
""")
exec(_EMBEDDER)  # noqa: S102 - the same code the subprocess runs


def test_trainer_fits_and_lowers_the_loss():
    anchor, positive, negative, _ = pairs()  # noqa: F821 - defined by exec above
    trainer = ContrastiveTrainer(embedder(), loss="mnrl")  # noqa: F821
    trainer.compile(optimizer=keras.optimizers.Adam(1e-2))
    x = {"anchor": anchor, "positive": positive, "negative": negative}
    history = trainer.fit(x, epochs=15, batch_size=16, verbose=0).history["loss"]
    assert history[-1] < 0.5 * history[0], history
    out = trainer.predict(x, batch_size=16, verbose=0)
    assert out["anchor"].shape == (16, 8) and set(out) == {"anchor", "positive", "negative"}
    with pytest.raises(ValueError, match="needs a score per pair"):
        scored = ContrastiveTrainer(embedder(), loss="cosent")  # noqa: F821
        scored.compile(optimizer="sgd")
        scored.fit({"anchor": anchor, "positive": positive}, epochs=1, verbose=0)


_MIRRORED = textwrap.dedent("""
    import json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    from tfbert.models.contrastive import ContrastiveTrainer
    {embedder}
    def run(strategy, loss):
        with strategy.scope():
            trainer = ContrastiveTrainer(embedder(), loss=loss)
            trainer.compile(optimizer=keras.optimizers.SGD(0.5))
        a, p, n, scores = pairs()
        x = {{"anchor": a, "positive": p}}
        if loss == "mnrl":
            x["negative"] = n
        y = (scores / 5.0) if loss == "cosine" else scores if loss == "cosent" else None
        ds = tf.data.Dataset.from_tensor_slices((x, y) if y is not None else (x,)).batch(8)
        h = trainer.fit(ds, epochs=3, verbose=0)
        return h.history["loss"], [v.numpy().tolist() for v in trainer.trainable_variables]
    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    two = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    out = {{loss: [run(one, loss), run(two, loss)]
           for loss in ("mnrl", "mnrl_symmetric", "cosent", "cosine")}}
    print("RESULT" + json.dumps(out))
""")


def test_two_replicas_equal_one_device():
    """Global batch 8 on 2 replicas of 4: candidates and CoSENT pairs gathered across replicas,
    so the losses and weights after 6 steps equal one device's."""
    script = _MIRRORED.format(embedder=_EMBEDDER)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, cwd=os.path.dirname(HERE))
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.split("RESULT", 1)[1])
    for loss, ((losses_one, weights_one), (losses_two, weights_two)) in out.items():
        np.testing.assert_allclose(losses_two, losses_one, rtol=1e-5, err_msg=loss)
        for a, b in zip(weights_two, weights_one, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=loss)
