"""The optimizers' updates, schedules and clip against google-research/bert's formulas.

The NumPy references here are transcriptions of google-research/bert's optimization.py
(`create_optimizer`, `AdamWeightDecayOptimizer.apply_gradients`), not of tfbert's code.
"""

from __future__ import annotations

import re
import textwrap
import types

import keras
import numpy as np
import pytest
import tensorflow as tf
from model_test_utils import (
    embedding_data,
    embedding_model,
    make_features,
    script_result,
    tiny_config,
)

from tfbert import BertEncoder, BertPretrainer
from tfbert.fields import field_help
from tfbert.training import gradients, optimization, runtime
from tfbert.training.config import RunConfig

# --- google-research/bert in NumPy ---------------------------------------------------------------

def google_learning_rate(init_lr: float, step: int, total: int, warmup: int) -> float:
    """create_optimizer: polynomial_decay(power=1, end 0, cycle=False), then linear warmup."""
    lr = init_lr * (1.0 - min(step, total) / total)
    if warmup and step < warmup:
        lr = init_lr * (step / warmup)
    return lr


def google_steps(params: dict, grads: list[dict], lr_of_step, decayed: set[str],
                 row_counted: set[str], clip_norm: float = 1.0) -> dict:
    """AdamWeightDecayOptimizer after tf.clip_by_global_norm, one step per element of `grads`.

    A gradient in `grads` is an array, or (indices, rows) for a table lookup. `row_counted` names
    the tables looked up by tf.gather (tf.gradients gives IndexedSlices: the clip counts each
    row); the others are one-hot matmuls (a dense gradient, the rows summed).
    """
    params = {k: v.astype("float64") for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(x) for k, x in params.items()}
    for step, g in enumerate(grads):
        squares = 0.0
        dense = {}
        for name, grad in g.items():
            if isinstance(grad, tuple):  # rows of a lookup: summed per id in the update
                indices, rows = grad
                dense[name] = np.zeros_like(params[name])
                np.add.at(dense[name], indices, rows.astype("float64"))
            else:
                dense[name] = grad.astype("float64")
            if name in row_counted:  # tf.gather's IndexedSlices: the clip counts each row
                squares += float(np.sum(grad[1].astype("float64") ** 2))
            else:  # a dense gradient (a one-hot matmul's, for a lookup)
                squares += float(np.sum(dense[name] ** 2))
        norm = np.sqrt(squares)
        scale = clip_norm * min(1.0 / norm, 1.0 / clip_norm)
        lr = lr_of_step(step)
        for name, grad in dense.items():
            grad = grad * scale
            m[name] = 0.9 * m[name] + (1.0 - 0.9) * grad
            v[name] = 0.999 * v[name] + (1.0 - 0.999) * grad ** 2
            update = m[name] / (np.sqrt(v[name]) + 1e-6)
            if name in decayed:
                update += 0.01 * params[name]
            params[name] = params[name] - lr * update
    return params


def _problem(steps: int, seed: int = 0):
    """Weights named like BERT's (a kernel, a bias, a LayerNorm gamma, a word table looked up by
    tf.gather, a token-type table looked up by a one-hot matmul there) and `steps` gradients with
    repeated ids, norms well above 1."""
    rng = np.random.default_rng(seed)
    shapes = {"kernel": (3, 4), "bias": (4,), "gamma": (4,), "word_embeddings": (6, 4),
              "token_type_embeddings": (2, 4)}
    params = {k: rng.normal(size=s).astype("float32") for k, s in shapes.items()}
    grads = []
    for _ in range(steps):
        g = {k: (rng.normal(size=s) * 3).astype("float32") for k, s in shapes.items()
             if "embeddings" not in k}
        g["word_embeddings"] = (np.array([1, 4, 1, 1, 0]),
                                rng.normal(size=(5, 4)).astype("float32") * 2)
        g["token_type_embeddings"] = (np.array([0, 1, 0, 0, 1, 1]),
                                      rng.normal(size=(6, 4)).astype("float32"))
        grads.append(g)
    return params, grads


