"""bench.bench_finetune's figures from given times and curves (no training here): the timed
span of a repetition, the target accuracy and each system's time to it, the ratios, and the
docs/results.md tables bench.report makes of a result."""

from __future__ import annotations

import pytest

from bench import bench_finetune as bf
from bench import report

CURVES = {  # dev accuracy every half epoch, training seconds since the clock started
    "tfbert (buckets)": [{"step": 10, "train_s": 4.0, "dev_accuracy": 0.70},
                         {"step": 20, "train_s": 6.0, "dev_accuracy": 0.80},
                         {"step": 30, "train_s": 8.0, "dev_accuracy": 0.78}],
    "keras-hub": [{"step": 10, "train_s": 9.0, "dev_accuracy": 0.60},
                  {"step": 20, "train_s": 15.0, "dev_accuracy": 0.75},
                  {"step": 30, "train_s": 21.0, "dev_accuracy": 0.74}],
    "transformers": [{"step": 10, "train_s": 5.0, "dev_accuracy": 0.76},
                     {"step": 20, "train_s": 10.0, "dev_accuracy": 0.77}],
}


def test_span_leaves_out_the_warm_steps():
    ends = [10.0, 10.5, 11.0, 12.0, 13.5]  # the time at the end of each of 5 steps
    assert bf.span(ends, 2) == pytest.approx(3.0)  # steps 3..5: from the end of step 2
    assert bf.span(ends, 0) == pytest.approx(3.5)


def test_target_is_the_lowest_best_and_each_time_its_first_score_there():
    assert bf.target_accuracy(CURVES) == pytest.approx(0.75)  # keras-hub's best
    table = bf.accuracy_table(CURVES)
    by = {r["system"]: r for r in table["rows"]}
    assert by["tfbert (buckets)"]["time_to_target_s"] == 6.0  # 0.70 < 0.75 <= 0.80
    assert by["tfbert (buckets)"]["step_at_target"] == 20
    assert by["keras-hub"]["time_to_target_s"] == 15.0
    assert by["transformers"]["time_to_target_s"] == 5.0  # its first score is 0.76
    assert by["transformers"]["train_s"] == 10.0  # the whole run's
    assert by["keras-hub"]["dev_accuracy_curve"] == [0.6, 0.75, 0.74]
    assert bf.time_to_accuracy(CURVES["keras-hub"], 0.9) == {"time_to_target_s": None,
                                                             "step_at_target": None}
    assert bf.target_accuracy({}) is None


def test_a_system_at_the_majority_share_did_not_learn_and_sets_no_target():
    stuck = {**CURVES, "transformers (by length)": [
        {"step": 10, "train_s": 2.0, "dev_accuracy": 0.52},
        {"step": 20, "train_s": 4.0, "dev_accuracy": 0.52}]}
    assert bf.target_accuracy(stuck) == pytest.approx(0.52)  # without the majority share
    assert bf.target_accuracy(stuck, chance=0.52) == pytest.approx(0.75)
    table = bf.accuracy_table(stuck, chance=0.52)
    by = {r["system"]: r for r in table["rows"]}
    assert table["majority_class_accuracy"] == 0.52
    assert by["transformers (by length)"]["learned"] is False
    assert by["transformers (by length)"]["time_to_target_s"] is None
    assert by["keras-hub"]["learned"] and by["keras-hub"]["time_to_target_s"] == 15.0
    assert bf.accuracy_table(stuck, chance=0.9)["target_dev_accuracy"] is None


def test_time_ratios_are_peer_over_ours():
    table = bf.accuracy_table(CURVES)
    ratios = bf.time_ratios(table, "tfbert (buckets)", ["keras-hub", "transformers", "absent"])
    assert ratios == {"builtin: time to accuracy keras-hub/tfbert (buckets)": 2.5,
                      "builtin: time to accuracy transformers/tfbert (buckets)":
                          pytest.approx(5 / 6)}
    assert bf.time_ratios(table, "absent", ["keras-hub"]) == {}


def test_throughput_rows_use_the_median_repetition_and_ratios_divide_rates():
    times = {"tfbert (buckets)": {"train": [2.0, 1.0, 4.0], "eval": [0.5, 0.5, 0.25]},
             "tfbert (fixed)": {"train": [3.0, 2.0, 2.0], "eval": [1.0, 2.0, 1.5]}}
    rows = bf.throughput_rows(times, {"train": 64, "eval": 30}, "builtin")
    by = {r["system"]: r for r in rows}
    assert by["tfbert (buckets)"]["train_examples_per_s"] == 32.0  # 64 / median 2.0
    assert by["tfbert (fixed)"]["eval_examples_per_s"] == 20.0  # 30 / median 1.5
    rows.append({"shape": "builtin", "system": "transformers", "error": "no torch"})
    ratios = bf.throughput_ratios(rows, [("tfbert (buckets)", "tfbert (fixed)"),
                                         ("tfbert (buckets)", "transformers")], "builtin")
    assert ratios == {"builtin: train tfbert (buckets)/tfbert (fixed)": 1.0,
                      "builtin: eval tfbert (buckets)/tfbert (fixed)": 3.0}


def test_quick_leaves_out_xla_and_by_length_curves():
    assert bf.systems("curves", quick=True) == ["tfbert (buckets)", "tfbert (fixed)",
                                                "keras-hub", "transformers"]
    assert len(bf.systems("curves", quick=False)) == 7
    assert "tfbert (buckets, XLA)" not in bf.systems("bert-base", quick=False)
    assert "transformers (by length)" in bf.systems("builtin", quick=True)


def test_report_tables_of_a_result():
    result = {"config": {"seq": 128, "shapes": {"builtin": {"hidden_size": 128}}},
              "rows": [{"shape": "builtin", "system": "tfbert (buckets)",
                        "train_examples_per_s": 812.345, "eval_examples_per_s": 2000.0},
                       {"shape": "builtin", "system": "transformers", "error": "no torch"}],
              "time_to_accuracy": {**bf.accuracy_table(CURVES, chance=0.5), "errors": []},
              "ratios": {"builtin: train tfbert (buckets)/tfbert (fixed)": 2.25},
              "load_average": {"start": [1.5, 1.0, 0.5]}, "phase_start_s": {"start": 0.0}}
    text = "\n".join(report.finetune_tables(result))
    assert "| builtin | tfbert (buckets) | 812.3 | 2000 |" in text
    assert "| builtin | transformers |  | no torch |" in text
    assert "Time to dev accuracy 0.75 (the lowest best of the systems that learned: above 0.5" \
        in text
    assert "| keras-hub | 0.75 | yes | 15 | 20 | 21 | [0.6, 0.75, 0.74] |" in text
    assert "| builtin: train tfbert (buckets)/tfbert (fixed) | 2.25 |" in text
    assert "| start | 0 | [1.5, 1, 0.5] |" in text


def test_clock_leaves_out_paused_and_discounted_spans(monkeypatch):
    now = iter([100.0, 104.0, 107.0, 110.0, 111.0])  # restart, pause, resume, point, point
    monkeypatch.setattr(bf.time, "perf_counter", lambda: next(now))
    clock = bf.Clock()
    with clock.paused():  # 3 s of dev scoring
        pass
    clock.point(10, 0.7)  # 10 s since the start, 3 paused
    clock.discount(0.5)  # scoring timed by the library itself
    clock.point(20, 0.8)
    assert clock.points == [{"step": 10, "train_s": 7.0, "dev_accuracy": 0.7},
                            {"step": 20, "train_s": 7.5, "dev_accuracy": 0.8}]
