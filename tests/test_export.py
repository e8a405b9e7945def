"""tfbert.export: SavedModel layout and signatures, fresh-process load, parity with the Keras
model (classification, NER, QA) on real Chinese text, bad input, concurrency, the op check.

Tiny random-init models (2 layers, hidden 32, max_seq_length 32) are saved with
`tfbert.save_pretrained` + fine-tuning metadata and exported once per session (`exported`).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf
from export_test_utils import NER_LABELS, SEQ, exported, load_signatures, tiny_model

import tfbert
from tfbert.data import corpora
from tfbert.data import ner as ner_data
from tfbert.evaluation.ner import get_entities
from tfbert.export import check_serving, export_model

TOLERANCE = 1e-5


def chinese_texts() -> list[str]:
    """Real sentences: reviews and People's Daily, one longer than SEQ, an empty string."""
    reviews = [text for text, _ in corpora.reviews()[:3]]
    lines = corpora.people_daily_lines()[:4]
    texts = reviews + lines
    long = "".join(lines)
    assert len(long) > 3 * SEQ
    return texts + [long, "", "BERT 模型 Models，全角（１２３）。"]


# --- layout and signatures -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["classification", "ner", "qa"])
def test_layout_signatures_and_serving_check(kind, export_root, chinese_vocab_file):
    _, export_dir, result = exported(kind, export_root, chinese_vocab_file)
    assert sorted(os.listdir(export_dir)) == ["assets", "assets.extra", "fingerprint.pb",
                                              "saved_model.pb", "variables"]
    assert os.path.basename(os.path.dirname(export_dir)) == kind  # saved_models/NAME/1
    with open(os.path.join(export_dir, "assets", "vocab.txt"), encoding="utf-8") as f:
        assert f.read() == open(chinese_vocab_file, encoding="utf-8").read()
    signatures = result["signatures"]
    text_inputs = ["text", "text_b"] if kind == "qa" else ["text"]
    assert signatures["serving_default"]["inputs"] == text_inputs
    assert signatures["serve_ids"]["inputs"] == ["input_ids", "input_mask", "segment_ids"]
    expected = {
        "classification": {"logits", "probabilities", "label_ids", "labels"},
        "ner": {"logits", "tag_ids", "tags", "token_starts", "token_ends", "entity_starts",
                "entity_ends", "entity_labels", "entity_texts", "entity_count"},
        "qa": {"start_logits", "end_logits", "score", "answer_token_start", "answer_token_end",
               "answer_start", "answer_end", "answer_text"}}[kind]
    assert set(signatures["serving_default"]["outputs"]) == expected
    ids_only = {"entity_token_starts", "entity_token_ends"} if kind == "ner" else set()
    text_only = {"token_starts", "token_ends", "entity_starts", "entity_ends", "entity_texts",
                 "answer_start", "answer_end", "answer_text"}
    assert set(signatures["serve_ids"]["outputs"]) == (expected - text_only) | ids_only
    report = check_serving.check_saved_model(export_dir)
    assert report.ok, report.format()
    assert report.non_core_ops == ["FastWordpieceTokenizeWithOffsets"]
    assert report.availability == {"2.12": {"FastWordpieceTokenizeWithOffsets": True},
                                   "2.20": {"FastWordpieceTokenizeWithOffsets": True}}


# --- parity with the Keras model ------------------------------------------------------------------


def test_classification_parity(export_root, chinese_vocab_file):
    model_dir, export_dir, _ = exported("classification", export_root, chinese_vocab_file)
    texts = chinese_texts()
    model = tfbert.checkpoints.load_model(model_dir)
    features = tfbert.BertPreprocessor(chinese_vocab_file, SEQ)(tf.constant(texts))
    want = model(features, training=False).numpy()
    serve_text, serve_ids = load_signatures(export_dir)
    got = serve_text(text=tf.constant(texts))
    np.testing.assert_allclose(got["logits"].numpy(), want, atol=TOLERANCE)
    np.testing.assert_allclose(got["probabilities"].numpy(), tf.nn.softmax(want).numpy(),
                               atol=TOLERANCE)
    assert got["label_ids"].numpy().tolist() == want.argmax(-1).tolist()
    assert [s.decode() for s in got["labels"].numpy()] == [["负面", "正面"][i]
                                                            for i in want.argmax(-1)]
    by_ids = serve_ids(**{k: tf.constant(v) for k, v in features.items()})
    for name in ("logits", "probabilities", "label_ids", "labels"):
        np.testing.assert_array_equal(by_ids[name].numpy(), got[name].numpy())


