"""tfbert's SQuAD windows, decoding and prediction files against google-research/bert's own
`write_predictions` (golden files made by tests/make_google_squad_golden.py), and run_squad.py
with Google's flags."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tfbert.data import squad as qa_data
from tfbert.tasks import qa as qa_task
from tfbert.tasks import qa_predictions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "data", "google_squad")


def _read(*parts: str):
    with open(os.path.join(GOLDEN, *parts), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def windows():
    """tfbert's windows of the golden questions, with the golden logits."""
    import tfbert

    settings = _read("settings.json")
    data = qa_data.read_squad_json(os.path.join(GOLDEN, "squad.json"), on_bad_answer="error")
    tokenizer = tfbert.BertTokenizer(os.path.join(GOLDEN, "vocab.txt"),
                                     lower_case=settings["do_lower_case"])
    features, _ = qa_data.convert_examples(data.examples, tokenizer, settings["max_seq_length"],
                                           settings["doc_stride"], settings["max_query_length"])
    logits = _read("logits.json")
    starts = np.array([x["start_logits"] for x in logits])
    ends = np.array([x["end_logits"] for x in logits])
    return settings, data.examples, features, starts, ends


def test_windows_are_googles(windows):
    _, _, features, _, _ = windows
    google = _read("features.json")
    assert len(features) == len(google)
    for mine, theirs in zip(features, google, strict=True):
        assert (mine.example_index, mine.window_index) == (theirs["example_index"],
                                                           theirs["doc_span_index"])
        assert mine.input_ids.tolist() == theirs["input_ids"]
        in_context = [i for i, c in enumerate(mine.token_start_char) if c >= 0]
        assert in_context == sorted(int(k) for k in theirs["token_to_orig_map"])
        assert [i for i in in_context if mine.token_is_max_context[i]] == sorted(
            int(k) for k, v in theirs["token_is_max_context"].items() if v)


def _assert_same_files(folder, version: str) -> None:
    for name in ("predictions.json", "nbest_predictions.json", "null_odds.json"):
        path = os.path.join(folder, name)
        if version == "v1" and name == "null_odds.json":
            assert not os.path.exists(path)
            continue
        mine, theirs = json.load(open(path, encoding="utf-8")), _read(version, name)
        assert list(mine) == list(theirs), name  # question order kept
        for qid, expected in theirs.items():
            got = mine[qid]
            if name == "predictions.json":
                assert got == expected, (qid, got, expected)
            elif name == "null_odds.json":
                assert got == pytest.approx(expected, abs=1e-6), qid
            else:
                assert [e["text"] for e in got] == [e["text"] for e in expected], qid
                for g, e in zip(got, expected, strict=True):
                    assert list(g) == list(e) == list(qa_predictions.NBEST_KEYS)
                    for key in ("probability", "start_logit", "end_logit"):
                        assert g[key] == pytest.approx(e[key], abs=1e-6), (qid, key)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_decoding_and_files_match_googles_write_predictions(windows, version, tmp_path):
    settings, examples, features, starts, ends = windows
    negative = version == "v2"
    predictions, nbest, null_odds = qa_predictions.postprocess_predictions(
        examples, features, starts, ends, settings["n_best_size"], settings["max_answer_length"],
        negative, settings["null_score_diff_threshold"])
    written = qa_predictions.write_predictions(
        predictions, nbest, null_odds if negative else None,
        str(tmp_path / "predictions.json"), str(tmp_path / "nbest_predictions.json"),
        str(tmp_path / "null_odds.json"))
    assert len(written) == (3 if negative else 2)
    _assert_same_files(str(tmp_path), version)
    if negative:  # the golden set has a question the null answer wins
        assert "" in predictions.values()


def test_v1_question_without_a_valid_span_gets_googles_stand_in(windows):
    _, examples, features, starts, ends = windows
    rows = [i for i, f in enumerate(features) if f.example_index == 0]
    # No position may start an answer: Google's write_predictions answers "empty".
    blocked = [qa_data.QAFeature(**{**f.__dict__, "token_is_max_context":
                                    np.zeros_like(f.token_is_max_context)})
               for f in (features[i] for i in rows)]
    predictions, nbest, _ = qa_predictions.postprocess_predictions(
        examples[:1], blocked, starts[rows], ends[rows])
    qid = examples[0].qas_id
    assert predictions == {qid: "empty"}
    assert [(e["text"], e["probability"], e["start_logit"], e["end_logit"])
            for e in nbest[qid]] == [("empty", 1.0, 0.0, 0.0)]


