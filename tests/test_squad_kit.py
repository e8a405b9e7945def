"""Extractive QA kit: the SQuAD v2.0 null threshold tuned on dev (against evaluate-v2.0.py's
search), stored with the model and used by predict-only runs and the export; CMRC 2018's two
layouts and character offsets through features, decoding and the exported SavedModel."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

from tfbert.data import squad as qa_data
from tfbert.evaluation import squad as metrics
from tfbert.tasks import qa as qa_task
from tfbert.tasks import qa_predictions

CMRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "cmrc2018")


# --- the threshold search --------------------------------------------------------------------


def official_find_best_thresh(preds, scores, na_probs, qid_to_has_ans):
    """evaluate-v2.0.py's find_best_thresh, written out as it reads there."""
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score = num_no_ans
    best_score = cur_score
    best_thresh = 0.0
    qid_list = sorted(na_probs, key=lambda k: na_probs[k])
    for qid in qid_list:
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        elif preds[qid]:
            diff = -1
        else:
            diff = 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def _hand_made(n: int, seed: int, tie_every: int = 0):
    """n questions: gold, best non-null answers (right, half right or wrong), null odds (lower
    for answerable questions; distinct unless tie_every)."""
    rng = random.Random(seed)
    words = ["red", "car", "blue", "bus", "old", "town", "hall", "river"]
    gold, answers, odds = {}, {}, {}
    for i in range(n):
        qid = f"q{i}"
        answerable = rng.random() < 0.6
        truth = rng.sample(words, 2)
        gold[qid] = [" ".join(truth)] if answerable else []
        answers[qid] = rng.choice([" ".join(truth), truth[0], " ".join(rng.sample(words, 2)),
                                   " ".join(truth)])
        odds[qid] = round(rng.uniform(-6, 2) if answerable else rng.uniform(-2, 4), 6)
        if tie_every and i % tie_every == 1:
            odds[qid] = odds[f"q{i - 1}"]
    return gold, answers, odds


def _official_on(gold, answers, odds):
    has_answer = {q: bool(g) for q, g in gold.items()}
    f1 = {q: max(metrics.squad_f1(g, answers[q]) for g in (gold[q] or [""])) for q in gold}
    return official_find_best_thresh(answers, f1, odds, has_answer)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_best_null_threshold_is_evaluate_v2s_search_and_reproduces_its_f1(seed):
    gold, answers, odds = _hand_made(120, seed)
    best, expected_threshold = _official_on(gold, answers, odds)
    threshold, f1 = metrics.best_null_threshold(gold, answers, odds, scoring="squad")
    assert (threshold, f1) == (expected_threshold, pytest.approx(best, abs=1e-9))
    assert threshold != 0.0  # a real search result, not the loop's starting value
    # Applied as Google's run_squad.py applies it, the threshold scores exactly that F1.
    predictions = metrics.apply_null_threshold(answers, odds, threshold)
    assert predictions != answers and "" in predictions.values()
    assert metrics.squad_v2_scores(gold, predictions)["f1"] == pytest.approx(f1, abs=1e-9)
    # ... and no other cut does better.
    for cut in sorted(set(odds.values())) + [min(odds.values()) - 1.0]:
        cut_f1 = metrics.squad_v2_scores(gold, metrics.apply_null_threshold(
            answers, odds, cut))["f1"]
        assert cut_f1 <= f1 + 1e-9


def test_best_null_threshold_with_equal_odds_and_when_nothing_should_be_answered():
    # Equal odds: the official loop can stop inside a group, which no threshold reproduces.
    gold = {"a": [], "b": ["x"], "b2": ["w"], "c": []}
    answers = {"a": "y", "b": "x", "b2": "w", "c": "z"}
    odds = {"b": 1.0, "a": 1.0, "b2": 1.5, "c": 2.0}
    assert _official_on(gold, answers, odds) == (75.0, 1.0)  # b switched on, a not yet
    assert metrics.squad_v2_scores(gold, metrics.apply_null_threshold(
        answers, odds, 1.0))["f1"] == 50.0  # applied, 1.0 switches a on too
    threshold, f1 = metrics.best_null_threshold(gold, answers, odds, scoring="squad")
    assert (threshold, f1) == (1.5, 75.0)
    assert metrics.squad_v2_scores(gold, metrics.apply_null_threshold(
        answers, odds, 1.5))["f1"] == 75.0
    # Ties everywhere in a larger set: the score still comes back when applied.
    gold, answers, odds = _hand_made(200, 5, tie_every=2)
    threshold, f1 = metrics.best_null_threshold(gold, answers, odds, scoring="squad")
    assert metrics.squad_v2_scores(gold, metrics.apply_null_threshold(
        answers, odds, threshold))["f1"] == pytest.approx(f1, abs=1e-9)
    # Every question unanswerable: the threshold sits below all odds (the loop says 0.0).
    gold = {"a": [], "b": []}
    answers, odds = {"a": "x", "b": "y"}, {"a": -1.0, "b": 3.0}
    assert _official_on(gold, answers, odds) == (100.0, 0.0)
    threshold, f1 = metrics.best_null_threshold(gold, answers, odds)
    assert threshold < -1.0 and f1 == 100.0
    assert set(metrics.apply_null_threshold(answers, odds, threshold).values()) == {""}


