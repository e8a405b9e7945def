"""Benchmark tasks by name (tfbert.data.task_folders): GLUE/XNLI readers against the golden output
of google-research/bert's own processors (tests/make_google_classifier_golden.py), CLUE readers,
layout errors, and google-research/bert's run_classifier command line end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from model_test_utils import tiny_config_file

from tfbert.data import task_folders
from tfbert.errors import UserError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "tests", "data", "google_classifier")
FOLDERS = {"mrpc": "MRPC", "cola": "CoLA", "mnli": "MNLI", "xnli": "XNLI"}

with open(os.path.join(DATA, "golden.json"), encoding="utf-8") as _f:
    GOLDEN = json.load(_f)["tasks"]
CASES = [(key, key.split("_")[0], key.split("_")[1] if "_" in key else "zh", split)
         for key, task in GOLDEN.items() for split in task["splits"]]


@pytest.mark.parametrize("key, name, language, split", CASES)
def test_readers_match_google_processors(key, name, language, split):
    golden = GOLDEN[key]
    assert list(task_folders.TASKS[name].labels) == golden["labels"]
    examples = task_folders.read_task(name.upper(), os.path.join(DATA, FOLDERS[name]), split,
                                    language=language)
    want = golden["splits"][split]
    assert len(examples) == want["count"]
    got = [[e.text, e.text_b, e.label] for e in examples]
    if split == "test":  # google puts a placeholder label on test rows; tfbert reads none
        assert all(e.label is None for e in examples)
        got = [row[:2] for row in got]
        want_rows = [row[:2] for row in want["examples"]]
    else:
        want_rows = want["examples"]
    assert got == want_rows


def test_xnli_test_file_is_filtered_and_labelled():
    examples = task_folders.read_task("xnli", os.path.join(DATA, "XNLI"), "test")
    assert [(e.text, e.label) for e in examples] == [("鸟在唱歌。", "entailment"),
                                                     ("现在是中午。", "contradiction")]


def test_clue_label_lists():
    assert task_folders.TASKS["tnews"].labels == (
        "100", "101", "102", "103", "104", "106", "107", "108", "109", "110", "112", "113",
        "114", "115", "116")
    assert task_folders.TASKS["iflytek"].labels == tuple(str(i) for i in range(119))
    assert task_folders.TASKS["afqmc"].labels == ("0", "1")
    for name in ("cmnli", "ocnli"):
        assert task_folders.TASKS[name].labels == ("contradiction", "entailment", "neutral")


def _jsonl(folder, name, rows):
    folder.mkdir(exist_ok=True)
    (folder / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                               encoding="utf-8")


def test_clue_readers(tmp_path):
    ocnli = tmp_path / "ocnli"
    _jsonl(ocnli, "train.json", [
        {"sentence1": "他在跑步", "sentence2": "他在运动", "label": "entailment", "genre": "x"},
        {"sentence1": "天很冷", "sentence2": "天很热", "label": "-"},
        {"sentence1": "她笑了", "sentence2": "她哭了", "label": "contradiction"}])
    _jsonl(ocnli, "test.json", [{"id": 7, "sentence1": "甲", "sentence2": "乙"},
                                {"id": 9, "sentence1": "丙", "sentence2": "丁"}])
    train = task_folders.read_task("ocnli", str(ocnli), "train")
    assert [(e.text, e.text_b, e.label) for e in train] == [
        ("他在跑步", "他在运动", "entailment"), ("她笑了", "她哭了", "contradiction")]
    test = task_folders.read_task("OCNLI", str(ocnli), "test")
    assert [(e.id, e.text, e.label) for e in test] == [("7", "甲", None), ("9", "丙", None)]

    tnews = tmp_path / "tnews"
    _jsonl(tnews, "dev.json", [
        {"label": "102", "label_desc": "news_entertainment", "sentence": "新片上映",
         "keywords": "电影"},
        {"label": "116", "label_desc": "news_game", "sentence": "游戏更新", "keywords": ""}])
    dev = task_folders.read_task("tnews", str(tnews), "dev")
    assert [(e.text, e.text_b, e.label) for e in dev] == [("新片上映", None, "102"),
                                                         ("游戏更新", None, "116")]
    _jsonl(tnews, "train.json", [{"label": "105", "sentence": "x"}])
    with pytest.raises(UserError, match=r"train.json:1: label '105' is not one of the tnews"):
        task_folders.read_task("tnews", str(tnews), "train")


@pytest.mark.parametrize("name, file, text, found", [
    ("mrpc", "train.tsv", "text\tlabel\nhi\t1\n", r"header \['text', 'label'\]"),
    ("cola", "train.tsv", "index\tsentence\n0\tHi.\n", r"first line \['index', 'sentence'\]"),
    ("mnli", "dev_matched.tsv", "a\tb\n", r"header \['a', 'b'\]"),
    ("xnli", "xnli.dev.tsv", "premise\thypo\tlabel\n", r"header \['premise', 'hypo', 'label'\]"),
    ("afqmc", "dev.json", '{"text": "a", "label": "0"}\n', r"first line keys \['label', 'text'\]"),
    ("tnews", "dev.json", "sentence\tlabel\n", r"first line 'sentence\\tlabel' is not a JSON"),
])
def test_layout_errors_name_file_found_and_expected(tmp_path, name, file, text, found):
    (tmp_path / file).write_text(text, encoding="utf-8")
    split = "dev" if "dev" in file else "train"
    with pytest.raises(UserError, match=found) as e:
        task_folders.read_task(name, str(tmp_path), split)
    message = str(e.value)
    assert "\n" not in message and str(tmp_path / file) in message
    if "JSON" not in found:
        assert f"matches no {name} {split} layout; expected" in message


def test_missing_file_names_the_layout(tmp_path):
    with pytest.raises(UserError, match=r"xnli: .*multinli.train.de.tsv not found .* header row "
                                        r"premise, hypo, label"):
        task_folders.read_task("xnli", str(tmp_path), "train", language="de")


@pytest.mark.slow  # 16 s; fast: the other google-task tests read the same folders
def test_google_command_line_mrpc(tmp_path, chinese_vocab_file):
    """google-research/bert's MRPC command (plus tfbert's tiny model) runs: eval_results.txt and
    test_results.tsv in google's formats beside results.json; TPU flags are accepted."""
    out = tmp_path / "out"
    config = tiny_config_file(tmp_path / "bert_config.json", chinese_vocab_file)
    cmd = [sys.executable, os.path.join(REPO, "run_classifier.py"), "--task_name=MRPC",
           f"--data_dir={os.path.join(DATA, 'MRPC')}", "--do_train=true", "--do_eval=true",
           "--do_predict=true", f"--vocab_file={chinese_vocab_file}",
           f"--bert_config_file={config}",
           "--max_seq_length=16", "--train_batch_size=2", "--learning_rate=2e-5",
           "--num_train_epochs=1.0", f"--output_dir={out}", "--save_checkpoints_steps=500",
           "--iterations_per_loop=1000", "--use_tpu=false", "--predict_batch_size=2",
           "--distribution_strategy=one_device"]
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "save_checkpoints_steps=500" in run.stderr
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["labels"] == ["0", "1"] and results["dev"]["num_examples"] == 3
    lines = (out / "eval_results.txt").read_text(encoding="utf-8").splitlines()
    assert [line.split(" = ")[0] for line in lines] == ["eval_accuracy", "eval_loss",
                                                        "global_step", "loss"]
    values = dict(line.split(" = ") for line in lines)
    assert float(values["eval_accuracy"]) == pytest.approx(results["dev"]["accuracy"])
    assert int(values["global_step"]) == results["train"]["num_train_steps"] == 2
    rows = [r.split("\t") for r in (out / "test_results.tsv").read_text().splitlines()]
    assert len(rows) == 3 and all(len(r) == 2 for r in rows)
    np.testing.assert_allclose(np.array(rows, float).sum(-1), 1.0, atol=1e-5)