def _as_tf(name: str, grad):
    if isinstance(grad, tuple):
        indices, rows = grad
        shape = {"word_embeddings": (6, 4), "token_type_embeddings": (2, 4)}[name]
        return tf.IndexedSlices(tf.constant(rows), tf.constant(indices, "int64"),
                                tf.constant(shape, "int64"))
    return tf.constant(grad)


@pytest.mark.parametrize("steps, warmup", [(1, 0), (6, 2)])
def test_adamw_google_matches_google_numpy(steps, warmup):
    """One step, and six (warmup 2 of 5 steps, then the decay and its end at 0), of
    create_optimizer(optimizer="adamw_google") against google-research/bert's formulas: the
    clip's norm (word rows one by one, token types summed), no bias correction, decay inside
    the update, no decay for biases and LayerNorm."""
    params, grads = _problem(steps)
    opt = optimization.create_optimizer(1e-2, num_train_steps=5, num_warmup_steps=warmup,
                                        optimizer="adamw_google")
    assert isinstance(opt, optimization.AdamWeightDecay)
    variables = {k: keras.Variable(v, name=k) for k, v in params.items()}
    step = tf.function(lambda gs: opt.apply(gs, list(variables.values())))
    for g in grads:
        step([_as_tf(k, g[k]) for k in variables])

    def google(row_counted):
        return google_steps(params, grads, lambda s: google_learning_rate(1e-2, s, 5, warmup),
                            decayed={"kernel", "word_embeddings", "token_type_embeddings"},
                            row_counted=row_counted)

    expected = google({"word_embeddings"})
    for name, var in variables.items():
        np.testing.assert_allclose(var.numpy(), expected[name], rtol=1e-6, atol=1e-6,
                                   err_msg=name)
    # A clip by the true norm would end elsewhere: the test can fail.
    assert np.abs(google(set())["kernel"] - expected["kernel"]).max() > 1e-5


def test_google_schedule():
    """WarmupPolynomialDecay against google-research/bert's own graph (tf.compat.v1's
    polynomial_decay wrapped by its warmup) and against values."""
    s = optimization.WarmupPolynomialDecay(1e-3, num_train_steps=100, num_warmup_steps=10)
    np.testing.assert_allclose([float(s(i)) for i in (0, 5, 9, 10, 55, 99, 100, 150)],
                               [0.0, 5e-4, 9e-4, 9e-4, 4.5e-4, 1e-5, 0.0, 0.0], atol=1e-10)
    for total, warmup in ((100, 10), (7, 0), (30, 3)):
        ours = optimization.WarmupPolynomialDecay(2e-5, total, warmup)
        for step in range(total + 2):
            global_step = tf.constant(step, "int64")
            rate = tf.compat.v1.train.polynomial_decay(
                tf.constant(2e-5), global_step, total, end_learning_rate=0.0, power=1.0,
                cycle=False)()
            if warmup:
                is_warmup = tf.cast(step < warmup, tf.float32)
                warm = 2e-5 * (tf.cast(step, tf.float32) / float(warmup))
                rate = (1.0 - is_warmup) * rate + is_warmup * warm
            assert float(ours(step)) == pytest.approx(float(rate), rel=1e-6, abs=1e-12), step
            assert float(ours(step)) == pytest.approx(
                google_learning_rate(2e-5, step, total, warmup), rel=1e-6, abs=1e-12)
    # The "linear" form (transformers') is total / (total - warmup) times google-research/bert's.
    linear = optimization.WarmupLinearDecay(1e-3, 100, 10)
    assert float(linear(55)) == pytest.approx(float(s(55)) / 0.9, rel=1e-6)


