"""The classification kit: long inputs as windows (packing rule, pooling, the document dataset),
multi-label data (files, built-in people_daily_types, metrics, threshold tuning, loss, export
parity), class weights, and run_classification end to end with each of them."""

from __future__ import annotations

import csv
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from model_test_utils import tiny_config_file

import tfbert
from tfbert.data import classification as data
from tfbert.errors import UserError
from tfbert.evaluation.classification import multi_label_metrics, tune_thresholds
from tfbert.models.classifier import (
    MultiLabelCrossentropy,
    WindowPooledClassifier,
    pool_windows,
)

CLS, SEP = 1, 2
A = [11, 12, 13, 14, 15, 16, 17, 18, 19]
B = [21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32]


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def tiny_encoder(vocab_size, seed=0, hidden=32):
    keras.utils.set_random_seed(seed)
    return tfbert.BertEncoder(tfbert.BertConfig(
        vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=2 * hidden, max_position_embeddings=64, initializer_range=0.2))


def vocab_size(vocab_file):
    with open(vocab_file, encoding="utf-8") as f:
        return sum(1 for _ in f)


# --- the window rule ------------------------------------------------------------------------------


def test_pack_windows_single_text_by_hand():
    # T = 6: body 4, stride 2 over 7 pieces: starts 0, 2, 4 (the last one reaches the end).
    got = data.pack_windows(A[:7], None, 6, 2, CLS, SEP)
    assert got == [([CLS, 11, 12, 13, 14, SEP], [0] * 6),
                   ([CLS, 13, 14, 15, 16, SEP], [0] * 6),
                   ([CLS, 15, 16, 17, SEP], [0] * 5)]
    # Stride 3 over 9 pieces: starts 0, 3, 6 (6 + 3 = 9 reaches the end).
    assert [w[0][1:-1] for w in data.pack_windows(A, None, 6, 3, CLS, SEP)] == [
        A[0:4], A[3:7], A[6:9]]
    assert data.pack_windows(A[:4], None, 6, 2, CLS, SEP) == [([CLS, *A[:4], SEP], [0] * 6)]
    assert data.pack_windows([], None, 6, 2, CLS, SEP) == [([CLS, SEP], [0, 0])]


def test_pack_windows_pairs_by_hand():
    t = 10  # T - 3 = 7 free positions
    # Fits (3 + 4 <= 7): one window, the ordinary pair packing.
    assert data.pack_windows(A[:3], B[:4], t, 2, CLS, SEP) == [
        ([CLS, 11, 12, 13, SEP, 21, 22, 23, 24, SEP], [0] * 5 + [1] * 5)]
    # Long b: a' = a[:max(7 - 12, 3)] = a (3 pieces), b in windows of body 7 - 3 = 4, stride 2:
    # starts 0, 2, 4, 6, 8.
    got = data.pack_windows(A[:3], B, t, 2, CLS, SEP)
    head = [CLS, 11, 12, 13, SEP]
    assert [w[0] for w in got] == [head + B[s:s + 4] + [SEP] for s in (0, 2, 4, 6, 8)]
    assert all(w[1] == [0] * 5 + [1] * 5 for w in got)
    # Long a, short b: a' = a[:max(7 - 2, 3)] = a[:5], body 2: b whole in one window.
    assert data.pack_windows(A, B[:2], t, 2, CLS, SEP) == [
        ([CLS, *A[:5], SEP, 21, 22, SEP], [0] * 7 + [1] * 3)]
    # Both long: a' = a[:3] ((T - 3) // 2), body 4 over 8 pieces of b: starts 0, 2, 4.
    got = data.pack_windows(A[:8], B[:8], t, 2, CLS, SEP)
    assert [w[0][5:-1] for w in got] == [B[0:4], B[2:6], B[4:8]]
    assert all(w[0][:5] == [CLS, 11, 12, 13, SEP] for w in got)
    # A stride above a window's body steps by the body: no piece is skipped.
    got = data.pack_windows(A[:3], B, t, 6, CLS, SEP)
    assert [w[0][5:-1] for w in got] == [B[0:4], B[4:8], B[8:12]]


def test_pack_windows_pair_that_fits_one_window_equals_the_packer(chinese_vocab_file):
    """A pair cut by the window rule, when b fits, is BertPacker's truncated pair."""
    tokenizer = tfbert.BertTokenizer(chinese_vocab_file, lower_case=False)
    packer = tfbert.BertPacker.from_tokenizer(tokenizer, 12)
    a = tokenizer.tokenize(tf.constant(["这本书很好看我非常喜欢", "好", "很好"]))
    b = tokenizer.tokenize(tf.constant(["值得", "值得一读", "不推荐"]))
    packed = {k: v.numpy() for k, v in packer((a, b)).items()}
    for i, (ids_a, ids_b) in enumerate(zip(a.to_list(), b.to_list(), strict=True)):
        (window_ids, window_segments), = data.pack_windows(ids_a, ids_b, 12, 4, tokenizer.cls_id,
                                                           tokenizer.sep_id)
        n = len(window_ids)
        assert packed["input_ids"][i, :n].tolist() == window_ids
        assert packed["segment_ids"][i, :n].tolist() == window_segments
        assert int(packed["input_mask"][i].sum()) == n