def test_best_null_threshold_cmrc_scoring_and_checks():
    gold = {"a": ["北京天安门"], "b": []}
    threshold, f1 = metrics.best_null_threshold(gold, {"a": "北京", "b": "上海"},
                                                {"a": -0.5, "b": 0.25})
    assert threshold == -0.5 and f1 == pytest.approx(100 * (4 / 7 + 1) / 2)  # CMRC: characters
    with pytest.raises(ValueError, match="no null odds.*'b'"):
        metrics.best_null_threshold(gold, {"a": "北京", "b": "上海"}, {"a": 0.0})


def test_threshold_source_order():
    def source(metadata=None, dev=True, **config):
        return qa_task.null_threshold_source(
            qa_task.QAConfig(output_dir="x", **config), metadata, dev)

    assert source(null_score_diff_threshold=0.0, metadata={"null_score_diff_threshold": -2.0}) \
        == (0.0, "flag")  # given explicitly, 0.0 included, it wins
    assert source({"null_score_diff_threshold": -2.0}) == (-2.0, "model")
    assert source({}) == (None, "tuned_on_dev")
    assert source({}, dev=False) == (0.0, "default")
    with pytest.raises(ValueError, match="finite"):
        qa_task.QAConfig(output_dir="x", null_score_diff_threshold=float("inf"))


# --- CMRC 2018 ---------------------------------------------------------------------------------


def test_cmrc_squad_layout_reads_with_character_offsets():
    data = qa_data.read_squad_json(os.path.join(CMRC, "dev_squad_layout.json"))
    assert len(data.examples) == 9
    assert data.problems == {"repaired_answer": ["DEV_2_QUERY_3"]}  # answer_start 1 off
    for ex in data.examples:
        for answer in ex.answers:  # answer_start counts characters, not UTF-8 bytes
            start = answer["answer_start"]
            assert ex.context[start:start + len(answer["text"])] == answer["text"]
    by_id = {ex.qas_id: ex for ex in data.examples}
    assert by_id["DEV_2_QUERY_0"].answer_char_span == (6, 24)  # after "ＡＢＣ大学（" (18 bytes)
    gold = qa_data.gold_answers(data.examples)
    assert gold["DEV_2_QUERY_2"] == ["求是 创新", "「求是 创新」"]
    assert metrics.evaluate(gold, {q: a[0] for q, a in gold.items()}) == {
        "exact_match": 100.0, "f1": 100.0, "total": 9, "missing": 0, "scoring": "cmrc2018"}


def test_cmrc_first_layout_reads_texts_into_offsets(tmp_path):
    data = qa_data.read_squad_json(os.path.join(CMRC, "trial_first_layout.json"))
    assert [ex.qas_id for ex in data.examples] == [
        "TRIAL_1_QUERY_0", "TRIAL_1_QUERY_1", "TRIAL_3_QUERY_0", "TRIAL_3_QUERY_1"]
    assert data.problems == {"located_answer": [ex.qas_id for ex in data.examples],
                             "unmatched_answer": ["TRIAL_3_QUERY_1"]}
    first = data.examples[0]
    assert first.title == "星河铁路" and first.question == "星河铁路全长多少公里？"
    assert first.answers == [{"text": "128.5 公里", "answer_start": 27},
                             {"text": "全长 128.5 公里", "answer_start": 24}]
    unmatched = data.examples[3]  # its first answer is not in the context: scored, not trained
    assert not unmatched.trainable and unmatched.answers[1]["answer_start"] == 55
    with pytest.raises(ValueError, match="TRIAL_3_QUERY_1.*上千名游客.*does not occur"):
        qa_data.read_squad_json(os.path.join(CMRC, "trial_first_layout.json"),
                                on_bad_answer="error")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"context_text": "x", "qas": [{"query_id": "q", "query_text": "?",
                                                             "answers": [{"text": "x"}]}]}]))
    with pytest.raises(ValueError, match="answers are texts"):
        qa_data.read_squad_json(str(bad))


