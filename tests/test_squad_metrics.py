"""QA metrics against hand-worked cases of the official SQuAD v1.1/v2.0 and CMRC2018 scripts."""

from __future__ import annotations

import pytest

from tfbert.evaluation import squad as metrics


@pytest.mark.parametrize("text, expected", [
    ("The Quick, brown fox!", "quick brown fox"),
    ("an apple a day", "apple day"),
    ("  Denver   Broncos. ", "denver broncos"),
    ("theater", "theater"),  # articles only as whole words
    ("A-B", "ab"),  # punctuation removed, not replaced by a space
    ("Über café", "über café"),  # non-ASCII kept
])
def test_normalize_answer(text, expected):
    assert metrics.normalize_answer(text) == expected


def test_squad_exact_and_f1_pairs():
    assert metrics.squad_exact("Denver Broncos", "the denver broncos.") == 1
    assert metrics.squad_exact("Denver Broncos", "Broncos") == 0
    # gold [cat, sat], prediction [cat, sat, on, mat]: P = 2/4, R = 2/2, F1 = 2/3.
    assert metrics.squad_f1("the cat sat", "cat sat on a mat") == pytest.approx(2 / 3)
    # tokens count as a bag: gold [x, x, y], prediction [x, z]: P 1/2, R 1/3.
    assert metrics.squad_f1("x x y", "x z") == pytest.approx(0.4)
    assert metrics.squad_f1("Broncos", "Panthers") == 0.0
    assert metrics.squad_f1("", "") == 1.0 and metrics.squad_f1("", "a thing") == 0.0


def test_squad_v1_max_over_gold_and_missing_predictions():
    gold = {"q1": ["Denver Broncos", "The Denver Broncos", "Broncos"],
            "q2": ["Santa Clara, California", "Levi's Stadium"],
            "q3": ["February 7"]}
    predictions = {"q1": "Broncos", "q2": "Levi's Stadium in Santa Clara"}  # q3 missing: 0
    result = metrics.squad_v1_scores(gold, predictions)
    assert result["exact_match"] == pytest.approx(100 / 3)
    # q2: best gold "Levi's Stadium": tokens [levis, stadium] vs [levis, stadium, in, santa,
    # clara] -> P 2/5, R 1, F1 4/7; gold "Santa Clara, California" -> [santa, clara, california]
    # vs prediction: same 2, P 2/5, R 2/3 -> F1 0.5. Max 4/7.
    assert result["f1"] == pytest.approx(100 * (1 + 4 / 7 + 0) / 3)
    assert result["total"] == 3 and result["missing"] == 1
    with pytest.raises(ValueError, match="q9"):
        metrics.squad_v1_scores({"q9": []}, {"q9": ""})


def test_squad_v2_no_answer_breakdown_and_best_threshold():
    gold = {"a": ["Paris"], "b": [], "c": [""], "d": ["the red car"]}
    predictions = {"a": "Paris", "b": "London", "c": "", "d": "red truck"}
    null_odds = {"a": -2.0, "b": 1.0, "c": 3.0, "d": 0.0}
    result = metrics.squad_v2_scores(gold, predictions, null_odds)
    # exact: a 1, b 0, c 1, d 0; f1: a 1, b 0, c 1, d 0.5 ([red, car] vs [red, truck]).
    assert result["exact_match"] == pytest.approx(50.0)
    assert result["f1"] == pytest.approx(62.5)
    assert result["HasAns_total"] == 2 and result["NoAns_total"] == 2
    assert result["HasAns_f1"] == pytest.approx(75.0)
    assert result["NoAns_exact_match"] == pytest.approx(50.0)
    # find_best_thresh over odds a(-2) d(0) b(1) c(3), starting from 2 unanswerables right:
    # +1 (a) = 3, +0.5 (d) = 3.5 best at threshold 0.0, -1 (b), +0 (c).
    assert result["best_f1"] == pytest.approx(87.5)
    assert result["best_f1_threshold"] == 0.0
    assert result["best_exact_match"] == pytest.approx(75.0)
    assert result["best_exact_match_threshold"] == -2.0
    # Thresholding the null odds at 0.5 turns b's "London" into "", which is right.
    assert metrics.squad_v2_scores(gold, predictions, null_odds,
                                   null_odds_threshold=0.5)["exact_match"] == pytest.approx(75.0)


def test_squad_v2_leaves_missing_predictions_out():
    result = metrics.squad_v2_scores({"a": ["x"], "b": ["y"]}, {"a": "x"})
    assert result["exact_match"] == 100.0 and result["total"] == 1 and result["missing"] == 1


def test_cmrc_segmentation():
    assert metrics.cmrc_segment("我爱NLP 3.5%，好") == ["我", "爱", "nlp", "3.5", "%", "好"]
    assert metrics.cmrc_segment("《三国演义》") == ["三", "国", "演", "义"]
    assert metrics.cmrc_segment("1,000 Yuan") == ["1,000", "yuan"]
    assert metrics.cmrc_segment("a-b", remove_punctuation=False) == ["a", "-", "b"]


def test_cmrc_exact_and_character_f1():
    assert metrics.cmrc_exact("《三国演义》", "三国演义") == 1
    assert metrics.cmrc_exact("北京", "北京市") == 0
    # LCS 2 of gold 5 / prediction 2 characters: P 1, R 0.4 -> F1 4/7.
    assert metrics.cmrc_f1("北京天安门", "北京") == pytest.approx(4 / 7)
    # Longest common SUBSTRING (not subsequence): 中人国 vs 中华人民共和国 share 1 in a row.
    precision, recall = 1 / 3, 1 / 7
    assert metrics.cmrc_f1("中华人民共和国", "中人国") == pytest.approx(
        2 * precision * recall / (precision + recall))
    assert metrics.cmrc_f1("江泽民", "李鹏") == 0.0
    assert metrics.cmrc_f1("", "") == 1.0


def test_cmrc_scores_over_questions():
    gold = {"q1": ["天安门", "北京天安门"], "q2": ["１９９８年"], "q3": ["新华社"]}
    predictions = {"q1": "北京天安门广场", "q2": "１９９８年"}
    result = metrics.evaluate(gold, predictions)
    assert result["scoring"] == "cmrc2018"
    assert result["exact_match"] == pytest.approx(100 / 3)
    # q1 best gold 北京天安门 (5 in a row of the prediction's 7): P 5/7, R 1 -> F1 5/6.
    assert result["f1"] == pytest.approx(100 * (5 / 6 + 1) / 3)


def test_evaluate_detects_scoring_and_validates():
    assert metrics.evaluate({"q": ["Paris"]}, {"q": "paris"})["scoring"] == "squad"
    with pytest.raises(ValueError, match="scoring"):
        metrics.evaluate({"q": ["x"]}, {"q": "x"}, scoring="bleu")
    v2 = metrics.evaluate({"q": [], "r": ["北京"]}, {"q": "", "r": "北京"},
                          version_2_with_negative=True)
    assert v2["exact_match"] == 100.0 and v2["scoring"] == "cmrc2018"
