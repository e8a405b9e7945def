"""Optimizers, schedule, strategies and callbacks of tfbert.training, on small Keras models."""

from __future__ import annotations

import glob
import json
import math
import os
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from model_test_utils import NaNWeightsAt, dense_data, dense_model, script_result

from tfbert.training import callbacks as cb
from tfbert.training import distribute, optimization


def _train(k: int, name: str = "adamw", steps: int = 4, batch: int = 16,
           jit_compile: bool = False) -> list[np.ndarray]:
    model = dense_model()
    opt = optimization.create_optimizer(1e-2, num_train_steps=20, num_warmup_steps=2,
                                        optimizer=name, gradient_accumulation_steps=k,
                                        variables=model.trainable_variables)
    model.compile(optimizer=opt, loss="mse", jit_compile=jit_compile)
    x, y = dense_data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch // k)
    model.fit(ds, epochs=1, steps_per_epoch=steps * k, verbose=0)
    assert int(keras.ops.convert_to_numpy(opt.iterations)) == steps  # updates, not batches
    return [v.numpy() for v in model.trainable_variables]


def test_schedule_warmup_then_linear_decay():
    s = optimization.WarmupLinearDecay(1e-3, num_train_steps=100, num_warmup_steps=10)
    values = [float(s(i)) for i in (0, 5, 10, 55, 100, 150)]
    np.testing.assert_allclose(values, [0.0, 5e-4, 1e-3, 5e-4, 0.0, 0.0], atol=1e-9)
    no_warmup = optimization.WarmupLinearDecay(1e-3, num_train_steps=4)
    np.testing.assert_allclose([float(no_warmup(i)) for i in range(5)],
                               [1e-3, 7.5e-4, 5e-4, 2.5e-4, 0.0], atol=1e-9)
    with pytest.raises(ValueError, match="num_warmup_steps 20"):
        optimization.WarmupLinearDecay(1e-3, num_train_steps=10, num_warmup_steps=20)


def test_weight_decay_skips_layer_norm_and_biases():
    model = dense_model()
    # Keyed by path below the model: its auto-name (sequential, sequential_1, ...) depends on
    # how many models this process built before.
    names = {v.path.split("/", 1)[1]: optimization.is_excluded_from_weight_decay(v)
             for v in model.trainable_variables}
    assert names == {"dense/kernel": False, "dense/bias": True,
                     "layer_norm/gamma": True, "layer_norm/beta": True,
                     "out/kernel": False, "out/bias": True}
    # Behaviour: with zero gradients Adam moves nothing, so only the decay acts: w *= 1 - lr*wd.
    for name in ("adamw", "lamb"):
        model = dense_model()
        before = [v.numpy().copy() for v in model.trainable_variables]
        opt = optimization.create_optimizer(0.5, num_train_steps=10, optimizer=name,
                                            weight_decay=0.1, clip_norm=None,
                                            variables=model.trainable_variables)
        opt.apply([keras.ops.zeros_like(v) for v in model.trainable_variables],
                  model.trainable_variables)
        for v, w in zip(model.trainable_variables, before, strict=True):
            if optimization.is_excluded_from_weight_decay(v):
                np.testing.assert_array_equal(v.numpy(), w, err_msg=f"{name} {v.path}")
            elif name == "adamw":
                np.testing.assert_allclose(v.numpy(), w * (1 - 0.5 * 0.1), rtol=1e-6)
            else:  # LAMB: update = wd * w, trust ratio |w| / |wd w| -> w -= lr * w
                np.testing.assert_allclose(v.numpy(), w * (1 - 0.5), rtol=1e-5, atol=1e-7)


