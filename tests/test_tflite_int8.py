"""int8 TFLite (dynamic range) of a CRF tagger: which tensors are int8, the CRF's Viterbi kept
float, tags near the float model's; tflite_eval's NER helpers; bad --tflite values.

The accuracy on real test sets (float vs int8 on sentiment and People's Daily NER) is
experiments/int8_study.py's; these tests pin what the files hold on a tiny random model. The
text-in file's tests convert one more model and are `slow`.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

import tfbert
from tfbert.data import ner
from tfbert.errors import UserError
from tfbert.evaluation.ner import entity_metrics
from tfbert.export import __main__ as export_cli
from tfbert.export import tflite, tflite_eval
from tfbert.export.saved_model import ExportSpec

SEQ = 32
LABELS = list(ner.PEOPLE_DAILY_LABELS)
LAYERS = 1
HIDDEN = 64


def vocab_size(vocab_file: str) -> int:
    with open(vocab_file, encoding="utf-8") as f:
        return len(f.read().splitlines())


@pytest.fixture(scope="module")
def tagger(chinese_vocab_file):
    """A tiny character-level CRF tagger (random weights, transitions that matter)."""
    keras.utils.set_random_seed(11)
    model = tfbert.BertTokenClassifier(tfbert.BertEncoder(tfbert.BertConfig(
        vocab_size=vocab_size(chinese_vocab_file), hidden_size=HIDDEN,
        num_hidden_layers=LAYERS, num_attention_heads=4, intermediate_size=2 * HIDDEN,
        max_position_embeddings=64, initializer_range=0.2)),
        num_classes=len(LABELS), crf=True)
    rng = np.random.default_rng(11)
    model.crf.transitions.assign(2 * rng.normal(size=(7, 7)).astype("float32"))
    model.crf.start_transitions.assign(rng.normal(size=7).astype("float32"))
    spec = ExportSpec("ner", SEQ, LABELS, long_input="windows", doc_stride=SEQ // 2,
                      token_separator="")
    return model, spec


@pytest.fixture(scope="module")
def files(tagger, chinese_vocab_file, tmp_path_factory):
    model, spec = tagger
    out = str(tmp_path_factory.mktemp("int8"))
    return tflite.export_tflite(model, spec, chinese_vocab_file, out, ("float32", "int8"),
                                kinds=("ids",))


@pytest.fixture(scope="module")
def text_file(tagger, chinese_vocab_file, tmp_path_factory):
    model, spec = tagger
    out = str(tmp_path_factory.mktemp("int8_text"))
    return tflite.export_tflite(model, spec, chinese_vocab_file, out, ("float32",),
                                kinds=("text",))["model_text_float32.tflite"]["path"]


@pytest.fixture(scope="module")
def examples():
    """Test sentences of the built-in NER corpus that fit one window (SEQ - 2 characters)."""
    return [e for e in ner.people_daily_ner("test") if len(e.tokens) <= SEQ - 2][:32]


@pytest.fixture(scope="module")
def many_examples():
    """256 such sentences: on random weights one flipped Viterbi path moves 32 sentences'
    agreement by a point (97.7% on the first 32, 98.6% on the first 256)."""
    return [e for e in ner.people_daily_ner("test") if len(e.tokens) <= SEQ - 2][:256]


def read(info) -> bytes:
    with open(info["path"], "rb") as f:
        return f.read()


def run_ids(info, features):
    return tflite.run_tflite(tflite.make_interpreter(info["path"], text_ops=False),
                             features.inputs())


def test_int8_has_int8_matmul_weights_and_float_activations(files, chinese_vocab_file):
    ops = tflite.tflite_op_inputs(read(files["model_ids_int8.tflite"]))
    matmuls = [inputs for name, inputs in ops if name == "FULLY_CONNECTED"]
    int8 = [w for _, w, *_ in matmuls if w[0] == "INT8"]
    # q, k, v, attention output, intermediate, output: six per layer, each per output channel
    assert len(int8) == 6 * LAYERS
    assert all(scales in (HIDDEN, 2 * HIDDEN) and elements >= 1024
               for _, elements, scales in int8), int8
    assert all(x[0] == "FLOAT32" for x, *_ in matmuls)  # activations stay float
    # the head (HIDDEN x 7 weights, under 1,024) stays float
    assert [w for _, w, *_ in matmuls if w[0] != "INT8"] == [("FLOAT32", HIDDEN * 7, 0)]
    gathers = [inputs[0] for name, inputs in ops if name == "GATHER" and inputs[0][0] == "INT8"]
    # the word embeddings, one scale
    assert gathers == [("INT8", vocab_size(chinese_vocab_file) * HIDDEN, 1)]
    with_int8 = {name for name, inputs in ops if any(t == "INT8" for t, _, _ in inputs)}
    assert with_int8 == {"FULLY_CONNECTED", "GATHER", "DEQUANTIZE"}, with_int8
    assert not any(t == "INT8" for _, inputs in tflite.tflite_op_inputs(
        read(files["model_ids_float32.tflite"])) for t, _, _ in inputs)
    assert files["model_ids_int8.tflite"]["bytes"] <= 0.35 * files[
        "model_ids_float32.tflite"]["bytes"]


def test_int8_crf_decodes_its_emissions_with_the_float_viterbi(tagger, files, examples,
                                                                 chinese_vocab_file):
    """The CRF is not quantized: the int8 file's tags are the Keras CRF's Viterbi path over
    the int8 file's own logits, exactly."""
    model, spec = tagger
    features = tflite_eval.ner_features(examples, chinese_vocab_file, spec)
    out = run_ids(files["model_ids_int8.tflite"], features)
    length = features.input_mask.sum(1) - 2
    chain = (np.arange(SEQ)[None] >= 1) & (np.arange(SEQ)[None] <= length[:, None])
    np.testing.assert_array_equal(out["tag_ids"], model.decode(out["logits"], chain).numpy())


