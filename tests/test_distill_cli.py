"""Distillation end to end with a walk-in teacher: the Hugging Face fine-tuned classifier
fixture tests/data/hf_heads/sequence (BertForSequenceClassification, labels neg/neutral/pos)
distilled into a bert-tiny student on a few labelled lines and an unlabelled file: its
results.json and its model/ (reloaded with tfbert: the outputs the run's student wrote); the
script run_distill.py itself, the teacher cache across reruns and the export (slow); and the
user's mistakes as one line."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tfbert
from tfbert.errors import UserError, run_cli
from tfbert.models import students
from tfbert.tasks.distill import distill_config, run_distill
from tfbert.text.preprocessor import BertPreprocessor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEACHER = os.path.join(REPO, "tests", "data", "hf_heads", "sequence")
LABELS = ["neg", "neutral", "pos"]


def _text(rng: np.random.Generator) -> str:
    return " ".join(f"w{i}" for i in rng.integers(0, 63, rng.integers(3, 9)))


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, str]:
    """train/dev/test TSVs (24/10/10 labelled lines) and 12 unlabelled lines."""
    root = tmp_path_factory.mktemp("distill_data")
    rng = np.random.default_rng(0)
    files = {}
    for split, n in (("train", 24), ("dev", 10), ("test", 10)):
        rows = ["text\tlabel"] + [f"{_text(rng)}\t{LABELS[i % 3]}" for i in range(n)]
        files[split] = str(root / f"{split}.tsv")
        (root / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    files["unlabelled"] = str(root / "unlabelled.txt")
    (root / "unlabelled.txt").write_text(
        "\n".join(_text(rng) for _ in range(12)) + "\n\n", encoding="utf-8")
    return files


def _flags(data: dict[str, str], out, **extra) -> list[str]:
    return [f"--{k}={v}" for k, v in {"teacher_dir": TEACHER, **_config(data, out),
                                      **extra}.items()]


def _run_script(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(REPO, "run_distill.py"), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})


def _probabilities(model, texts: list[str]) -> np.ndarray:
    inputs = BertPreprocessor(os.path.join(TEACHER, "vocab.txt"), 16, lower_case=True)(
        np.array(texts))
    logits = np.asarray(model(inputs, training=False))
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _config(data: dict[str, str], out, **extra) -> dict:
    return {"student_preset": "bert-tiny", "output_dir": str(out), "train_file": data["train"],
            "dev_file": data["dev"], "test_file": data["test"],
            "unlabelled_file": data["unlabelled"], "max_seq_length": 16, "train_batch_size": 8,
            "eval_batch_size": 16, "num_train_epochs": 2, "distribution_strategy": "one_device",
            "verbose": 0, **extra}


@pytest.fixture(scope="module")
def distilled(data, tmp_path_factory) -> str:
    """The output folder of one distillation run (run_distill.py's library call; the script
    itself runs in the slow test), with a teacher cache written beside it."""
    root = tmp_path_factory.mktemp("distill_run")
    run_distill(distill_config(TEACHER, **_config(
        data, root / "out", teacher_cache=str(root / "cache" / "teacher.tfrecord"))))
    return str(root / "out")


def test_run_distill_with_a_hugging_face_teacher(distilled, data):
    with open(os.path.join(distilled, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    assert (results["task"], results["metric"], results["labels"]) == (
        "classification", "accuracy", LABELS)
    teacher = tfbert.from_pretrained(TEACHER)
    student = tfbert.checkpoints.load_model(os.path.join(distilled, "model"))
    assert type(student) is tfbert.BertClassifier and student.num_classes == 3
    assert (student.encoder.config.num_hidden_layers, student.encoder.config.hidden_size,
            student.encoder.config.vocab_size) == (2, 128, 120)  # bert-tiny, the teacher's vocab
    counts = results["parameters"]
    assert counts["teacher"] == teacher.count_params()
    assert counts["student"] == student.count_params()
    assert counts["student_share"] == pytest.approx(counts["student"] / counts["teacher"])
    assert results["student"]["parameters"] == students.model_parameters(student)
    assert results["data"] == {"labelled": 24, "unlabelled": 12, "augmented": 0, "rows": 36}
    assert results["distillation"]["teacher_outputs"] == "cache written"
    assert os.path.isfile(results["distillation"]["teacher_cache"])
    assert results["distillation"]["temperature"] == 2.0
    assert [h["epoch"] for h in results["train"]["history"]] == [1, 2]
    assert {"train_loss", "train_soft_loss", "train_hard_loss"} <= set(
        results["train"]["history"][0])
    assert not [k for k in results["train"]["history"][0] if k.startswith("train_val")]
    with open(data["test"], encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    texts, gold = [r["text"] for r in rows], [LABELS.index(r["label"]) for r in rows]
    for split in ("dev", "test"):
        assert results[split]["num_examples"] == 10
        assert results["teacher"][split]["num_examples"] == 10
        kept = results[split]["accuracy"] / results["teacher"][split]["accuracy"]
        assert results["kept"][split] == pytest.approx(kept)
    # The teacher's test score is the walk-in teacher's own accuracy on these texts.
    teacher_accuracy = np.mean(_probabilities(teacher, texts).argmax(-1) == gold)
    assert results["teacher"]["test"]["accuracy"] == pytest.approx(teacher_accuracy)
    # model/ reloads with tfbert and gives the outputs the run's student wrote.
    with open(os.path.join(distilled, "test_predictions.tsv"), encoding="utf-8") as f:
        predicted = list(csv.DictReader(f, delimiter="\t"))
    written = np.array([[float(r[f"p_{n}"]) for n in LABELS] for r in predicted])
    np.testing.assert_allclose(_probabilities(student, texts), written, atol=1e-5)
    assert results["test"]["accuracy"] == pytest.approx(
        np.mean(written.argmax(-1) == gold))
    metadata = tfbert.checkpoints.read_metadata(os.path.join(distilled, "model"))
    assert (metadata["task"], metadata["labels"], metadata["max_seq_length"],
            metadata["pair"], metadata["distilled_from"]) == (
        "classification", LABELS, 16, False, TEACHER)


def test_a_pretrained_student_starts_from_its_checkpoint(data, tmp_path):
    pretrained = os.path.join(REPO, "tests", "data", "tiny_pretraining")  # the teacher's vocab
    config = distill_config(TEACHER, **{**_config(data, tmp_path / "out"),
                                        "student_preset": None,
                                        "student_checkpoint": pretrained,
                                        "unlabelled_file": None, "num_train_epochs": 1})
    assert config.learning_rate == 1e-3  # a hidden-32 checkpoint: the small-model rate
    results = run_distill(config)
    assert results["student"]["init"] == f"pretrained {pretrained}"
    student = tfbert.checkpoints.load_model(str(tmp_path / "out" / "model"))
    source = tfbert.from_pretrained(pretrained)
    source = getattr(source, "encoder", source)
    assert student.encoder.config.hidden_size == source.config.hidden_size == 32
    # trained from the checkpoint's weights: moved, but still near them
    moved = [np.abs(a - b).max() for a, b in zip(student.encoder.get_weights(),
                                                  source.get_weights(), strict=True)]
    assert 0 < max(moved) < 0.1


@pytest.mark.slow  # three more training runs and a TFLite export
def test_the_script_the_teacher_cache_and_the_export(distilled, data, tmp_path):
    """run_distill.py itself (flags, summary, exit 0) reusing the fixture's teacher cache, a
    rerun with another max_seq_length recomputing it, and `python -m tfbert.export` taking the
    output folder (TFLite float16 and int8)."""
    cache = os.path.join(os.path.dirname(distilled), "cache", "teacher.tfrecord")
    run = _run_script(_flags(data, tmp_path / "script", teacher_cache=cache))
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout[run.stdout.index("{"):])
    assert set(summary) == {"student", "teacher", "kept", "parameters"}
    with open(tmp_path / "script" / "results.json", encoding="utf-8") as f:
        results = json.load(f)
    assert results["distillation"]["teacher_outputs"] == "cache reused"
    assert summary["teacher"]["test"] == results["teacher"]["test"]["accuracy"]
    longer = run_distill(distill_config(TEACHER, **_config(
        data, tmp_path / "longer", max_seq_length=20, num_train_epochs=1,
        teacher_cache=cache)))
    assert longer["distillation"]["teacher_outputs"].startswith(
        "cache recomputed: the packed inputs")
    run = subprocess.run([sys.executable, "-m", "tfbert.export", f"--model_dir={distilled}",
                          f"--export_dir={tmp_path / 'saved'}", "--tflite=float16,int8"],
                         cwd=REPO, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 0, run.stderr[-3000:]
    tflite = sorted(os.listdir(tmp_path / "saved" / "tflite"))
    assert any("float16" in name for name in tflite) and any("int8" in name for name in tflite)
    missing = _run_script(_flags(data, tmp_path / "out", teacher_dir=tmp_path / "nowhere"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert [line for line in missing.stderr.splitlines()
            if line.startswith("run_distill")] == [
        f"run_distill.py: error: teacher_dir {tmp_path / 'nowhere'}: no such folder"]


# --- the user's mistakes: one line ------------------------------------------------------------


def test_a_missing_teacher_is_one_line_and_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        run_cli(lambda: distill_config(str(tmp_path / "nowhere"), output_dir=str(tmp_path),
                                       student_preset="bert-tiny"), prog="run_distill.py")
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"run_distill.py: error: teacher_dir {tmp_path / 'nowhere'}: no such folder"]


def test_a_teacher_without_a_task_head(tmp_path):
    encoder = tfbert.BertEncoder(tfbert.BertConfig(
        vocab_size=120, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64))
    tfbert.save_pretrained(encoder, str(tmp_path / "encoder"),
                           vocab_file=os.path.join(TEACHER, "vocab.txt"))
    with pytest.raises(UserError, match=r"holds a BertEncoder \(task 'encoder'\): the teacher "
                       "must be a fine-tuned classification or ner model") as error:
        distill_config(str(tmp_path / "encoder"), output_dir=str(tmp_path / "out"),
                       student_preset="bert-tiny")
    assert "\n" not in str(error.value)


def test_a_student_with_another_vocab_size(tmp_path, data):
    path = tmp_path / "student.json"
    tfbert.BertConfig(vocab_size=99, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=32).to_json_file(str(path))
    config = distill_config(TEACHER, output_dir=str(tmp_path / "out"),
                            student_config_file=str(path), train_file=data["train"],
                            max_seq_length=16, distribution_strategy="one_device")
    with pytest.raises(UserError, match=f"student config {path} has vocab_size 99, the "
                       "teacher's vocab 120"):
        run_distill(config)
    assert set(os.listdir(tmp_path / "out")) <= {".tfbert.lock"}  # nothing of the run is kept


def test_a_bad_unlabelled_line_names_file_and_line(tmp_path):
    train = tmp_path / "pairs.tsv"
    train.write_text("text\ttext_b\tlabel\nw1 w2\tw3\tpos\nw4\tw5 w6\tneg\n", encoding="utf-8")
    unlabelled = tmp_path / "u.txt"
    unlabelled.write_text("w1\tw2\nw3 w4 without a second text\n", encoding="utf-8")
    config = distill_config(TEACHER, output_dir=str(tmp_path / "out"),
                            student_layers_from_teacher=2, train_file=str(train),
                            unlabelled_file=str(unlabelled), max_seq_length=16,
                            distribution_strategy="one_device")
    with pytest.raises(UserError, match=rf"^{unlabelled}:2: the teacher takes sentence pairs"):
        run_distill(config)


def test_settings_that_do_not_apply_are_refused(tmp_path):
    base = dict(output_dir=str(tmp_path / "out"), task_name="sentiment")
    with pytest.raises(UserError, match="give one student"):
        distill_config(TEACHER, **base)
    with pytest.raises(UserError, match="teacher_cache holds the teacher's logits only"):
        distill_config(TEACHER, **base, student_preset="bert-tiny", hidden_weight=1.0,
                       teacher_cache=str(tmp_path / "c.tfrecord"))
    with pytest.raises(UserError, match="char_level do"):
        distill_config(TEACHER, **base, student_preset="bert-tiny", char_level=True)
    with pytest.raises(UserError, match="preset does not apply to distillation: use "
                       "student_preset"):
        distill_config(TEACHER, **base, student_preset="bert-tiny", preset="bert-mini")


@pytest.mark.slow  # two more distillation runs
def test_multi_label_pairs_and_a_crf_tagger(tmp_path):
    """The other heads through the whole run: a multi-label sentence-pair classifier (labels
    tuned on dev, the student's thresholds in its tfbert.json) and a CRF NER teacher with
    hidden and attention transfer from every second layer (its CRF transitions copied)."""
    vocab = os.path.join(TEACHER, "vocab.txt")
    config = tfbert.BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=64)
    types = ["x", "y"]
    multi = tfbert.BertClassifier(tfbert.BertEncoder(config), num_classes=2, multi_label=True)
    tfbert.save_pretrained(multi, str(tmp_path / "multi"), vocab_file=vocab, metadata={
        "task": "classification", "labels": types, "multi_label": True, "pair": True,
        "max_seq_length": 16, "thresholds": [0.5, 0.5]})
    rng = np.random.default_rng(1)
    for split, n in (("train", 16), ("dev", 8)):
        rows = [json.dumps({"text": _text(rng), "text_b": _text(rng),
                            "labels": types[:i % 3]}) for i in range(n)]
        (tmp_path / f"{split}.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (tmp_path / "u.txt").write_text(f"{_text(rng)}\t{_text(rng)}\n", encoding="utf-8")
    results = run_distill(distill_config(
        str(tmp_path / "multi"), output_dir=str(tmp_path / "multi_out"),
        student_layers_from_teacher=2, train_file=str(tmp_path / "train.jsonl"),
        dev_file=str(tmp_path / "dev.jsonl"), unlabelled_file=str(tmp_path / "u.txt"),
        train_batch_size=8, num_train_epochs=1, distribution_strategy="one_device",
        verbose=0))
    assert results["metric"] == "micro_f1" and results["data"]["unlabelled"] == 1
    assert set(results["dev"]["thresholds"]) == set(types)
    metadata = tfbert.checkpoints.read_metadata(str(tmp_path / "multi_out" / "model"))
    assert metadata["multi_label"] and metadata["pair"] and len(metadata["thresholds"]) == 2

    tags = ["O", "B-PER", "I-PER"]
    tagger = tfbert.BertTokenClassifier(tfbert.BertEncoder(config), num_classes=3, crf=True)
    tagger.crf.set_weights([w + 0.5 for w in tagger.crf.get_weights()])
    tfbert.save_pretrained(tagger, str(tmp_path / "tagger"), vocab_file=vocab, metadata={
        "task": "ner", "labels": tags, "max_seq_length": 16, "token_separator": " "})
    lines = []
    for i in range(12):
        words = _text(rng).split()
        lines += [f"{w}\t{'B-PER' if j == i % len(words) else 'O'}"
                  for j, w in enumerate(words)] + [""]
    (tmp_path / "train.conll").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "words.txt").write_text(f"{_text(rng)}\n{_text(rng)}\n", encoding="utf-8")
    results = run_distill(distill_config(
        str(tmp_path / "tagger"), output_dir=str(tmp_path / "tagger_out"),
        student_layers_from_teacher=2, train_file=str(tmp_path / "train.conll"),
        dev_file=str(tmp_path / "train.conll"), unlabelled_file=str(tmp_path / "words.txt"),
        hidden_weight=1.0, attention_weight=1.0, train_batch_size=8, num_train_epochs=1,
        distribution_strategy="one_device", verbose=0))
    assert results["metric"] == "f1" and results["distillation"]["layer_map"] == [1]
    assert results["distillation"]["teacher_outputs"].startswith("live")
    assert results["data"]["unlabelled"] == 2
    assert {"train_hidden_loss", "train_attention_loss"} <= set(results["train"]["history"][0])
    student = tfbert.checkpoints.load_model(str(tmp_path / "tagger_out" / "model"))
    assert student.use_crf and student.encoder.config.num_hidden_layers == 1