def test_encode_windows_and_document_batches(chinese_vocab_file):
    tokenizer = tfbert.BertTokenizer(chinese_vocab_file, lower_case=False)
    texts = ["今天天气很好我们去公园散步", "好", "这本书很好看"]  # 13, 1 and 6 characters
    examples = [data.ClassificationExample(t, lab) for t, lab in zip(texts, "xyx", strict=True)]
    windows = data.encode_windows(examples, tokenizer, 8, 3)  # body 6, stride 3
    # 13 pieces: starts 0, 3, 6 (6 + 6 = 12 < 13) and 9; 1 and 6 pieces: one window each.
    assert windows.document.tolist() == [0, 0, 0, 0, 1, 2]
    assert windows.stats == {"documents": 3, "windows": 6, "documents_over_one_window": 1,
                             "max_windows": 4}
    pieces = tokenizer.tokenize(tf.constant(texts[:1])).to_list()[0]
    assert windows.input_ids[1, :8].tolist() == [tokenizer.cls_id, *pieces[3:9],
                                                 tokenizer.sep_id]
    assert windows.input_mask[4].tolist() == [1, 1, 1, 0, 0, 0, 0, 0]
    ds = data.make_window_dataset(windows, data.label_ids(examples, ["x", "y"]), 2,
                                  sample_weights=np.array([1.0, 2.0, 3.0]))
    (first, y, w), (second, y2, w2) = list(ds)
    assert first["input_ids"].shape == (2, 4, 8) and second["input_ids"].shape == (1, 1, 8)
    assert first["input_mask"][:, :, 0].numpy().tolist() == [[1, 1, 1, 1], [1, 0, 0, 0]]
    np.testing.assert_array_equal(first["input_ids"][0], windows.input_ids[:4])
    np.testing.assert_array_equal(first["input_ids"][1, 1:], 0)  # padding windows
    assert y.numpy().tolist() + y2.numpy().tolist() == [0, 1, 0]
    assert w.numpy().tolist() + w2.numpy().tolist() == [1.0, 2.0, 3.0]


def test_window_pooling_is_the_mean_of_window_logits(chinese_vocab_file):
    tokenizer = tfbert.BertTokenizer(chinese_vocab_file, lower_case=False)
    classifier = tfbert.BertClassifier(tiny_encoder(vocab_size(chinese_vocab_file)),
                                       num_classes=3)
    texts = ["今天天气很好我们去公园散步了", "好", "这本书很好看但是太长"]
    examples = [data.ClassificationExample(t, None) for t in texts]
    windows = data.encode_windows(examples, tokenizer, 8, 4)
    flat = classifier(windows.inputs(), training=False).numpy()  # [W, C]
    want = np.stack([flat[windows.document == i].mean(0) for i in range(3)])
    pooled = WindowPooledClassifier(classifier)
    x, y = next(iter(data.make_window_dataset(windows, np.array([0, 1, 2], np.int32), 3)))
    assert x["input_ids"].shape[:2] == (3, int(windows.windows_per_document().max()))
    np.testing.assert_allclose(pooled(x, training=False).numpy(), want, atol=1e-5)
    np.testing.assert_allclose(pool_windows(tf.constant([[1.0, 2.0], [3.0, 6.0], [5.0, 0.0]]),
                                            tf.constant([0, 0, 1]), 2).numpy(),
                               [[2.0, 4.0], [5.0, 0.0]])
    # The training loss is on the pooled logits (one term per document), and its gradient
    # reaches the classifier through the pooling.
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with tf.GradientTape() as tape:
        loss = loss_fn(y, pooled(x, training=False))
    assert float(loss) == pytest.approx(float(loss_fn(np.array([0, 1, 2]), want)), abs=1e-5)
    grads = tape.gradient(loss, classifier.trainable_variables)
    assert all(g is not None for g in grads[-2:])  # the logits layer
    assert float(tf.linalg.global_norm([g for g in grads if g is not None])) > 0


# --- multi-label data -----------------------------------------------------------------------------


