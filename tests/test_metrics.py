"""Classification and entity-level NER metrics against hand-computed cases."""

from __future__ import annotations

import random

import pytest

from tfbert.evaluation import (
    Entity,
    classification_metrics,
    entity_metrics,
    entity_spans,
    get_entities,
)


def test_classification_metrics_hand_computed():
    # gold    0 0 0 1 1 2
    # pred    0 0 1 1 2 2
    # class 0: tp 2, predicted 2, true 3 -> P 1,   R 2/3, F1 0.8
    # class 1: tp 1, predicted 2, true 2 -> P 1/2, R 1/2, F1 0.5
    # class 2: tp 1, predicted 2, true 1 -> P 1/2, R 1,   F1 2/3
    m = classification_metrics([0, 0, 0, 1, 1, 2], [0, 0, 1, 1, 2, 2], ["a", "b", "c"])
    assert m["accuracy"] == pytest.approx(4 / 6)
    assert m["per_class"]["a"] == pytest.approx(
        {"precision": 1.0, "recall": 2 / 3, "f1": 0.8, "support": 3})
    assert m["per_class"]["b"] == pytest.approx(
        {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2})
    assert m["per_class"]["c"] == pytest.approx(
        {"precision": 0.5, "recall": 1.0, "f1": 2 / 3, "support": 1})
    assert m["macro_f1"] == pytest.approx((0.8 + 0.5 + 2 / 3) / 3)
    assert m["num_examples"] == 6


def test_classification_metrics_never_predicted_class_scores_zero():
    m = classification_metrics([0, 1, 1, 1], [1, 1, 1, 1])
    assert m["per_class"]["0"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert m["macro_f1"] == pytest.approx((0.0 + 2 * 0.75 / 1.75) / 2)


def test_classification_metrics_match_sklearn():
    sklearn = pytest.importorskip("sklearn.metrics")
    rng = random.Random(0)
    for _ in range(20):
        gold = [rng.randrange(4) for _ in range(50)]
        pred = [rng.randrange(4) for _ in range(50)]
        m = classification_metrics(gold, pred)
        assert m["accuracy"] == pytest.approx(sklearn.accuracy_score(gold, pred))
        assert m["macro_f1"] == pytest.approx(sklearn.f1_score(gold, pred, average="macro"))


def test_classification_metrics_errors():
    with pytest.raises(ValueError, match="3 labels but 2 predictions"):
        classification_metrics([0, 1, 1], [0, 1])
    with pytest.raises(ValueError, match=r"class ids \[2\] have no name"):
        classification_metrics([0, 2], [0, 1], ["a", "b"])


@pytest.mark.parametrize("tags, entities", [
    (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 1), ("LOC", 3, 3)]),
    # conlleval: I- after O starts an entity; a type change ends one.
    (["O", "I-PER", "I-PER", "I-LOC"], [("PER", 1, 2), ("LOC", 3, 3)]),
    (["B-PER", "B-PER", "I-PER"], [("PER", 0, 0), ("PER", 1, 2)]),
    # BIOES
    (["S-LOC", "B-ORG", "I-ORG", "E-ORG", "O", "S-PER"],
     [("LOC", 0, 0), ("ORG", 1, 3), ("PER", 5, 5)]),
    # E- then I- starts a new entity; a lone E- is an entity.
    (["B-ORG", "E-ORG", "I-ORG", "O", "E-LOC"], [("ORG", 0, 1), ("ORG", 2, 2), ("LOC", 4, 4)]),
    (["O", "O"], []),
])
def test_get_entities(tags, entities):
    assert get_entities(tags) == [Entity(*e) for e in entities]


def test_get_entities_rejects_bad_tag():
    with pytest.raises(ValueError, match="invalid NER tag 'PER'"):
        get_entities(["O", "PER"])


def test_entity_metrics_hand_computed():
    gold = [["B-PER", "I-PER", "O", "B-LOC", "O"],
            ["B-ORG", "I-ORG", "I-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-LOC", "I-LOC"],  # PER right, LOC too long
            ["B-ORG", "I-ORG", "I-ORG", "B-PER"]]        # ORG right, PER spurious
    # gold 3 entities, predicted 4, correct 2 -> P 0.5, R 2/3, F1 4/7
    m = entity_metrics(gold, pred)
    assert (m["num_gold"], m["num_predicted"], m["num_correct"]) == (3, 4, 2)
    assert m["precision"] == pytest.approx(0.5)
    assert m["recall"] == pytest.approx(2 / 3)
    assert m["f1"] == pytest.approx(4 / 7)
    assert m["per_type"]["PER"] == pytest.approx(
        {"precision": 0.5, "recall": 1.0, "f1": 2 / 3, "support": 1})
    assert m["per_type"]["LOC"] == pytest.approx(
        {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1})
    assert m["per_type"]["ORG"] == pytest.approx(
        {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1})


def test_entity_metrics_same_span_in_two_sentences_counts_twice():
    m = entity_metrics([["B-PER"], ["B-PER"]], [["B-PER"], ["O"]])
    assert (m["num_gold"], m["num_correct"], m["recall"]) == (2, 1, 0.5)


def test_entity_metrics_match_seqeval():
    seqeval = pytest.importorskip("seqeval.metrics")
    rng = random.Random(1)
    tags = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC"]
    for _ in range(100):
        gold = [[rng.choice(tags) for _ in range(rng.randint(1, 10))] for _ in range(4)]
        pred = [[rng.choice(tags) for _ in g] for g in gold]
        m = entity_metrics(gold, pred)
        assert m["precision"] == pytest.approx(seqeval.precision_score(gold, pred))
        assert m["recall"] == pytest.approx(seqeval.recall_score(gold, pred))
        assert m["f1"] == pytest.approx(seqeval.f1_score(gold, pred))


def test_entity_metrics_length_mismatch_names_sentence():
    with pytest.raises(ValueError, match="sentence 1 has 2 gold tags but 1 predicted"):
        entity_metrics([["O"], ["O", "O"]], [["O"], ["O"]])


def test_entity_spans_character_offsets():
    text = "John lives in New York"
    offsets = [(0, 4), (5, 10), (11, 13), (14, 17), (18, 22)]
    spans = entity_spans(["B-PER", "O", "O", "B-LOC", "I-LOC"], offsets, text)
    assert spans == [{"type": "PER", "start": 0, "end": 4, "text": "John"},
                     {"type": "LOC", "start": 14, "end": 22, "text": "New York"}]
