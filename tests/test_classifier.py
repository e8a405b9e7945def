"""Classification: file/TFDS/built-in readers, the tf.data pipeline, run_classification end to
end."""

from __future__ import annotations

import csv
import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
from model_test_utils import REPO, tiny_config_file

from tfbert.data import classification as data
from tfbert.data import corpora
from tfbert.errors import UserError

ROWS = [("这本书很好", "positive", "值得一读"), ("太差了", "negative", "不推荐")]


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# --- readers --------------------------------------------------------------------------------------


def test_tsv_csv_jsonl_read_the_same(tmp_path):
    tsv = write(tmp_path, "a.tsv", "label\ttext\ttext_b\textra\n"
                + "".join(f"{lab}\t{t}\t{b}\tx\n" for t, lab, b in ROWS))
    with open(tmp_path / "a.csv", "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "text_b", "label"])
        writer.writerows([(t, b, lab) for t, lab, b in ROWS])
    jsonl = write(tmp_path, "a.jsonl", "".join(
        json.dumps({"text": t, "label": lab, "text_b": b}, ensure_ascii=False) + "\n"
        for t, lab, b in ROWS))
    for path in (tsv, str(tmp_path / "a.csv"), jsonl):
        examples = data.read_examples(path)
        assert [(e.text, e.label, e.text_b) for e in examples] == ROWS, path
        assert examples[1].source == f"{path}:{2 if path == jsonl else 3}"


def test_blank_lines_are_counted_not_silent(tmp_path, caplog):
    path = write(tmp_path, "b.tsv", "text\tlabel\n好\tpositive\n\n差\tnegative\n\n")
    with caplog.at_level(logging.WARNING):
        examples = data.read_examples(path)
    assert len(examples) == 2
    assert "skipped 2 empty line(s) (lines 3, 5)" in caplog.text


@pytest.mark.parametrize("name, text, message", [
    ("c.tsv", "sentence\tlabel\n好\tpositive\n", r"c.tsv:1: header \['sentence', 'label'\] "
                                                  r"has no 'text' column"),
    ("d.tsv", "text\tlabel\n好\tpositive\n差\n", r"d.tsv:3: 1 fields but the header has 2"),
    ("e.tsv", "text\tlabel\n好\tpositive\n \tnegative\n", r"e.tsv:3: empty text"),
    ("f.tsv", "text\tlabel\n好\t\n", r"f.tsv:2: missing label"),
    ("g.jsonl", '{"text": "好", "label": 1}\n{"label": 0}\n', r"g.jsonl:2: no 'text' field"),
    ("h.jsonl", '{"text": "好", "label": 1}\n[1]\n', r"h.jsonl:2: expected a JSON object"),
    ("i.tsv", "text\n好\n", r"i.tsv:2: no 'label' field"),
    ("j.xml", "<x/>", r"j.xml: unknown file type"),
])
def test_bad_rows_name_file_and_line(tmp_path, name, text, message):
    with pytest.raises(ValueError, match=message):
        data.read_examples(write(tmp_path, name, text))


def test_unlabelled_test_file_and_unknown_dev_label(tmp_path):
    test = data.read_examples(write(tmp_path, "test.tsv", "text\n好\n差\n"), labelled=False)
    assert [e.label for e in test] == [None, None]
    assert not data.is_labelled(test)
    dev = data.read_examples(write(tmp_path, "dev.tsv", "text\tlabel\n好\tpositive\n差\tbad\n"))
    # A UserError: the command line prints it as one line and exits with 2.
    with pytest.raises(UserError, match=r"dev.tsv:3: label 'bad' is not one of the training "
                                        r"labels \['negative', 'positive'\]"):
        data.label_ids(dev, ["negative", "positive"])


def test_label_list_sorts_numbers_as_numbers():
    examples = [data.ClassificationExample("t", label) for label in ("10", "2", "1", "2")]
    assert data.label_list(examples) == ["1", "2", "10"]


def test_builtin_sentiment_splits_are_disjoint_and_complete():
    splits = {s: data.builtin_examples("sentiment", s) for s in ("train", "dev", "test")}
    texts = {s: {e.text for e in examples} for s, examples in splits.items()}
    assert sum(len(t) for t in texts.values()) == len(corpora.reviews())
    assert not (texts["train"] & texts["dev"] or texts["train"] & texts["test"]
                or texts["dev"] & texts["test"])
    assert 1500 < len(splits["test"]) < 2000
    assert {e.label for e in splits["test"]} == {"negative", "positive"}
    assert data.builtin_labels("sentiment") == ["negative", "positive"]


def test_tfds_examples_with_mock_data():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=6):
        examples, labels = data.tfds_examples("glue/mrpc", "train")
    assert labels == ["not_equivalent", "equivalent"]
    assert len(examples) == 6
    assert all(e.text and e.text_b and e.label in labels for e in examples)
    assert examples[0].source == "tfds:glue/mrpc/train#0"


