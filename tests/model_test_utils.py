"""The shared checks every tfbert layer and model test runs.

`check_model` / `check_layer` build the object, call it eagerly and inside a tf.function (XLA
with `jit_compile=True`), round-trip `get_config`/`from_config` (same config, same outputs with
copied weights), save and reload a `.keras` file (same class, same outputs) and run one `fit`
step (finite loss, weights move). Tests then only assert what is specific to them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import keras
import numpy as np
import tensorflow as tf

from tfbert.config import BertConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ATOL = 1e-5


def op_types(fn, *args) -> set[str]:
    """The op types in the graph of tf.function `fn` traced for `args`."""
    return {op.type for op in fn.get_concrete_function(*args).graph.get_operations()}


def tiny_config(vocab_file: str | None = None, **overrides) -> BertConfig:
    """A 2-layer, hidden-32 BERT that builds and runs in well under a second.

    Args:
        vocab_file: str or None. When given, vocab_size is its number of lines.
        **overrides: BertConfig fields to change.
    """
    values = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
                  hidden_act="gelu")
    if vocab_file is not None:
        with open(vocab_file, encoding="utf-8") as f:
            values["vocab_size"] = sum(1 for _ in f)
    values.update(overrides)
    return BertConfig(**values)


def tiny_config_file(path, vocab_file: str, **overrides) -> str:
    """`tiny_config(vocab_file, **overrides)` written as a bert_config.json at `path`; its path."""
    tiny_config(vocab_file, **overrides).to_json_file(str(path))
    return str(path)


def make_features(config: BertConfig, batch_size: int = 4, seq_length: int = 16,
                  max_predictions: int = 0, seed: int = 0) -> dict[str, np.ndarray]:
    """Random encoder inputs with ragged real lengths (padding ids 0), optionally pretraining
    fields (`masked_lm_*` [B, max_predictions], `next_sentence_labels` [B, 1])."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(seq_length // 2, seq_length + 1, size=batch_size)
    lengths[0] = seq_length
    mask = (np.arange(seq_length)[None, :] < lengths[:, None]).astype("int32")
    features = {
        "input_ids": (rng.integers(5, config.vocab_size, (batch_size, seq_length)) * mask)
        .astype("int32"),
        "input_mask": mask,
        "segment_ids": ((np.arange(seq_length)[None, :] >= lengths[:, None] // 2) * mask)
        .astype("int32"),
    }
    if max_predictions:
        p = max_predictions
        features["masked_lm_positions"] = np.stack(
            [np.sort(rng.choice(np.arange(1, n), size=p, replace=False)) for n in lengths]
        ).astype("int32")
        features["masked_lm_ids"] = rng.integers(5, config.vocab_size, (batch_size, p)).astype(
            "int32")
        weights = np.ones((batch_size, p), "float32")
        weights[1:, -1] = 0.0  # some padded prediction slots
        features["masked_lm_weights"] = weights
        features["next_sentence_labels"] = rng.integers(0, 2, (batch_size, 1)).astype("int32")
    return features


def dense_model(seed: int = 1) -> keras.Model:
    """A small dense regression model (8 -> 16 tanh -> LayerNorm -> 1) for optimizer and
    runtime tests, its weights fixed by `seed`."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((8,)),
        keras.layers.Dense(16, activation="tanh", name="dense"),
        keras.layers.LayerNormalization(name="layer_norm"),
        keras.layers.Dense(1, name="out"),
    ])


def dense_data(n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(x [n, 8], y [n, 1]) for dense_model: rows of very different scale, so gradients are well
    above a clip norm of 1 and per-batch norms differ."""
    rng = np.random.default_rng(0)
    scale = np.linspace(0.1, 10, n, dtype="float32")[:, None]
    x = rng.normal(size=(n, 8)).astype("float32") * scale
    y = rng.normal(size=(n, 1)).astype("float32") * 5
    return x, y


def embedding_model(seed: int = 1) -> keras.Model:
    """Word and token-type tables (sparse gradients with repeated ids), a Dense on top."""
    keras.utils.set_random_seed(seed)
    ids = keras.Input((5,), dtype="int32", name="input_ids")
    types_ = keras.Input((5,), dtype="int32", name="segment_ids")
    x = (keras.layers.Embedding(7, 4, name="word_embeddings")(ids)
         + keras.layers.Embedding(2, 4, name="token_type_embeddings")(types_))
    x = keras.layers.Dense(1, name="out")(keras.layers.Flatten()(x))
    return keras.Model({"input_ids": ids, "segment_ids": types_}, x)


def embedding_data(n: int = 64) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Inputs for `embedding_model` (3 of 7 word ids: rows repeat) and regression targets."""
    rng = np.random.default_rng(0)
    x = {"input_ids": rng.integers(0, 3, (n, 5)).astype("int32"),  # 3 of 7 ids: repeats
         "segment_ids": (np.arange(5)[None, :] >= rng.integers(1, 5, (n, 1))).astype("int32")}
    y = (rng.normal(size=(n, 1)) * 20).astype("float32")
    return x, y


def _numpy(outputs):
    return tf.nest.map_structure(lambda t: np.asarray(keras.ops.convert_to_numpy(t)), outputs)


def assert_all_close(actual, expected, atol: float = ATOL, what: str = "outputs") -> None:
    """Structures equal and every array within `atol`."""
    tf.nest.assert_same_structure(expected, actual)
    for a, e in zip(tf.nest.flatten(_numpy(actual)), tf.nest.flatten(_numpy(expected)),
                    strict=True):
        assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
        np.testing.assert_allclose(a.astype("float32"), e.astype("float32"), atol=atol,
                                   err_msg=what)


def _check_fit(model: keras.Model, x, y=None, compile_kwargs: dict | None = None,
               batch_size: int = 2) -> dict:
    # SGD and a plain graph by default: tracing Adam's per-variable updates or XLA-compiling a
    # train step costs seconds per model on a small CPU; tests that need XLA training ask.
    compile_kwargs = {"optimizer": keras.optimizers.SGD(0.05), "jit_compile": False,
                      **(compile_kwargs or {})}
    model.compile(**compile_kwargs)
    before = [np.array(w) for w in model.trainable_weights]
    history = model.fit(x, y, batch_size=batch_size, epochs=1, steps_per_epoch=1, verbose=0,
                        shuffle=False)
    for name, values in history.history.items():
        assert np.all(np.isfinite(values)), f"fit: {name} = {values}"
    after = [np.array(w) for w in model.trainable_weights]
    moved = sum(not np.array_equal(b, a) for b, a in zip(before, after, strict=True))
    assert moved > 0.9 * len(before), f"fit moved only {moved}/{len(before)} weight tensors"
    return {k: v[-1] for k, v in history.history.items()}


def check_model(model: keras.Model, features: dict, tmp_path, labels=None,
                compile_kwargs: dict | None = None, fit: bool = True, jit: bool = True) -> dict:
    """The standard model checks; returns the last `fit` metrics ({} when fit=False).

    Args:
        model: the model (its class must be Keras-serializable).
        features: numpy feature dict (may hold extra keys such as labels).
        tmp_path: a pytest tmp_path for the `.keras` file.
        labels: `y` for fit, or None when the model finds its labels in `features`.
        compile_kwargs: compile arguments for the fit step (default: SGD, no XLA).
        fit: run the fit step.
        jit: run the tf.function with jit_compile=True (XLA) rather than a plain graph.
    """
    eager = model(features, training=False)
    graph = tf.function(lambda x: model(x, training=False), jit_compile=jit)(features)
    assert_all_close(graph, eager, what=f"{type(model).__name__}: tf.function vs eager")

    config = model.get_config()
    clone = type(model).from_config(config)
    assert type(clone) is type(model)
    assert clone.get_config() == config, "from_config(get_config()).get_config() differs"
    clone.set_weights(model.get_weights())
    assert_all_close(clone(features, training=False), eager, what="from_config clone")

    path = os.path.join(str(tmp_path), f"{model.name}.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is type(model)
    assert_all_close(loaded(features, training=False), eager, what=".keras reload")
    assert loaded.count_params() == model.count_params()

    return _check_fit(model, features, labels, compile_kwargs) if fit else {}


def check_layer(layer: keras.layers.Layer, args: list[np.ndarray], tmp_path,
                kwargs: dict | None = None, expected_shape: tuple | None = None,
                jit: bool = True):
    """The standard layer checks on `layer(*args, **kwargs)`; returns the eager output.

    Tensor `kwargs` become model inputs of the wrapper used for the save/load and fit checks;
    python values are passed through.
    """
    kwargs = dict(kwargs or {})
    out = layer(*args, **kwargs, training=False)
    if expected_shape is not None:
        assert tuple(out.shape) == tuple(expected_shape), f"{layer.name}: shape {out.shape}"
    graph = tf.function(lambda a, k: layer(*a, **k, training=False), jit_compile=jit)(
        args, kwargs)
    assert_all_close(graph, out, what=f"{layer.name}: tf.function vs eager")

    clone = type(layer).from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    clone(*args, **kwargs)
    clone.set_weights(layer.get_weights())
    assert_all_close(clone(*args, **kwargs, training=False), out, what="from_config clone")

    # Wrap in a functional model: `.keras` save/load and a fit step on an MSE target.
    tensor_kwargs = {k: v for k, v in kwargs.items() if isinstance(v, np.ndarray)}
    spec = lambda a, name: keras.Input(shape=a.shape[1:], dtype=str(a.dtype), name=name)
    inputs = [spec(a, f"arg_{i}") for i, a in enumerate(args)]
    kw_inputs = {k: spec(v, k) for k, v in tensor_kwargs.items()}
    static = {k: v for k, v in kwargs.items() if k not in tensor_kwargs}
    wrapper = keras.Model([*inputs, *kw_inputs.values()],
                          layer(*inputs, **kw_inputs, **static))
    feed = [*args, *tensor_kwargs.values()]
    path = os.path.join(str(tmp_path), f"{layer.name}_wrapper.keras")
    wrapper.save(path)
    loaded = keras.saving.load_model(path)
    assert_all_close(loaded(feed, training=False), out, what=".keras reload")

    target = np.random.default_rng(0).normal(size=out.shape).astype("float32")
    _check_fit(wrapper, feed, target, {"loss": "mse", "run_eagerly": True})
    return out


class NaNWeightsAt(keras.callbacks.Callback):
    """Turns every trainable weight NaN at the start of the given training batch (1-based,
    counted across epochs): a diverged run."""

    def __init__(self, batch: int) -> None:
        super().__init__()
        self.batch, self.seen = batch, 0

    def on_train_batch_begin(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.batch:
            for v in self.model.trainable_variables:
                v.assign(keras.ops.full(v.shape, float("nan")))


def script_result(script: str) -> dict:
    """Runs `script` (its `{tests}` filled with this folder) in a child Python in the repository
    root, asserts it succeeded and returns the JSON of its last stdout line starting "RESULT"
    (the two-logical-CPU MirroredStrategy tests: the devices must be set before TensorFlow
    starts, so they need a process of their own)."""
    tests = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run([sys.executable, "-c", script.format(tests=tests)],
                          capture_output=True, text=True, cwd=os.path.dirname(tests),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])