def test_bfloat16_export_close_to_float32(export_root, chinese_vocab_file):
    """--dtype bfloat16: matmul kernels stored in bfloat16 (embeddings, LayerNorm, head float32),
    float32 outputs within bfloat16 rounding of the float32 export, same labels."""
    from tfbert.export.__main__ import main

    model_dir, export_dir, _ = exported("classification", export_root, chinese_vocab_file)
    bf16_dir = os.path.join(export_root, "saved_models", "classification_bf16", "1")
    assert main([f"--model_dir={model_dir}", f"--export_dir={bf16_dir}",
                 "--dtype=bfloat16"]) == 0
    loaded = tf.saved_model.load(bf16_dir)
    dtypes = {v.name: v.dtype.name for v in loaded._model_variables}
    assert {d for n, d in dtypes.items() if "LayerNorm" in n} == {"float32"}
    assert {d for n, d in dtypes.items() if "intermediate" in n} == {"bfloat16"}
    with open(os.path.join(bf16_dir, "assets.extra", "tfbert_export.json"),
              encoding="utf-8") as f:
        assert json.load(f)["dtype"] == "bfloat16"
    texts = tf.constant(chinese_texts())
    want = load_signatures(export_dir)[0](text=texts)
    got = loaded.signatures["serving_default"](text=texts)
    assert got["logits"].dtype == tf.float32
    scale = np.abs(want["logits"].numpy()).max()
    np.testing.assert_allclose(got["logits"].numpy(), want["logits"].numpy(),
                               atol=0.05 * scale)
    assert not np.array_equal(got["logits"].numpy(), want["logits"].numpy())
    margin = np.abs(np.diff(want["logits"].numpy(), axis=-1))[:, 0]
    clear = margin > 0.1 * scale  # rows whose float32 decision is not a near tie
    assert clear.sum() >= 3
    np.testing.assert_array_equal(got["label_ids"].numpy()[clear],
                                  want["label_ids"].numpy()[clear])
    with pytest.raises(ValueError, match="dtype 'float16' is not one of"):
        export_model(model_dir, bf16_dir, dtype="float16")


def test_xla_export_matches_and_is_flagged(export_root, chinese_vocab_file):
    """--jit_compile (here with --no_trim_padding): the model's forward is an XLA-compiled
    function in the SavedModel; both signatures give the plain export's outputs, and the
    serving check warns that the CPU model server needs --xla_cpu_compilation_enabled=true."""
    from tfbert.export.__main__ import main

    model_dir, export_dir, _ = exported("classification", export_root, chinese_vocab_file)
    xla_dir = os.path.join(export_root, "saved_models", "classification_xla", "1")
    assert main([f"--model_dir={model_dir}", f"--export_dir={xla_dir}", "--jit_compile",
                 "--no_trim_padding"]) == 0
    with open(os.path.join(xla_dir, "assets.extra", "tfbert_export.json"),
              encoding="utf-8") as f:
        record = json.load(f)
    assert record["jit_compile"] is True and record["trim_padding"] is False
    report = check_serving.check_saved_model(xla_dir)
    assert report.ok, report.format()
    for version in ("2.12", "2.20"):
        assert any("--xla_cpu_compilation_enabled=true" in w for w in report.warnings[version])
    plain = check_serving.check_saved_model(export_dir)
    assert not any("XLA" in w for w in plain.warnings["2.20"])
    texts = tf.constant(chinese_texts())
    want_text, want_ids = load_signatures(export_dir)
    got_text, got_ids = load_signatures(xla_dir)
    np.testing.assert_allclose(got_text(text=texts)["logits"].numpy(),
                               want_text(text=texts)["logits"].numpy(), atol=TOLERANCE)
    features = tfbert.BertPreprocessor(chinese_vocab_file, SEQ)(texts)
    features = {k: tf.constant(v) for k, v in features.items()}
    np.testing.assert_allclose(got_ids(**features)["logits"].numpy(),
                               want_ids(**features)["logits"].numpy(), atol=TOLERANCE)


