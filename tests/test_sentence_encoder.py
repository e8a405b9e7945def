"""BertSentenceEncoder (tfbert/models/sentence_encoder.py) and sentence-transformers directories
(tfbert/checkpoints/sentence_transformers.py): all-MiniLM-L6-v2's vectors against
sentence-transformers' own (tests/data/minilm_st_golden.npz, made by tests/make_st_golden.py),
each pooling mode, the projection and the normalisation against numpy written from
sentence-transformers' modules, the directory format both ways, and its refusals."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
from model_test_utils import check_model, make_features, tiny_config
from safetensors.numpy import load_file

import tfbert
from tfbert import checkpoints
from tfbert.checkpoints import CheckpointError
from tfbert.models.encoder import BertEncoder
from tfbert.models.sentence_encoder import POOLING_MODES, BertSentenceEncoder
from tfbert.text.preprocessor import BertPreprocessor

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "data", "minilm_st_golden.npz")
TINY_HF = os.path.join(HERE, "data", "tiny_pretraining")
TOLERANCE = 1e-5
SEQ = 16


# --- numpy, from sentence-transformers' Pooling, Dense and Normalize ------------------------


def st_pool(x: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    """sentence-transformers' Pooling of one mode on token vectors x [B, T, H], mask [B, T]."""
    m = mask[:, :, None].astype(np.float64)
    if mode == "cls":
        return x[:, 0]
    if mode == "max":
        return np.where(m > 0, x, -1e9).max(axis=1)
    total, count = (x * m).sum(axis=1), np.clip(m.sum(axis=1), 1e-9, None)
    return total / (count if mode == "mean" else np.sqrt(count))


def st_dense(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, tanh: bool) -> np.ndarray:
    """Dense: activation(x W^T + b), W [out, in] as torch.nn.Linear keeps it."""
    y = x @ weight.T + bias
    return np.tanh(y) if tanh else y


def st_normalize(x: np.ndarray) -> np.ndarray:
    """torch.nn.functional.normalize(x, p=2, dim=-1), eps 1e-12."""
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_encoder(chinese_vocab_file):
    keras.utils.set_random_seed(0)
    return BertEncoder(tiny_config(chinese_vocab_file))


@pytest.fixture(scope="module")
def features(tiny_encoder):
    f = make_features(tiny_encoder.config, batch_size=4, seq_length=SEQ, seed=3)
    assert f["input_mask"].min() == 0  # padded rows
    return f


def _numpy(x) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x), np.float64)


def _save_st(model, directory, vocab_file, **metadata) -> str:
    tfbert.save_pretrained(model, str(directory), vocab_file=vocab_file,
                           format="sentence-transformers",
                           metadata={"max_seq_length": SEQ, **metadata})
    return str(directory)


def _read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _write_json(path, value) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f)


# --- the real checkpoint against sentence-transformers ---------------------------------------