@pytest.mark.slow  # (a second script process; the MRPC command line is fast)
def test_data_dir_runs_nothing_unless_asked(tmp_path):
    """With --data_dir, do_train/do_eval/do_predict default off (google-research/bert)."""
    cmd = [sys.executable, os.path.join(REPO, "run_classifier.py"), "--task_name=cola",
           f"--data_dir={os.path.join(DATA, 'CoLA')}", f"--output_dir={tmp_path / 'out'}"]
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 2, run.stderr[-2000:]
    assert "nothing to do" in run.stderr


@pytest.mark.slow
def test_mnli_scores_dev_mismatched_and_eval_only_rerun(tmp_path, chinese_vocab_file):
    """MNLI reports dev_mismatched beside dev; a fine-tuned model scores again without training
    (global_step 0) and keeps the task's label order."""
    from tfbert.tasks.classification import ClassificationConfig, run_classification

    common = dict(task_name="MNLI", data_dir=os.path.join(DATA, "MNLI"), max_seq_length=16,
                  distribution_strategy="one_device", verbose=0, do_eval=True)
    out = tmp_path / "out"
    results = run_classification(ClassificationConfig(
        output_dir=str(out), do_train=True, do_predict=True, train_batch_size=2,
        bert_config_file=tiny_config_file(tmp_path / "bert_config.json", chinese_vocab_file),
        vocab_file=chinese_vocab_file, **common))
    assert results["labels"] == ["contradiction", "entailment", "neutral"]
    assert (results["dev"]["num_examples"], results["dev_mismatched"]["num_examples"]) == (3, 2)
    assert len((out / "test_results.tsv").read_text().splitlines()) == 2
    again = run_classification(ClassificationConfig(
        output_dir=str(tmp_path / "eval"), init_checkpoint=str(out / "model"), do_train=False,
        do_predict=False, **common))
    assert again["dev"]["accuracy"] == pytest.approx(results["dev"]["accuracy"])
    text = (tmp_path / "eval" / "eval_results.txt").read_text()
    assert "global_step = 0\n" in text