@pytest.mark.parametrize("name", ["adamw", "lamb", "adamw_google"])
def test_default_schedule_is_google_research_berts(name):
    """Every optimizer decays as google-research/bert (and tensorflow/models) by default;
    "linear" (transformers' form) is a choice for adamw and lamb, refused for adamw_google."""
    opt = optimization.create_optimizer(1e-3, 100, 10, optimizer=name)
    assert type(opt._learning_rate) is optimization.WarmupPolynomialDecay
    np.testing.assert_allclose(
        [float(opt._learning_rate(i)) for i in (5, 10, 55, 100)],
        [google_learning_rate(1e-3, i, 100, 10) for i in (5, 10, 55, 100)], rtol=1e-6)
    if name == "adamw_google":
        with pytest.raises(ValueError, match="adamw_google runs google-research/bert's schedule"):
            optimization.create_optimizer(1e-3, 100, 10, optimizer=name, lr_schedule="linear")
        with pytest.raises(ValueError, match="lr_schedule polynomial"):
            RunConfig(output_dir="o", optimizer=name, lr_schedule="linear")
        return
    opt = optimization.create_optimizer(1e-3, 100, 10, optimizer=name, lr_schedule="linear")
    assert type(opt._learning_rate) is optimization.WarmupLinearDecay
    assert float(opt._learning_rate(55)) == pytest.approx(1e-3 * 45 / 90, rel=1e-6)
    assert RunConfig(output_dir="o", optimizer=name, lr_schedule="linear").lr_schedule == "linear"
    with pytest.raises(ValueError, match="lr_schedule must be one of"):
        RunConfig(output_dir="o", lr_schedule="cosine")
    assert "get_linear_schedule_with_warmup" in field_help(RunConfig, "lr_schedule")


def test_a_resume_keeps_the_schedule_it_was_started_with(tmp_path):
    """A pretraining resume trains on with the run's own schedule: the recorded one, "linear"
    for a record written before the choice; a given lr_schedule wins; a new run: polynomial."""
    from tfbert.ownership import PRETRAIN_RECORD
    from tfbert.training.pretrain import PretrainConfig
    from tfbert.training.resume import resumed_lr_schedule

    config = PretrainConfig(output_dir=str(tmp_path))
    latest = str(tmp_path / "checkpoints" / "ckpt-20")
    assert resumed_lr_schedule(str(tmp_path), config, None) == "polynomial"
    record = tmp_path / PRETRAIN_RECORD
    record.write_text('{"input_files": ["a (1 bytes)"]}')
    assert resumed_lr_schedule(str(tmp_path), config, latest) == "linear"
    assert resumed_lr_schedule(str(tmp_path), config, None) == "polynomial"  # not a resume
    record.write_text('{"input_files": ["a (1 bytes)"], "lr_schedule": "polynomial"}')
    assert resumed_lr_schedule(str(tmp_path), config, latest) == "polynomial"
    given = PretrainConfig(output_dir=str(tmp_path), lr_schedule="linear")
    assert resumed_lr_schedule(str(tmp_path), given, latest) == "linear"


# --- the clip by the true global norm ------------------------------------------------------------

def _pretrainer_gradients():
    """A tiny BertPretrainer's step-0 gradients on a batch with repeated token ids (16 x 32:
    the token-type table's gradient is an IndexedSlices of 512 rows over 2 ids)."""
    config = tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    features = make_features(config, batch_size=16, seq_length=32, max_predictions=5)
    keras.utils.set_random_seed(0)
    model = BertPretrainer(BertEncoder(config))
    model(features)
    with tf.GradientTape() as tape:
        loss = model.compute_loss(x=features, y=None, y_pred=model(features, training=True))
    variables = model.trainable_variables
    return tape.gradient(loss, variables), variables


def _clipped(opt, grads, variables):
    """The gradients `opt.update_step` receives in `opt.apply(grads, variables)`."""
    seen = []
    update_step = opt.update_step

    def record(gradient, variable, learning_rate):
        seen.append(tf.convert_to_tensor(gradient))
        return update_step(gradient, variable, learning_rate)

    opt.update_step = record
    opt.apply(grads, variables)
    return seen