def test_make_dataset_pairs_through_preprocessor(chinese_vocab_file):
    import tfbert

    pre = tfbert.BertPreprocessor(chinese_vocab_file, 16, lower_case=False)
    examples = [data.ClassificationExample(t, lab, b) for t, lab, b in ROWS]
    features, labels = next(iter(data.make_dataset(examples, pre, ["negative", "positive"], 2)))
    np.testing.assert_array_equal(labels, [1, 0])
    assert features["input_ids"].shape == (2, 16)
    # [CLS] 这 本 书 很 好 [SEP] 值 得 一 读 [SEP]: segment 1 from the second text on.
    np.testing.assert_array_equal(features["segment_ids"][0, :13],
                                  [0] * 7 + [1] * 5 + [0])
    assert int(features["input_mask"][0].numpy().sum()) == 12
    unlabelled = next(iter(data.make_dataset(examples, pre, None, 2)))
    np.testing.assert_array_equal(unlabelled["input_ids"], features["input_ids"])
    with pytest.raises(ValueError, match="mixes single texts and sentence pairs"):
        data.make_dataset([examples[0], data.ClassificationExample("好", "positive")], pre,
                          None, 2)


# --- end to end -----------------------------------------------------------------------------------


@pytest.mark.slow  # (test_google_tasks runs the script end to end; the library runs stay fast)
def test_run_classifier_script_on_sentiment(tmp_path, chinese_vocab_file):
    """run_classifier.py end to end on the built-in data with a tiny random-init model, then the
    saved model scored again without training."""
    config = tiny_config_file(tmp_path / "bert_config.json", chinese_vocab_file)
    out = tmp_path / "out"
    cmd = [sys.executable, os.path.join(REPO, "run_classifier.py"), f"--output_dir={out}",
           f"--bert_config_file={config}", f"--vocab_file={chinese_vocab_file}",
           "--max_seq_length=32", "--train_batch_size=16", "--num_train_epochs=2",
           "--learning_rate=1e-3", "--max_train_examples=96", "--max_eval_examples=40",
           "--head_hidden_layers=1", "--head_hidden_size=16", "--distribution_strategy=one_device"]
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    for split in ("dev", "test"):
        assert {"accuracy", "macro_f1", "per_class", "num_examples"} <= set(results[split])
        assert results[split]["num_examples"] == 40
    assert results["labels"] == ["negative", "positive"]
    assert [h["epoch"] for h in results["train"]["history"]] == [1, 2]
    # Length buckets (on by default): 2 epochs of one batch of 16 or fewer per bucket.
    from tfbert.data import length_buckets
    from tfbert.text.preprocessor import BertPreprocessor

    packed = BertPreprocessor(chinese_vocab_file, 32)(
        np.array([e.text for e in data.builtin_examples("sentiment", "train")[:96]]))
    steps = length_buckets.num_batches(packed["input_mask"].numpy().sum(1), 32, 16)
    assert results["train"]["num_train_steps"] == 2 * steps >= 12
    with open(out / "test_predictions.tsv", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    assert rows[0] == ["index", "text", "label", "predicted", "p_negative", "p_positive"]
    assert len(rows) == 41
    test = data.builtin_examples("sentiment", "test")[:40]
    assert [r[1] for r in rows[1:]] == [e.text for e in test]
    probabilities = np.array([[float(x) for x in r[4:]] for r in rows[1:]])
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    accuracy = np.mean([r[2] == r[3] for r in rows[1:]])
    assert accuracy == pytest.approx(results["test"]["accuracy"])

    from tfbert import checkpoints
    from tfbert.tasks.classification import ClassificationConfig, run_classification

    metadata = checkpoints.read_metadata(str(out / "model"))
    assert (metadata["task"], metadata["labels"], metadata["max_seq_length"]) == (
        "classification", ["negative", "positive"], 32)
    again = run_classification(ClassificationConfig(
        output_dir=str(tmp_path / "eval"), task_name="sentiment",
        init_checkpoint=str(out / "model"), do_train=False, max_seq_length=32,
        max_eval_examples=40, distribution_strategy="one_device", verbose=0))
    assert again["test"]["accuracy"] == pytest.approx(results["test"]["accuracy"])
    assert again["dev"]["accuracy"] == pytest.approx(results["dev"]["accuracy"])


@pytest.mark.slow
def test_run_classifier_on_tfds_pairs(tmp_path, chinese_vocab_file):
    """A TFDS pair task (mock data) goes through; labels are the dataset's ClassLabel names."""
    tfds = pytest.importorskip("tensorflow_datasets")
    from tfbert.tasks.classification import ClassificationConfig, run_classification

    config = tiny_config_file(tmp_path / "bert_config.json", chinese_vocab_file)
    with tfds.testing.mock_data(num_examples=24):
        results = run_classification(ClassificationConfig(
            output_dir=str(tmp_path / "out"), tfds_name="glue/mrpc",
            bert_config_file=config, vocab_file=chinese_vocab_file, max_seq_length=16,
            train_batch_size=8, num_train_epochs=1, best_metric="macro_f1",
            distribution_strategy="one_device", verbose=0))
    assert results["labels"] == ["not_equivalent", "equivalent"]
    assert results["dev"]["num_examples"] == 24
    assert set(results["test"]) >= {"accuracy", "macro_f1"}


@pytest.mark.slow  # 17 s; fast: the single-sentence run_classification tests
def test_run_classifier_learns_jsonl_pairs(tmp_path, chinese_vocab_file):
    """A tiny model learns a pair task (the label depends on the word in text_b) from JSONL
    files; an unlabelled test file gets predictions only."""
    from tfbert.tasks.classification import ClassificationConfig, run_classification

    rng = np.random.default_rng(0)
    words = list("好差大小多少上下")

    def jsonl(name, n, labelled=True):
        lines = []
        for _ in range(n):
            a, b = str(rng.choice(words)), str(rng.choice(words))
            row = {"text": a, "text_b": b}
            if labelled:
                row["label"] = "up" if b in "好大多上" else "down"
            lines.append(json.dumps(row, ensure_ascii=False) + "\n")
        return write(tmp_path, name, "".join(lines))

    out = tmp_path / "out"
    results = run_classification(ClassificationConfig(
        output_dir=str(out), train_file=jsonl("train.jsonl", 384),
        dev_file=jsonl("dev.jsonl", 64), test_file=jsonl("test.jsonl", 8, labelled=False),
        bert_config_file=tiny_config_file(tmp_path / "bert_config.json", chinese_vocab_file),
        vocab_file=chinese_vocab_file, max_seq_length=8, train_batch_size=32,
        num_train_epochs=6, learning_rate=3e-3, distribution_strategy="one_device",
        verbose=0))
    assert results["labels"] == ["down", "up"]
    assert results["dev"]["accuracy"] > 0.9, results["train"]["history"]
    assert "test" not in results
    with open(out / "test_predictions.tsv", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    assert rows[0] == ["index", "text", "text_b", "label", "predicted", "p_down", "p_up"]
    assert len(rows) == 9
    for row in rows[1:]:
        assert row[3] == ""
        assert row[4] == ("up" if row[2] in "好大多上" else "down")


def test_keras_api_doc_example_runs(tmp_path, chinese_vocab_file, monkeypatch):
    """The ten-line example of docs/keras_api.md, run as written on a tiny checkpoint."""
    import re

    import tfbert

    encoder = tfbert.BertEncoder(tfbert.BertConfig.from_json_file(
        tiny_config_file(tmp_path / "bert_config.json", chinese_vocab_file,
                         max_position_embeddings=128)))
    checkpoint = tmp_path / "pretrained"
    tfbert.save_pretrained(encoder, str(checkpoint), vocab_file=chinese_vocab_file)
    with open(os.path.join(REPO, "docs", "keras_api.md"), encoding="utf-8") as f:
        code = re.search(r"```python\n(.*?)```", f.read(), re.S).group(1)
    lines = [line for line in code.splitlines() if line.strip() and not line.startswith("import")]
    assert len(lines) <= 11, "the README example should stay about ten lines"
    assert '"output/pretrain_default/model"' in code
    code = code.replace('"output/pretrain_default/model"', repr(str(checkpoint)))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "docs/keras_api.md", "exec"), namespace)
    model = namespace["model"]
    assert len(model.history.history["loss"]) == 3
    assert np.isfinite(model.history.history["loss"]).all()
    metadata = tfbert.checkpoints.read_metadata(str(tmp_path / "my_classifier"))
    assert metadata["model_class"] == "BertClassifier"
    assert metadata["model_config"]["num_classes"] == 2