def test_multi_label_files_read_the_same(tmp_path):
    rows = [("北京的天安门", ["LOC"]), ("张三在人民日报", ["ORG", "PER"]), ("今天", [])]
    tsv = write(tmp_path, "a.tsv", "text\tlabels\n" + "".join(
        f"{t}\t{','.join(labs)}\n" for t, labs in rows))
    with open(tmp_path / "a.csv", "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["Labels", "text"])
        writer.writerows([(" , ".join(labs), t) for t, labs in rows])
    jsonl = write(tmp_path, "a.jsonl", "".join(
        json.dumps({"text": t, "labels": labs}, ensure_ascii=False) + "\n" for t, labs in rows))
    for path in (tsv, str(tmp_path / "a.csv"), jsonl):
        examples = data.read_examples(path, multi_label=True)
        assert [(e.text, e.labels, e.label) for e in examples] == [
            (t, tuple(labs), None) for t, labs in rows], path
    assert data.label_list(examples) == ["LOC", "ORG", "PER"]
    np.testing.assert_array_equal(data.label_matrix(examples, ["LOC", "ORG", "PER"]),
                                  [[1, 0, 0], [0, 1, 1], [0, 0, 0]])
    test = data.read_examples(write(tmp_path, "t.jsonl", '{"text": "好"}\n'), labelled=False,
                              multi_label=True)
    assert test[0].labels is None and not data.is_labelled(test)


@pytest.mark.parametrize("name, text, message", [
    ("b.tsv", "text\tlabels\n好\tA,,B\n", r"b.tsv:2: empty label name in labels 'A,,B'"),
    ("c.jsonl", '{"text": "好", "labels": ["A", "A"]}\n',
     r"c.jsonl:1: labels \['A', 'A'\] name \['A'\] more than once"),
    ("d.jsonl", '{"text": "好", "labels": "A"}\n{"text": "差", "labels": [1]}\n',
     r"d.jsonl:2: 'labels' must be a list of label names"),
    ("e.tsv", "text\tlabel\n好\tA\n", r"e.tsv:2: no 'labels' field"),
])
def test_multi_label_file_errors(tmp_path, name, text, message):
    with pytest.raises(UserError, match=message):
        data.read_examples(write(tmp_path, name, text), multi_label=True)


def test_unknown_dev_label_and_single_label_column_in_test(tmp_path):
    dev = data.read_examples(write(tmp_path, "dev.tsv", "text\tlabels\n好\tA\n差\tA,Z\n"),
                             multi_label=True)
    with pytest.raises(UserError, match=r"dev.tsv:3: label 'Z' is not one of the training "
                                        r"labels \['A', 'B'\]"):
        data.label_matrix(dev, ["A", "B"])
    with pytest.raises(UserError, match=r"t.tsv:1: column\(s\) \['label'\] are none of text, "
                                        "labels, text_b, id"):
        data.read_examples(write(tmp_path, "t.tsv", "text\tlabel\n好\tA\n"), labelled=False,
                           multi_label=True)


@pytest.mark.slow  # (reads the whole People's Daily corpus: 5 s)
def test_people_daily_types_are_the_sentences_entity_types():
    from tfbert.data import ner

    dev = data.builtin_examples("people_daily_types", "dev")
    sentences = {(e.source, e.text): e for e in ner.people_daily_ner("dev")}
    assert len(dev) == len(ner.people_daily_ner("dev")) > 1000
    for example in dev[:300]:
        tags = sentences[example.source, example.text].tags
        want = tuple(sorted({t[2:] for t in tags if t != "O"}))
        assert example.labels == want
    counts = data.label_matrix(dev, data.builtin_labels("people_daily_types")).sum(0)
    assert data.builtin_labels("people_daily_types") == ["LOC", "ORG", "PER"]
    assert counts.min() > 100 and any(not e.labels for e in dev)


# --- metrics, thresholds, loss, weights ----------------------------------------------------------


def test_multi_label_metrics_equal_scikit_learn():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    y = rng.random((60, 5)) < 0.3
    p = rng.random((60, 5)) < 0.3
    p[:, 4] = False
    y[:, 4] = False  # a label never true nor predicted counts 0 in macro
    y[:10] = p[:10]  # some exact matches
    got = multi_label_metrics(y, p, list("abcde"))
    assert got["micro_f1"] == pytest.approx(metrics.f1_score(y, p, average="micro"))
    assert got["macro_f1"] == pytest.approx(metrics.f1_score(y, p, average="macro",
                                                             zero_division=0))
    assert got["exact_match"] == pytest.approx(metrics.accuracy_score(y, p))
    assert got["micro_precision"] == pytest.approx(metrics.precision_score(y, p,
                                                                           average="micro"))
    per = metrics.f1_score(y, p, average=None, zero_division=0)
    assert [got["per_label"][c]["f1"] for c in "abcde"] == pytest.approx(per)
    assert got["per_label"]["a"]["support"] == int(y[:, 0].sum())


def test_tune_thresholds_values():
    # Sorted: 0.9 (+), 0.4 (-), 0.3 (+), 0.1 (-): F1 of the top k = 0, 2/3, 1/2, 4/5, 2/3;
    # best k = 3, threshold between 0.3 and 0.1.
    y = np.array([[1], [0], [1], [0]])
    p = np.array([[0.9], [0.4], [0.3], [0.1]], np.float32)
    np.testing.assert_allclose(tune_thresholds(y, p), [0.2], rtol=1e-6)
    # Labels side by side. First: both positives on top, a cut between 0.6 and 0.3. Second:
    # F1 2/3 at k = 1 (2 / (1 + 2)) and at k = 4 (2 * 2 / (4 + 2)); the tie goes to the
    # threshold nearest 0.5: 0.55 / 2 = 0.275 (k = 4) rather than (0.8 + 0.7) / 2 = 0.75.
    # Third: no positive, 0.5.
    y = np.array([[1, 1, 0], [1, 0, 0], [0, 0, 0], [0, 1, 0]])
    p = np.array([[0.9, 0.8, 0.2], [0.6, 0.7, 0.9], [0.3, 0.6, 0.1], [0.1, 0.55, 0.3]],
                 np.float32)
    np.testing.assert_allclose(tune_thresholds(y, p), [0.45, 0.275, 0.5], rtol=1e-6)
    # Ties in probability: no cut between equal values; predicting all (k = N) gives half the
    # lowest.
    y, p = np.array([[1], [1], [0]]), np.array([[0.4], [0.4], [0.4]], np.float32)
    np.testing.assert_allclose(tune_thresholds(y, p), [0.2], rtol=1e-6)
    # Against brute force: the tuned threshold's F1 is the best any threshold gets.
    rng = np.random.default_rng(1)
    y = rng.random((200, 4)) < [0.1, 0.3, 0.5, 0.05]
    p = np.clip(y * 0.3 + rng.random((200, 4)) * 0.7, 0, 1).astype(np.float32)
    p[:50, 0] = np.float32(0.5)  # float32 neighbours and ties
    p[50:52, 1] = [np.float32(0.25), np.nextafter(np.float32(0.25), np.float32(1))]
    thresholds = tune_thresholds(y, p)
    f1 = lambda c, t: multi_label_metrics(y[:, c:c + 1], p[:, c:c + 1] >= t)["micro_f1"]
    for c in range(4):
        best = max(f1(c, t) for t in [*np.unique(p[:, c]), np.float32(1.5)])
        assert f1(c, thresholds[c]) == pytest.approx(best), c


def test_multi_label_loss_values():
    y = np.array([[1, 0, 1], [0, 0, 1]], np.float32)
    z = np.array([[2.0, -1.0, 0.5], [0.3, 1.5, -2.0]], np.float32)
    plain = MultiLabelCrossentropy()
    assert float(plain(y, z)) == pytest.approx(
        float(keras.losses.BinaryCrossentropy(from_logits=True)(y, z)), abs=1e-6)
    weights = np.array([2.0, 1.0, 3.0], np.float32)
    s = 1 / (1 + np.exp(-z))
    want = -(weights * y * np.log(s) + (1 - y) * np.log(1 - s)).mean(-1).mean()
    weighted = MultiLabelCrossentropy(positive_weights=weights)
    assert float(weighted(y, z)) == pytest.approx(want, rel=1e-5)
    again = MultiLabelCrossentropy.from_config(weighted.get_config())
    assert float(again(y, z)) == pytest.approx(want, rel=1e-5)


def test_class_weights_values(tmp_path):
    utils = pytest.importorskip("sklearn.utils")
    labels = ["a", "b", "c"]
    names = list("aaaaabbbc")
    examples = [data.ClassificationExample(str(i), x) for i, x in enumerate(names)]
    want = utils.class_weight.compute_class_weight("balanced", classes=np.array(labels),
                                                   y=np.array(names))
    np.testing.assert_allclose(data.class_weights("balanced", examples, labels), want,
                               rtol=1e-6)
    sets = [("a",), ("a", "b"), (), ("a",)]
    multi = [data.ClassificationExample(str(i), None, labels=s) for i, s in enumerate(sets)]
    # a: 3 positive, 1 negative -> 1/3; b: 1 and 3 -> 3.
    np.testing.assert_allclose(data.class_weights("balanced", multi, ["a", "b"], True),
                               [1 / 3, 3.0], rtol=1e-6)
    path = write(tmp_path, "w.json", '{"b": 2, "a": 0.5, "c": 1.5}')
    np.testing.assert_allclose(data.class_weights(path, examples, labels), [0.5, 2.0, 1.5])
    path = write(tmp_path, "w.tsv", "label\tweight\na\t1\nb\t2.5\nc\t4\n")
    np.testing.assert_allclose(data.class_weights(path, examples, labels), [1.0, 2.5, 4.0])


@pytest.mark.parametrize("name, text, message", [
    ("u.json", '{"a": 1, "b": 1, "c": 1, "z": 1}', r"u.json: label 'z' is not one of the "
                                                   r"training labels \['a', 'b', 'c'\]"),
    ("m.tsv", "a\t1\nb\t2\n", r"m.tsv: no weight for label\(s\) \['c'\]"),
    ("n.tsv", "a\t1\nb\t-2\nc\t1\n", r"n.tsv:2: the weight of 'b' must be a positive number, "
                                     r"got '-2'"),
    ("d.tsv", "a\t1\nb\t2\na\t3\n", r"d.tsv:3: label 'a' is given a weight twice"),
    ("x.tsv", "a 1\n", r"x.tsv:1: expected 'label<TAB>weight'"),
])
def test_class_weight_file_errors(tmp_path, name, text, message):
    examples = [data.ClassificationExample("t", x) for x in "abc"]
    with pytest.raises(UserError, match=message):
        data.class_weights(write(tmp_path, name, text), examples, ["a", "b", "c"])


def test_balanced_needs_every_class():
    examples = [data.ClassificationExample("t", x) for x in "aab"]
    with pytest.raises(UserError, match=r"class\(es\) \['c'\] have no training examples"):
        data.class_weights("balanced", examples, ["a", "b", "c"])
    multi = [data.ClassificationExample("t", None, labels=("a",))] * 2
    with pytest.raises(UserError, match="label 'a' is on every one of the 2 training"):
        data.class_weights("balanced", multi, ["a"], multi_label=True)


def test_config_checks():
    from tfbert.tasks.classification import ClassificationConfig

    ok = dict(output_dir="unused", max_seq_length=16)
    assert ClassificationConfig(**ok, task_name="people_daily_types").multi_label
    assert ClassificationConfig(**ok, task_name="people_daily_types").best_metric == "micro_f1"
    assert ClassificationConfig(**ok, task_name="sentiment").best_metric == "accuracy"
    assert ClassificationConfig(**ok, task_name="sentiment", long_input="windows",
                                doc_stride=13).doc_stride == 13
    for bad, message in [
            (dict(task_name="sentiment", long_input="windows", doc_stride=14),
             r"doc_stride must be an integer in \[1, 14\)"),
            (dict(task_name="sentiment", doc_stride=0), r"in \[1, 14\).*got 0"),
            (dict(task_name="sentiment", long_input="truncate", doc_stride=4),
             "doc_stride applies to long_input=windows"),
            (dict(task_name="sentiment", long_input="slide"), "long_input must be one of"),
            (dict(task_name="sentiment", multi_label=True), "sentiment is a single-label task"),
            (dict(task_name="people_daily_types", best_metric="accuracy"),
             r"best_metric must be one of \('micro_f1', 'macro_f1', 'exact_match'\)"),
            (dict(task_name="sentiment", class_weights="nofile.json"),
             "class_weights must be 'balanced' or a file")]:
        with pytest.raises(UserError, match=message):
            ClassificationConfig(**ok, **bad)


# --- export ---------------------------------------------------------------------------------------


def _multi_label_model_dir(tmp_path, vocab_file, long_input="truncate"):
    model = tfbert.BertClassifier(tiny_encoder(vocab_size(vocab_file), seed=3), num_classes=3,
                                  multi_label=True)
    model_dir = str(tmp_path / "model")
    tfbert.save_pretrained(model, model_dir, vocab_file=vocab_file, metadata={
        "task": "classification", "labels": ["LOC", "ORG", "PER"], "max_seq_length": 16,
        "lower_case": True, "multi_label": True, "thresholds": [0.3, 0.5, 0.7],
        "long_input": long_input, "doc_stride": 8})
    return model, model_dir


def _check_multi_label_outputs(got, logits, name):
    """The export's multi-label outputs against the Keras model's logits [N, 3]."""
    probabilities = 1 / (1 + np.exp(-logits.astype(np.float64)))
    chosen = probabilities >= np.array([0.3, 0.5, 0.7])
    assert 0 < chosen.sum() < chosen.size  # both decisions occur
    np.testing.assert_allclose(got["logits"].numpy(), logits, atol=1e-5, err_msg=name)
    np.testing.assert_allclose(got["probabilities"].numpy(), probabilities, atol=1e-5)
    np.testing.assert_allclose(got["thresholds"].numpy(),
                               np.tile([0.3, 0.5, 0.7], (len(logits), 1)), rtol=1e-7)
    np.testing.assert_array_equal(got["label_mask"].numpy(), chosen.astype(np.int32))
    assert [[x.decode() for x in row] for row in got["labels"].numpy()] == [
        [n if c else "" for n, c in zip(["LOC", "ORG", "PER"], row, strict=True)]
        for row in chosen]


def _texts():
    from tfbert.data import corpora

    return [t for t, _ in corpora.reviews()[:6]] + corpora.people_daily_lines()[:6] + [""]


def test_multi_label_serving_module_equals_keras(tmp_path, chinese_vocab_file):
    """The export's signature graph, in process (`test_multi_label_saved_model_equals_keras`
    saves and reloads it): the spec from tfbert.json, outputs equal to the Keras model's."""
    from tfbert.export import load_for_export
    from tfbert.export.saved_model import BertServingModule

    _, model_dir = _multi_label_model_dir(tmp_path, chinese_vocab_file)
    model, vocab_file, spec, _ = load_for_export(model_dir)
    assert spec.multi_label and spec.thresholds == pytest.approx([0.3, 0.5, 0.7])
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 17, size=12)
    mask = (np.arange(16)[None, :] < lengths[:, None]).astype(np.int32)  # [12, 16]
    features = {"input_ids": rng.integers(5, vocab_size(vocab_file), (12, 16)) * mask,
                "input_mask": mask, "segment_ids": np.zeros((12, 16), np.int32)}
    features = {k: tf.constant(v, tf.int32) for k, v in features.items()}
    module = BertServingModule(model, vocab_file, spec)
    _check_multi_label_outputs(module.serve_ids(features),
                               model(features, training=False).numpy(), "serve_ids")