def test_int8_crf_tags_stay_close_to_float(tagger, files, many_examples, chinese_vocab_file):
    """On the tiny random model: int8 logits within 5% of the float logits' spread, and at
    least 98% of the characters get the float model's tag (98.6% here; random weights leave
    more positions near a tie than trained ones: the 2-layer hidden-128 CRF model fine-tuned
    on People's Daily agrees on 99.96% of its test characters, experiments/int8_study.py)."""
    model, spec = tagger
    features = tflite_eval.ner_features(many_examples, chinese_vocab_file, spec)
    want = model(features.inputs(), training=False).numpy()
    f32 = run_ids(files["model_ids_float32.tflite"], features)
    int8 = run_ids(files["model_ids_int8.tflite"], features)
    on = features.input_mask.astype(bool)
    spread = want[on].max() - want[on].min()
    assert np.abs(int8["logits"] - want)[on].max() < 0.05 * spread
    chain = f32["tag_ids"] >= 0
    agreement = np.mean(int8["tag_ids"][chain] == f32["tag_ids"][chain])
    assert agreement >= 0.98, agreement


def keras_tags(tagger, examples, vocab_file):
    model, spec = tagger
    features = tflite_eval.ner_features(examples, vocab_file, spec)
    logits = model(features.inputs(), training=False).numpy()
    return ner.decode_logits(features, logits, LABELS, model.decode)


def test_ner_tags_and_scores_of_the_ids_file_equal_keras(tagger, files, examples,
                                                         chinese_vocab_file):
    _, spec = tagger
    want = keras_tags(tagger, examples, chinese_vocab_file)
    assert any(tag != "O" for tags in want for tag in tags)
    path = files["model_ids_float32.tflite"]["path"]
    assert tflite_eval.ner_tags(path, examples, chinese_vocab_file, spec, batch_size=7) == want
    scores = tflite_eval.evaluate_ner(path, examples, chinese_vocab_file, spec)
    assert scores == entity_metrics([e.tags for e in examples], want)
    with pytest.raises(UserError, match="NER scores need a NER model, not task "
                                        "'classification'"):
        tflite_eval.ner_features(examples, chinese_vocab_file,
                                 ExportSpec("classification", SEQ, ["a", "b"]))


@pytest.mark.slow
def test_ner_tags_of_the_text_file_equal_keras(tagger, text_file, examples,
                                               chinese_vocab_file):
    """One-window sentences: the text file (its own tokenizer) tags them as Keras does."""
    _, spec = tagger
    assert tflite_eval.ner_tags(text_file, examples, chinese_vocab_file, spec,
                                batch_size=7) == keras_tags(tagger, examples, chinese_vocab_file)


@pytest.mark.slow
def test_text_file_reads_the_first_window_only(tagger, files, text_file, chinese_vocab_file):
    """A sentence longer than one window: the ids file tags every character, the text file
    those of its first window and "O" past them."""
    _, spec = tagger
    long = next(e for e in ner.people_daily_ner("test") if len(e.tokens) > 2 * SEQ)
    ids = tflite_eval.ner_tags(files["model_ids_float32.tflite"]["path"], [long],
                               chinese_vocab_file, spec)[0]
    text = tflite_eval.ner_tags(text_file, [long], chinese_vocab_file, spec)[0]
    first_window = tflite_eval.ner_features([long], chinese_vocab_file, spec, text_model=True)
    past = [i for i, piece in enumerate(first_window.read_pieces[0]) if piece < 0]
    assert len(ids) == len(text) == len(long.tokens) > len(past) > SEQ
    assert {text[i] for i in past} == {"O"} and {ids[i] for i in past} != {"O"}


def test_every_quantization_is_offered_and_unknown_ones_refused(tagger):
    model, _ = tagger
    tflite.check_tflite_model(model, ("float32", "float16", "int8"))  # CRF int8 offered
    with pytest.raises(UserError, match=r"unknown quantization\(s\)/kind\(s\) \['int4'\]"):
        tflite.check_tflite_model(model, ("int8", "int4"))


def test_cli_refuses_an_unknown_quantization_in_one_line(tmp_path, capsys):
    assert export_cli.tflite_quantizations(" int8,float32,, int8 ") == ("int8", "float32")
    assert export_cli.tflite_quantizations("") == ()
    with pytest.raises(SystemExit) as exit_info:  # refused before the model folder is read
        export_cli.main(["--model_dir", str(tmp_path / "none"), "--export_dir",
                         str(tmp_path / "out"), "--tflite=int8,INT4"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == ("python -m tfbert.export: error: --tflite 'int8,INT4': unknown quantization "
                   "'INT4'; use a comma-separated list of float32, float16, int8"), err
    assert not (tmp_path / "out").exists()