@pytest.mark.parametrize("name", optimization.OPTIMIZERS)
def test_clip_by_true_global_norm(name):
    """Every optimizer clips the tiny pretrainer's step-0 gradients by their true (dense)
    global norm: the token-type table's duplicate rows summed, as google-research/bert's one-hot
    lookup has them (its word table is dense here: the MLM head shares it)."""
    grads, variables = _pretrainer_gradients()
    sparse = [v.path for v, g in zip(variables, grads, strict=True)
              if isinstance(g, tf.IndexedSlices)]
    assert any("token_type_embeddings" in p for p in sparse), sparse
    dense = [tf.convert_to_tensor(g) for g in grads]
    true_norm = float(tf.linalg.global_norm(dense))
    row_norm = float(tf.linalg.global_norm(grads))  # tf.clip_by_global_norm's, rows apart
    assert true_norm > 1.0 and abs(true_norm - row_norm) > 1e-3, (true_norm, row_norm)
    opt = optimization.create_optimizer(1e-3, 10, optimizer=name)
    clipped = _clipped(opt, grads, variables)
    assert float(tf.linalg.global_norm(clipped)) == pytest.approx(1.0, abs=1e-6)
    for c, d in zip(clipped, dense, strict=True):
        np.testing.assert_allclose(c.numpy(), d.numpy() / true_norm, rtol=1e-5, atol=1e-7)


def test_dense_gradients_sums_duplicate_rows():
    g = tf.IndexedSlices(tf.constant([[1.0, 0.0], [1.0, 0.0], [0.0, 2.0]]),
                         tf.constant([0, 0, 1]), tf.constant([2, 2]))
    (dense,) = gradients.dense_gradients([g])
    np.testing.assert_array_equal(dense.numpy(), [[2.0, 0.0], [0.0, 2.0]])
    assert float(tf.linalg.global_norm([dense])) == pytest.approx(np.sqrt(8.0))
    assert float(tf.linalg.global_norm([g])) == pytest.approx(np.sqrt(6.0))  # rows apart
    assert gradients.dense_gradients([None]) == [None]


def test_summed_rows_stay_sparse_with_the_true_norm():
    """adamw's and lamb's clip input: one row per id, the norm the dense gradient has."""
    g = tf.IndexedSlices(tf.constant([[1.0, 0.0], [1.0, 0.0], [0.0, 2.0], [3.0, 0.0]]),
                         tf.constant([4, 4, 1, 4]), tf.constant([6, 2]))
    (summed,) = gradients.summed_rows([g])
    assert isinstance(summed, tf.IndexedSlices)
    assert summed.indices.numpy().tolist() == [4, 1]
    np.testing.assert_array_equal(summed.values.numpy(), [[5.0, 0.0], [0.0, 2.0]])
    np.testing.assert_array_equal(tf.convert_to_tensor(summed).numpy(),
                                  tf.convert_to_tensor(g).numpy())
    assert float(tf.linalg.global_norm([summed])) == pytest.approx(np.sqrt(29.0))
    dense = tf.constant([[1.0]])
    assert gradients.summed_rows([None, dense]) == [None, dense]


# --- accumulation, strategies, settings ----------------------------------------------------------

def _train_google(k: int, steps: int = 4, batch: int = 16, clip_norm=1.0,
                  jit_compile: bool = False):
    model = embedding_model()
    opt = optimization.create_optimizer(5e-2, 6, 2, optimizer="adamw_google",
                                        gradient_accumulation_steps=k, clip_norm=clip_norm)
    model.compile(optimizer=opt, loss="mse", jit_compile=jit_compile)
    x, y = embedding_data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch // k)
    model.fit(ds, epochs=1, steps_per_epoch=steps * k, verbose=0, shuffle=False)
    assert int(keras.ops.convert_to_numpy(opt.iterations)) == steps
    return [v.numpy() for v in model.trainable_variables]


