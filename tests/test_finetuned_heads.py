"""Fine-tuned task heads in and out of Google's and Hugging Face's formats.

The golden files are made by google-research/bert's own code (tests/make_google_head_golden.py)
and by transformers (tests/make_hf_heads_golden.py); tests that run transformers here skip when
it is not installed. Tolerance against the references: max abs diff <= 1e-5 in float32.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import tfbert
from tfbert import checkpoints
from tfbert.checkpoints.canonical import CheckpointError
from tfbert.errors import UserError
from tfbert.models import pretrained

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
GOOGLE = os.path.join(DATA, "google_heads")
HF = os.path.join(DATA, "hf_heads")
INPUTS = ("input_ids", "input_mask", "segment_ids")
TOLERANCE = 1e-5
LABELS = {"sequence": ["neg", "neutral", "pos"],
          "token": ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]}


def _golden(path: str) -> dict[str, np.ndarray]:
    with np.load(os.path.join(path, "golden.npz")) as data:
        return {k: data[k] for k in data.files}


def _inputs(golden: dict) -> dict[str, np.ndarray]:
    return {k: golden[k] for k in INPUTS}


def _logits(model, inputs) -> dict[str, np.ndarray]:
    out = model(inputs, training=False)
    return {k: np.asarray(v) for k, v in out.items()} if isinstance(out, dict) else {
        "logits": np.asarray(out)}


def _max_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32))))


def _assert_same(a: dict, b: dict, tolerance: float = 1e-6) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        assert _max_diff(a[key], b[key]) <= tolerance, key


# --- Google (run_classifier.py / run_squad.py) ----------------------------------------------


def test_google_classifier_matches_golden():
    golden = _golden(GOOGLE)
    model = tfbert.BertClassifier.from_pretrained(os.path.join(GOOGLE, "classifier"))
    assert model.num_classes == 3 and model.head_hidden_layers == 0  # from the weights' shape
    assert _max_diff(_logits(model, _inputs(golden))["logits"],
                     golden["classifier_logits"]) <= TOLERANCE
    picked = tfbert.from_pretrained(os.path.join(GOOGLE, "classifier"))
    assert isinstance(picked, tfbert.BertClassifier)
    assert checkpoints.read_checkpoint(os.path.join(GOOGLE, "classifier")).metadata == {
        "model_class": "BertClassifier", "model_config": {"num_classes": 3},
        "task": "classification"}  # no label names: Google checkpoints carry none


def test_google_squad_matches_golden():
    golden = _golden(GOOGLE)
    model = tfbert.from_pretrained(os.path.join(GOOGLE, "squad"))
    assert isinstance(model, tfbert.BertSpanLabeler)
    out = _logits(model, _inputs(golden))
    assert _max_diff(out["start_logits"], golden["start_logits"]) <= TOLERANCE
    assert _max_diff(out["end_logits"], golden["end_logits"]) <= TOLERANCE
    # The encoder alone loads from it too; the head is left out.
    encoder = pretrained.model_from_pretrained(tfbert.BertEncoder, os.path.join(GOOGLE, "squad"))
    assert isinstance(encoder, tfbert.BertEncoder)


@pytest.mark.parametrize("kind", ["classifier", "squad"])
def test_google_round_trip_keeps_head(tmp_path, kind):
    import tensorflow as tf

    golden = _golden(GOOGLE)
    model = tfbert.from_pretrained(os.path.join(GOOGLE, kind))
    result = tfbert.save_pretrained(model, str(tmp_path / "g"), format="google")
    assert result == {"directory": str(tmp_path / "g"), "format": "google"}
    shapes = tf.train.load_checkpoint(str(tmp_path / "g" / "bert_model.ckpt")
                                      ).get_variable_to_shape_map()
    prefix = "" if kind == "classifier" else "cls/squad/"
    rows = 3 if kind == "classifier" else 2
    assert shapes[f"{prefix}output_weights"] == [rows, 32]
    assert shapes[f"{prefix}output_bias"] == [rows]
    again = tfbert.from_pretrained(str(tmp_path / "g"))
    assert type(again) is type(model)
    _assert_same(_logits(model, _inputs(golden)), _logits(again, _inputs(golden)))


# --- Hugging Face (BertFor... classes) ------------------------------------------------------


@pytest.mark.parametrize("kind, cls", [("sequence", tfbert.BertClassifier),
                                       ("token", tfbert.BertTokenClassifier),
                                       ("qa", tfbert.BertSpanLabeler)])
def test_hf_heads_match_golden(kind, cls):
    golden = _golden(HF)
    path = os.path.join(HF, kind)
    model = tfbert.from_pretrained(path)
    assert type(model) is cls
    assert type(cls.from_pretrained(path)) is cls
    out = _logits(model, _inputs(golden))
    if kind == "qa":
        assert _max_diff(out["start_logits"], golden["start_logits"]) <= TOLERANCE
        assert _max_diff(out["end_logits"], golden["end_logits"]) <= TOLERANCE
    else:
        assert _max_diff(out["logits"], golden[f"{kind}_logits"]) <= TOLERANCE
    metadata = checkpoints.read_checkpoint(path).metadata
    assert metadata.get("labels") == LABELS.get(kind)


def test_hf_problem_types_other_than_single_label_are_refused(tmp_path):
    import shutil

    for problem, extra in (("multi_label_classification", {}), (None, {"id2label": {"0": "x"}}),
                           ("regression", {})):
        path = str(tmp_path / str(problem))
        shutil.copytree(os.path.join(HF, "sequence"), path)
        with open(os.path.join(path, "config.json")) as f:
            values = json.load(f)
        values.update(problem_type=problem, **extra)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(values, f)
        with pytest.raises(UserError, match="problem_type"):
            tfbert.from_pretrained(path)


@pytest.mark.parametrize("kind", ["sequence", "token", "qa"])
def test_hf_round_trip_keeps_head_and_labels(tmp_path, kind):
    from safetensors.numpy import load_file

    golden = _golden(HF)
    model = tfbert.from_pretrained(os.path.join(HF, kind))
    labels = LABELS.get(kind)
    tfbert.save_pretrained(model, str(tmp_path / "hf"), format="hf",
                           metadata={"labels": labels} if labels else None)
    with open(tmp_path / "hf" / "config.json") as f:
        values = json.load(f)
    with open(os.path.join(HF, kind, "config.json")) as f:
        reference = json.load(f)
    assert values["architectures"] == reference["architectures"]
    for key in ("id2label", "label2id", "problem_type"):
        assert values.get(key) == reference.get(key), key
    state = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert sorted(state) == sorted(load_file(os.path.join(HF, kind, "model.safetensors")))
    again = tfbert.from_pretrained(str(tmp_path / "hf"))
    _assert_same(_logits(model, _inputs(golden)), _logits(again, _inputs(golden)))
    assert checkpoints.read_checkpoint(str(tmp_path / "hf")).metadata.get("labels") == labels


@pytest.mark.parametrize("kind, auto", [("sequence", "AutoModelForSequenceClassification"),
                                        ("token", "AutoModelForTokenClassification"),
                                        ("qa", "AutoModelForQuestionAnswering")])
def test_hf_export_loads_in_transformers(tmp_path, kind, auto):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    golden = _golden(HF)
    # From Google's classifier too: a tfbert model of another origin, saved as HF.
    source = os.path.join(GOOGLE, "classifier") if kind == "sequence" else os.path.join(HF, kind)
    model = tfbert.from_pretrained(source)
    labels = ["a", "b", "c"] if kind == "sequence" else LABELS.get(kind)
    tfbert.save_pretrained(model, str(tmp_path / "hf"), format="hf",
                           metadata={"labels": labels} if labels else None)
    reference = getattr(transformers, auto).from_pretrained(str(tmp_path / "hf")).eval()
    if labels:
        assert [reference.config.id2label[i] for i in range(len(labels))] == labels
    with torch.no_grad():
        out = reference(**{name: torch.tensor(golden[key], dtype=torch.long) for name, key in (
            ("input_ids", "input_ids"), ("attention_mask", "input_mask"),
            ("token_type_ids", "segment_ids"))})
    ours = _logits(model, _inputs(golden))
    if kind == "qa":
        assert _max_diff(out.start_logits.numpy(), ours["start_logits"]) <= TOLERANCE
        assert _max_diff(out.end_logits.numpy(), ours["end_logits"]) <= TOLERANCE
    else:
        # Google's tanh GELU is HF's "gelu_new": the exported config says so.
        assert _max_diff(out.logits.numpy(), ours["logits"]) <= TOLERANCE


# --- what a format cannot hold ---------------------------------------------------------------


def test_heads_a_format_cannot_hold_are_errors(tmp_path):
    encoder = pretrained.model_from_pretrained(tfbert.BertEncoder,
                                               os.path.join(GOOGLE, "classifier"))
    rich = tfbert.BertClassifier(encoder, num_classes=2, head_hidden_layers=1)
    for fmt in ("google", "hf"):
        with pytest.raises(UserError, match="head_hidden_layers=1"):
            tfbert.save_pretrained(rich, str(tmp_path / fmt), format=fmt)
        assert not os.path.exists(tmp_path / fmt)  # refused before anything is written
    tagger = tfbert.BertTokenClassifier(encoder, num_classes=4)
    with pytest.raises(CheckpointError, match="no BertTokenClassifier head"):
        tfbert.save_pretrained(tagger, str(tmp_path / "t"), format="google")
    with pytest.raises(ValueError, match="metadata is written to tfbert.json"):
        tfbert.save_pretrained(tagger, str(tmp_path / "t"), format="google",
                               metadata={"labels": ["a", "b", "c", "d"]})


def test_exact_gelu_to_google_needs_the_option_and_reports_the_change(tmp_path, caplog):
    golden = _golden(HF)
    model = tfbert.from_pretrained(os.path.join(HF, "sequence"))  # HF "gelu": exact erf
    assert model.encoder.config.hidden_act == "gelu"
    with pytest.raises(UserError, match=r"approximate_activation=True"):
        tfbert.save_pretrained(model, str(tmp_path / "g"), format="google")
    assert not os.path.exists(tmp_path / "g")
    with caplog.at_level(logging.WARNING, logger="tfbert.models.pretrained"):
        result = tfbert.save_pretrained(model, str(tmp_path / "g"), format="google",
                                        approximate_activation=True)
    change = result["approximation"]["max_abs_output_change"]
    assert 0 < change < 1e-2 and f"{change:.3g}" in caplog.text
    with open(tmp_path / "g" / "bert_config.json") as f:
        values = json.load(f)
    assert values["hidden_act"] == "gelu" and values["tfbert_approximation"] == result[
        "approximation"]
    # tfbert reads the exact model back; Google's code (tanh) moves the logits by the stated
    # amount on the probe batch.
    again = tfbert.from_pretrained(str(tmp_path / "g"))
    _assert_same(_logits(model, _inputs(golden)), _logits(again, _inputs(golden)))
    del values["tfbert_config"]
    with open(tmp_path / "g" / "bert_config.json", "w") as f:
        json.dump(values, f)
    as_google = tfbert.from_pretrained(str(tmp_path / "g"))
    assert as_google.encoder.config.hidden_act == "gelu_tanh"
    probe = pretrained.probe_batch(model.encoder.config)
    assert _max_diff(_logits(model, probe)["logits"], _logits(as_google, probe)["logits"]) == (
        pytest.approx(change, rel=1e-6))


# --- the export (python -m tfbert.export) ---------------------------------------------------


@pytest.mark.slow  # ~35 s: a fresh process exports and checks the SavedModel
def test_export_of_a_transformers_classifier_serves_label_names(tmp_path):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the SavedModel uses)

    export_dir = tmp_path / "saved_models" / "sentiment"
    proc = subprocess.run(
        [sys.executable, "-m", "tfbert.export", f"--model_dir={os.path.join(HF, 'sequence')}",
         f"--export_dir={export_dir}", "--max_seq_length=16"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    serve = tf.saved_model.load(str(export_dir / "1")).signatures["serving_default"]
    out = serve(text=tf.constant(["a b c", "w1 w2"]))
    labels = [s.decode() for s in out["labels"].numpy()]
    assert labels == [LABELS["sequence"][i] for i in np.argmax(out["logits"].numpy(), -1)]
