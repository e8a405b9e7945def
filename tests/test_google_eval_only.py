"""Evaluation and prediction without training from checkpoints that carry a task head: a
google-research/bert (GR) run_classifier.py / run_squad.py output and a Hugging Face
BertFor... directory, through the same calls as run_classifier.py / run_squad.py, writing GR's
files. The expected values are GR's own outputs from the same checkpoints
(tests/make_google_eval_only_golden.py, tests/data/google_eval_only/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfbert.errors import UserError
from tfbert.tasks.classification import ClassificationConfig, run_classification
from tfbert.tasks.qa import QAConfig, run_qa

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "tests", "data")
GOLDEN = os.path.join(DATA, "google_eval_only")
HEADS = os.path.join(DATA, "google_heads")
MNLI = os.path.join(DATA, "google_classifier", "MNLI")
SQUAD_FILE = os.path.join(DATA, "google_squad", "squad.json")
STEP = 30


def _golden() -> dict:
    with open(os.path.join(GOLDEN, "golden.json"), encoding="utf-8") as f:
        return json.load(f)


def _read_json(path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def gr_output(tmp_path, kind: str) -> str:
    """The fixture's weights as a GR training run leaves them: output_dir/model.ckpt-30 with
    global_step and Adam slots, and no bert_config.json or vocab.txt beside it."""
    reader = tf.train.load_checkpoint(os.path.join(HEADS, kind, "bert_model.ckpt"))
    tensors = {}
    for name in reader.get_variable_to_shape_map():
        value = reader.get_tensor(name)
        tensors.update({name: value, f"{name}/adam_m": np.zeros_like(value),
                        f"{name}/adam_v": np.ones_like(value)})
    tensors["global_step"] = np.int64(STEP)
    folder = tmp_path / f"gr_{kind}"
    folder.mkdir()
    prefix = str(folder / f"model.ckpt-{STEP}")
    names = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(tensors[n]) for n in names])
    return prefix


def _classifier(tmp_path, checkpoint: str, **steps) -> ClassificationConfig:
    model = os.path.join(HEADS, "classifier")
    return ClassificationConfig(
        task_name="MNLI", data_dir=MNLI, init_checkpoint=checkpoint, do_train=False,
        vocab_file=os.path.join(model, "vocab.txt"),
        bert_config_file=os.path.join(model, "bert_config.json"), max_seq_length=64,
        output_dir=str(tmp_path / "out"), distribution_strategy="one_device", verbose=0,
        **steps)


def _lines(path) -> dict[str, str]:
    with open(path, encoding="utf-8") as f:
        return dict(line.rstrip("\n").split(" = ") for line in f)


def test_gr_classifier_eval_only(tmp_path):
    """GR's --do_eval from its run_classifier output: eval_results.txt holds GR's values and
    the checkpoint's global_step; MNLI's labels in GR's processor order."""
    results = run_classification(_classifier(tmp_path, gr_output(tmp_path, "classifier"),
                                             do_eval=True, do_predict=False))
    golden = _golden()
    assert results["labels"] == golden["labels"] == ["contradiction", "entailment", "neutral"]
    out = tmp_path / "out"
    ours, theirs = _lines(out / "eval_results.txt"), _lines(os.path.join(GOLDEN, "mnli",
                                                                           "eval_results.txt"))
    assert sorted(ours) == ["eval_accuracy", "eval_loss", "global_step", "loss"]
    assert ours["global_step"] == str(STEP)
    for key in theirs:  # GR's str(float32) text, values within float noise
        assert float(ours[key]) == pytest.approx(float(theirs[key]), abs=2e-6), key
        assert len(ours[key]) <= 10, ours[key]  # float32 text, not a float64 expansion
    assert ours["eval_accuracy"] == theirs["eval_accuracy"]
    assert not (out / "test_results.tsv").exists()


def test_gr_classifier_predict_only(tmp_path):
    """GR's --do_predict alone: test_results.tsv holds GR's probabilities, row for row."""
    run_classification(_classifier(tmp_path, gr_output(tmp_path, "classifier"), do_eval=False,
                                   do_predict=True))
    out = tmp_path / "out"
    rows = np.loadtxt(out / "test_results.tsv", delimiter="\t", ndmin=2)
    theirs = np.loadtxt(os.path.join(GOLDEN, "mnli", "test_results.tsv"), delimiter="\t",
                        ndmin=2)
    np.testing.assert_allclose(rows, theirs, atol=1e-6, rtol=0)
    np.testing.assert_allclose(rows, _golden()["test_probabilities"], atol=1e-6, rtol=0)
    assert not (out / "eval_results.txt").exists()


