"""Every registered task (`tfbert.tasks.registry.tasks()`) through the same checks.

The model test builds the task's model on a tiny config and runs model_test_utils.check_model
(eager vs tf.function, get_config/from_config, `.keras` save/load, one fit step), then
`save_pretrained` / `load_model` give the same outputs. The export test (`slow`) writes the
SavedModel and the ids-in float32 TFLite model of one `export_model` call: both give the Keras
model's outputs as the task's serving head names them (`ServingHead.tflite_outputs`). The list
of tasks comes from the registry only: a new task is checked here without a line in this file.
"""

from __future__ import annotations

import inspect
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from model_test_utils import assert_all_close, check_model, make_features, tiny_config

import tfbert
from tfbert.export import export_model, heads, load_for_export, tflite
from tfbert.models.encoder import BertEncoder
from tfbert.tasks import registry

SEQ = 16
NUM_CLASSES = 3
TASKS = registry.tasks()


def _build(task: registry.Task, config: tfbert.BertConfig) -> keras.Model:
    """`task`'s model class on `config`: the encoder itself, or the class on an encoder with its
    required arguments after the encoder given small values."""
    keras.utils.set_random_seed(0)
    if issubclass(task.model_class, BertEncoder):
        return task.model_class(config)
    params = list(inspect.signature(task.model_class.__init__).parameters.values())[2:]
    required = [p.name for p in params if p.default is inspect.Parameter.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    unknown = sorted(set(required) - {"num_classes"})
    assert not unknown, f"{task.name}: no example value for {unknown} of {task.model_class}"
    return task.model_class(BertEncoder(config), **{name: NUM_CLASSES for name in required})


def _fit_targets(model: keras.Model, features: dict) -> tuple[object, dict]:
    """(y, compile arguments) for one fit step. A model that computes its own loss from the
    features (the pretrainer) takes none; a task model trains with its `default_loss()`: under
    sparse cross-entropy (over the last axis of an output) its targets are integers of the
    output's shape less that axis, under any other loss (a regressor's squared error) floats
    of the output's shape; a bare encoder gets random targets under MSE."""
    if type(model).compute_loss is not keras.Model.compute_loss:
        return None, {}
    outputs = model(features, training=False)
    rng = np.random.default_rng(1)

    def target(output, loss):
        if isinstance(loss, keras.losses.SparseCategoricalCrossentropy):
            return rng.integers(0, output.shape[-1], size=output.shape[:-1]).astype("int32")
        return rng.normal(size=output.shape).astype("float32")

    if hasattr(model, "default_loss"):
        return tf.nest.map_structure(target, outputs, model.default_loss()), {}
    return tf.nest.map_structure(lambda t: target(t, None), outputs), {"loss": "mse"}


def _metadata(task: registry.Task) -> dict:
    """tfbert.json fields the export reads: the task, the sequence length, label names when
    the serving head needs them."""
    metadata = {"task": task.name, "max_seq_length": SEQ, "lower_case": True}
    if heads.get(task.export).needs_labels:
        metadata["labels"] = ["O", "B-X", "I-X"]  # also valid BIO tags (a tagging head)
    return metadata


@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_task_model_trains_saves_and_loads(task, tmp_path, chinese_vocab_file):
    config = tiny_config(chinese_vocab_file)
    model = _build(task, config)
    features = make_features(config, seq_length=SEQ, max_predictions=2)
    y, compile_kwargs = _fit_targets(model, features)
    metrics = check_model(model, features, tmp_path, labels=y, compile_kwargs=compile_kwargs,
                          jit=False)
    assert metrics and all(np.isfinite(v) for v in metrics.values())

    model_dir = str(tmp_path / "model")
    tfbert.save_pretrained(model, model_dir, vocab_file=chinese_vocab_file,
                           metadata=_metadata(task))
    loaded = tfbert.checkpoints.load_model(model_dir)
    assert type(loaded) is type(model)
    assert_all_close(loaded(features, training=False), model(features, training=False),
                     what=f"{task.name}: save_pretrained / load_model")


@pytest.mark.slow  # ~60 s for all tasks; fast: test_export.py and test_tflite.py export each head
@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_task_export_saved_model_and_tflite_equal_keras(task, tmp_path, chinese_vocab_file):
    config = tiny_config(chinese_vocab_file, initializer_range=0.2)  # logits O(1), not ~0
    model_dir = str(tmp_path / "model")
    tfbert.save_pretrained(_build(task, config), model_dir, vocab_file=chinese_vocab_file,
                           metadata=_metadata(task))
    result = export_model(model_dir, str(tmp_path / "saved_models" / task.name / "1"),
                          tflite=("float32",), text_tflite=False, check=False)
    model, _, spec, _ = load_for_export(model_dir)
    features = make_features(config, seq_length=SEQ)
    inputs = {k: tf.constant(v) for k, v in features.items()}
    with open(chinese_vocab_file, encoding="utf-8") as f:
        continuation = tf.constant([line.startswith("##") for line in f.read().splitlines()])
    want = spec.head.tflite_outputs(model, spec, inputs, model(inputs, training=False),
                                    continuation)
    want = {k: np.asarray(v) for k, v in want.items()}

    serve_ids = tf.saved_model.load(result["export_dir"]).signatures["serve_ids"]
    served = {k: np.asarray(v) for k, v in serve_ids(**inputs).items()}
    shared = sorted(set(served) & set(want))
    assert shared, f"{task.name}: serve_ids {sorted(served)} vs head {sorted(want)}"
    [info] = result["tflite"].values()
    interpreter = tflite.make_interpreter(info["path"], text_ops=False)
    got = tflite.run_tflite(interpreter, features)
    assert set(got) == set(want)
    for key in shared:  # the decoded integer outputs of serve_ids mark padding: floats only
        if np.issubdtype(want[key].dtype, np.floating):
            np.testing.assert_allclose(served[key], want[key], atol=1e-4,
                                       err_msg=f"{task.name}: SavedModel serve_ids {key}")
    for key, value in got.items():
        if np.issubdtype(want[key].dtype, np.floating):
            np.testing.assert_allclose(value, want[key], atol=1e-4,
                                       err_msg=f"{task.name}: TFLite {key}")
        else:
            np.testing.assert_array_equal(value, want[key], err_msg=f"{task.name}: TFLite {key}")
    assert os.path.getsize(info["path"]) == info["bytes"]