@pytest.mark.slow
def test_multi_label_saved_model_equals_keras(tmp_path, chinese_vocab_file):
    from tfbert.export import export_model

    model, model_dir = _multi_label_model_dir(tmp_path, chinese_vocab_file)
    result = export_model(model_dir, str(tmp_path / "saved_models" / "types"), check=False)
    assert set(result["signatures"]["serving_default"]["outputs"]) == {
        "logits", "probabilities", "thresholds", "label_mask", "labels"}
    texts = _texts()
    features = tfbert.BertPreprocessor(chinese_vocab_file, 16)(tf.constant(texts))
    logits = model(features, training=False).numpy()
    loaded = tf.saved_model.load(result["export_dir"])
    _check_multi_label_outputs(loaded.signatures["serving_default"](text=tf.constant(texts)),
                               logits, "serving_default")
    _check_multi_label_outputs(loaded.signatures["serve_ids"](**features), logits, "serve_ids")


@pytest.mark.slow
def test_multi_label_tflite_equals_keras(tmp_path, chinese_vocab_file):
    from tfbert.export import load_for_export, tflite

    model, model_dir = _multi_label_model_dir(tmp_path, chinese_vocab_file)
    model, vocab_file, spec, _ = load_for_export(model_dir)
    assert spec.multi_label and spec.thresholds == pytest.approx([0.3, 0.5, 0.7])
    files = tflite.export_tflite(model, spec, vocab_file, str(tmp_path / "tflite"),
                                 ("float32",), kinds=("ids",))
    features = {k: v.numpy() for k, v in tfbert.BertPreprocessor(chinese_vocab_file, 16)(
        tf.constant(["今天天气很好", "人民日报社论", "张三去北京"])).items()}
    logits = model(features, training=False).numpy()
    got = tflite.run_tflite(tflite.make_interpreter(files["model_ids_float32.tflite"]["path"],
                                                    text_ops=False), features)
    probabilities = 1 / (1 + np.exp(-logits))
    np.testing.assert_allclose(got["probabilities"], probabilities, atol=1e-5)
    np.testing.assert_array_equal(got["label_mask"], probabilities >= [0.3, 0.5, 0.7])