# --- the shared fine-tuning runner ----------------------------------------------------------------


def test_finetune_keeps_best_epoch_and_counts_steps(tmp_path):
    """finetune restores the weights of the best dev epoch; a fractional epoch count and
    gradient accumulation give the expected number of optimizer updates."""
    import keras
    import tensorflow as tf

    from tfbert.training.finetune import FinetuneConfig, finetune

    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)  # 4 batches per epoch
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    scores = iter([0.5, 0.9, 0.7])
    snapshots = []

    def evaluate(m):
        snapshots.append([w.copy() for w in m.get_weights()])
        return {"accuracy": next(scores), "per_class": {}}

    result = finetune(model, ds, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      FinetuneConfig(learning_rate=1e-2, num_train_epochs=2.5, verbose=0,
                                     log_dir=str(tmp_path / "logs")), evaluate_fn=evaluate)
    assert result.best_epoch == 2
    assert result.num_train_steps == 10  # 2.5 epochs x 4 batches
    assert [h["epoch"] for h in result.history] == [1, 2, 3]
    assert [h["accuracy"] for h in result.history] == [0.5, 0.9, 0.7]
    assert result.best_metrics == {"accuracy": 0.9, "per_class": {}}
    for now, best in zip(model.get_weights(), snapshots[1], strict=True):
        np.testing.assert_array_equal(now, best)
    assert os.listdir(tmp_path / "logs" / "train")  # TensorBoard events were written

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    result = finetune(model, ds, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      FinetuneConfig(num_train_epochs=3, gradient_accumulation_steps=2,
                                     verbose=0))
    assert result.num_train_steps == 6  # 12 batches, 2 per update
    assert result.best_epoch == 3 and result.best_metrics == {}
    with pytest.raises(ValueError, match="num_train_epochs must be a positive finite number"):
        FinetuneConfig(num_train_epochs=0)