def test_cmrc_character_offsets_survive_features_and_decoding(chinese_vocab_file):
    import tfbert

    data = qa_data.read_squad_json(os.path.join(CMRC, "dev_squad_layout.json"))
    tokenizer = tfbert.BertTokenizer(chinese_vocab_file, lower_case=True)
    # Short windows: every context is read in several, so answers sit at window offsets.
    features, stats = qa_data.convert_examples(data.examples, tokenizer, max_seq_length=48,
                                               doc_stride=12, max_query_length=16)
    assert stats["features"] > 2 * len(data.examples)
    labelled = {}
    for f in features:
        if f.start_position:
            labelled.setdefault(f.example_index, f)
    assert sorted(labelled) == list(range(len(data.examples)))  # every answer in some window
    for i, f in labelled.items():
        ex = data.examples[i]
        text = ex.context[f.token_start_char[f.start_position]:f.token_end_char[f.end_position]]
        assert text == ex.answers[0]["text"], ex.qas_id  # spaces, full-width, latin kept
    # Decoding cuts the same characters out of the original context: logits that point at the
    # gold span of each labelled window give back the gold text and its character span.
    starts = np.full((len(features), 48), -5.0)
    ends = np.full((len(features), 48), -5.0)
    for row, f in enumerate(features):
        if f.start_position:
            starts[row, f.start_position] = ends[row, f.end_position] = 5.0
    predictions, nbest, _ = qa_predictions.postprocess_predictions(
        data.examples, features, starts, ends, n_best_size=5, max_answer_length=20)
    for ex in data.examples:
        best = nbest[ex.qas_id][0]
        assert predictions[ex.qas_id] == ex.answers[0]["text"]
        assert best["start_char"] == ex.answers[0]["answer_start"]
        assert best["end_char"] == best["start_char"] + len(ex.answers[0]["text"])


# --- the export: stored threshold, windows, Chinese character offsets ---------------------------

SEQ, QUERY, STRIDE, ANSWER = 40, 12, 8, 6  # contexts of 50-80 characters: 3-9 windows each


@pytest.fixture(scope="module")
def qa_export(tmp_path_factory, chinese_vocab_file):
    """A tiny random-init v2.0 span labeler saved with a null threshold in tfbert.json, opened
    for export, and the Keras side's decoding over all windows of CMRC-layout questions, People's
    Daily paragraphs, an empty context and an empty question."""
    import dataclasses

    import keras

    import tfbert
    from tfbert.data import corpora
    from tfbert.export import load_for_export
    from tfbert.export.saved_model import BertServingModule

    keras.utils.set_random_seed(3)
    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").readlines())
    config = tfbert.BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=64, initializer_range=0.2)
    model = tfbert.BertSpanLabeler(tfbert.BertEncoder(config))
    examples = qa_data.read_squad_json(os.path.join(CMRC, "dev_squad_layout.json")).examples
    examples += [qa_data.QAExample(f"pd{i}", "谁在讲话？", line, [])
                 for i, line in enumerate(corpora.people_daily_lines()[:3])]
    examples += [qa_data.QAExample("no-context", "谁？", "", []),
                 qa_data.QAExample("no-question", "", "新华社记者 兰红光 摄。", [])]
    tokenizer = tfbert.BertTokenizer(chinese_vocab_file, lower_case=True)
    features, _ = qa_data.convert_examples(examples, tokenizer, SEQ, STRIDE, QUERY)
    inputs = {k: np.stack([getattr(f, k) for f in features])
              for k in ("input_ids", "input_mask", "segment_ids")}
    out = model(inputs, training=False)
    logits = out["start_logits"].numpy(), out["end_logits"].numpy()
    answers, nbest, odds = qa_predictions.postprocess_predictions(
        examples, features, *logits, 20, ANSWER, True, float("inf"))
    finite = sorted(v for v in odds.values() if v < 1e6)  # between the two largest: one ""
    threshold = (finite[-1] + finite[-2]) / 2
    model_dir = str(tmp_path_factory.mktemp("qa_export") / "model")
    tfbert.save_pretrained(model, model_dir, vocab_file=chinese_vocab_file, metadata={
        "task": "qa", "max_seq_length": SEQ, "max_query_length": QUERY, "doc_stride": STRIDE,
        "max_answer_length": ANSWER, "version_2_with_negative": True, "lower_case": True,
        "null_score_diff_threshold": threshold})
    loaded, vocab, spec, _ = load_for_export(model_dir)
    windowed = dataclasses.replace(spec, doc_stride=STRIDE)
    return dict(module=BertServingModule(loaded, vocab, windowed), model=loaded, vocab=vocab,
                spec=spec, examples=examples, features=features, logits=logits,
                answers=answers, nbest=nbest, odds=odds, threshold=threshold)