@pytest.mark.slow
@pytest.mark.parametrize("multi_label, pair", [(True, False), (False, True)])
def test_windowed_export_equals_keras_windows(tmp_path, chinese_vocab_file, multi_label, pair):
    """The text signature of a long_input=windows model (tfbert.json) reads long texts as
    `encode_windows` does and answers the mean of the windows' logits, as the Keras model."""
    from tfbert.data import corpora
    from tfbert.export import load_for_export
    from tfbert.export.saved_model import BertServingModule

    lines = corpora.people_daily_lines()[:8]
    texts = ["".join(lines[:3]), lines[3], "好", "", "".join(lines[4:8])]
    texts_b = [t for t, _ in corpora.reviews()[:4]] + ["".join(lines[:2])]
    labels = ["LOC", "ORG", "PER"]
    model = tfbert.BertClassifier(tiny_encoder(vocab_size(chinese_vocab_file), seed=4),
                                  num_classes=3, multi_label=multi_label)
    model_dir = str(tmp_path / "model")
    tfbert.save_pretrained(model, model_dir, vocab_file=chinese_vocab_file, metadata={
        "task": "classification", "labels": labels, "max_seq_length": 16, "lower_case": True,
        "pair": pair, "multi_label": multi_label, "long_input": "windows", "doc_stride": 5,
        **({"thresholds": [0.4, 0.5, 0.6]} if multi_label else {})})
    model, vocab_file, spec, _ = load_for_export(model_dir)
    assert (spec.long_input, spec.window_stride, spec.pair) == ("windows", 5, pair)
    module = BertServingModule(model, vocab_file, spec)
    got = module.serve_text(tf.constant(texts), *([tf.constant(texts_b)] if pair else []))
    examples = [data.ClassificationExample(a, None, b if pair else None)
                for a, b in zip(texts, texts_b, strict=True)]
    windows = data.encode_windows(examples, tfbert.BertTokenizer(vocab_file, lower_case=True),
                                  16, 5)
    assert windows.stats["max_windows"] > 3
    want = pool_windows(model(windows.inputs(), training=False), windows.document,
                        len(texts)).numpy()
    np.testing.assert_allclose(got["logits"].numpy(), want, atol=1e-5)
    if multi_label:
        probabilities = 1 / (1 + np.exp(-want.astype(np.float64)))
        np.testing.assert_allclose(got["probabilities"].numpy(), probabilities, atol=1e-5)
        np.testing.assert_array_equal(got["label_mask"].numpy(),
                                      probabilities >= np.array([0.4, 0.5, 0.6]))
    else:
        np.testing.assert_allclose(got["probabilities"].numpy(),
                                   tf.nn.softmax(want).numpy(), atol=1e-5)
        assert got["label_ids"].numpy().tolist() == want.argmax(-1).tolist()


