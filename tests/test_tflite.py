"""tfbert.export.tflite, tflite_text, tflite_eval: ids-in model (builtin ops only), text-in
model (TF Text kernels), dynamic-range int8, parity with the Keras model, the text model's
tokenizer vs the reference.

The accuracy check (int8 within 1 point of float32 on the sentiment test split) needs a
fine-tuned model and is the `slow` test at the end.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfbert
from tfbert.data import corpora
from tfbert.export import tflite, tflite_eval, tflite_text
from tfbert.export.saved_model import ExportSpec

SEQ = 32
TEXT_OPS = {"FastBertNormalize", "FastWordpieceTokenizeWithOffsets", "RaggedTensorToTensor",
            "TFText>ByteSplitWithOffsets", "TFText>ByteSplitByOffsets",
            "TFText>NgramsStringJoin"}  # the last three drop invalid UTF-8


@pytest.fixture(scope="module")
def classifier(chinese_vocab_file):
    keras.utils.set_random_seed(7)
    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").readlines())
    config = tfbert.BertConfig(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=128,
                               max_position_embeddings=64, initializer_range=0.2)
    model = tfbert.BertClassifier(tfbert.BertEncoder(config), num_classes=3)
    return model, ExportSpec(task="classification", seq_length=SEQ, labels=["a", "b", "c"])


@pytest.fixture(scope="module")
def files(classifier, chinese_vocab_file, tmp_path_factory):
    model, spec = classifier
    out = str(tmp_path_factory.mktemp("tflite"))
    result = tflite.export_tflite(model, spec, chinese_vocab_file, out, ("float32", "int8"),
                                  kinds=("ids",))
    result.update(tflite.export_tflite(model, spec, chinese_vocab_file, out, ("float32",),
                                       kinds=("text",)))
    return result


def texts() -> list[str]:
    lines = corpora.people_daily_lines()[:6]
    return lines + [text for text, _ in corpora.reviews()[:4]] + ["", "".join(lines)]


def test_ids_model_builtin_only_and_matches_keras(classifier, files, chinese_vocab_file):
    model, _ = classifier
    info = files["model_ids_float32.tflite"]
    assert info["custom_ops"] == [] and "FULLY_CONNECTED" in info["builtin_ops"]
    assert info["bytes"] > 0 and info["latency_ms"] > 0
    inputs = {k: v.numpy() for k, v in tfbert.BertPreprocessor(chinese_vocab_file, SEQ)(
        tf.constant(texts())).items()}
    want = model(inputs, training=False).numpy()
    interpreter = tflite.make_interpreter(info["path"], text_ops=False)  # plain interpreter
    got = tflite.run_tflite(interpreter, inputs)
    np.testing.assert_allclose(got["logits"], want, atol=1e-4)
    np.testing.assert_allclose(got["probabilities"], tf.nn.softmax(want).numpy(), atol=1e-4)
    assert got["label_ids"].tolist() == want.argmax(-1).tolist()
    # Batch size is dynamic.
    one = tflite.run_tflite(interpreter, {k: v[:1] for k, v in inputs.items()})
    np.testing.assert_allclose(one["logits"], want[:1], atol=1e-4)


def test_int8_is_small_and_close(classifier, files, chinese_vocab_file):
    model, _ = classifier
    f32, int8 = files["model_ids_float32.tflite"], files["model_ids_int8.tflite"]
    assert int8["custom_ops"] == []
    assert int8["bytes"] <= 0.30 * f32["bytes"], (int8["bytes"], f32["bytes"])
    inputs = {k: v.numpy() for k, v in tfbert.BertPreprocessor(chinese_vocab_file, SEQ)(
        tf.constant(texts())).items()}
    want = model(inputs, training=False).numpy()
    got = tflite.run_tflite(tflite.make_interpreter(int8["path"], text_ops=False), inputs)
    spread = want.max() - want.min()
    assert np.abs(got["logits"] - want).max() < 0.1 * spread


def test_text_model_uses_tf_text_kernels_and_matches_keras(classifier, files,
                                                            chinese_vocab_file):
    model, _ = classifier
    info = files["model_text_float32.tflite"]
    assert set(info["custom_ops"]) == TEXT_OPS
    interpreter = tflite.make_interpreter(info["path"], text_ops=True)
    batch = texts()
    got = tflite.run_tflite(interpreter, {"text": np.array([t.encode() for t in batch],
                                                           dtype=object)})
    reference = tfbert.BertPreprocessor(chinese_vocab_file, SEQ)(tf.constant(batch))
    np.testing.assert_array_equal(got["input_ids"], reference["input_ids"].numpy())
    want = model(reference, training=False).numpy()
    np.testing.assert_allclose(got["logits"], want, atol=1e-4)
    assert (info["inputs"], info["quantization"]) == ("text", "float32")
    np.testing.assert_allclose(tflite_eval.run_text_tflite(info["path"], batch),
                               tf.nn.softmax(want).numpy(), atol=1e-4)


def test_text_tokenizer_agreement_on_builtin_corpus(chinese_vocab_file, classifier, files):
    spec = ExportSpec(task="encoder", seq_length=64)
    sample = corpora.people_daily_lines()[::20][:600] + [t for t, _ in corpora.reviews()[:400]]
    result = tflite_eval.measure_agreement(chinese_vocab_file, spec, sample)
    assert result["texts"] == 1000
    assert result["equal_texts"] >= 0.99 and result["equal_tokens"] >= 0.999, result
    # The same through the converted model and TF Text's TFLite kernels.
    result = tflite_eval.measure_agreement(chinese_vocab_file, classifier[1], sample[::5],
                                           tflite_path=files["model_text_float32.tflite"]["path"])
    assert result["equal_texts"] >= 0.99, result


def test_case_extended_vocab_lowercases_like_the_reference(chinese_vocab_file):
    spec = ExportSpec(task="encoder", seq_length=16)
    vocab = open(chinese_vocab_file, encoding="utf-8").read().splitlines()
    extended, remap = tflite_text.case_extended_vocab(vocab, lower_case=True)
    assert extended[:len(vocab)][vocab.index("bert")] == "bert"
    assert remap[extended.index("BERT")] == vocab.index("bert")
    assert remap[extended.index("##S")] == vocab.index("##s")
    packer = tflite_text.TextPacker(vocab, spec)
    reference = tfbert.BertPreprocessor(chinese_vocab_file, 16)
    same = ["BERT Models 模型", "The bert MODELS", "ＡＢＣ（１２３）"]
    np.testing.assert_array_equal(packer(tf.constant(same))["input_ids"].numpy(),
                                  reference(tf.constant(same))["input_ids"].numpy())
    # Documented differences: mixed case inside a word and accents.
    for text in ["BeRT", "modèl"]:
        assert not np.array_equal(packer(tf.constant([text]))["input_ids"].numpy(),
                                  reference(tf.constant([text]))["input_ids"].numpy()), text


def test_text_packer_pairs_truncate_like_bert_packer(chinese_vocab_file):
    spec = ExportSpec(task="classification", seq_length=12, labels=["a", "b"], pair=True)
    vocab = open(chinese_vocab_file, encoding="utf-8").read().splitlines()
    packer = tflite_text.TextPacker(vocab, spec)
    reference = tfbert.BertPreprocessor(chinese_vocab_file, 12)
    words = "中国人民共和国北京上海天津"
    a = [words[:i] for i in (0, 1, 4, 5, 9, 13) for _ in (0, 1, 4, 5, 9, 13)]
    b = [words[::-1][:j] for _ in (0, 1, 4, 5, 9, 13) for j in (0, 1, 4, 5, 9, 13)]
    got = packer(tf.constant(a), tf.constant(b))
    want = reference((tf.constant(a), tf.constant(b)))
    for key in ("input_ids", "input_mask", "segment_ids"):
        np.testing.assert_array_equal(got[key].numpy(), want[key].numpy(), err_msg=key)


@pytest.mark.slow
def test_int8_accuracy_within_one_point_on_sentiment(tmp_path, chinese_vocab_file):
    """Fine-tunes a small classifier on the built-in sentiment task, exports float32 and int8,
    and compares their accuracy on the sentiment test split."""
    import json

    from tfbert.export import export_model
    from tfbert.tasks.classification import ClassificationConfig, run_classification

    config_file = tmp_path / "bert_config.json"
    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").readlines())
    config_file.write_text(json.dumps({
        "vocab_size": vocab_size, "hidden_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 256, "max_position_embeddings": 128,
        "type_vocab_size": 2, "hidden_act": "gelu"}))
    run_classification(ClassificationConfig(
        output_dir=str(tmp_path / "run"), task_name="sentiment",
        bert_config_file=str(config_file), vocab_file=chinese_vocab_file, max_seq_length=64,
        train_batch_size=32, num_train_epochs=2, learning_rate=5e-4, do_predict=False,
        verbose=0))
    model_dir = str(tmp_path / "run" / "model")
    export_model(model_dir, str(tmp_path / "saved_models" / "sentiment" / "1"),
                 tflite=("float32", "int8"))
    from tfbert.data import classification

    test = classification.builtin_examples("sentiment", "test")
    accuracy = tflite_eval.folder_accuracy(
        str(tmp_path / "saved_models" / "sentiment" / "tflite"), model_dir,
        [e.text for e in test], [e.label for e in test])
    sizes = {p.name: p.stat().st_size for p in (tmp_path / "saved_models" / "sentiment" /
                                                  "tflite").glob("*.tflite")}
    print(json.dumps({"accuracy": accuracy, "bytes": sizes}, indent=1))  # shown with -s
    assert accuracy["model_ids_float32.tflite"] > 0.7, accuracy
    assert abs(accuracy["model_ids_int8.tflite"] - accuracy["model_ids_float32.tflite"]) <= 0.01
    assert abs(accuracy["model_text_int8.tflite"] - accuracy["model_ids_int8.tflite"]) <= 0.01
    assert sizes["model_ids_int8.tflite"] <= 0.30 * sizes["model_ids_float32.tflite"], sizes
