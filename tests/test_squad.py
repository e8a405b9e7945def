"""Extractive QA: SQuAD reader, built-in QA set, windowed features, span decoding, run_qa."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from tfbert.data import squad as qa_data
from tfbert.data.splits import people_daily_line_splits
from tfbert.tasks import qa as qa_task
from tfbert.tasks import qa_predictions

CLS, SEP, PAD = 2, 3, 0


def _squad_file(tmp_path, qas, context="Denver Broncos beat the Carolina Panthers 24-10.",
                version="v1.1"):
    path = tmp_path / "data.json"
    payload = {"version": version, "data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": qas}]}]}
    path.write_text(json.dumps(payload), encoding="utf-8")
    return str(path)


# --- reader ------------------------------------------------------------------------------------


def test_reader_reads_v1_and_v2(tmp_path):
    path = _squad_file(tmp_path, [
        {"id": "q1", "question": "Who won?",
         "answers": [{"text": "Denver Broncos", "answer_start": 0},
                     {"text": "Broncos", "answer_start": 7}]},
        {"id": "q2", "question": "Who sang?", "answers": [], "is_impossible": True,
         "plausible_answers": [{"text": "Carolina", "answer_start": 24}]},
    ], version="v2.0")
    data = qa_data.read_squad_json(path)
    assert data.version == "v2.0" and data.problems == {}
    q1, q2 = data.examples
    assert q1.answer_char_span == (0, 14) and not q1.is_impossible
    assert q2.is_impossible and q2.answers == [] and q2.answer_char_span is None
    assert qa_data.gold_answers(data.examples) == {"q1": ["Denver Broncos", "Broncos"], "q2": []}


def test_reader_bad_answer_is_an_error_naming_the_question(tmp_path):
    path = _squad_file(tmp_path, [{"id": "q-bad", "question": "Who lost?",
                                   "answers": [{"text": "Carolina Panthers", "answer_start": 3}]}])
    with pytest.raises(ValueError, match=r"q-bad.*answer_start 3.*occurs at 24"):
        qa_data.read_squad_json(path, on_bad_answer="error")


def test_reader_bad_answers_are_counted_warnings(tmp_path, caplog):
    path = _squad_file(tmp_path, [
        {"id": "moved", "question": "Who lost?",
         "answers": [{"text": "Carolina Panthers", "answer_start": 3}]},
        {"id": "absent", "question": "Where?",
         "answers": [{"text": "Santa Clara", "answer_start": 0}]},
        {"id": "no-gold", "question": "When?", "answers": []},
    ])
    with caplog.at_level("WARNING"):
        data = qa_data.read_squad_json(path, on_bad_answer="warn")
    assert data.problems == {"repaired_answer": ["moved"], "unmatched_answer": ["absent"],
                             "missing_answers": ["no-gold"]}
    assert data.problem_counts() == {"repaired_answer": 1, "unmatched_answer": 1,
                                     "missing_answers": 1}
    moved, absent, no_gold = data.examples  # nothing dropped
    assert moved.answers[0]["answer_start"] == 24 and moved.trainable
    assert not absent.trainable and absent.answer_char_span is None
    assert not no_gold.has_gold
    assert "gold" not in qa_data.gold_answers(data.examples)
    assert re.search(r"1 question\(s\) with unmatched_answer.*absent", caplog.text)


def test_reader_rejects_malformed_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        qa_data.read_squad_json(str(tmp_path / "nope.json"))
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="'data' list"):
        qa_data.read_squad_json(str(tmp_path / "x.json"))
    path = _squad_file(tmp_path, [{"id": "a", "question": "?", "answers": []},
                                  {"id": "a", "question": "?", "answers": []}])
    with pytest.raises(ValueError, match="'a' appears twice"):
        qa_data.read_squad_json(path)


def test_write_then_read_round_trip(tmp_path):
    examples = qa_data.builtin_qa_examples("dev", version_2_with_negative=True)[:50]
    path = qa_data.write_squad_json(examples, str(tmp_path / "dev.json"))
    back = qa_data.read_squad_json(path, on_bad_answer="error")
    assert back.problems == {} and back.version == "v2.0"
    assert sorted(back.examples, key=lambda e: e.qas_id) == sorted(examples, key=lambda e: e.qas_id)


# --- built-in QA set ------------------------------------------------------------------------


def test_paragraph_entities_merges_names_and_compounds():
    text, entities = qa_data.paragraph_entities([
        ("江", "nr"), ("泽民", "nr"), ("李", "nr"), ("鹏", "nr"), ("在", "p"),
        ("[中央", "n"), ("人民", "n"), ("广播", "vn"), ("电台", "n]nt"), ("克林顿", "nr"),
        ("[中国", "ns"), ("银行", "n]nz"), ("北京", "ns")])
    assert text == "江泽民李鹏在中央人民广播电台克林顿中国银行北京"
    assert [(text[s:e], k) for s, e, k in entities] == [
        ("江泽民", "PER"), ("李鹏", "PER"), ("中央人民广播电台", "ORG"), ("克林顿", "PER"),
        ("中国", "LOC"), ("北京", "LOC")]


def test_cloze_question_replaces_the_entity_in_its_clause():
    paragraph = "１２月３１日，中共中央总书记、国家主席江泽民发表新年讲话。新华社记者兰红光摄。"
    start = paragraph.index("江泽民")
    assert qa_data.cloze_question(paragraph, start, start + 3, "PER") == \
        "中共中央总书记、国家主席谁发表新年讲话？"
    start = paragraph.index("新华社")  # short clause widened to the next one in the sentence
    assert qa_data.cloze_question(paragraph, start, start + 3, "ORG") == "哪个机构记者兰红光摄？"


def test_builtin_qa_is_deterministic_split_and_aligned():
    splits = {s: qa_data.builtin_qa_examples(s) for s in qa_data.BUILTIN_SPLITS}
    line_splits = people_daily_line_splits()
    sizes = {s: len(v) for s, v in splits.items()}
    assert sizes == {"train": 9005, "dev": 816, "test": 755}  # tfbert.data.splits' rule
    contexts = {s: {ex.context for ex in v} for s, v in splits.items()}
    assert not contexts["train"] & contexts["dev"] and not contexts["dev"] & contexts["test"]
    for split, examples in splits.items():
        for ex in examples:
            answer = ex.answers[0]
            assert ex.context[answer["answer_start"]:][:len(answer["text"])] == answer["text"]
            assert line_splits[int(ex.qas_id[2:])] == split
            assert any(w in ex.question for w in qa_data.WH_WORDS.values())
    first = splits["dev"][0]
    assert first == qa_data.builtin_qa_examples("dev")[0]  # same again


def test_builtin_qa_v2_has_unanswerable_questions():
    examples = qa_data.builtin_qa_examples("dev", version_2_with_negative=True)
    impossible = [ex for ex in examples if ex.is_impossible]
    assert 0.25 < len(impossible) / len(examples) < 0.42
    plain = {ex.qas_id: ex for ex in qa_data.builtin_qa_examples("dev")}
    for ex in impossible:
        assert ex.answers == [] and plain[ex.qas_id].answers[0]["text"] not in ex.context


# --- features ----------------------------------------------------------------------------------


def _char_tokens(context: str) -> qa_data.TokenizedExample:
    """One token per non-space character (ids 100 + position), like Chinese character pieces."""
    positions = [i for i, ch in enumerate(context) if not ch.isspace()]
    return qa_data.TokenizedExample([50, 51], [100 + i for i in positions], positions,
                                    [i + 1 for i in positions])


def test_window_spans_and_max_context():
    spans = qa_data.window_spans(10, 4, 2)
    assert spans == [(0, 4), (2, 4), (4, 4), (6, 4)]
    assert qa_data.window_spans(0, 4, 2) == [(0, 0)]
    assert qa_data.window_spans(3, 4, 2) == [(0, 3)]
    # token 4: window 1 (2..5) min(2, 1) + .04 beats window 2 (4..7) min(0, 3) + .04.
    assert qa_data.is_max_context(spans, 1, 4) and not qa_data.is_max_context(spans, 2, 4)
    # token 5: windows 1 (3, 0), 2 (1, 2): window 2 wins.
    assert qa_data.is_max_context(spans, 2, 5)
    # every token has exactly one max-context window
    for position in range(10):
        assert sum(qa_data.is_max_context(spans, i, position) for i in range(4)) == 1


def test_char_span_to_tokens():
    starts, ends = [0, 6, 11], [5, 10, 16]  # "Alpha beta Gamma"
    assert qa_data.char_span_to_tokens(starts, ends, 6, 16) == (1, 2)
    assert qa_data.char_span_to_tokens(starts, ends, 7, 9) == (1, 1)  # inside one token
    assert qa_data.char_span_to_tokens(starts, ends, 5, 6) is None  # only the space


def test_make_features_windows_labels_and_offsets():
    context = "ABCDEFGHIJ"
    ex = qa_data.QAExample("q", "?", context, [{"text": "FG", "answer_start": 5}])
    # T = 9: [CLS] q q [SEP] + 4 context tokens + [SEP]; stride 2 -> 4 windows.
    features, stats = qa_data.make_features([ex], [_char_tokens(context)], 9, 2, 2, CLS, SEP, PAD)
    assert stats["features"] == 4 and stats["answer_outside_window"] == 3
    f0, f1, f2, f3 = features
    assert f0.input_ids.tolist() == [CLS, 50, 51, SEP, 100, 101, 102, 103, SEP]
    assert f0.segment_ids.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert f1.token_start_char.tolist() == [-1, -1, -1, -1, 2, 3, 4, 5, -1]
    assert f1.token_end_char.tolist() == [-1, -1, -1, -1, 3, 4, 5, 6, -1]
    # "FG" = tokens 5, 6: only window 2 (4..7) holds both; window 1 (2..5) has F but not G.
    assert (f0.start_position, f1.start_position) == (0, 0)
    assert (f2.start_position, f2.end_position) == (5, 6)  # tokens 5, 6 at offset 4 - 4 + 4
    assert (f3.start_position, f3.end_position) == (0, 0)
    assert f2.token_is_max_context.tolist() == [False] * 4 + [False, True, True, False, False]


def test_make_features_counts_answers_without_tokens(caplog):
    context = "AB  CD"
    ex = qa_data.QAExample("blank", "?", context, [{"text": " ", "answer_start": 2}])
    with caplog.at_level("WARNING"):
        features, stats = qa_data.make_features([ex], [_char_tokens(context)], 16, 4, 2, CLS,
                                                SEP, PAD)
    assert stats["answers_without_tokens"] == 1 and "blank" in caplog.text
    assert (features[0].start_position, features[0].end_position) == (0, 0)


def test_make_features_truncates_questions_and_pads():
    ex = qa_data.QAExample("q", "?", "AB", [{"text": "B", "answer_start": 1}])
    tok = qa_data.TokenizedExample(list(range(60, 70)), [100, 101], [0, 1], [1, 2])
    (f,), stats = qa_data.make_features([ex], [tok], 12, 4, 3, CLS, SEP, PAD)
    assert stats["truncated_questions"] == 1
    assert f.input_ids.tolist() == [CLS, 60, 61, 62, SEP, 100, 101, SEP, PAD, PAD, PAD, PAD]
    assert f.input_mask.tolist() == [1] * 8 + [0] * 4
    assert (f.start_position, f.end_position) == (6, 6)
    with pytest.raises(ValueError, match="max_seq_length 8 leaves no room"):
        qa_data.make_features([ex], [tok], 8, 4, 5, CLS, SEP, PAD)


# --- span decoding ---------------------------------------------------------------------------


def _logits(feature: qa_data.QAFeature, start: dict[int, float], end: dict[int, float]):
    s = np.full(len(feature.input_ids), -10.0)
    e = np.full(len(feature.input_ids), -10.0)
    for k, v in start.items():
        s[k] = v
    for k, v in end.items():
        e[k] = v
    return s, e


def test_decoding_picks_the_best_span_across_windows_and_cuts_the_original_text():
    context = "Alpha beta Gamma delta Epsilon zeta"
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", context)]
    tok = qa_data.TokenizedExample([50], [100 + i for i in range(6)], [s for s, _ in words],
                                   [e for _, e in words])
    ex = qa_data.QAExample("q", "?", context, [{"text": "delta Epsilon", "answer_start": 17}])
    # T = 7: [CLS] q [SEP] + 3 words + [SEP]; stride 2 -> windows of words 0-2, 2-4, 4-5.
    features, _ = qa_data.make_features([ex], [tok], 7, 2, 1, CLS, SEP, PAD)
    assert [(f.window_index, int(f.token_start_char[3])) for f in features] == [
        (0, 0), (1, 11), (2, 23)]
    assert (features[1].start_position, features[1].end_position) == (4, 5)
    # Window 2 scores "Epsilon zeta" highest, but Epsilon (word 4) has its maximal context in
    # window 1, so window 2 may not start an answer there. Window 1 holds "delta Epsilon" across
    # the boundary of windows 0 and 2; window 0 offers "Gamma", window 2 "zeta".
    w0 = _logits(features[0], {5: 2.0}, {5: 2.5})
    w1 = _logits(features[1], {4: 4.0}, {5: 3.0, 4: 1.0})
    w2 = _logits(features[2], {3: 9.0, 4: -5.0}, {4: 9.0})  # "zeta" 4.0: 4th
    starts, ends = np.stack([w0[0], w1[0], w2[0]]), np.stack([w0[1], w1[1], w2[1]])
    predictions, nbest, null_odds = qa_predictions.postprocess_predictions(
        [ex], features, starts, ends, n_best_size=3, max_answer_length=5)
    assert predictions == {"q": "delta Epsilon"}
    assert [c["text"] for c in nbest["q"]] == ["delta Epsilon", "delta", "Gamma"]
    assert [c["start_logit"] + c["end_logit"] for c in nbest["q"]] == [7.0, 5.0, 4.5]
    assert sum(c["probability"] for c in nbest["q"]) == pytest.approx(1.0)
    assert (nbest["q"][0]["start_char"], nbest["q"][0]["end_char"]) == (17, 30)
    assert null_odds == {}
    # max_answer_length 1 rules out the two-word span.
    predictions, _, _ = qa_predictions.postprocess_predictions([ex], features, starts, ends,
                                                     n_best_size=3, max_answer_length=1)
    assert predictions == {"q": "delta"}


def test_decoding_v2_null_answer_threshold():
    context = "ABCDEF"
    ex = qa_data.QAExample("q", "?", context, [], is_impossible=True)
    features, _ = qa_data.make_features([ex], [_char_tokens(context)], 9, 2, 2, CLS, SEP, PAD)
    assert len(features) == 2  # windows (0..3), (2..5)
    w0 = _logits(features[0], {0: 3.0, 4: 2.0}, {0: 3.0, 5: 2.0})  # null 6, "AB" 4
    w1 = _logits(features[1], {0: 1.0}, {0: 1.5})  # null 2.5 (the minimum)
    starts, ends = np.stack([w0[0], w1[0]]), np.stack([w0[1], w1[1]])
    predictions, nbest, null_odds = qa_predictions.postprocess_predictions(
        [ex], features, starts, ends, version_2_with_negative=True)
    assert null_odds["q"] == pytest.approx(2.5 - 4.0)
    assert predictions == {"q": "AB"}  # -1.5 is not above threshold 0
    assert "" in [c["text"] for c in nbest["q"]]
    predictions, _, _ = qa_predictions.postprocess_predictions(
        [ex], features, starts, ends, version_2_with_negative=True,
        null_score_diff_threshold=-2.0)
    assert predictions == {"q": ""}


def test_decoding_checks_shapes():
    ex = qa_data.QAExample("q", "?", "AB", [])
    features, _ = qa_data.make_features([ex], [_char_tokens("AB")], 8, 2, 2, CLS, SEP, PAD)
    with pytest.raises(ValueError, match="1 features but 2 start"):
        qa_predictions.postprocess_predictions([ex], features, np.zeros((2, 8)),
                                               np.zeros((2, 8)))


# --- run_qa end to end -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_bert_config(tmp_path_factory, chinese_vocab_file) -> str:
    from tfbert.config import BertConfig

    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").read().split("\n")) - 1
    path = tmp_path_factory.mktemp("tiny") / "bert_config.json"
    BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
               intermediate_size=64, max_position_embeddings=64).to_json_file(str(path))
    return str(path)


def _tiny_run(output_dir, config_file, vocab_file, **overrides):
    values = dict(output_dir=str(output_dir), bert_config_file=config_file,
                  vocab_file=vocab_file, max_seq_length=64, doc_stride=24, max_query_length=24,
                  max_train_examples=64, max_eval_examples=24, num_train_epochs=1,
                  train_batch_size=16, eval_batch_size=32, learning_rate=1e-3, verbose=0)
    values.update(overrides)
    return qa_task.QAConfig(**values)


@pytest.mark.slow  # 16 s alone, up to 2 minutes late in the full suite; the fast end-to-end
# library run is tests/test_google_squad.py::test_run_squad_google_style_library
def test_run_squad_builtin_end_to_end_and_reload(tmp_path, tiny_bert_config, chinese_vocab_file):
    out = tmp_path / "qa"
    results = qa_task.run_qa(_tiny_run(out, tiny_bert_config, chinese_vocab_file))
    for split in ("dev", "test"):
        assert results[split]["scoring"] == "cmrc2018" and results[split]["total"] == 24
        assert 0.0 <= results[split]["exact_match"] <= results[split]["f1"] <= 100.0
    assert results["data"]["train"]["examples"] == 64
    assert results["data"]["dev"]["features"] > 24  # long paragraphs give several windows
    # Length buckets (on by default): one batch of 16 or fewer per bucket.
    from tfbert.data import length_buckets
    from tfbert.text.tokenizer import BertTokenizer

    train = qa_task.load_data(_tiny_run(out, tiny_bert_config, chinese_vocab_file),
                              str(tmp_path / "data"))["train"].examples
    features, _ = qa_data.convert_examples([ex for ex in train if ex.trainable],
                                           BertTokenizer(chinese_vocab_file), 64, 24, 24)
    assert len(features) == results["data"]["train"]["features"]
    assert results["train"]["num_train_steps"] == length_buckets.num_batches(
        [f.input_mask.sum() for f in features], 64, 16) >= math.ceil(len(features) / 16)
    saved = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert saved["test"]["f1"] == pytest.approx(results["test"]["f1"])

    predictions = json.loads((out / "predictions.json").read_text(encoding="utf-8"))
    test = qa_data.read_squad_json(str(out / "data" / "test.json")).examples[:24]
    assert list(predictions) == [ex.qas_id for ex in test]
    # Answers are cut from the original context; a question whose windows hold no valid span
    # gets Google's stand-in "empty" (the tiny model is barely trained).
    spans = [ex for ex in test if predictions[ex.qas_id] != qa_predictions.NO_SPAN_TEXT]
    assert len(spans) >= 20
    for ex in spans:
        assert predictions[ex.qas_id] in ex.context
    nbest = json.loads((out / "test_nbest_predictions.json").read_text(encoding="utf-8"))
    first = nbest[spans[0].qas_id][0]  # Google's n-best format
    assert list(first) == ["text", "probability", "start_logit", "end_logit"]
    assert first["text"] == predictions[spans[0].qas_id] and first["text"] in spans[0].context
    assert (out / "nbest_predictions.json").read_text("utf-8") == (
        out / "test_nbest_predictions.json").read_text("utf-8")
    # The metrics in results.json are the official ones on predictions.json.
    from tfbert.evaluation.squad import evaluate

    assert evaluate(qa_data.gold_answers(test), predictions)["f1"] == pytest.approx(
        results["test"]["f1"])

    from tfbert import checkpoints

    metadata = checkpoints.read_metadata(str(out / "model"))
    assert {k: metadata[k] for k in ("task", "max_seq_length", "max_query_length", "doc_stride",
                                     "max_answer_length", "version_2_with_negative")} == {
        "task": "qa", "max_seq_length": 64, "max_query_length": 24, "doc_stride": 24,
        "max_answer_length": 30, "version_2_with_negative": False}
    # Eval/predict only, from the saved model: the same predictions.
    again = qa_task.run_qa(_tiny_run(tmp_path / "again", None, None, do_train=False,
                                     init_checkpoint=str(out / "model")))
    assert again["test"] == results["test"]
    assert json.loads((tmp_path / "again" / "predictions.json").read_text("utf-8")) == predictions


@pytest.mark.slow  # (the library run is tested fast; this adds the script's flags)
def test_run_squad_cli_v2(tmp_path, tiny_bert_config, chinese_vocab_file):
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = tmp_path / "qa_v2"
    cmd = [sys.executable, os.path.join(root, "run_squad.py"), f"--output_dir={out}",
           f"--bert_config_file={tiny_bert_config}", f"--vocab_file={chinese_vocab_file}",
           "--version_2_with_negative", "--max_seq_length=64", "--doc_stride=32",
           "--max_query_length=24", "--max_train_examples=16", "--max_eval_examples=12",
           "--num_train_epochs=1", "--train_batch_size=16", "--learning_rate=1e-3",
           "--nodo_predict"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    dev = results["dev"]
    assert dev["total"] == 12 and dev["HasAns_total"] + dev["NoAns_total"] == 12
    assert {"best_f1", "best_f1_threshold", "exact_match", "f1"} <= set(dev)
    assert "test" not in results and results["predictions_split"] == "dev"
    null_odds = json.loads((out / "dev_null_odds.json").read_text(encoding="utf-8"))
    predictions = json.loads((out / "predictions.json").read_text(encoding="utf-8"))
    assert set(null_odds) == set(predictions) and len(predictions) == 12
    # No threshold flag and a dev set with answers: the threshold is tuned on dev, and "" is
    # answered exactly where the null odds pass it.
    threshold = results["null_score_diff_threshold"]
    assert threshold["source"] == "tuned_on_dev"
    for qid, odds in null_odds.items():
        assert (predictions[qid] == "") == (odds > threshold["value"])


def test_run_squad_bad_answer_error_names_the_question(tmp_path, tiny_bert_config,
                                                      chinese_vocab_file):
    path = _squad_file(tmp_path, [{"id": "bad-1", "question": "谁？",
                                   "answers": [{"text": "江泽民", "answer_start": 0}]}],
                       context="新华社记者兰红光摄")
    config = _tiny_run(tmp_path / "out", tiny_bert_config, chinese_vocab_file, train_file=path,
                       dev_file=path, do_predict=False, on_bad_answer="error")
    with pytest.raises(ValueError, match="bad-1.*does not occur in the context"):
        qa_task.run_qa(config)


def test_run_squad_v2_data_needs_the_v2_flag(tmp_path, tiny_bert_config, chinese_vocab_file):
    path = _squad_file(tmp_path, [{"id": "no-answer", "question": "谁？", "answers": [],
                                   "is_impossible": True}], context="新华社记者兰红光摄")
    config = _tiny_run(tmp_path / "out", tiny_bert_config, chinese_vocab_file, train_file=path,
                       dev_file=path, do_predict=False)
    with pytest.raises(ValueError, match="'no-answer'.*needs version_2_with_negative"):
        qa_task.run_qa(config)


def test_squad_config_validates():
    with pytest.raises(ValueError, match="max_seq_length \\(64\\) must be greater"):
        qa_task.QAConfig(output_dir="x", max_seq_length=64, max_query_length=61)
    with pytest.raises(ValueError, match="on_bad_answer"):
        qa_task.QAConfig(output_dir="x", on_bad_answer="ignore")