# --- run_classification end to end ---------------------------------------------------------------


@pytest.mark.slow
def test_run_classifier_multi_label_file_then_eval_only(tmp_path, chinese_vocab_file):
    """A tiny model learns a multi-label task from JSONL (label "up" when the text holds 好,
    "big" when it holds 大, either, both or none), with balanced class weights; the thresholds
    tuned on dev are stored and an eval-only run scores test the same with them."""
    from tfbert.tasks.classification import ClassificationConfig, run_classification

    rng = np.random.default_rng(0)
    filler = list("的了是在我有他这中")

    def jsonl(name, n):
        lines = []
        for _ in range(n):
            chars, labels = list(rng.choice(filler, 5)), []
            for label, key in (("big", "大"), ("up", "好")):
                if rng.random() < 0.4:
                    chars.insert(int(rng.integers(0, len(chars) + 1)), key)
                    labels.append(label)
            lines.append(json.dumps({"text": "".join(chars), "labels": labels},
                                    ensure_ascii=False) + "\n")
        return write(tmp_path, name, "".join(lines))

    config = tiny_config_file(tmp_path / "bert_config.json", chinese_vocab_file)
    common = dict(bert_config_file=config,
                  vocab_file=chinese_vocab_file, max_seq_length=12, multi_label=True,
                  distribution_strategy="one_device", verbose=0)
    files = dict(train_file=jsonl("train.jsonl", 320), dev_file=jsonl("dev.jsonl", 64),
                 test_file=jsonl("test.jsonl", 64))
    results = run_classification(ClassificationConfig(
        output_dir=str(tmp_path / "out"), **files, train_batch_size=32, num_train_epochs=6,
        learning_rate=3e-3, class_weights="balanced", **common))
    assert results["labels"] == ["big", "up"]
    assert results["test"]["micro_f1"] > 0.9, results["train"]["history"]
    assert results["class_weights"]["source"] == "balanced"
    assert set(results["thresholds"]) == {"big", "up"} and results["thresholds_from"] == "dev"
    metadata = tfbert.checkpoints.read_metadata(str(tmp_path / "out" / "model"))
    assert metadata["multi_label"] and metadata["thresholds"] == pytest.approx(
        [results["thresholds"]["big"], results["thresholds"]["up"]])
    rows = [json.loads(line) for line in open(tmp_path / "out" / "test_predictions.jsonl",
                                              encoding="utf-8")]
    assert len(rows) == 64 and set(rows[0]) == {"index", "text", "labels", "predicted",
                                                "probabilities"}
    exact = np.mean([sorted(r["labels"]) == sorted(r["predicted"]) for r in rows])
    assert exact == pytest.approx(results["test"]["exact_match"])
    again = run_classification(ClassificationConfig(
        output_dir=str(tmp_path / "eval"), **files, do_train=False,
        init_checkpoint=str(tmp_path / "out" / "model"), **common))
    assert again["test"]["micro_f1"] == pytest.approx(results["test"]["micro_f1"])
    assert again["thresholds"] == pytest.approx(results["thresholds"])
    assert again["thresholds_from"] == "model"
    with pytest.raises(UserError, match="the model is multi-label; pass multi_label"):
        run_classification(ClassificationConfig(
            output_dir=str(tmp_path / "eval2"), **files, do_train=False,
            init_checkpoint=str(tmp_path / "out" / "model"),
            **{**common, "multi_label": False}))