def test_export_spec_reads_the_stored_threshold(qa_export):
    spec = qa_export["spec"]
    assert spec.version_2_with_negative and spec.null_score_diff_threshold == qa_export[
        "threshold"]
    assert (spec.max_query_length, spec.max_answer_length) == (QUERY, ANSWER)


def test_export_ids_signature_applies_the_stored_threshold(qa_export):
    """serve_ids scores each window it is given alone: Keras' decoding of that one window
    (every context piece may start an answer), "" where null - best > the stored threshold."""
    import dataclasses

    import tensorflow as tf

    module, threshold = qa_export["module"], qa_export["threshold"]
    first = {}
    for row, f in enumerate(qa_export["features"]):
        first.setdefault(f.example_index, row)
    rows = list(first.values())
    inputs = {k: tf.constant(np.stack([getattr(qa_export["features"][r], k) for r in rows]))
              for k in ("input_ids", "input_mask", "segment_ids")}
    got = {k: v.numpy() for k, v in module._serve_ids(inputs).items()}  # eagerly
    nulled = 0
    for i, r in enumerate(rows):
        f = qa_export["features"][r]
        f = dataclasses.replace(f, token_is_max_context=f.token_start_char >= 0)
        nbest, null = qa_predictions.decode_example(
            qa_export["examples"][f.example_index], [f], [qa_export["logits"][0][r]],
            [qa_export["logits"][1][r]], 20, ANSWER, True)
        best = next((c for c in nbest if c.text), None)
        if best is None or null - best.score > threshold:
            nulled += 1
            assert (got["answer_token_start"][i], got["answer_token_end"][i]) == (-1, -1)
            assert got["score"][i] == pytest.approx(null, abs=1e-4)
            continue
        span = (f.token_start_char[got["answer_token_start"][i]],
                f.token_end_char[got["answer_token_end"][i]])
        assert span == (best.start_char, best.end_char)
        assert got["score"][i] == pytest.approx(best.score, abs=1e-4)
    assert 0 < nulled < len(rows)


def _expected(qa_export):
    """(text, start, end, score) per example: Keras' postprocess at the stored threshold."""
    threshold, rows = qa_export["threshold"], []
    for ex in qa_export["examples"]:
        entries = qa_export["nbest"][ex.qas_id]
        best = next((e for e in entries if e["text"]), None)
        null = next(e for e in entries if not e["text"])
        if best is None or qa_export["odds"][ex.qas_id] > threshold:
            rows.append(("", -1, -1, null["start_logit"] + null["end_logit"]))
        else:
            rows.append((best["text"], best["start_char"], best["end_char"],
                         best["start_logit"] + best["end_logit"]))
    return rows


def _check_text_outputs(got, qa_export):
    texts = [t.decode("utf-8") for t in np.asarray(got["answer_text"])]
    expected = _expected(qa_export)
    for i, ex in enumerate(qa_export["examples"]):
        text, start, end, score = expected[i]
        assert (texts[i], int(got["answer_start"][i]), int(got["answer_end"][i])) == (
            text, start, end), ex.qas_id
        assert float(got["score"][i]) == pytest.approx(score, abs=1e-4), ex.qas_id
        if text:
            assert ex.context[start:end] == text  # characters of text_b, not bytes
    return texts, expected


def test_export_windows_long_contexts_like_training(qa_export):
    """The text signature (run eagerly here; traced in the slow test below) reads each context
    in windows: the same answers, character spans and scores as training's postprocess over
    all windows, with Chinese text, spaces, full-width punctuation and latin words."""
    import tensorflow as tf

    examples = qa_export["examples"]
    got = qa_export["module"]._serve_text(tf.constant([ex.question for ex in examples]),
                                          tf.constant([ex.context for ex in examples]))
    texts, expected = _check_text_outputs(got, qa_export)
    assert sum(t == "" for t in texts) == 2  # the one past the threshold, the empty context
    first_window_end = {}
    for f in qa_export["features"]:
        first_window_end.setdefault(f.example_index, f.token_end_char.max())
    later = [i for i, (_, start, _, _) in enumerate(expected) if start >= first_window_end[i]]
    assert len(later) >= 3  # answers read from a window after the first one
    starts = [start for _, start, _, _ in expected]
    assert any(start > 0 and len(ex.context[:start].encode()) > start  # characters, not bytes
               for start, ex in zip(starts, examples, strict=True))
    assert (got["start_logits"].shape, got["answer_token_start"].shape) == (
        (len(examples), SEQ), (len(examples),))