def test_optimizer_settings_match_bert():
    opt = optimization.create_optimizer(1e-4, num_train_steps=100, num_warmup_steps=10)
    assert isinstance(opt, optimization.AdamW)
    assert (opt.epsilon, opt.weight_decay, opt.clip_norm) == (1e-6, 0.01, 1.0)
    lamb = optimization.create_optimizer(1e-4, 100, optimizer="lamb")
    assert (lamb.epsilon, lamb.decay_rate, lamb.clip_norm) == (1e-6, 0.01, 1.0)
    scaled = optimization.create_optimizer(1e-4, 100, loss_scale=True)
    assert isinstance(scaled, keras.optimizers.LossScaleOptimizer)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        optimization.create_optimizer(1e-4, 100, optimizer="sgd")


@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_optimizer_serialization_round_trip_keeps_schedule_and_exclusions(name):
    opt = optimization.create_optimizer(1e-3, 100, 10, optimizer=name,
                                        gradient_accumulation_steps=2, loss_scale=True)
    back = keras.optimizers.deserialize(keras.optimizers.serialize(opt)).inner_optimizer
    assert type(back) is type(opt.inner_optimizer) and back.accumulation_steps == 2
    assert back.clip_norm == 1.0
    assert isinstance(back._learning_rate, optimization.WarmupLinearDecay)
    model = dense_model()
    assert [back._use_weight_decay(v) if name == "adamw" else
            not optimization.is_excluded_from_weight_decay(v)
            for v in model.trainable_variables] == [True, False, False, False, True, False]


def test_lamb_matches_reference_numpy():
    """Two LAMB steps against a numpy transcription of You et al. (2019), Algorithm 2."""
    w0 = np.array([[0.5, -1.0], [2.0, 0.25]], "float32")
    b0 = np.array([0.1, -0.2], "float32")
    grads = [(np.array([[0.3, -0.1], [0.2, 0.4]], "float32"), np.array([0.5, 0.1], "float32")),
             (np.array([[-0.2, 0.3], [0.1, -0.5]], "float32"), np.array([0.2, -0.3], "float32"))]
    w = keras.Variable(w0, name="kernel")
    b = keras.Variable(b0, name="bias")
    opt = optimization.Lamb(learning_rate=0.1, decay_rate=0.01, epsilon=1e-6)
    for gw, gb in grads:
        opt.apply([gw, gb], [w, b])

    def reference(x, gs, decay):
        m = v = np.zeros_like(x)
        for t, g in enumerate(gs, start=1):
            m = 0.9 * m + 0.1 * g
            v = 0.999 * v + 0.001 * g * g
            r = (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-6)
            if decay:
                r = r + 0.01 * x
                ratio = np.linalg.norm(x) / np.linalg.norm(r)
            else:
                ratio = 1.0  # excluded: no decay, no layer adaptation
            x = x - 0.1 * ratio * r
        return x

    np.testing.assert_allclose(w.numpy(), reference(w0, [g for g, _ in grads], True),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b.numpy(), reference(b0, [g for _, g in grads], False),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_adamw_fused_update_matches_keras_and_numpy(jit_compile):
    """tfbert's AdamW runs Adam's update as TensorFlow's one-pass ResourceApplyAdam: the same
    weights as keras.optimizers.AdamW and as a numpy transcription (decoupled decay first)."""
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(6, 4)).astype("float32")
    grads = [rng.normal(size=(6, 4)).astype("float32") for _ in range(4)]

    def run(opt):
        w = keras.Variable(w0, name="kernel")
        step = tf.function(lambda g: opt.apply([g], [w]), jit_compile=jit_compile)
        for g in grads:
            step(tf.constant(g))
        graph = step.get_concrete_function(tf.TensorSpec([6, 4])).graph
        return w.numpy(), {op.type for op in graph.get_operations()}

    ours, ops_used = run(optimization.AdamW(learning_rate=0.05, weight_decay=0.1))
    if not jit_compile:
        assert "ResourceApplyAdam" in ops_used
    keras_w, _ = run(keras.optimizers.AdamW(learning_rate=0.05, weight_decay=0.1))
    x, m, v = w0.copy(), np.zeros_like(w0), np.zeros_like(w0)
    for t, g in enumerate(grads, start=1):
        x = x - 0.05 * 0.1 * x
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        x = x - 0.05 * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t) * m / (np.sqrt(v) + 1e-7)
    np.testing.assert_allclose(ours, keras_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours, x, rtol=1e-5, atol=1e-6)