def test_ner_parity_with_training_decode(export_root, chinese_vocab_file):
    model_dir, export_dir, _ = exported("ner", export_root, chinese_vocab_file)
    examples = [e for e in ner_data.people_daily_ner("test")[:40] if e.tags.count("O") < len(
        e.tags)][:6]
    examples.append(ner_data.NerExample(tokens=(), tags=(), separator=""))  # empty text
    texts = [e.text for e in examples]
    assert any(len(t) > SEQ for t in texts)
    model = tfbert.checkpoints.load_model(model_dir)
    tokenizer = tfbert.BertTokenizer(chinese_vocab_file)
    features = ner_data.encode_examples(examples, tokenizer, SEQ, NER_LABELS)
    logits = model(features.inputs(), training=False).numpy()
    tags = ner_data.decode_predictions(features, logits.argmax(-1), NER_LABELS)
    serve_text, serve_ids = load_signatures(export_dir)
    got = {k: v.numpy() for k, v in serve_text(text=tf.constant(texts)).items()}
    np.testing.assert_allclose(got["logits"], logits, atol=TOLERANCE)
    total = 0
    for i, example in enumerate(examples):
        offsets = example.token_offsets()
        want = [(offsets[e.start][0], offsets[e.end][1], e.type) for e in get_entities(tags[i])]
        n = got["entity_count"][i]
        have = list(zip(got["entity_starts"][i][:n].tolist(), got["entity_ends"][i][:n].tolist(),
                        [s.decode() for s in got["entity_labels"][i][:n]], strict=True))
        assert have == want, f"sentence {i}: {example.text[:40]}"
        assert [s.decode() for s in got["entity_texts"][i][:n]] == [
            example.text[s:e] for s, e, _ in want]
        assert (got["entity_starts"][i][n:] == -1).all() and not any(got["entity_labels"][i][n:])
        total += n
    assert total > 5
    by_ids = {k: v.numpy() for k, v in serve_ids(**{
        k: tf.constant(v) for k, v in features.inputs().items()}).items()}
    for name in ("tag_ids", "tags", "entity_labels", "entity_count"):
        np.testing.assert_array_equal(by_ids[name], got[name])
    # Token positions of the entities map to the same characters.
    starts = np.take_along_axis(got["token_starts"], np.maximum(by_ids["entity_token_starts"], 0),
                                axis=1)
    np.testing.assert_array_equal(np.where(by_ids["entity_token_starts"] >= 0, starts, -1),
                                  got["entity_starts"])


def test_qa_parity_with_training_decode(export_root, chinese_vocab_file):
    """The text signature reads each context in windows as training does (the model's
    doc_stride 8): the answers, character spans and scores of training's decode over all
    windows; serve_ids scores each window it is given as the Keras model does."""
    from tfbert.data import squad
    from tfbert.tasks.qa_predictions import decode_example

    model_dir, export_dir, _ = exported("qa", export_root, chinese_vocab_file)
    lines = corpora.people_daily_lines()[:5]
    questions = ["这是哪里的新闻？", "谁在讲话？", "今年是哪一年？", "",
                 "这段话说了什么内容呢请回答"]
    contexts = lines[:3] + [lines[3], ""]
    examples = [squad.QAExample(str(i), q, c, []) for i, (q, c) in
                enumerate(zip(questions, contexts, strict=True))]
    tokenizer = tfbert.BertTokenizer(chinese_vocab_file)
    features, _ = squad.convert_examples(examples, tokenizer, SEQ, doc_stride=8,
                                         max_query_length=8)
    assert len(features) > len(examples)  # some contexts take several windows
    inputs = {k: np.stack([getattr(f, k) for f in features])
              for k in ("input_ids", "input_mask", "segment_ids")}
    model = tfbert.checkpoints.load_model(model_dir)
    out = {k: v.numpy() for k, v in model(inputs, training=False).items()}
    serve_text, serve_ids = load_signatures(export_dir)
    got = {k: v.numpy() for k, v in serve_text(text=tf.constant(questions),
                                               text_b=tf.constant(contexts)).items()}
    for i, example in enumerate(examples):
        mine = [j for j, f in enumerate(features) if f.example_index == i]
        nbest, _ = decode_example(example, [features[j] for j in mine],
                                  [out["start_logits"][j] for j in mine],
                                  [out["end_logits"][j] for j in mine], n_best_size=20,
                                  max_answer_length=6)
        if not nbest:  # empty context: no span
            assert got["answer_start"][i] == -1 and got["answer_text"][i] == b""
            continue
        best = nbest[0]
        assert got["answer_text"][i].decode() == best.text
        assert (got["answer_start"][i], got["answer_end"][i]) == (best.start_char, best.end_char)
        assert got["score"][i] == pytest.approx(best.score, abs=1e-4)
    by_ids = {k: v.numpy() for k, v in serve_ids(**{
        k: tf.constant(v) for k, v in inputs.items()}).items()}
    np.testing.assert_allclose(by_ids["start_logits"], out["start_logits"], atol=TOLERANCE)
    np.testing.assert_allclose(by_ids["end_logits"], out["end_logits"], atol=TOLERANCE)