@pytest.fixture(scope="module")
def golden(minilm_dir):
    data = np.load(GOLDEN)
    with open(os.path.join(minilm_dir, "model.safetensors"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != str(data["model_sha256"]):
        pytest.fail(f"{minilm_dir}/model.safetensors is not the checkpoint {GOLDEN} was made "
                    "from; rerun tests/make_st_golden.py")
    return data


def test_minilm_vectors_equal_sentence_transformers(minilm_dir, golden):
    """Single sentences, a padded batch, a text past 256 word pieces, "", Chinese, accents:
    tfbert's tokenizer at the directory's max_seq_length gives sentence-transformers' ids and
    the model its vectors."""
    checkpoint = checkpoints.read_checkpoint(minilm_dir)
    assert checkpoint.format == "hf"
    assert checkpoint.metadata == {
        "model_class": "BertSentenceEncoder", "task": "embedding",
        "model_config": {"pooling": "mean", "projection_size": None,
                         "projection_activation": "tanh", "normalize": True},
        "max_seq_length": 256, "lower_case": True}  # the tokenizer lower-cases (see reader)
    assert checkpoints.stated_lower_case(minilm_dir)[0] is True
    model = tfbert.from_pretrained(checkpoint)
    assert type(model) is BertSentenceEncoder and model.embedding_size == 384
    sentences = golden["sentences"].tolist()
    assert "" in sentences and int(golden["max_seq_length"]) == 256
    preprocessor = BertPreprocessor(checkpoint.vocab_file, checkpoint.metadata["max_seq_length"],
                                    lower_case=checkpoint.metadata["lower_case"])
    inputs = preprocessor(tf.constant(sentences))
    np.testing.assert_array_equal(inputs["input_ids"].numpy(), golden["input_ids"])
    np.testing.assert_array_equal(inputs["input_mask"].numpy().sum(1), golden["lengths"])
    vectors = _numpy(model.predict(inputs, batch_size=5, verbose=0))
    assert vectors.shape == golden["embeddings"].shape
    assert np.max(np.abs(vectors - golden["embeddings"])) <= TOLERANCE
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


def test_minilm_from_the_class_and_as_a_plain_encoder(minilm_dir):
    assert type(BertSentenceEncoder.from_pretrained(minilm_dir)) is BertSentenceEncoder
    encoder = BertEncoder.from_pretrained(minilm_dir)  # the BERT alone, head left out
    assert type(encoder) is BertEncoder


# --- pooling, projection, normalisation -----------------------------------------------------


@pytest.mark.parametrize("mode", POOLING_MODES)
def test_each_pooling_mode_equals_sentence_transformers(tiny_encoder, features, mode):
    model = BertSentenceEncoder(tiny_encoder, pooling=mode, normalize=False)
    tokens = _numpy(tiny_encoder(features, training=False)["sequence_output"])
    want = st_pool(tokens, features["input_mask"], mode)
    got = _numpy(model(features, training=False))
    np.testing.assert_allclose(got, want, atol=TOLERANCE)
    if mode != "cls":  # the padding is really left out: counting it gives other vectors
        unmasked = st_pool(tokens, np.ones_like(features["input_mask"]), mode)
        assert np.max(np.abs(unmasked[1:] - want[1:])) > 1e-3


def test_an_all_padding_row_stays_finite(tiny_encoder, features):
    empty = {k: v.copy() for k, v in features.items()}
    empty["input_mask"][1] = 0
    for mode in POOLING_MODES:
        vectors = _numpy(BertSentenceEncoder(tiny_encoder, pooling=mode)(empty))
        assert np.all(np.isfinite(vectors)), mode


@pytest.mark.parametrize("activation", ["tanh", "identity"])
def test_projection_and_normalisation_equal_dense_and_normalize(tiny_encoder, features,
                                                                activation):
    keras.utils.set_random_seed(1)
    model = BertSentenceEncoder(tiny_encoder, pooling="mean", projection_size=8,
                                projection_activation=activation, normalize=True)
    kernel, bias = (_numpy(w) for w in model.projection.weights)
    assert kernel.shape == (32, 8) and model.embedding_size == 8
    bound = 1 / np.sqrt(32)  # torch.nn.Linear's initial range
    assert np.abs(kernel).max() <= bound and np.abs(bias).max() <= bound and bias.any()
    tokens = _numpy(tiny_encoder(features, training=False)["sequence_output"])
    pooled = st_pool(tokens, features["input_mask"], "mean")
    want = st_normalize(st_dense(pooled, kernel.T, bias, activation == "tanh"))
    got = _numpy(model(features, training=False))
    np.testing.assert_allclose(got, want, atol=TOLERANCE)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


def test_model_checks_and_default_training(tiny_encoder, features, tmp_path):
    """Eager vs tf.function, config and .keras round trips, one fit step under compile()'s
    defaults: mean squared error to target vectors, cosine similarity as the metric."""
    keras.utils.set_random_seed(2)
    model = BertSentenceEncoder(tiny_encoder, pooling="max", projection_size=8,
                                projection_activation="identity", normalize=False)
    assert model.output_names == ["embeddings"]
    assert model.get_config()["projection_size"] == 8
    targets = np.random.default_rng(0).normal(size=(4, 8)).astype("float32")
    metrics = check_model(model, features, tmp_path, labels=targets, jit=False)
    assert set(metrics) == {"loss", "cosine_similarity"}
    assert isinstance(model.default_loss(), keras.losses.MeanSquaredError)


def test_constructor_refusals(tiny_encoder):
    with pytest.raises(ValueError, match="pooling must be one of"):
        BertSentenceEncoder(tiny_encoder, pooling="sum")
    with pytest.raises(ValueError, match="projection_size must be a positive int"):
        BertSentenceEncoder(tiny_encoder, projection_size=0)
    with pytest.raises(ValueError, match="projection_activation must be one of"):
        BertSentenceEncoder(tiny_encoder, projection_size=4, projection_activation="relu")


def test_any_checkpoint_with_a_pooling():
    """`BertSentenceEncoder.from_pretrained` on a plain HF BERT: its pooling of its outputs."""
    model = BertSentenceEncoder.from_pretrained(TINY_HF, pooling="cls", normalize=False)
    encoder = tfbert.from_pretrained(TINY_HF)
    assert type(encoder) is BertEncoder
    features = make_features(encoder.config, seq_length=SEQ)
    np.testing.assert_allclose(
        _numpy(model(features)),
        _numpy(encoder(features)["sequence_output"])[:, 0], atol=1e-6)


# --- the directory format -------------------------------------------------------------------


def test_directory_round_trip_with_projection(tiny_encoder, features, tmp_path,
                                              chinese_vocab_file):
    keras.utils.set_random_seed(3)
    model = BertSentenceEncoder(tiny_encoder, pooling="mean_sqrt_len", projection_size=8)
    path = _save_st(model, tmp_path / "st", chinese_vocab_file)
    assert _read_json(os.path.join(path, "modules.json")) == [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
        {"idx": 3, "name": "3", "path": "3_Normalize",
         "type": "sentence_transformers.models.Normalize"}]
    assert _read_json(os.path.join(path, "1_Pooling", "config.json")) == {
        "word_embedding_dimension": 32, "pooling_mode_cls_token": False,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": True, "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False}
    assert _read_json(os.path.join(path, "2_Dense", "config.json")) == {
        "in_features": 32, "out_features": 8, "bias": True,
        "activation_function": "torch.nn.modules.activation.Tanh"}
    dense = load_file(os.path.join(path, "2_Dense", "model.safetensors"))
    kernel, bias = (_numpy(w) for w in model.projection.weights)
    assert sorted(dense) == ["linear.bias", "linear.weight"]
    np.testing.assert_array_equal(dense["linear.weight"], kernel.T.astype(np.float32))
    np.testing.assert_array_equal(dense["linear.bias"], bias.astype(np.float32))
    assert os.path.isdir(os.path.join(path, "3_Normalize"))
    assert _read_json(os.path.join(path, "sentence_bert_config.json")) == {
        "max_seq_length": SEQ, "do_lower_case": False}
    assert _read_json(os.path.join(path, "config_sentence_transformers.json")) == {
        "model_type": "SentenceTransformer", "prompts": {}, "default_prompt_name": None,
        "similarity_fn_name": "cosine"}
    assert not any(k.startswith("head.") for k in load_file(os.path.join(path,
                                                                          "model.safetensors")))
    assert os.path.isfile(os.path.join(path, "vocab.txt"))

    loaded = tfbert.from_pretrained(path)
    assert type(loaded) is BertSentenceEncoder
    assert {k: v for k, v in loaded.get_config().items() if k not in ("encoder", "name")} == {
        "pooling": "mean_sqrt_len", "projection_size": 8, "projection_activation": "tanh",
        "normalize": True}
    np.testing.assert_allclose(_numpy(loaded(features)), _numpy(model(features)), atol=1e-6)
    checkpoint = checkpoints.read_checkpoint(path)
    assert checkpoint.metadata["max_seq_length"] == SEQ
    # A Checkpoint read from the directory writes the same directory again.
    again = tmp_path / "again"
    tfbert.save_pretrained(checkpoint, str(again), format="sentence-transformers")
    for name in ("modules.json", "sentence_bert_config.json", "1_Pooling/config.json",
                 "2_Dense/config.json"):
        assert _read_json(again / name) == _read_json(os.path.join(path, name)), name


def test_directory_round_trip_without_projection_or_normalisation(tiny_encoder, features,
                                                                  tmp_path, chinese_vocab_file):
    model = BertSentenceEncoder(tiny_encoder, pooling="cls", normalize=False)
    path = _save_st(model, tmp_path / "st", chinese_vocab_file, lower_case=False)
    assert [m["path"] for m in _read_json(os.path.join(path, "modules.json"))] == ["",
                                                                                  "1_Pooling"]
    assert sorted(os.listdir(path)) == [
        "1_Pooling", "config.json", "config_sentence_transformers.json", "model.safetensors",
        "modules.json", "sentence_bert_config.json", "tokenizer_config.json", "vocab.txt"]
    assert _read_json(os.path.join(path, "tokenizer_config.json"))["do_lower_case"] is False
    checkpoint = checkpoints.read_checkpoint(path)
    assert checkpoint.metadata["model_config"] == {
        "pooling": "cls", "projection_size": None, "projection_activation": "tanh",
        "normalize": False}
    assert checkpoint.metadata["lower_case"] is False and not checkpoint.config.lower_case
    loaded = tfbert.from_pretrained(path)
    np.testing.assert_allclose(_numpy(loaded(features)), _numpy(model(features)), atol=1e-6)


@pytest.fixture
def st_dir(tiny_encoder, tmp_path, chinese_vocab_file):
    """A written directory (mean pooling, Dense 8, Normalize) the tests below change."""
    keras.utils.set_random_seed(4)
    model = BertSentenceEncoder(tiny_encoder, projection_size=8)
    return _save_st(model, tmp_path / "st", chinese_vocab_file)


def test_transformer_in_a_subfolder_and_release_6_names(st_dir, features):
    """Releases before 1 kept the BERT in 0_Transformer/; release 6 writes other module type
    names, `pooling_mode`, and the length in tokenizer_config.json only."""
    want = _numpy(tfbert.from_pretrained(st_dir)(features))
    bert = os.path.join(st_dir, "0_Transformer")
    os.makedirs(bert)
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json",
                 "sentence_bert_config.json"):
        shutil.move(os.path.join(st_dir, name), bert)
    modules = _read_json(os.path.join(st_dir, "modules.json"))
    modules[0]["path"] = "0_Transformer"
    modules[0]["type"] = "sentence_transformers.base.modules.transformer.Transformer"
    modules[1]["type"] = "sentence_transformers.sentence_transformer.modules.pooling.Pooling"
    modules[2]["type"] = "sentence_transformers.base.modules.dense.Dense"
    _write_json(os.path.join(st_dir, "modules.json"), modules)
    _write_json(os.path.join(st_dir, "1_Pooling", "config.json"),
                {"embedding_dimension": 32, "pooling_mode": "mean", "include_prompt": True})
    _write_json(os.path.join(bert, "sentence_bert_config.json"),
                {"transformer_task": "feature-extraction"})
    tokenizer = _read_json(os.path.join(bert, "tokenizer_config.json"))
    _write_json(os.path.join(bert, "tokenizer_config.json"), {**tokenizer, "model_max_length": 12})
    assert checkpoints.detect_format(st_dir) == "hf"
    checkpoint = checkpoints.read_checkpoint(st_dir)
    assert checkpoint.vocab_file == os.path.join(bert, "vocab.txt")
    assert checkpoint.metadata["max_seq_length"] == 12
    np.testing.assert_allclose(_numpy(tfbert.from_pretrained(st_dir)(features)), want,
                               atol=1e-6)


def test_lower_case_is_the_tokenizers_or_sentence_bert_configs(st_dir, caplog):
    tokenizer_config = os.path.join(st_dir, "tokenizer_config.json")
    _write_json(tokenizer_config, {"do_lower_case": False})
    config = _read_json(os.path.join(st_dir, "config.json"))
    _write_json(os.path.join(st_dir, "config.json"), {**config, "do_lower_case": False})
    assert checkpoints.read_checkpoint(st_dir).metadata["lower_case"] is False
    _write_json(os.path.join(st_dir, "sentence_bert_config.json"),
                {"max_seq_length": SEQ, "do_lower_case": True})
    checkpoint = checkpoints.read_checkpoint(st_dir)
    assert checkpoint.metadata["lower_case"] is True and checkpoint.config.lower_case
    assert "keeps accents" in caplog.text
    assert checkpoints.stated_lower_case(st_dir)[0] is True


def _set_pooling(st_dir, **modes) -> None:
    path = os.path.join(st_dir, "1_Pooling", "config.json")
    _write_json(path, {**_read_json(path), **modes})


def test_refusals_name_the_file_and_module(st_dir):
    modules_file = os.path.join(st_dir, "modules.json")
    modules = _read_json(modules_file)
    _write_json(modules_file, [*modules[:2], {"idx": 2, "name": "2", "path": "2_LSTM",
                                              "type": "sentence_transformers.models.LSTM"}])
    with pytest.raises(CheckpointError, match=r"modules\.json: module type "
                                              r"'sentence_transformers\.models\.LSTM'"):
        tfbert.from_pretrained(st_dir)
    _write_json(modules_file, [modules[0], modules[3], modules[1]])
    with pytest.raises(CheckpointError, match=r"Transformer -> Normalize -> Pooling; tfbert"):
        checkpoints.read_checkpoint(st_dir)
    _write_json(modules_file, modules)

    pooling_file = os.path.join(st_dir, "1_Pooling", "config.json")
    _set_pooling(st_dir, pooling_mode_cls_token=True)  # and mean
    with pytest.raises(CheckpointError, match=re.escape(pooling_file)
                       + r": pooling modes \['cls', 'mean'\] concatenate several"):
        checkpoints.read_checkpoint(st_dir)
    _set_pooling(st_dir, pooling_mode_cls_token=False, pooling_mode_mean_tokens=False,
                 pooling_mode_weightedmean_tokens=True)
    with pytest.raises(CheckpointError, match="pooling mode 'weightedmean' is not one"):
        checkpoints.read_checkpoint(st_dir)
    _set_pooling(st_dir, pooling_mode_weightedmean_tokens=False, word_embedding_dimension=64)
    with pytest.raises(CheckpointError, match="pools 64 values per token; the BERT's "
                                              "hidden_size is 32"):
        checkpoints.read_checkpoint(st_dir)
    _set_pooling(st_dir, word_embedding_dimension=32)

    dense_file = os.path.join(st_dir, "2_Dense", "config.json")
    dense = _read_json(dense_file)
    _write_json(dense_file, {**dense, "activation_function": "torch.nn.modules.activation.ReLU"})
    with pytest.raises(CheckpointError, match=r"config\.json: activation_function "
                                              r"'torch\.nn\.modules\.activation\.ReLU'"):
        checkpoints.read_checkpoint(st_dir)
    _write_json(dense_file, {**dense, "out_features": 9})
    with pytest.raises(CheckpointError, match=r"linear\.weight \(8, 32\) .*\(out_features 9"):
        checkpoints.read_checkpoint(st_dir)
    _write_json(dense_file, dense)
    assert checkpoints.read_checkpoint(st_dir).metadata["model_config"]["projection_size"] == 8


def test_a_dense_module_in_pytorch_model_bin_needs_torch(st_dir):
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed: pytorch_model.bin loads")
    dense = os.path.join(st_dir, "2_Dense")
    os.replace(os.path.join(dense, "model.safetensors"), os.path.join(dense,
                                                                      "pytorch_model.bin"))
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin needs torch.*convert"):
        checkpoints.read_checkpoint(st_dir)


def test_writer_refusals(tiny_encoder, tmp_path, chinese_vocab_file):
    with pytest.raises(CheckpointError, match="holds a BertSentenceEncoder .* not a "
                                              "BertEncoder; wrap the encoder"):
        tfbert.save_pretrained(tiny_encoder, str(tmp_path / "a"), vocab_file=chinese_vocab_file,
                               format="sentence-transformers")
    with pytest.raises(CheckpointError, match="needs the vocab"):
        tfbert.save_pretrained(BertSentenceEncoder(tiny_encoder), str(tmp_path / "b"),
                               format="sentence-transformers")
    with pytest.raises(ValueError, match=r"format='sentence-transformers' has not .*'labels'"):
        tfbert.save_pretrained(BertSentenceEncoder(tiny_encoder), str(tmp_path / "c"),
                               vocab_file=chinese_vocab_file, format="sentence-transformers",
                               metadata={"labels": ["a"]})
    assert not any((tmp_path / name).exists() for name in "abc")