def _tiny_v2_file(path) -> str:
    context = "新华社记者兰红光摄。江泽民发表新年讲话。"
    qas = [{"id": "a", "question": "谁发表讲话？", "is_impossible": False,
            "answers": [{"text": "江泽民", "answer_start": context.index("江泽民")}]},
           {"id": "b", "question": "谁摄影？", "is_impossible": False,
            "answers": [{"text": "兰红光", "answer_start": context.index("兰红光")}]},
           {"id": "c", "question": "哪一年？", "is_impossible": True, "answers": []}]
    payload = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": qas}]}]}
    path.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
    return str(path)


def _assert_google_format(out, qids) -> None:
    predictions = json.loads((out / "predictions.json").read_text("utf-8"))
    nbest = json.loads((out / "nbest_predictions.json").read_text("utf-8"))
    null_odds = json.loads((out / "null_odds.json").read_text("utf-8"))
    assert list(predictions) == list(nbest) == list(null_odds) == qids
    for qid in qids:
        entries = nbest[qid]
        assert all(list(e) == list(qa_predictions.NBEST_KEYS) for e in entries)
        assert "" in [e["text"] for e in entries]
        assert sum(e["probability"] for e in entries) == pytest.approx(1.0)
        scores = [e["start_logit"] + e["end_logit"] for e in entries]
        assert scores == sorted(scores, reverse=True)
        assert (predictions[qid] == "") == (null_odds[qid] > 0.0)


def test_run_squad_google_style_library(tmp_path, chinese_vocab_file):
    """What run_squad.py's Google-style command gives the library: train on train_file, predict
    predict_file (as test_file), no dev split."""
    from tfbert.config import BertConfig

    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").read().split("\n")) - 1
    config_file = tmp_path / "bert_config.json"
    BertConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
               intermediate_size=32, max_position_embeddings=64).to_json_file(str(config_file))
    data = _tiny_v2_file(tmp_path / "v2.json")
    out = tmp_path / "out"
    results = qa_task.run_qa(qa_task.QAConfig(
        output_dir=str(out), bert_config_file=str(config_file), vocab_file=chinese_vocab_file,
        train_file=data, test_file=data, do_eval=False, version_2_with_negative=True,
        max_seq_length=48, doc_stride=16, max_query_length=16, num_train_epochs=1,
        train_batch_size=4, verbose=0))
    assert results["predictions_split"] == "test" and "dev" not in results
    _assert_google_format(out, ["a", "b", "c"])


@pytest.mark.slow  # a process of its own (TensorFlow import, a tiny model trained): ~20 s
def test_run_squad_cli_with_googles_flags(tmp_path, chinese_vocab_file):
    from tfbert.config import BertConfig

    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").read().split("\n")) - 1
    config_file = tmp_path / "bert_config.json"
    BertConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
               intermediate_size=32, max_position_embeddings=64).to_json_file(str(config_file))
    data = _tiny_v2_file(tmp_path / "v2.json")
    out = tmp_path / "squad2"
    cmd = [sys.executable, os.path.join(ROOT, "run_squad.py"),
           f"--vocab_file={chinese_vocab_file}", f"--bert_config_file={config_file}",
           "--do_train=True", f"--train_file={data}", "--do_predict=True",
           f"--predict_file={data}", "--train_batch_size=4", "--learning_rate=3e-5",
           "--num_train_epochs=1.0", "--max_seq_length=48", "--doc_stride=16",
           "--max_query_length=16", f"--output_dir={out}", "--version_2_with_negative=True",
           "--null_score_diff_threshold=0.0", "--n_best_size=5", "--max_answer_length=10",
           "--predict_batch_size=8", "--use_tpu=False", "--save_checkpoints_steps=500",
           "--iterations_per_loop=1000", "--verbose_logging=False", "--verbose=0"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_google_format(out, ["a", "b", "c"])
    warnings = [line for line in done.stderr.splitlines() if "no effect in tfbert" in line]
    assert len(warnings) == 1 and "--save_checkpoints_steps=500" in warnings[0]
    assert "iterations_per_loop" not in warnings[0]  # given at its default
    results = json.loads((out / "results.json").read_text("utf-8"))
    assert "dev" not in results and results["test"]["total"] == 3
