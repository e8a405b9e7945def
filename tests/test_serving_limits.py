"""What one serving request may be: rank checks that hold in a loaded SavedModel, the request
length limit (ExportSpec.max_request_chars), and windows read in bounded chunks whose results
equal those of all windows at once.

The exports are export_test_utils' tiny models (2 layers, hidden 32, max_seq_length 32); the NER
one here reads long texts in windows (doc_stride 8).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time

import numpy as np
import pytest
import tensorflow as tf
from export_test_utils import SEQ, exported, tiny_model

import tfbert
from tfbert.data import corpora
from tfbert.data import windows as py_windows
from tfbert.errors import UserError
from tfbert.export import export_model, load_for_export, window_inputs
from tfbert.export.__main__ import build_parser
from tfbert.export.saved_model import MAX_REQUEST_CHARS, BertServingModule, ExportSpec
from tfbert.tasks import serving_windows as windows
from tfbert.tasks.serving_ops import substr

LIMIT = 3000  # the NER export's max_request_chars


def _text(n: int) -> str:
    """n characters of People's Daily."""
    text = "".join(corpora.people_daily_lines()[:200])
    assert len(text) >= n
    return text[:n]


def _fails(message: str):
    return pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(message))


@pytest.fixture(scope="session")
def limits_root(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("limits"))


@pytest.fixture(scope="module")
def ner_windows(limits_root, chinese_vocab_file):
    """(model_dir, export_dir, loaded) of a tiny NER model trained on windows, exported with
    max_request_chars LIMIT."""
    model_dir = os.path.join(limits_root, "ner", "model")
    model, metadata = tiny_model("ner", len(open(chinese_vocab_file,
                                                 encoding="utf-8").readlines()))
    tfbert.save_pretrained(model, model_dir, vocab_file=chinese_vocab_file, metadata={
        **metadata, "long_input": "windows", "doc_stride": 8})
    result = export_model(model_dir, os.path.join(limits_root, "saved_models", "ner"),
                          check=False, max_request_chars=LIMIT)
    return model_dir, result["export_dir"], tf.saved_model.load(result["export_dir"])


# --- rank checks in the loaded SavedModel -----------------------------------------------------


def test_loaded_signatures_refuse_inputs_of_the_wrong_rank(tmp_path, chinese_vocab_file):
    """Called from Python, a loaded signature passes tensors of any shape to the graph (as TF
    Serving does), where Grappler folds tf.rank to the signature's: the checks read the shape
    the run was fed."""
    root = str(tmp_path)
    qa = tf.saved_model.load(exported("qa", root, chinese_vocab_file)[1])
    serve_text, serve_ids = qa.signatures["serving_default"], qa.signatures["serve_ids"]
    for text, shape in [([["a", "b"], ["c", "d"]], "[2 2]"), ("a", "[]"), ([[["a"]]], "[1 1 1]")]:
        with _fails(f"text has shape {shape}, expected [B] (one string per example)"):
            serve_text(text=tf.constant(text), text_b=tf.constant(["c"]))
    with _fails("text_b has shape [1 1], expected [B] (one string per example)"):
        serve_text(text=tf.constant(["a"]), text_b=tf.constant([["c"]]))
    ids = {name: tf.zeros([SEQ], tf.int32) for name in ("input_ids", "input_mask",
                                                        "segment_ids")}
    with _fails(f"input_ids has shape [{SEQ}], expected [B, {SEQ}]"):
        serve_ids(**ids)
    with _fails(f"input_ids has shape [1 1 {SEQ}], expected [B, {SEQ}]"):
        serve_ids(**{k: v[tf.newaxis, tf.newaxis] for k, v in ids.items()})
    good = serve_text(text=tf.constant(["首都"]), text_b=tf.constant(["北京是首都。"]))
    assert good["answer_start"].shape == (1,)  # and it keeps serving


# --- the request limit ----------------------------------------------------------------------