def _squad(tmp_path, checkpoint: str, **kwargs) -> QAConfig:
    model = os.path.join(HEADS, "squad")
    settings = _golden()["squad"]
    return QAConfig(
        init_checkpoint=checkpoint, do_train=False, vocab_file=os.path.join(model, "vocab.txt"),
        bert_config_file=os.path.join(model, "bert_config.json"),
        output_dir=str(tmp_path / "out"), distribution_strategy="one_device", verbose=0,
        **{k: settings[k] for k in ("max_seq_length", "doc_stride", "max_query_length",
                                    "n_best_size", "max_answer_length")}, **kwargs)


def _same_nbest(ours: dict, theirs: dict) -> None:
    """GR's n-best lists, up to tfbert's documented difference
    (tfbert/tasks/qa_predictions.py): GR's `get_final_text` cannot map a span onto words holding
    [UNK] punctuation and returns the whole words, where tfbert cuts the span from the context.
    So a GR entry is ours (the same logits) with the same text or ours widened to whole words;
    GR's widened texts merge spans, so its list reaches past our last score."""
    assert list(ours) == list(theirs)
    same = widened = 0
    for qid, entries in theirs.items():
        floor = min(e["start_logit"] + e["end_logit"] for e in ours[qid] if e["text"])
        for entry in entries:
            mine = [e for e in ours[qid] if abs(e["start_logit"] - entry["start_logit"]) < 1e-5
                    and abs(e["end_logit"] - entry["end_logit"]) < 1e-5]
            if not mine:  # below our 20th
                assert entry["start_logit"] + entry["end_logit"] <= floor + 1e-5, (qid, entry)
                continue
            assert mine[0]["text"] in entry["text"], (qid, mine[0]["text"], entry["text"])
            same += mine[0]["text"] == entry["text"]
            widened += mine[0]["text"] != entry["text"]
        assert ours[qid][0]["text"] == entries[0]["text"]
        assert sum(e["probability"] for e in ours[qid]) == pytest.approx(1.0)
    assert same > 3 * widened > 0, (same, widened)


@pytest.mark.parametrize("version", ["squad_v1", "squad_v2"])
def test_gr_squad_predict_only(tmp_path, version):
    """GR's run_squad --do_predict from its output: predictions.json and nbest (and v2.0's
    null_odds.json) are GR's, at GR's default threshold 0.0."""
    v2 = version == "squad_v2"
    test_file = SQUAD_FILE
    if not v2:  # the same questions as v1.1 data (GR's prediction reads no is_impossible)
        squad = _read_json(SQUAD_FILE)
        for paragraph in squad["data"][0]["paragraphs"]:
            for question in paragraph["qas"]:
                question["is_impossible"] = False
        test_file = tmp_path / "v1.json"
        test_file.write_text(json.dumps(squad), "utf-8")
    results = run_qa(_squad(tmp_path, gr_output(tmp_path, "squad"), test_file=str(test_file),
                            do_eval=False, do_predict=True, version_2_with_negative=v2))
    out, golden = tmp_path / "out", os.path.join(GOLDEN, version)
    assert _read_json(out / "predictions.json") == _read_json(os.path.join(golden,
                                                                           "predictions.json"))
    _same_nbest(_read_json(out / "nbest_predictions.json"),
                _read_json(os.path.join(golden, "nbest_predictions.json")))
    if v2:
        assert results["null_score_diff_threshold"] == {"value": 0.0, "source": "default"}
        ours, theirs = (_read_json(out / "null_odds.json"),
                        _read_json(os.path.join(golden, "null_odds.json")))
        assert list(ours) == list(theirs)
        np.testing.assert_allclose(list(ours.values()), list(theirs.values()), atol=1e-5)
    assert "test" in results and "dev" not in results


def test_gr_squad_eval_only(tmp_path):
    """--do_eval alone scores the dev file with the GR checkpoint: GR's answers, scored."""
    results = run_qa(_squad(tmp_path, os.path.join(HEADS, "squad", "bert_model.ckpt"),
                            dev_file=SQUAD_FILE, do_eval=True, do_predict=False,
                            version_2_with_negative=True, null_score_diff_threshold=0.0))
    out = tmp_path / "out"
    theirs = _read_json(os.path.join(GOLDEN, "squad_v2", "predictions.json"))
    assert _read_json(out / "dev_predictions.json") == theirs
    assert results["predictions_split"] == "dev" and results["dev"]["total"] == len(theirs)
    # q3 and q6 have no answer and GR answers every question: those two count as wrong
    answerable = [q for q, a in theirs.items() if a]
    assert results["dev"]["NoAns_total"] == 2 and len(answerable) == 6