# --- self-contained: a fresh process with tensorflow + tensorflow_text only -----------------------

FRESH_SCRIPT = r"""
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the TF Text ops)
args = json.loads(sys.argv[1])
out = {}
for kind, (path, inputs) in args.items():
    sig = tf.saved_model.load(path).signatures["serving_default"]
    result = sig(**{k: tf.constant(v) for k, v in inputs.items()})
    out[kind] = {k: v.numpy().tolist() if v.dtype != tf.string else
                 [x.decode() for x in v.numpy().ravel()] for k, v in result.items()}
assert "tfbert" not in sys.modules and "keras_hub" not in sys.modules, sorted(sys.modules)
print(json.dumps({"loaded": sorted(m for m in sys.modules if m.split(".")[0] in
                  ("tfbert", "keras_hub", "keras")), "out": out}))
"""


@pytest.mark.slow  # 10 s; fast: test_serving loads the export in saved_model_cli and old TF
def test_fresh_process_load_equals_in_process(export_root, chinese_vocab_file):
    texts = chinese_texts()
    args = {}
    for kind in ("classification", "ner", "qa"):
        _, export_dir, _ = exported(kind, export_root, chinese_vocab_file)
        inputs = {"text": texts}
        if kind == "qa":
            inputs["text_b"] = texts[::-1]
        args[kind] = (export_dir, inputs)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", FRESH_SCRIPT, json.dumps(args)],
                          capture_output=True, text=True, env=env, timeout=300,
                          cwd=export_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fresh = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not [m for m in fresh["loaded"] if not m.startswith("keras")], fresh["loaded"]
    for kind, (export_dir, inputs) in args.items():
        here = load_signatures(export_dir)[0](**{k: tf.constant(v) for k, v in inputs.items()})
        for name, value in here.items():
            if value.dtype == tf.string:
                assert fresh["out"][kind][name] == [x.decode() for x in value.numpy().ravel()]
            else:
                np.testing.assert_allclose(np.asarray(fresh["out"][kind][name]), value.numpy(),
                                           atol=TOLERANCE, err_msg=f"{kind}/{name}")


# --- the serving boundary: bad input, concurrency -------------------------------------------------


def test_bad_input_gives_errors_or_defined_results(export_root, chinese_vocab_file):
    _, export_dir, _ = exported("ner", export_root, chinese_vocab_file)
    serve_text, serve_ids = load_signatures(export_dir)
    # Invalid UTF-8: decoded with U+FFFD replacement; offsets and texts refer to that string.
    bad = b"\xff\xfe\xe4\xb8" + "北京欢迎你".encode() + b"\xc3"
    out = serve_text(text=tf.constant([bad, "北京欢迎你".encode()]))
    fixed = bad.decode("utf-8", errors="replace")
    n = int(out["entity_count"][0])
    for s, e, t in zip(out["entity_starts"][0][:n].numpy(), out["entity_ends"][0][:n].numpy(),
                       out["entity_texts"][0][:n].numpy(), strict=True):
        assert t.decode() == fixed[s:e]
    starts = out["token_starts"][0].numpy()
    assert starts[1:6].tolist() == [fixed.index(c) for c in "北京欢迎你"]
    # 1 MB of text: cut to max_seq_length, answered normally.
    big = ("中华人民共和国" * 50000)[:1_000_000]
    out = serve_text(text=tf.constant([big]))
    assert out["tag_ids"].shape == (1, SEQ) and int(out["token_ends"][0, SEQ - 2]) == SEQ - 2
    # An empty batch: empty outputs of the right rank.
    out = serve_text(text=tf.constant([], tf.string))
    assert out["logits"].shape == (0, SEQ, len(NER_LABELS)) and out["entity_starts"].shape[0] == 0
    out = serve_ids(input_ids=tf.zeros([0, SEQ], tf.int32), input_mask=tf.zeros([0, SEQ],
                    tf.int32), segment_ids=tf.zeros([0, SEQ], tf.int32))
    assert out["tag_ids"].shape == (0, SEQ)
    # Wrong dtype / shape: a clear error, and the model keeps serving.
    with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError)):
        serve_text(text=tf.constant([1, 2]))
    with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError)):
        serve_ids(input_ids=tf.zeros([1, SEQ + 1], tf.int32), input_mask=tf.zeros(
            [1, SEQ + 1], tf.int32), segment_ids=tf.zeros([1, SEQ + 1], tf.int32))
    assert serve_text(text=tf.constant(["好"]))["tag_ids"].shape == (1, SEQ)


