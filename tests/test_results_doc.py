"""docs/results.md is what `python -m bench.report` writes from bench/results/*.json: a results
file added or changed without rerunning the command fails here."""

from __future__ import annotations

import json
import os

from bench import report

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_results_doc_is_what_the_command_writes(tmp_path):
    out = tmp_path / "results.md"
    report.main(["--out", str(out)])
    with open(os.path.join(REPO, "docs", "results.md"), encoding="utf-8") as f:
        committed = f.read()
    assert out.read_text(encoding="utf-8") == committed, (
        "docs/results.md is stale: run `python -m bench.report`")
    assert not os.path.exists(f"{out}.tmp")


def test_every_results_file_has_a_section_with_command_and_host():
    text = report.document()
    names = sorted(n for n in os.listdir(report.RESULTS) if n.endswith(".json"))
    assert len(names) >= 40
    for name in names:
        start = text.index(f"### {name}\n")
        lines = text[start:].split("\n")
        assert lines[2].startswith("Command: `python "), name
        assert lines[4].startswith("Host: "), name
    suite = text[text.index("### vm-2cpu-2026-11-30.json"):]
    assert "| tfbert BertTokenizer | 2.818e+05 |" in suite  # lines/s, 4 significant digits
    assert "| tfbert/keras-hub | 1.194 |" in suite  # the pretraining step ratio


def test_tables_render_records_and_summarise_long_lists():
    lines = report.render({"rounds": 3, "a-xla": {"step_ms": 33.32, "q": [1.0, 2.5]},
                           "curve": [{"step": 1, "loss": 6.614117}, {"step": 2}],
                           "long": list(range(20))})
    assert lines[:5] == ["| field | value |", "|---|---|", "| rounds | 3 |",
                         "| long | 20 values: 0 ... 19 |", ""]
    assert "| a-xla | 33.32 | [1, 2.5] |" in lines
    assert lines[lines.index("**curve**") + 4:][:2] == ["| 1 | 6.614 |", "| 2 |  |"]


def test_quality_file_renders_as_the_quality_table():
    path = os.path.join(report.RESULTS, "quality-sentiment_1000-amx-xeon-2026-12-07.json")
    with open(path) as f:
        lines = report.quality_tables(json.load(f))
    assert lines[0].startswith("| setup | training examples | model |")
    assert lines[2].startswith("| sentiment_1000 (accuracy) | 1,000 | character 1-3-gram TF-IDF")
    assert "| sentiment_1000 (accuracy) | 1,000 | BERT, pretrained 12,000 steps | 0.0003 | 164 | " \
           "76.27% | 75.57% ± 0.4 (+6.6) |" in lines
