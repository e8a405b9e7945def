"""The task registry (tfbert/tasks/registry.py), the one QA span search (tfbert/evaluation/spans.py)
and the import direction models -> checkpoints."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import tfbert
from tfbert.errors import UserError
from tfbert.evaluation.spans import best_span, span_candidates
from tfbert.tasks import registry


def test_builtin_tasks_name_their_model_class_and_export_head():
    got = {t.name: (t.model_class, t.export) for t in registry.tasks()}
    assert got == {"encoder": (tfbert.BertEncoder, "encoder"),
                   "pretraining": (tfbert.BertPretrainer, "encoder"),
                   "classification": (tfbert.BertClassifier, "classification"),
                   "ner": (tfbert.BertTokenClassifier, "ner"),
                   "qa": (tfbert.BertSpanLabeler, "qa"),
                   "regression": (tfbert.BertRegressor, "regression"),
                   "embedding": (tfbert.BertSentenceEncoder, "embedding")}
    assert registry.find("BertSpanLabeler") is registry.get("qa")
    assert registry.find("NoSuchModel") is None
    with pytest.raises(KeyError, match="no task 'sst2'"):
        registry.get("sst2")


def test_task_of_a_model_and_of_a_foreign_class():
    assert registry.task_of(tfbert.BertTokenClassifier).name == "ner"

    class Other:
        pass

    with pytest.raises(UserError, match="Other is not a tfbert task model.*BertClassifier"):
        registry.task_of(Other())


def test_register_refuses_clashes():
    task = registry.get("qa")
    assert registry.register(task) is task  # the same declaration again: a no-op
    with pytest.raises(ValueError, match="clashes"):
        registry.register(registry.Task("qa", tfbert.BertClassifier, export="qa"))


def test_module_paths_of_older_imports_give_the_task_modules_objects():
    """tfbert.tasks.classifier/_outputs and squad/_predictions re-export the objects of the
    modules named after their task, under both names; each task is registered once."""
    from tfbert.tasks import (
        classification,
        classification_outputs,
        classifier,
        classifier_outputs,
        qa,
        qa_predictions,
        squad,
        squad_predictions,
    )

    assert squad.SquadConfig is squad.QAConfig is qa.QAConfig
    assert squad.run_squad is squad.run_qa is qa.run_qa
    assert squad.postprocess_predictions is qa_predictions.postprocess_predictions
    assert squad_predictions.decode_example is qa_predictions.decode_example
    assert classifier.ClassifierConfig is classifier.ClassificationConfig \
        is classification.ClassificationConfig
    assert classifier.run_classifier is classifier.run_classification \
        is classification.run_classification
    assert classifier_outputs.write_predictions is classification_outputs.write_predictions
    assert squad.TASK is qa.TASK is registry.get("qa")
    assert classifier.TASK is classification.TASK is registry.get("classification")
    names = [t.name for t in registry.tasks()]
    assert len(names) == len(set(names)), names



def test_every_task_names_a_serving_head():
    """Each task's `export` names the HEAD of a tfbert/tasks/*_serving.py that carries that
    name; an unknown head is refused with the ones there are."""
    from tfbert.export import heads

    assert heads.names() == ("classification", "embedding", "encoder", "ner", "qa", "regression")
    for task in registry.tasks():
        head = heads.get(task.export)
        assert issubclass(head, heads.ServingHead) and head.name == task.export
    with pytest.raises(UserError, match=r"task 'scores' is not one of \('classification'"):
        heads.get("scores")


def test_checkpoints_import_no_models():
    code = ("import sys, tfbert.checkpoints; "
            "print(sorted(m for m in sys.modules if m.startswith('tfbert.models')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def _run_squad_order(starts, ends, start_ok, end_ok, n, max_len):
    """run_squad.py's loops, written out: the oracle for span_candidates."""
    top = lambda x: np.argsort(-x, kind="stable")[:n]
    return [(s, e) for s in top(starts) if start_ok[s] for e in top(ends)
            if end_ok[e] and s <= e < s + max_len]


def test_span_candidates_match_run_squad_loops_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(50):
        t = int(rng.integers(3, 30))
        starts, ends = np.round(rng.normal(size=(2, t)) * 2) / 2  # many ties
        start_ok, end_ok = rng.random((2, t)) > 0.3
        n, max_len = int(rng.integers(1, 25)), int(rng.integers(1, 8))
        top_s, top_e, ok = (x.numpy() for x in span_candidates(
            starts[None], ends[None], start_ok[None], end_ok[None], n, max_len))
        got = [(top_s[0, i], top_e[0, j]) for i, j in zip(*np.nonzero(ok[0]), strict=True)]
        assert got == _run_squad_order(starts, ends, start_ok, end_ok, n, max_len)


def test_best_span_picks_the_top_candidate():
    starts = np.array([[0.0, 3.0, 1.0, 2.0, 0.5]], np.float32)
    ends = np.array([[0.0, 0.1, 4.0, 1.0, 5.0]], np.float32)
    ok = np.array([[False, True, True, True, True]])
    start, end, score, found = (x.numpy() for x in best_span(starts, ends, ok, ok, 20, 2))
    assert (start[0], end[0], found[0]) == (1, 2, True) and score[0] == pytest.approx(7.0)
    _, _, _, found = best_span(starts, ends, ok & False, ok, 20, 2)
    assert not found.numpy()[0]