@pytest.mark.slow
def test_run_classifier_windows_read_what_truncation_cuts(tmp_path, chinese_vocab_file):
    """The label is a character written three times after 14 others; at max_seq_length 12
    truncation never sees it and stays near chance, windows learn it. The model's metadata
    holds long_input and doc_stride, and an eval-only run windows as the model says."""
    from tfbert.tasks.classification import ClassificationConfig, run_classification

    rng = np.random.default_rng(0)
    filler = list("的了是在我有他这中")

    def tsv(name, n):
        rows = ["text\tlabel"]
        for _ in range(n):
            label = str(rng.choice(["up", "down"]))
            rows.append("".join(rng.choice(filler, 14)) + ("好" if label == "up" else "差") * 3
                        + "\t" + label)
        return write(tmp_path, name, "\n".join(rows) + "\n")

    files = dict(train_file=tsv("train.tsv", 384), dev_file=tsv("dev.tsv", 64),
                 test_file=tsv("test.tsv", 64))
    config = tiny_config_file(tmp_path / "bert_config.json", chinese_vocab_file)
    common = dict(**files, bert_config_file=config,
                  vocab_file=chinese_vocab_file, max_seq_length=12, train_batch_size=16,
                  num_train_epochs=5, learning_rate=2e-3, distribution_strategy="one_device",
                  verbose=0)
    windows = run_classification(ClassificationConfig(output_dir=str(tmp_path / "w"),
                                                      long_input="windows", doc_stride=5, **common))
    cut = run_classification(ClassificationConfig(output_dir=str(tmp_path / "t"), **common))
    assert windows["test"]["accuracy"] > 0.9, windows["train"]["history"]
    assert cut["test"]["accuracy"] < 0.7
    assert windows["long_input"] == {"mode": "windows", "doc_stride": 5}
    # 17 pieces, body 10, stride 5: starts 0, 5 (5 + 10 = 15 < 17) and 10.
    assert windows["data"]["test"] == {"documents": 64, "windows": 192,
                                       "documents_over_one_window": 64, "max_windows": 3}
    metadata = tfbert.checkpoints.read_metadata(str(tmp_path / "w" / "model"))
    assert (metadata["long_input"], metadata["doc_stride"]) == ("windows", 5)
    again = run_classification(ClassificationConfig(
        output_dir=str(tmp_path / "e"), **{**common, "train_file": None}, do_train=False,
        init_checkpoint=str(tmp_path / "w" / "model")))
    assert again["long_input"] == {"mode": "windows", "doc_stride": 5}
    assert again["test"]["accuracy"] == pytest.approx(windows["test"]["accuracy"])