def test_hf_sequence_head_eval_and_predict(tmp_path):
    """A Hugging Face BertForSequenceClassification directory: labels from id2label, dev
    scored and test predicted without training; the probabilities are its model's."""
    import tfbert

    source = os.path.join(DATA, "hf_heads", "sequence")
    rows = [("a b c", "pos"), ("w1 w2 w3 w4", "neg"), ("x y", "neutral")]
    for split in ("dev", "test"):
        (tmp_path / f"{split}.tsv").write_text(
            "text\tlabel\n" + "".join(f"{t}\t{label}\n" for t, label in rows), "utf-8")
    results = run_classification(ClassificationConfig(
        init_checkpoint=source, dev_file=str(tmp_path / "dev.tsv"),
        test_file=str(tmp_path / "test.tsv"), do_train=False, max_seq_length=16,
        output_dir=str(tmp_path / "out"), distribution_strategy="one_device", verbose=0))
    assert results["labels"] == ["neg", "neutral", "pos"]
    assert results["dev"]["num_examples"] == 3
    model = tfbert.from_pretrained(source)
    batch = tfbert.BertPreprocessor(os.path.join(source, "vocab.txt"), 16)(
        tf.constant([t for t, _ in rows]))
    expected = tf.nn.softmax(model(batch, training=False), -1).numpy()
    with open(tmp_path / "out" / "test_predictions.tsv", encoding="utf-8") as f:
        written = np.array([line.rstrip("\n").split("\t")[-3:] for line in f][1:], float)
    np.testing.assert_allclose(written, expected, atol=1e-6)


def test_head_of_another_task_is_refused(tmp_path):
    """run_squad's checkpoint given to run_classification: one line naming the head it holds."""
    with pytest.raises(UserError, match=r"BertSpanLabeler head \(task 'qa'\); without do_train "
                                        r"it must be a fine-tuned classification model"):
        run_classification(_classifier(tmp_path, os.path.join(HEADS, "squad", "bert_model.ckpt"),
                                       do_eval=True, do_predict=False))
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.slow  # a script process (about 10 s)
def test_gr_command_line_eval_and_predict(tmp_path):
    """GR's exact command line from its run_classifier output runs and writes GR's files."""
    prefix = gr_output(tmp_path, "classifier")
    model = os.path.join(HEADS, "classifier")
    out = tmp_path / "out"
    cmd = [sys.executable, os.path.join(REPO, "run_classifier.py"), "--task_name=MNLI",
           "--do_eval=true", "--do_predict=true", f"--data_dir={MNLI}",
           f"--vocab_file={os.path.join(model, 'vocab.txt')}",
           f"--bert_config_file={os.path.join(model, 'bert_config.json')}",
           f"--init_checkpoint={prefix}", "--max_seq_length=64", f"--output_dir={out}"]
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert _lines(out / "eval_results.txt")["global_step"] == str(STEP)
    np.testing.assert_allclose(np.loadtxt(out / "test_results.tsv", delimiter="\t", ndmin=2),
                               _golden()["test_probabilities"], atol=1e-6, rtol=0)


@pytest.mark.slow  # a script process (about 10 s)
def test_gr_squad_command_line_predict(tmp_path):
    """GR's run_squad.py --do_predict command line from its output writes GR's predictions."""
    prefix = gr_output(tmp_path, "squad")
    model, settings = os.path.join(HEADS, "squad"), _golden()["squad"]
    out = tmp_path / "out"
    cmd = [sys.executable, os.path.join(REPO, "run_squad.py"), "--do_predict=true",
           f"--predict_file={SQUAD_FILE}", "--version_2_with_negative=true",
           f"--vocab_file={os.path.join(model, 'vocab.txt')}",
           f"--bert_config_file={os.path.join(model, 'bert_config.json')}",
           f"--init_checkpoint={prefix}", f"--output_dir={out}",
           *(f"--{k}={settings[k]}" for k in ("max_seq_length", "doc_stride",
                                              "max_query_length"))]
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert _read_json(out / "predictions.json") == _read_json(
        os.path.join(GOLDEN, "squad_v2", "predictions.json"))