@pytest.mark.slow  # saves and reloads a SavedModel and traces its text signature
def test_exported_saved_model_windows_like_training(qa_export, tmp_path):
    import tensorflow as tf

    from tfbert.export.saved_model import export_saved_model

    _, version_dir = export_saved_model(qa_export["model"], str(tmp_path / "qa" / "1"),
                                        qa_export["vocab"], qa_export["module"]._spec)
    serve = tf.saved_model.load(version_dir).signatures["serving_default"]
    examples = qa_export["examples"]
    got = {k: v.numpy() for k, v in serve(
        text=tf.constant([ex.question for ex in examples]),
        text_b=tf.constant([ex.context for ex in examples])).items()}
    _check_text_outputs(got, qa_export)


# --- run_qa: tuned on dev, stored, reused --------------------------------------------------------


@pytest.mark.slow  # three tiny runs (train, predict, predict); the parts are tested above
def test_run_squad_v2_tunes_stores_and_reuses_the_threshold(tmp_path, chinese_vocab_file):
    from tfbert import checkpoints
    from tfbert.config import BertConfig
    from tfbert.export import load_for_export

    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").read().split("\n")) - 1
    config_file = tmp_path / "bert_config.json"
    BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
               intermediate_size=64, max_position_embeddings=64).to_json_file(str(config_file))
    common = dict(max_seq_length=64, doc_stride=32, max_query_length=24, max_eval_examples=24,
                  eval_batch_size=64, version_2_with_negative=True, do_predict=False, verbose=0)
    out = tmp_path / "qa"
    results = qa_task.run_qa(qa_task.QAConfig(
        output_dir=str(out), bert_config_file=str(config_file), vocab_file=chinese_vocab_file,
        max_train_examples=32, num_train_epochs=1, train_batch_size=16, learning_rate=1e-3,
        **common))
    chosen = results["null_score_diff_threshold"]
    assert chosen["source"] == "tuned_on_dev"
    threshold = chosen["value"]
    # Re-made from the written files: the search on the best non-null answers gives this
    # threshold, and dev's predictions, made with it, score exactly its F1.
    dev = qa_data.read_squad_json(str(out / "data" / "dev.json")).examples[:24]
    gold = qa_data.gold_answers(dev)
    nbest = json.loads((out / "dev_nbest_predictions.json").read_text("utf-8"))
    odds = json.loads((out / "dev_null_odds.json").read_text("utf-8"))
    answers = {q: next((e["text"] for e in entries if e["text"]), "")
               for q, entries in nbest.items()}
    expected, best_f1 = metrics.best_null_threshold(gold, answers, odds)
    assert threshold == pytest.approx(expected, abs=1e-9)
    predictions = json.loads((out / "dev_predictions.json").read_text("utf-8"))
    assert predictions == metrics.apply_null_threshold(answers, odds, threshold)
    assert metrics.evaluate(gold, predictions, True)["f1"] == pytest.approx(best_f1, abs=1e-9)
    assert results["dev"]["f1"] == pytest.approx(best_f1, abs=1e-9)
    assert results["dev"]["null_score_diff_threshold"] == threshold
    at_zero = metrics.evaluate(gold, metrics.apply_null_threshold(answers, odds, 0.0), True)
    assert results["dev_at_threshold_0"]["f1"] == pytest.approx(at_zero["f1"])
    assert results["dev"]["f1"] >= results["dev_at_threshold_0"]["f1"]
    # Stored with the model; the export and a predict-only run use it.
    metadata = checkpoints.read_metadata(str(out / "model"))
    assert metadata["null_score_diff_threshold"] == threshold
    assert metadata["null_score_diff_threshold_source"] == "tuned_on_dev"
    assert load_for_export(str(out / "model"))[2].null_score_diff_threshold == threshold
    again = qa_task.run_qa(qa_task.QAConfig(
        output_dir=str(tmp_path / "again"), do_train=False, init_checkpoint=str(out / "model"),
        **common))
    assert again["null_score_diff_threshold"] == {"value": threshold, "source": "model"}
    assert again["dev"] == results["dev"]
    # An explicit threshold wins, 0.0 included (google-research/bert's command lines).
    flag = qa_task.run_qa(qa_task.QAConfig(
        output_dir=str(tmp_path / "flag"), do_train=False, init_checkpoint=str(out / "model"),
        null_score_diff_threshold=0.0, **common))
    assert flag["null_score_diff_threshold"] == {"value": 0.0, "source": "flag"}
    assert flag["dev"]["f1"] == pytest.approx(results["dev_at_threshold_0"]["f1"])