@pytest.mark.slow
def test_run_classifier_cli_people_daily_types(tmp_path, chinese_vocab_file):
    """The command line: --task_name=people_daily_types with --class_weights from a file."""
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    weights = write(tmp_path, "w.json", '{"LOC": 1, "ORG": 3, "PER": 2}')
    out = tmp_path / "out"
    config = tiny_config_file(tmp_path / "bert_config.json", chinese_vocab_file)
    cmd = [sys.executable, os.path.join(repo, "run_classifier.py"), f"--output_dir={out}",
           "--task_name=people_daily_types", f"--class_weights={weights}",
           f"--bert_config_file={config}",
           f"--vocab_file={chinese_vocab_file}", "--max_seq_length=32", "--train_batch_size=16",
           "--num_train_epochs=1", "--learning_rate=1e-3", "--max_train_examples=64",
           "--max_eval_examples=32", "--distribution_strategy=one_device"]
    run = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["multi_label"] and results["labels"] == ["LOC", "ORG", "PER"]
    assert results["class_weights"] == {"source": weights, "positive_weights": {
        "LOC": 1.0, "ORG": 3.0, "PER": 2.0}}
    assert {"micro_f1", "macro_f1", "exact_match", "per_label"} <= set(results["test"])
    bad = subprocess.run(cmd[:2] + [f"--output_dir={tmp_path / 'bad'}", "--task_name=sentiment",
                                    "--long_input=windows", "--doc_stride=0"],
                         cwd=repo, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "doc_stride must be an integer in [1, 126)" in bad.stderr