def test_concurrent_requests_match_sequential(export_root, chinese_vocab_file):
    _, export_dir, _ = exported("classification", export_root, chinese_vocab_file)
    serve_text, _ = load_signatures(export_dir)
    texts = corpora.people_daily_lines()[:40] + ["", "好"]
    requests = [texts[i % len(texts):i % len(texts) + 1 + i % 3] for i in range(320)]
    want = [serve_text(text=tf.constant(r))["logits"].numpy() for r in requests]
    got: list = [None] * len(requests)
    errors: list = []

    def worker(k: int) -> None:
        try:
            for i in range(k, len(requests), 8):
                got[i] = serve_text(text=tf.constant(requests[i]))["logits"].numpy()
        except Exception as e:  # noqa: BLE001 - collected and reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_array_equal(a, b, err_msg=f"request {i}")


# --- the op check ---------------------------------------------------------------------------------


def test_check_serving_flags_tf_text_op_newer_than_2_12(tmp_path, capsys):
    import tensorflow_text as tf_text

    module = tf.Module()
    module.f = tf.function(lambda x: tf_text.utf8_binarize(x),
                           input_signature=[tf.TensorSpec([None], tf.string)])
    tf.saved_model.save(module, str(tmp_path / "1"), signatures={"serving_default": module.f})
    report = check_serving.check_saved_model(str(tmp_path / "1"))
    assert report.non_core_ops == ["TFText>Utf8Binarize"]
    assert report.availability == {"2.12": {"TFText>Utf8Binarize": False},
                                   "2.20": {"TFText>Utf8Binarize": True}}
    assert not report.ok and report.problems["2.20"] == []
    assert "added to TF Text after 2.12.1" in report.problems["2.12"][0]
    assert check_serving.main([str(tmp_path / "1")]) == 1
    assert "TF Serving 2.12: FAIL" in capsys.readouterr().out
    assert check_serving.main([str(tmp_path / "1"), "--serving_versions=2.20"]) == 0