def test_request_limit_is_recorded_and_refused_in_the_graph(ner_windows):
    _, export_dir, loaded = ner_windows
    with open(os.path.join(export_dir, "assets.extra", "tfbert_export.json"),
              encoding="utf-8") as f:
        record = json.load(f)
    assert (record["max_request_chars"], record["window_batch"]) == (LIMIT, 64)
    serve = loaded.signatures["serving_default"]
    message = f"over the limit of this model (max_request_chars {LIMIT}): send fewer or shorter"
    with _fails(f"text holds {LIMIT + 1} characters in all, {message}"):
        serve(text=tf.constant([_text(LIMIT + 1)]))
    half = LIMIT // 2
    with _fails(f"text holds {LIMIT + 1} characters in all"):  # the batch's sum counts
        serve(text=tf.constant([_text(half), _text(LIMIT + 1 - half)]))
    assert serve(text=tf.constant([_text(LIMIT)]))["tag_ids"].shape[1] > LIMIT // 2


def test_default_limit_and_option_values(chinese_vocab_file, tmp_path):
    assert ExportSpec("encoder", 16).max_request_chars == MAX_REQUEST_CHARS == 1_000_000
    for name, value in [("max_request_chars", -1), ("window_batch", 0),
                        ("max_request_chars", True), ("window_batch", 2.0)]:
        with pytest.raises(UserError, match=f"{name} must be an int >= "):
            ExportSpec("encoder", 16, **{name: value})
    args = build_parser().parse_args(["--model_dir=m", "--export_dir=e",
                                      "--max_request_chars=0"])
    assert args.max_request_chars == 0
    # 0: no limit, so no check in the graph (a check would refuse every non-empty text).
    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").readlines())
    model = tfbert.BertEncoder(tfbert.BertConfig(vocab_size=vocab_size, hidden_size=8,
                                                 num_hidden_layers=1, num_attention_heads=1,
                                                 intermediate_size=8))
    module = BertServingModule(model, chinese_vocab_file,
                               ExportSpec("encoder", 16, max_request_chars=0))
    assert module.serve_text(tf.constant([_text(40)]))["input_mask"].shape == (1, 16)
    limited = BertServingModule(model, chinese_vocab_file,
                                ExportSpec("encoder", 16, max_request_chars=39))
    with _fails("text holds 40 characters in all, over the limit of this model "
                "(max_request_chars 39)"):
        limited.serve_text(tf.constant([_text(40)]))


# --- windows in chunks ----------------------------------------------------------------------


@pytest.mark.slow  # (an NER export and two window modules: ~40 s on 2 cores)
def test_long_text_near_the_limit_equals_all_windows_at_once(ner_windows, chinese_vocab_file):
    """A request at the limit (a text of LIMIT - 2 characters, ~370 windows in 6 chunks of 64,
    and one of 2) gives the logits and tags of the long text's windows run all at once through
    serve_ids and merged by the Python rule, and the same outputs as a module whose chunks are
    of 2 windows or of all of them."""
    model_dir, _, loaded = ner_windows
    text = _text(LIMIT - 2)
    got = {k: v.numpy() for k, v in loaded.signatures["serving_default"](
        text=tf.constant([text, "北京"])).items()}
    batch = window_inputs.make_windows(tfbert.BertTokenizer(chinese_vocab_file), [text], SEQ, 8)
    assert len(batch.row) > 5 * 64
    logits = loaded.signatures["serve_ids"](**{k: tf.constant(v) for k, v in
                                               batch.inputs.items()})["logits"].numpy()
    want = window_inputs.merge_ner(batch, logits)[0]  # [P, C]
    pieces = len(want)
    np.testing.assert_allclose(got["logits"][0, :pieces], want, atol=1e-5)
    np.testing.assert_array_equal(got["tag_ids"][0, :pieces], want.argmax(-1))
    assert (got["tag_ids"][0, pieces:] == -1).all() and got["entity_count"][0] > 10
    model, vocab_file, spec, _ = load_for_export(model_dir)
    outs = []
    for window_batch in (2, 10_000):
        module = BertServingModule(model, vocab_file, dataclasses.replace(
            spec, window_batch=window_batch))
        outs.append({k: v.numpy() for k, v in module.serve_text(
            tf.constant([text, "北京"])).items()})
    for out in outs:
        assert sorted(out) == sorted(got)
        for name in got:
            if got[name].dtype.kind == "f":
                np.testing.assert_allclose(out[name], got[name], atol=1e-5)
            else:
                np.testing.assert_array_equal(out[name], got[name], err_msg=name)


