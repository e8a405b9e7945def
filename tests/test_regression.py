"""Sentence-pair regression (tfbert/tasks/regression.py, GLUE STS-B): the metrics against scipy,
STS-B's folder layout and its errors, run_classifier.py --task_name=sts-b end to end, and the
Hugging Face head (BertForSequenceClassification with problem_type "regression")."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf
from model_test_utils import make_features, tiny_config, tiny_config_file

import tfbert
from tfbert.errors import UserError
from tfbert.tasks import registry
from tfbert.tasks.regression import RegressionConfig, read_stsb, regression_metrics, run_regression
from tfbert.text.preprocessor import BertPreprocessor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"


def _write_stsb(folder, n_train=384, n_dev=64, n_test=8, seed=0) -> None:
    """An STS-B folder in GLUE's layout whose score a tiny model can learn: 1.0 when sentence2's
    word is one of 好大多上, else 0.0 (sentence1 is noise; sentence2 carries a quote character,
    as GLUE's sentences do)."""
    rng = np.random.default_rng(seed)
    words = list("好差大小多少上下")
    os.makedirs(folder, exist_ok=True)
    for split, n in (("train", n_train), ("dev", n_dev), ("test", n_test)):
        rows = [HEADER + ("" if split == "test" else "\tscore")]
        for i in range(n):
            a, b = str(rng.choice(words)), str(words[i % len(words)])
            score = "" if split == "test" else f"\t{float(b in '好大多上'):.3f}"
            rows.append(f'{i}\tmain-news\tMSRvid\t2012test\t{i:04d}\tnone\tnone\t{a}\t{b}"{score}')
        with open(os.path.join(folder, f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("\n".join(rows) + "\n")


def test_metrics_equal_scipys_with_ties():
    rng = np.random.default_rng(3)
    gold = rng.integers(0, 6, 200).astype(float)  # many ties, as STS-B's 0-5 scores have
    predicted = gold + rng.normal(scale=1.5, size=200)
    predicted[:20] = 2.5  # tied predictions too
    m = regression_metrics(gold, predicted)
    assert m["pearson"] == pytest.approx(scipy.stats.pearsonr(gold, predicted)[0], abs=1e-12)
    assert m["spearman"] == pytest.approx(scipy.stats.spearmanr(gold, predicted)[0], abs=1e-12)
    assert m["mse"] == pytest.approx(np.mean((gold - predicted) ** 2)) and m["loss"] == m["mse"]
    assert m["num_examples"] == 200
    constant = regression_metrics(gold, np.full(200, 3.0))
    assert (constant["pearson"], constant["spearman"]) == (0.0, 0.0)


def test_stsb_reader_finds_columns_by_header_and_names_bad_rows(tmp_path):
    _write_stsb(tmp_path, n_train=4, n_dev=2, n_test=2)
    train = read_stsb(str(tmp_path), "train")
    assert len(train) == 4 and train[0].text_b.endswith('"')
    assert [float(e.label) for e in train] == [1.0, 0.0, 1.0, 0.0]
    assert train[1].source == f"{tmp_path / 'train.tsv'}:3"
    test = read_stsb(str(tmp_path), "test")
    assert [e.label for e in test] == [None, None]
    (tmp_path / "dev.tsv").write_text(HEADER + "\tscore\n0\tg\tf\ty\to\ts\ts\ta\tb\tfive\n",
                                      encoding="utf-8")
    with pytest.raises(UserError, match=r"dev.tsv:2: score 'five' is not a finite number"):
        read_stsb(str(tmp_path), "dev")
    (tmp_path / "dev.tsv").write_text("sentence1\tlabel\na\t1\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"lacks column\(s\) \['sentence2', 'score'\]"):
        read_stsb(str(tmp_path), "dev")


def test_config_refusals():
    with pytest.raises(UserError, match="exactly one data source"):
        RegressionConfig(output_dir="o", task_name="sts-b")
    with pytest.raises(UserError, match="best_metric must be one of"):
        RegressionConfig(output_dir="o", task_name="sts-b", data_dir="d", best_metric="accuracy")
    assert registry.claiming("classifier", "STS-B") is registry.get("regression")
    assert registry.claiming("classifier", "mrpc") is None


def test_run_classifier_sts_b_end_to_end(tmp_path, chinese_vocab_file):
    """google-research/bert-style command line with --task_name=STS-B: the model learns the
    folder's score, results.json, eval_results.txt, test_results.tsv and test_predictions.tsv
    agree, and the saved model scores dev again the same without training."""
    folder, out = tmp_path / "STS-B", tmp_path / "out"
    _write_stsb(folder)
    config = tiny_config_file(tmp_path / "bert_config.json", chinese_vocab_file)
    cmd = [sys.executable, os.path.join(REPO, "run_classifier.py"), "--task_name=STS-B",
           f"--data_dir={folder}", "--do_train=true", "--do_eval=true", "--do_predict=true",
           f"--vocab_file={chinese_vocab_file}", f"--bert_config_file={config}",
           "--max_seq_length=8", "--train_batch_size=32", "--learning_rate=3e-3",
           "--num_train_epochs=6", f"--output_dir={out}", "--use_tpu=false",
           "--distribution_strategy=one_device"]
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    dev = results["dev"]
    assert dev["num_examples"] == 64 and dev["pearson"] > 0.9, dev
    values = dict(line.split(" = ") for line in
                  (out / "eval_results.txt").read_text(encoding="utf-8").splitlines())
    assert sorted(values) == ["eval_loss", "eval_pearson", "eval_spearman", "global_step", "loss"]
    assert float(values["eval_pearson"]) == pytest.approx(dev["pearson"], rel=1e-6)
    assert int(values["global_step"]) == results["train"]["num_train_steps"] == 72
    with open(out / "test_predictions.tsv", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    assert rows[0] == ["index", "text", "text_b", "score", "predicted"] and len(rows) == 9
    scores = np.loadtxt(out / "test_results.tsv", ndmin=1)
    np.testing.assert_allclose(scores, [float(r[4]) for r in rows[1:]], atol=1e-6)
    learned = np.array([r[2][0] in "好大多上" for r in rows[1:]])
    assert scores[learned].min() > scores[~learned].max()  # the score read from sentence1

    again = run_regression(RegressionConfig(
        output_dir=str(tmp_path / "eval"), task_name="sts-b", data_dir=str(folder),
        init_checkpoint=str(out / "model"), do_train=False, do_predict=False,
        max_seq_length=8, distribution_strategy="one_device"))
    assert again["dev"]["pearson"] == pytest.approx(dev["pearson"], abs=1e-6)

    # The SavedModel takes the two texts and returns the score the Keras model gives.
    from tfbert.export import export_model

    export_dir = str(tmp_path / "saved_models" / "stsb" / "1")
    export_model(str(out / "model"), export_dir, tflite=(), check=False)
    serving = tf.saved_model.load(export_dir).signatures["serving_default"]
    texts, texts_b = [r[1] for r in rows[1:]], [r[2] for r in rows[1:]]
    served = serving(text=tf.constant(texts), text_b=tf.constant(texts_b))
    assert set(served) == {"score"} and served["score"].shape == (8,)
    model = tfbert.checkpoints.load_model(str(out / "model"))
    packed = BertPreprocessor(chinese_vocab_file, 8)((tf.constant(texts), tf.constant(texts_b)))
    np.testing.assert_allclose(served["score"].numpy(), model(packed).numpy(), atol=1e-5)
    np.testing.assert_allclose(served["score"].numpy(), scores, atol=1e-5)


def test_flags_of_another_task_are_refused(tmp_path):
    cmd = [sys.executable, os.path.join(REPO, "run_classifier.py"), "--task_name=sts-b",
           f"--data_dir={tmp_path}", "--multi_label", "--head_hidden_layers=1",
           f"--output_dir={tmp_path / 'out'}"]
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 2, run.stderr[-2000:]
    assert "--head_hidden_layers, --multi_label do(es) not apply to --task_name=sts-b" in \
        run.stderr


def test_hugging_face_regression_head_round_trip(tmp_path, chinese_vocab_file):
    """A BertRegressor saved as Hugging Face's BertForSequenceClassification (num_labels 1,
    problem_type regression) loads back as a BertRegressor with the same scores; without a
    problem_type, num_labels=1 reads as regression (transformers' rule)."""
    config = tiny_config(chinese_vocab_file)
    model = tfbert.BertRegressor(tfbert.BertEncoder(config), dropout=0.2)
    features = make_features(config)
    tfbert.save_pretrained(model, str(tmp_path / "hf"), format="hf")
    values = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert values["architectures"] == ["BertForSequenceClassification"]
    assert (values["problem_type"], values["num_labels"], values["classifier_dropout"]) == (
        "regression", 1, 0.2)
    again = tfbert.from_pretrained(str(tmp_path / "hf"))
    assert type(again) is tfbert.BertRegressor and again.dropout == 0.2
    np.testing.assert_allclose(again(features), model(features), atol=1e-6)
    del values["problem_type"]
    (tmp_path / "hf" / "config.json").write_text(json.dumps(values))
    assert type(tfbert.from_pretrained(str(tmp_path / "hf"))) is tfbert.BertRegressor


def test_a_sentence_longer_than_csvs_field_limit_reads(tmp_path):
    """TSV has no quoting, so a field may be longer than Python csv's 131,072 characters (the
    limit is lifted while the file is read, and restored after)."""
    import csv as csv_module

    long = "长" * 200_000
    (tmp_path / "dev.tsv").write_text(HEADER + f"\tscore\n0\tg\tf\ty\to\ts\ts\t{long}\tb\t2.5\n",
                                      encoding="utf-8")
    limit = csv_module.field_size_limit()
    [example] = read_stsb(str(tmp_path), "dev")
    assert len(example.text) == 200_000 and example.label == "2.5"
    assert csv_module.field_size_limit() == limit