@pytest.mark.slow
def test_op_lists_match_this_tf_text():
    from tfbert.export import tf_core_ops, tf_text_ops

    assert len(tf_text_ops.TF_TEXT_OPS["2.12.1"]) == 35
    assert tf_text_ops.TF_TEXT_OPS["2.20.0"] - tf_text_ops.TF_TEXT_OPS["2.12.1"] == {
        "TFText>RoundRobinGenerateMasks", "TFText>RoundRobinTrim", "TFText>Utf8Binarize"}
    assert tf_text_ops.tf_text_release_for_serving("2.16.1") == "2.12.1"
    assert tf_text_ops.tf_text_release_for_serving("2.20") == "2.20.0"
    with pytest.raises(ValueError, match="no recorded TF Text release"):
        tf_text_ops.tf_text_release_for_serving("2.11")
    assert len(tf_core_ops.CORE_OPS["2.12.1"]) == 1838
    assert len(tf_core_ops.CORE_OPS["2.20.0"]) == 1907
    # This project's TF Text (2.21) registers exactly the 2.20.0 ops (the docstring's claim),
    # measured the documented way, in a process that has not imported tensorflow_text.
    proc = subprocess.run([sys.executable, tf_text_ops.__file__], capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert set(json.loads(proc.stdout)["tf_text_ops"]) == tf_text_ops.TF_TEXT_OPS["2.20.0"]


# --- pair classification and encoder exports (the module in-process, no save) ---------------------


def test_pair_classifier_and_encoder_signatures(tmp_path, chinese_vocab_file):
    from tfbert.export import load_for_export
    from tfbert.export.saved_model import BertServingModule

    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").readlines())
    model, metadata = tiny_model("classification", vocab_size)
    tfbert.save_pretrained(model, str(tmp_path / "pair"), vocab_file=chinese_vocab_file,
                           metadata={**metadata, "pair": True})
    tfbert.save_pretrained(model.encoder, str(tmp_path / "encoder"),
                           vocab_file=chinese_vocab_file)  # a pretrained model: no task
    a = corpora.people_daily_lines()[:3] + [""]
    b = [text for text, _ in corpora.reviews()[:3]] + ["很好"]
    loaded, vocab_file, spec, _ = load_for_export(str(tmp_path / "pair"))
    assert spec.pair and spec.has_text_b
    module = BertServingModule(loaded, vocab_file, spec)
    features = tfbert.BertPreprocessor(chinese_vocab_file, SEQ)((tf.constant(a), tf.constant(b)))
    got = module.serve_text(tf.constant(a), tf.constant(b))
    np.testing.assert_allclose(got["logits"].numpy(), model(features, training=False).numpy(),
                               atol=TOLERANCE)
    with pytest.raises(tf.errors.InvalidArgumentError, match="same number of strings"):
        module.serve_text(tf.constant(a), tf.constant(b[:2]))

    encoder, vocab_file, spec, _ = load_for_export(str(tmp_path / "encoder"), max_seq_length=16)
    assert (spec.task, spec.seq_length, spec.has_text_b) == ("encoder", 16, False)
    module = BertServingModule(encoder, vocab_file, spec)
    got = module.serve_text(tf.constant(a))
    features = tfbert.BertPreprocessor(chinese_vocab_file, 16)(tf.constant(a))
    want = model.encoder(features, training=False)
    for name in ("pooled_output", "sequence_output"):
        np.testing.assert_allclose(got[name].numpy(), want[name].numpy(), atol=TOLERANCE)
    np.testing.assert_array_equal(got["input_mask"].numpy(), features["input_mask"].numpy())


def test_trimmed_length():
    from tfbert.tasks.serving_ops import trimmed_length

    def length(rows, t: int = 32) -> int:
        return int(trimmed_length(tf.constant(rows, tf.int32, shape=np.shape(rows)), t))

    assert length([[1] * 5 + [0] * 27]) == 16
    assert length([[1] * 17 + [0] * 15]) == 32
    assert length([[1] * 16 + [0] * 16, [1] * 3 + [0] * 29]) == 16
    assert length([[0] * 40 + [1] + [0] * 23], t=64) == 48  # a lone attended position counts
    assert length([[0] * 32]) == 16
    assert length(np.zeros((0, 32), int)) == 16  # an empty batch
    assert length([[1] * 18 + [0] * 2], t=20) == 20  # never past T
    assert length([[2] * 3 + [0] * 5], t=8) == 8  # any nonzero attends


@pytest.mark.parametrize("kind", ["ner", "qa", "encoder"])
def test_trim_padding_leaves_attended_positions_unchanged(kind, tmp_path, chinese_vocab_file):
    """A batch of short texts runs at 16 positions instead of SEQ: per-position outputs agree
    with the untrimmed export where any row attends and read 0 past the cut; the decoded
    outputs are identical; a short row batched with a full-length one (no cut) agrees too."""
    import dataclasses

    from tfbert.export import load_for_export
    from tfbert.export.saved_model import BertServingModule

    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").readlines())
    model, metadata = tiny_model("classification" if kind == "encoder" else kind, vocab_size)
    if kind == "encoder":
        model, metadata = model.encoder, None
    tfbert.save_pretrained(model, str(tmp_path), vocab_file=chinese_vocab_file, metadata=metadata)
    loaded, vocab_file, spec, _ = load_for_export(str(tmp_path), max_seq_length=SEQ)
    assert spec.trim_padding
    trimmed = BertServingModule(loaded, vocab_file, spec)
    full = BertServingModule(loaded, vocab_file, dataclasses.replace(spec, trim_padding=False))
    short = ["人民日报", "北京欢迎你。", ""]
    inputs = [tf.constant(short)] + ([tf.constant(["在哪里？", "谁？", "何时"])]
                                     if kind == "qa" else [])
    got, want = (module.serve_text(*inputs) for module in (trimmed, full))
    per_position = {"ner": ["logits"], "qa": ["start_logits", "end_logits"],
                    "encoder": ["sequence_output"]}[kind]
    mask = want["input_mask"].numpy() if kind == "encoder" else None
    for name in want:
        a, b = got[name].numpy(), want[name].numpy()
        if name in per_position:
            np.testing.assert_allclose(a[:, :16], b[:, :16], atol=TOLERANCE)
            assert not a[:, 16:].any() and b[:, 16:].any(), name  # the cut happened
        elif a.dtype.kind == "f":
            np.testing.assert_allclose(a, b, atol=TOLERANCE)
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)
    if mask is not None:
        assert mask[:, 16:].sum() == 0
    # Batched with a row as long as SEQ (nothing cut), the short rows' outputs are the same.
    long = "".join(corpora.people_daily_lines()[:4])
    batched = trimmed.serve_text(*(tf.concat([x, tf.constant([long])], 0) for x in inputs))
    for name in per_position:
        np.testing.assert_allclose(batched[name].numpy()[:3, :16], got[name].numpy()[:, :16],
                                   atol=TOLERANCE)
        assert batched[name].numpy()[3, 16:].any()