def test_adamw_google_accumulation_matches_large_batch():
    """k=4 micro-batches of 4 (and k=2 of 8 under XLA) make the updates of batches of 16: the
    clip counts the word table's rows as one batch of 16 would (the micro-batches' row squares
    summed, / k^2)."""
    big = _train_google(1)
    for accumulated in (_train_google(4), _train_google(2, jit_compile=True)):
        for a, b in zip(big, accumulated, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    unclipped = _train_google(1, clip_norm=None)  # the clip acts here: the test can fail
    assert max(np.abs(a - b).max() for a, b in zip(big, unclipped, strict=True)) > 1e-3


_MIRRORED_SCRIPT = textwrap.dedent("""
    import json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    sys.path.insert(0, {tests!r})
    import model_test_utils as t
    from tfbert.training import distribute, optimization

    def run(strategy, k, loss_scale=False):
        with strategy.scope():
            model = t.embedding_model()
            opt = optimization.create_optimizer(5e-2, 6, 2, optimizer="adamw_google",
                                                gradient_accumulation_steps=k,
                                                loss_scale=loss_scale)
            model.compile(optimizer=opt, loss="mse")
        x, y = t.embedding_data()
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16 // k)
        h = model.fit(ds, epochs=3, steps_per_epoch=k, verbose=0, shuffle=False)
        return h.history["loss"], [v.numpy().tolist() for v in model.trainable_variables]

    mirrored = distribute.get_strategy("mirrored")
    assert mirrored.num_replicas_in_sync == 2, mirrored.num_replicas_in_sync
    out = {{"one": run(distribute.get_strategy("one_device"), 1), "mirrored": run(mirrored, 1),
           "mirrored_k2": run(mirrored, 2, loss_scale=True)}}
    print("RESULT" + json.dumps(out))
""")


def test_adamw_google_mirrored_matches_one_device():
    """Under MirroredStrategy (2 logical CPUs; with accumulation and loss scaling too)
    adamw_google follows the one-device run: the replicas' sparse rows are gathered, so the
    clip counts the global batch's rows."""
    out = script_result(_MIRRORED_SCRIPT)
    one_loss, one_w = out.pop("one")
    for key, (loss, w) in out.items():
        np.testing.assert_allclose(loss, one_loss, rtol=1e-5, err_msg=key)
        for a, b in zip(w, one_w, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=key)


def test_adamw_google_settings_and_serialization():
    opt = optimization.create_optimizer(2e-5, 100, 10, optimizer="adamw_google",
                                        gradient_accumulation_steps=2, loss_scale=True)
    back = keras.optimizers.deserialize(keras.optimizers.serialize(opt)).inner_optimizer
    assert type(back) is optimization.AdamWeightDecay and back.accumulation_steps == 2
    assert (back.epsilon, back.weight_decay_rate, back.clip_norm, back.global_clipnorm) == (
        1e-6, 0.01, 1.0, None)
    assert isinstance(back._learning_rate, optimization.WarmupPolynomialDecay)
    assert float(back.learning_rate) == 0.0  # step 0 of warmup
    with pytest.raises(ValueError, match="not Keras's global_clipnorm"):
        optimization.AdamWeightDecay(global_clipnorm=1.0)
    # The same name in the config, the flag's help and compile_for_training.
    assert RunConfig(output_dir="out", optimizer="adamw_google").optimizer == "adamw_google"
    assert "adamw_google" in field_help(RunConfig, "optimizer")
    model = embedding_model()
    config = types.SimpleNamespace(learning_rate=1e-3, optimizer="adamw_google",
                                   lr_schedule=None, weight_decay=0.01,
                                   gradient_accumulation_steps=1, jit_compile=False)
    compiled = runtime.compile_for_training(model, config, 10, 1, loss_scale=False, loss="mse")
    assert model.optimizer is compiled and isinstance(compiled, optimization.AdamWeightDecay)
    # Exclusions: google-research/bert's list, as it reads it, on tfbert's variable paths
    # (which keep its LayerNorm and bias names): the tiny pretrainer's 18 kernels and tables.
    pre = BertPretrainer(BertEncoder(tiny_config()))
    pre(make_features(tiny_config(), max_predictions=2))
    opt = optimization.AdamWeightDecay()
    opt.build(pre.trainable_variables)
    google = [not any(re.search(r, v.path) for r in ["LayerNorm", "layer_norm", "bias"])
              for v in pre.trainable_variables]
    assert opt._decayed == google and sum(google) == 18
    assert [v.path for v, o in zip(pre.trainable_variables, opt._one_hot, strict=True) if o] == [
        v.path for v in pre.trainable_variables if "token_type_embeddings" in v.path]