@pytest.mark.slow  # (two QA window modules: ~25 s on 2 cores)
def test_qa_windows_in_chunks_equal_all_at_once(tmp_path, chinese_vocab_file):
    model_dir = exported("qa", str(tmp_path), chinese_vocab_file)[0]
    model, vocab_file, spec, _ = load_for_export(model_dir)
    questions = ["这是哪里的新闻？", "谁在讲话？", ""]
    contexts = [_text(900), _text(40), ""]
    outs = []
    for window_batch in (3, 10_000):
        module = BertServingModule(model, vocab_file, dataclasses.replace(
            spec, window_batch=window_batch))
        outs.append({k: v.numpy() for k, v in module.serve_text(
            tf.constant(questions), tf.constant(contexts)).items()})
    chunked, whole = outs
    assert chunked["answer_start"][0] >= 0
    for name in whole:
        if whole[name].dtype.kind == "f":
            np.testing.assert_allclose(chunked[name], whole[name], atol=1e-5)
        else:
            np.testing.assert_array_equal(chunked[name], whole[name], err_msg=name)


# --- linear in the text ---------------------------------------------------------------------


def test_max_context_is_linear_in_the_pieces():
    """300,000 pieces in windows of 30 every 15 (20,000 windows): a dense [windows, pieces]
    table would be 48 GB; the pairs a window holds are 600,000."""
    n, body, stride = 300_000, 30, 15
    lengths = tf.constant([n, 7])
    begin = time.perf_counter()
    row, start, length = windows.window_spans(lengths, body, stride)
    best = windows.max_context(row, start, length, lengths).numpy()
    assert time.perf_counter() - begin < 20
    spans = py_windows.window_spans(n, body, stride)
    assert best.shape == (2, n) and len(spans) == int(np.sum(row.numpy() == 0))
    for p in [0, 1, 14, 15, 22, 23, 29, 30, 1000, 150_007, n - 16, n - 1]:
        owners = [i for i in range(max(0, p // stride - 2), min(len(spans), p // stride + 2))
                  if py_windows.is_max_context(spans, i, p)]
        assert best[0, p] == owners[0], p
    assert best[1, :7].tolist() == [len(spans)] * 7 and (best[1, 7:] == -1).all()


def test_substrings_are_linear_in_the_text():
    """100,000 substrings of a 1,000,000-character text: copying the text per substring (what
    tf.strings.substr over a broadcast text does) would be 300 GB."""
    text = tf.constant([_text(1000).encode() * 1000, "中国a".encode()])
    starts = tf.stack([tf.range(0, 1_000_000, 10), tf.fill([100_000], -1)])  # [2, E]
    ends = starts + tf.stack([tf.fill([100_000], 3), tf.fill([100_000], 1)])
    starts = tf.tensor_scatter_nd_update(starts, [[1, 0], [1, 1]], [0, 2])
    ends = tf.tensor_scatter_nd_update(ends, [[1, 0], [1, 1]], [2, 3])
    got = substr(text, starts, ends).numpy()
    assert got.shape == (2, 100_000)
    source = _text(1000) * 1000
    assert [s.decode() for s in got[0, [0, 1, 777, 99_999]]] == [
        source[i:i + 3] for i in (0, 10, 7770, 999_990)]
    assert got[1, :3].tolist() == ["中国".encode(), b"a", b""]