def test_load_for_export_errors(tmp_path, chinese_vocab_file):
    from tfbert.export import load_for_export

    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").readlines())
    model, metadata = tiny_model("classification", vocab_size)
    tfbert.save_pretrained(model, str(tmp_path / "novocab"), metadata=metadata)
    with pytest.raises(FileNotFoundError, match="no vocab.txt"):
        load_for_export(str(tmp_path / "novocab"))
    tfbert.save_pretrained(model, str(tmp_path / "ok"), vocab_file=chinese_vocab_file,
                           metadata=metadata)
    tfbert.save_pretrained(model, str(tmp_path / "wrong"), vocab_file=chinese_vocab_file,
                           metadata={**metadata, "task": "ner"})
    with pytest.raises(ValueError, match="says task 'ner' but the model is a BertClassifier"):
        load_for_export(str(tmp_path / "wrong"))
    with pytest.raises(ValueError, match="exceeds the model's max_position_embeddings 64"):
        load_for_export(str(tmp_path / "ok"), max_seq_length=65)


def test_ner_span_decoding_follows_conlleval_for_bio_and_bioes(chinese_vocab_file):
    from tfbert.export.saved_model import BertServingModule, ExportSpec

    labels = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC"]
    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").readlines())
    keras.utils.set_random_seed(5)
    model = tfbert.BertTokenClassifier(tfbert.BertEncoder(tfbert.BertConfig(
        vocab_size=vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=16, max_position_embeddings=64)), num_classes=len(labels))
    module = BertServingModule(model, chinese_vocab_file, ExportSpec("ner", 24, labels))
    rng = np.random.default_rng(0)
    batch, t = 64, 24
    lengths = rng.integers(0, t - 1, batch)
    tags = rng.integers(0, len(labels), (batch, t))
    positions = np.arange(t)[None, :]
    mask = (positions < lengths[:, None] + 2).astype(np.int32)
    ids = np.where(mask == 1, 20, 0).astype(np.int32)  # a non-"##" piece everywhere
    logits = np.eye(len(labels), dtype=np.float32)[tags]
    ner = module._objects.head  # the NER serving head (tfbert/tasks/ner_serving.py)
    out = ner.decode({"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
                      "segment_ids": tf.zeros_like(ids)}, {"logits": tf.constant(logits)}, None)
    for i in range(batch):
        words = [labels[k] for k in tags[i, 1:lengths[i] + 1]]  # pieces between [CLS]/[SEP]
        want = [(e.start + 1, e.end + 2, e.type) for e in get_entities(words)]
        n = int(out["entity_count"][i])
        have = list(zip(out["entity_token_starts"][i][:n].numpy().tolist(),
                        out["entity_token_ends"][i][:n].numpy().tolist(),
                        [s.decode() for s in out["entity_labels"][i][:n].numpy()], strict=True))
        assert have == want, (i, words)
    # Word pieces: a "##" piece belongs to the word before it and its own tag is ignored.
    continuation = open(chinese_vocab_file, encoding="utf-8").read().splitlines().index("##s")
    is_cont = (rng.random((batch, t)) < 0.4) & (positions >= 2) & (mask == 1)
    out = ner.decode({"input_ids": tf.constant(np.where(is_cont, continuation, ids)),
                      "input_mask": tf.constant(mask), "segment_ids": tf.zeros_like(ids)},
                     {"logits": tf.constant(logits)}, None)
    for i in range(batch):
        last = lengths[i]  # pieces 1..last
        firsts = [p for p in range(1, last + 1) if not is_cont[i, p]]
        ends = firsts[1:] + [last + 1]
        words = [labels[tags[i, p]] for p in firsts]
        want = [(firsts[e.start], ends[e.end], e.type) for e in get_entities(words)]
        n = int(out["entity_count"][i])
        have = list(zip(out["entity_token_starts"][i][:n].numpy().tolist(),
                        out["entity_token_ends"][i][:n].numpy().tolist(),
                        [s.decode() for s in out["entity_labels"][i][:n].numpy()], strict=True))
        assert have == want, (i, words)


# --- cpu_streams ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kinds", [  # 14 s each; fast: test_cpu_streams_errors (the flags)
    pytest.param(("classification",), marks=pytest.mark.slow),
    pytest.param(("ner", "qa"), marks=pytest.mark.slow)])
