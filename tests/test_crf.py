"""LinearChainCrf: log-likelihood and Viterbi against brute-force enumeration (masked chains with
gaps, empty rows), the loss, the CRF head of BertTokenClassifier (fit, save/reload)."""

from __future__ import annotations

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf
from model_test_utils import check_model, make_features, tiny_config

import tfbert
from tfbert.layers.crf import CrfLoss, LinearChainCrf


def random_crf(num_tags: int, seed: int) -> LinearChainCrf:
    rng = np.random.default_rng(seed)
    crf = LinearChainCrf(num_tags)
    crf.transitions.assign(rng.normal(size=(num_tags, num_tags)).astype("float32"))
    crf.start_transitions.assign(rng.normal(size=num_tags).astype("float32"))
    crf.end_transitions.assign(rng.normal(size=num_tags).astype("float32"))
    return crf


def brute_force(crf: LinearChainCrf, emissions: np.ndarray, tags: np.ndarray):
    """(log-likelihood of tags, best tag sequence) by enumerating every sequence."""
    trans, start, end = (np.asarray(w) for w in (crf.transitions, crf.start_transitions,
                                                 crf.end_transitions))

    def score(y):
        return (start[y[0]] + end[y[-1]] + sum(emissions[i, t] for i, t in enumerate(y))
                + sum(trans[a, b] for a, b in itertools.pairwise(y)))

    sequences = list(itertools.product(range(crf.num_tags), repeat=len(emissions)))
    scores = np.array([score(y) for y in sequences])
    log_z = np.log(np.exp(scores - scores.max()).sum()) + scores.max()
    return score(tuple(tags)) - log_z, list(sequences[int(scores.argmax())])


def test_log_likelihood_and_viterbi_equal_brute_force():
    rng = np.random.default_rng(0)
    num_tags, batch, t = 3, 6, 6
    crf = random_crf(num_tags, 1)
    emissions = rng.normal(size=(batch, t, num_tags)).astype("float32") * 2
    tags = rng.integers(0, num_tags, (batch, t))
    mask = rng.random((batch, t)) < 0.6  # gaps: the chain skips unselected positions
    mask[0] = True
    mask[1] = False  # an empty row: log-likelihood 0, all -1
    mask[2] = [False, False, False, True, False, False]
    ll = crf.log_likelihood(emissions, tags, mask).numpy()
    decoded = crf(emissions, mask).numpy()
    graph = tf.function(lambda e, m: crf(e, m))(emissions, mask).numpy()
    np.testing.assert_array_equal(graph, decoded)
    for b in range(batch):
        chain = np.flatnonzero(mask[b])
        assert (decoded[b][~mask[b]] == -1).all()
        if not len(chain):
            assert ll[b] == 0.0
            continue
        want_ll, want_tags = brute_force(crf, emissions[b, chain], tags[b, chain])
        assert ll[b] == pytest.approx(want_ll, abs=1e-4)
        assert decoded[b][chain].tolist() == want_tags
    # The loss: mean negative log-likelihood; -100 labels and zero weights leave positions out.
    loss = CrfLoss(crf)
    want = -ll.mean()
    assert float(loss(np.where(mask, tags, -100), emissions)) == pytest.approx(want, rel=1e-5)
    assert float(loss(tags, emissions, sample_weight=mask.astype("float32"))) == pytest.approx(
        want, rel=1e-5)
    # Untrained (zero transitions): Viterbi is the argmax.
    fresh = LinearChainCrf(num_tags)
    np.testing.assert_array_equal(fresh(emissions, mask).numpy(),
                                  np.where(mask, emissions.argmax(-1), -1))


def test_config_round_trip_and_bad_size():
    crf = LinearChainCrf(4, name="crf")
    clone = LinearChainCrf.from_config(crf.get_config())
    assert clone.get_config() == crf.get_config() and clone.num_tags == 4
    with pytest.raises(ValueError, match="num_tags must be a positive int, got 0"):
        LinearChainCrf(0)


@pytest.mark.slow  # 7 s; fast: the Viterbi and loss tests above
def test_token_classifier_crf_fits_saves_and_reloads(tmp_path):
    config = tiny_config()
    features = make_features(config, batch_size=4, seq_length=8)
    keras.utils.set_random_seed(0)
    model = tfbert.BertTokenClassifier(tfbert.BertEncoder(config), num_classes=5, crf=True)
    assert model.get_config()["crf"] is True
    labels = np.random.default_rng(0).integers(0, 5, (4, 8))
    weights = features["input_mask"].astype("float32")
    check_model(model, features, tmp_path, labels=None, fit=False, jit=False)
    model.compile(optimizer=keras.optimizers.SGD(0.1), jit_compile=False)
    assert isinstance(model.loss, CrfLoss)
    before = model.crf.transitions.numpy().copy()
    history = model.fit(features, labels, sample_weight=weights, epochs=2, batch_size=4,
                        verbose=0)
    assert history.history["loss"][1] < history.history["loss"][0]
    assert not np.allclose(model.crf.transitions.numpy(), before)  # the loss trains the CRF
    tfbert.save_pretrained(model, str(tmp_path / "m"))
    loaded = tfbert.checkpoints.load_model(str(tmp_path / "m"))
    assert loaded.use_crf and loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(loaded.crf.transitions.numpy(), model.crf.transitions.numpy())
    logits = model(features, training=False)
    np.testing.assert_array_equal(loaded.decode(logits, features["input_mask"]).numpy(),
                                  model.decode(logits, features["input_mask"]).numpy())
    # Without the CRF: the same config and outputs as always, decode is the argmax.
    plain = tfbert.BertTokenClassifier(tfbert.BertEncoder(config), num_classes=5)
    assert "crf" not in plain.get_config() and plain.crf is None
    out = plain(features, training=False).numpy()
    np.testing.assert_array_equal(plain.decode(out, features["input_mask"]).numpy(),
                                  np.where(features["input_mask"] == 1, out.argmax(-1), -1))
    with pytest.raises(Exception, match="format 'hf' cannot hold: head.crf"):
        tfbert.save_pretrained(model, str(tmp_path / "hf"), format="hf")


def test_crf_loss_takes_a_keras_padding_mask():
    """A Keras model whose logits carry a padding mask (Embedding(mask_zero=True)) trains with
    CrfLoss: the mask leaves the padded positions out of each sentence's chain, as -100 labels
    do, and one step of fit runs."""
    keras.utils.set_random_seed(0)
    ids = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(20, 8, mask_zero=True)(ids)
    logits = keras.layers.Dense(3)(keras.layers.LSTM(8, return_sequences=True)(x))
    model = keras.Model(ids, logits)
    model.crf = LinearChainCrf(3)
    batch = np.array([[3, 4, 5, 0, 0], [6, 7, 8, 9, 2]], "int32")
    tags = np.array([[0, 1, 2, 1, 1], [2, 0, 0, 1, 2]], "int32")
    out = model(batch)
    loss = CrfLoss(model.crf)
    ll = model.crf.log_likelihood(out, tags, batch != 0).numpy()
    assert float(loss(tags, out)) == pytest.approx(-ll.mean(), rel=1e-5)
    assert float(loss(np.where(batch != 0, tags, -100), out)) == pytest.approx(-ll.mean(),
                                                                              rel=1e-5)
    model.compile(optimizer="sgd", loss=CrfLoss(model.crf))
    history = model.fit(batch, tags, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