def test_adamw_sparse_gradient_takes_the_fused_update_clipped_sparse():
    """A word table's gradient (IndexedSlices, repeated rows) is clipped while sparse and made
    dense only for ResourceApplyAdam: the weights of keras.optimizers.AdamW with the same
    global clip (whose ops make the gradient dense: every row's moments decay at every step)."""
    rng = np.random.default_rng(1)
    w0 = rng.normal(size=(6, 4)).astype("float32")
    steps = [(rng.normal(size=(3, 4)).astype("float32") * 4, [0, 0, 3]),
             (rng.normal(size=(3, 4)).astype("float32") * 4, [2, 5, 2])]

    def run(opt):
        w = keras.Variable(w0, name="kernel")
        step = tf.function(lambda values, ids: opt.apply(
            [tf.IndexedSlices(values, ids, tf.constant([6, 4]))], [w]))
        for values, ids in steps:
            step(tf.constant(values), tf.constant(ids))
        graph = step.get_concrete_function(tf.TensorSpec([3, 4]),
                                           tf.TensorSpec([3], tf.int32)).graph
        return w.numpy(), [op.type for op in graph.get_operations()]

    ours, ops_used = run(optimization.AdamW(learning_rate=0.05, weight_decay=0.1,
                                            global_clipnorm=1.0))
    assert ops_used.count("ResourceApplyAdam") == 1
    assert ops_used.count("UnsortedSegmentSum") == 2  # rows summed for the clip; made dense once
    keras_w, _ = run(keras.optimizers.AdamW(learning_rate=0.05, weight_decay=0.1,
                                            global_clipnorm=1.0))
    np.testing.assert_allclose(ours, keras_w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_gradient_accumulation_matches_large_batch(name):
    """k=4 micro-batches of 4 make the same updates (weights, schedule) as batches of 16."""
    big = _train(1, name)
    accumulated = _train(4, name)
    for a, b in zip(big, accumulated, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_accumulation_under_xla():
    for a, b in zip(_train(1), _train(2, jit_compile=True), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_strategy_selection():
    assert isinstance(distribute.get_strategy("auto"), tf.distribute.OneDeviceStrategy)
    assert distribute.get_strategy("one_device").num_replicas_in_sync == 1
    assert distribute.is_chief(tf.distribute.get_strategy())
    assert distribute.num_workers(distribute.get_strategy("one_device")) == 1
    with pytest.raises(ValueError, match="distribution_strategy must be one of"):
        distribute.get_strategy("horovod")
    old = os.environ.pop("TF_CONFIG", None)
    try:
        with pytest.raises(ValueError, match="TF_CONFIG"):
            distribute.get_strategy("multi_worker")
    finally:
        if old is not None:
            os.environ["TF_CONFIG"] = old


_MIRRORED_SCRIPT = textwrap.dedent("""
    import json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    sys.path.insert(0, {tests!r})
    from model_test_utils import dense_data, dense_model
    from tfbert.training import distribute, optimization

    def run(strategy, k, name):
        with strategy.scope():
            model = dense_model()
            opt = optimization.create_optimizer(
                1e-2, 20, 2, optimizer=name, gradient_accumulation_steps=k,
                variables=model.trainable_variables, loss_scale=(k == 2))
            model.compile(optimizer=opt, loss="mse")
        x, y = dense_data()
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16 // k)
        h = model.fit(ds, epochs=4, steps_per_epoch=k, verbose=0)  # one step per epoch
        return h.history["loss"], [v.numpy().tolist() for v in model.trainable_variables]

    one = distribute.get_strategy("one_device")
    mirrored = distribute.get_strategy("mirrored")
    assert mirrored.num_replicas_in_sync == 2, mirrored.num_replicas_in_sync
    out = {{"adamw": {{"one": run(one, 1, "adamw"), "mirrored": run(mirrored, 1, "adamw"),
                       "mirrored_k2": run(mirrored, 2, "adamw")}},
           "lamb": {{"one": run(one, 1, "lamb"), "mirrored_k2": run(mirrored, 2, "lamb")}}}}
    print("RESULT" + json.dumps(out))
""")


def test_mirrored_two_cpus_matches_one_device():
    """MirroredStrategy over 2 logical CPUs follows the one-device loss trajectory and weights
    (global-norm clipping sees the global gradient; accumulation and loss scaling work too)."""
    out = script_result(_MIRRORED_SCRIPT)
    for name, runs in out.items():
        one_loss, one_w = runs["one"]
        assert one_loss[-1] < one_loss[0]
        for key in set(runs) - {"one"}:
            loss, w = runs[key]
            np.testing.assert_allclose(loss, one_loss, rtol=1e-5, err_msg=f"{name} {key}")
            for a, b in zip(w, one_w, strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=f"{name} {key}")


def test_callbacks_count_steps_save_checkpoints_and_stop_on_nan(tmp_path):
    model = dense_model()
    opt = optimization.create_optimizer(1e-2, 100, gradient_accumulation_steps=2,
                                        variables=model.trainable_variables)
    model.compile(optimizer=opt, loss="mse")
    opt.build(model.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64)
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt, global_step=step)
    manager = cb.checkpoint_manager(ckpt, str(tmp_path / "checkpoints"), max_to_keep=10)
    progress = cb.TrainingProgress(0, 2, global_batch_size=8, global_step=step, stop_at=100)
    guard = cb.StopOnNaN(progress)
    saver = cb.CheckpointSaver(progress, manager, every_steps=2)
    board = cb.TensorBoardScalars(progress, str(tmp_path / "logs"), every_steps=1)
    history = cb.LoopHistory(progress, str(tmp_path / "history.json"))
    x, y = dense_data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4).repeat()
    # 2 batches per step; the weights turn NaN in batch 12 (step 6).
    model.fit(ds, epochs=3, steps_per_epoch=6, verbose=0,
              callbacks=[progress, guard, saver, board, history, NaNWeightsAt(12)])
    assert guard.bad_step == 6 and math.isnan(guard.bad_loss)
    assert progress.step == 6 and int(step.numpy()) == 6
    # Checkpoints at steps 2 and 4; none at 6, whose loss is NaN.
    assert [int(p.rsplit("-", 1)[1]) for p in manager.checkpoints] == [2, 4]
    assert saver.last_saved == 4
    reader = tf.train.load_checkpoint(manager.latest_checkpoint)
    assert reader.get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE") == 4
    entries = json.loads((tmp_path / "history.json").read_text())
    assert [e["step"] for e in entries] == [3, 6]
    assert math.isfinite(entries[0]["loss"]) and entries[1]["loss"] is None  # NaN: JSON null
    assert entries[0]["learning_rate"] > 0
    # TensorBoard: loss, learning rate and examples/s per step, against the global step.
    scalars: dict[str, list[int]] = {}
    for path in glob.glob(str(tmp_path / "logs" / "train" / "events*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append(event.step)
    assert {"loss", "learning_rate", "examples_per_second"} <= set(scalars)
    assert scalars["learning_rate"][:3] == [2, 3, 4]
    assert progress.examples == 6 * 8 and progress.examples_per_second > 0


def test_write_json_is_atomic_and_readable(tmp_path):
    path = tmp_path / "sub" / "r.json"
    cb.write_json(str(path), {"a": 1, "b": [1.5]})
    assert json.loads(path.read_text()) == {"a": 1, "b": [1.5]}
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]