def test_cpu_streams_export_equals_the_plain_export(kinds, export_root, chinese_vocab_file,
                                                    capsys):
    """--cpu_streams 2: the blocks' kernels are saved cut per stream in place of the originals
    (the same parameter count), every output equals the plain export's, the record and the
    command line say how to serve it, and a process with one intra-op and two inter-op
    threads (the serving set-up it is made for) gives the same outputs."""
    from tfbert.export.__main__ import main

    texts = chinese_texts()
    args = {}
    for kind in kinds:  # (the streamed blocks are the same under every head)
        model_dir, export_dir, _ = exported(kind, export_root, chinese_vocab_file)
        streams_dir = os.path.join(export_root, "saved_models", f"{kind}_streams", "1")
        if kind == "classification":
            assert main([f"--model_dir={model_dir}", f"--export_dir={streams_dir}",
                         "--cpu_streams=2"]) == 0
            assert ("--tensorflow_intra_op_parallelism=1 --tensorflow_inter_op_parallelism=2"
                    in capsys.readouterr().out)
        else:
            assert export_model(model_dir, streams_dir, check=False,
                                cpu_streams=2)["cpu_streams"] == 2
        with open(os.path.join(streams_dir, "assets.extra", "tfbert_export.json"),
                  encoding="utf-8") as f:
            assert json.load(f)["cpu_streams"] == 2
        report = check_serving.check_saved_model(streams_dir)
        assert report.ok and all(
            any("cpu_streams=2" in w and "--tensorflow_inter_op_parallelism=2" in w
                for w in report.warnings[v]) for v in ("2.12", "2.20"))
        assert not any("cpu_streams" in w
                       for w in check_serving.check_saved_model(export_dir).warnings["2.20"])
        saved = {d: tf.train.list_variables(os.path.join(d, "variables", "variables"))
                 for d in (export_dir, streams_dir)}
        sizes = {d: sum(int(np.prod(shape)) for _, shape in v) for d, v in saved.items()}
        assert sizes[streams_dir] == sizes[export_dir]
        count = {d: collections.Counter(name.split("/")[0] for name, _ in v)
                 for d, v in saved.items()}  # {tracked list: variables}
        assert count[streams_dir]["_stream_variables"] == 2 * 20  # 2 layers, 2 streams
        assert (count[streams_dir]["_model_variables"]
                == count[export_dir]["_model_variables"] - 2 * 10)  # the cut kernels left out
        inputs = {"text": texts}
        if kind == "qa":
            inputs["text_b"] = texts[::-1]
        want = load_signatures(export_dir)[0](**{k: tf.constant(v) for k, v in inputs.items()})
        got = load_signatures(streams_dir)[0](**{k: tf.constant(v) for k, v in inputs.items()})
        for name, value in want.items():
            if value.dtype.is_floating:
                np.testing.assert_allclose(got[name].numpy(), value.numpy(), atol=TOLERANCE,
                                           err_msg=f"{kind}/{name}")
            else:
                np.testing.assert_array_equal(got[name].numpy(), value.numpy(),
                                              err_msg=f"{kind}/{name}")
        args[kind] = (streams_dir, inputs)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_NUM_INTRAOP_THREADS="1",
               TF_NUM_INTEROP_THREADS="2")
    proc = subprocess.run([sys.executable, "-c", FRESH_SCRIPT, json.dumps(args)],
                          capture_output=True, text=True, env=env, timeout=300,
                          cwd=export_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fresh = json.loads(proc.stdout.strip().splitlines()[-1])["out"]
    for kind, (streams_dir, inputs) in args.items():
        here = load_signatures(streams_dir)[0](**{k: tf.constant(v) for k, v in inputs.items()})
        for name, value in here.items():
            if value.dtype == tf.string:
                assert fresh[kind][name] == [x.decode() for x in value.numpy().ravel()]
            else:
                np.testing.assert_allclose(np.asarray(fresh[kind][name]), value.numpy(),
                                           atol=TOLERANCE, err_msg=f"{kind}/{name}")


def test_cpu_streams_errors(export_root, chinese_vocab_file, capsys):
    from tfbert.export.__main__ import main

    model_dir, _, _ = exported("classification", export_root, chinese_vocab_file)
    out = os.path.join(export_root, "saved_models", "bad_streams", "1")
    with pytest.raises(ValueError, match="3 streams must divide the 4 attention heads"):
        export_model(model_dir, out, cpu_streams=3, check=False)
    with pytest.raises(ValueError, match="does not combine with jit_compile"):
        export_model(model_dir, out, cpu_streams=2, jit_compile=True, check=False)
    with pytest.raises(SystemExit) as exit_info:
        main([f"--model_dir={model_dir}", f"--export_dir={out}", "--cpu_streams=0"])
    assert exit_info.value.code == 2
    assert "cpu_streams must be a positive int, got 0" in capsys.readouterr().err
