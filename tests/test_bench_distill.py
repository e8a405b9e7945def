"""bench.distill without training: its settings (the quality setups, --quick), the student's
share of the teacher's parameters, the score rows and the Markdown that bench.report prints."""

from __future__ import annotations

import dataclasses

import pytest

from bench import distill, report


def test_settings_are_the_quality_setups_and_quick_shrinks_every_size():
    full = distill.settings("ner", quick=False)
    assert (full["max_seq_length"], full["epochs"], full["max_train_examples"],
            full["max_eval_examples"], full["metric"]) == (128, 3, 3000, 1000, "f1")
    assert full["variants"]["labels"] == {"soft_weight": 0.0}
    assert full["variants"]["unlabelled"]["unlabelled_builtin"] == "people_daily"
    quick = distill.settings("ner", quick=True)
    assert quick["max_train_examples"] == 300 and quick["student_epochs"] == 1
    assert quick["variants"]["unlabelled"]["max_unlabelled_examples"] == 300
    assert distill.settings("sentiment", quick=True)["variants"]["unlabelled"] == {
        "augment_copies": 1}
    # --quick copies: the module's VARIANTS stay as they are
    assert distill.VARIANTS["unlabelled"]["sentiment"] == {"augment_copies": 2}


def test_the_student_is_under_a_quarter_of_the_bert_mini_teacher():
    import tfbert
    from tfbert.models.students import model_parameters

    teacher_config = dataclasses.replace(tfbert.BertConfig.from_preset("bert-mini"),
                                         vocab_size=8000)  # the built-in vocab
    student_config = dataclasses.replace(teacher_config, **distill.STUDENT)

    def count(config):
        return model_parameters(tfbert.BertClassifier(tfbert.BertEncoder(config),
                                                      num_classes=2))["total"]

    teacher, student = count(teacher_config), count(student_config)
    assert teacher == pytest.approx(5.41e6, rel=0.01)
    assert student / teacher == pytest.approx(0.235, abs=0.005) and student / teacher <= 0.25


RESULT = {"dev": {"accuracy": 0.80}, "test": {"accuracy": 0.78},
          "teacher": {"test": {"accuracy": 0.80}}, "kept": {"test": 0.975, "dev": 0.99},
          "parameters": {"teacher": 400, "student": 100, "student_share": 0.25},
          "data": {"labelled": 10}, "seconds": 12}


def test_rows_and_markdown():
    rows = distill.student_rows("sentiment", "accuracy",
                                {"dev": {"accuracy": 0.81}, "test": {"accuracy": 0.80}},
                                {"soft": RESULT})
    assert [r["model"] for r in rows] == ["teacher", "student"]
    assert rows[1]["kept_test"] == 0.975 and rows[1]["teacher_test"] == 0.80
    scores = {"keras": {"latency_ms": 2.0, "score": 78.0},
              "saved_model": {"latency_ms": 3.0, "bytes": 3 * 2**20},
              "tflite_float32": {"latency_ms": 0.5, "bytes": 2**20, "score": 78.0},
              "tflite_int8": {"latency_ms": 0.25, "bytes": 2**19, "score": 77.5,
                              "difference": -0.5}}
    record = {"scores": rows, "teacher_parameters": {"sentiment": 400},
              "deployment": [{"task": "sentiment", "model": "student (soft)",
                              "parameters": 100, **scores}]}
    text = distill.markdown(record)
    assert ("| sentiment | student: soft targets (T = 2) + labels | 80.00 | 78.00 | 97.5% | "
            "100 (25.0%) | 12 |") in text
    assert "| sentiment | teacher | 81.00 | 80.00 |  | 400 |  |" in text
    assert ("| sentiment | student (soft) | 100 | 3.0 | 1.0 / 0.5 | 2.00 / 3.00 / 0.50 / 0.25 | "
            "78.00 / 77.50 (-0.50) |") in text


def test_report_prints_a_study_s_own_tables(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr(report, "RESULTS", str(tmp_path))
    (tmp_path / "distill-x.json").write_text(json.dumps(
        {"machine": "x", "markdown": "| a |\n|---|\n| 1 |\n", "phases": {"ner teacher": "10:00"},
         "rows_not_printed": [1]}), encoding="utf-8")
    lines = report.section("distill-x.json", "python -m bench.distill")
    assert lines[lines.index("| a |"):lines.index("| a |") + 3] == ["| a |", "|---|", "| 1 |"]
    assert any("ner teacher" in line for line in lines)
    assert not any("rows_not_printed" in line for line in lines)
