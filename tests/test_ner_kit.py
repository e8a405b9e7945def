"""The NER kit: windows over long sentences (training, evaluation, the SavedModel's text path and
its ids-in helper), label alignment, entity metrics against seqeval, CRF export parity, and the
bad-input errors (doc_stride, unknown tags); a CRF model is offered TFLite int8.

Export checks run the serving module in-process on tiny random-init models (T = 16, so People's
Daily sentences need several windows); the SavedModel file round trip and TFLite are slow.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from model_test_utils import tiny_config_file
from task_test_utils import learnable_conll_lines

import tfbert
from tfbert.data import corpora, ner
from tfbert.errors import UserError
from tfbert.evaluation.ner import entity_metrics, entity_spans
from tfbert.export import window_inputs

LABELS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
PD_LABELS = list(ner.PEOPLE_DAILY_LABELS)
SEQ = 16
STRIDE = 5


@pytest.fixture(scope="module")
def english_tokenizer(tmp_path_factory):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "john", "live", "##s", "in", "new",
              "york"]
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return tfbert.BertTokenizer(str(path), lower_case=True)


EXAMPLE = ner.NerExample(("Johns", "lives", "in", "New", "York"),
                         ("B-PER", "O", "O", "B-LOC", "I-LOC"))


# --- training data ---------------------------------------------------------------------------


def test_windows_give_every_token_a_prediction_and_count_it_once(english_tokenizer):
    # john ##s live ##s in new york: 7 pieces; T = 6 holds 4, stride 2 -> windows at 0, 2, 4
    # (window_spans(7, 4, 2) = [(0, 4), (2, 4), (4, 3)]).
    f = ner.encode_examples([EXAMPLE], english_tokenizer, 6, LABELS, long_input="windows",
                            doc_stride=2)
    np.testing.assert_array_equal(f.input_ids, [[2, 5, 7, 6, 7, 3], [2, 6, 7, 8, 9, 3],
                                                [2, 8, 9, 10, 3, 0]])
    np.testing.assert_array_equal(f.input_mask[2], [1, 1, 1, 1, 1, 0])
    np.testing.assert_array_equal(f.window_example, [0, 0, 0])
    np.testing.assert_array_equal(f.label_ids, [[-100, 3, -100, 0, -100, -100],
                                                [-100, 0, -100, 0, 1, -100],
                                                [-100, 0, 1, 2, -100, -100]])
    # Max context (is_max_context): pieces 0-2 window 0, 3-4 window 1, 5-6 window 2.
    np.testing.assert_array_equal(f.max_context, [[0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 0, 0],
                                                  [0, 0, 1, 1, 0, 0]])
    _, labels, weights = next(iter(ner.make_dataset(f, batch_size=3)))
    # Each token's label counts once (in its max-context window); the CRF takes every one.
    np.testing.assert_array_equal(weights.numpy().sum(), 5)
    np.testing.assert_array_equal(weights[1], [0, 0, 0, 1, 0, 0])
    crf_weights = next(iter(ner.make_dataset(f, batch_size=3, crf=True)))[2]
    np.testing.assert_array_equal(crf_weights.numpy().sum(), 8)
    assert f.read_pieces == [[0, 2, 4, 5, 6]]
    assert f.token_windows == [[0, 0, 1, 2, 2]] and f.token_pieces == [[1, 3, 3, 2, 3]]
    assert f.stats == {"examples": 1, "windows": 3, "long_examples": 1, "truncated_examples": 0,
                       "truncated_entities": 0, "uncovered_tokens": 0, "lost_tokens": 0,
                       "unpredicted_tokens": 0}
    # One-hot logits of the gold labels decode to the gold tags, every token predicted.
    gold = np.eye(len(LABELS), dtype=np.float32)[np.maximum(f.label_ids, 0)]
    assert ner.decode_logits(f, gold, LABELS) == [list(EXAMPLE.tags)]
    # Truncation: the same sentence cut after 4 pieces; in, New, York get no prediction.
    cut = ner.encode_examples([EXAMPLE], english_tokenizer, 6, LABELS, long_input="truncate")
    assert cut.stats["unpredicted_tokens"] == 3 and cut.stats["truncated_entities"] == 1
    gold = np.eye(len(LABELS), dtype=np.float32)[np.maximum(cut.label_ids, 0)]
    assert ner.decode_logits(cut, gold, LABELS) == [["B-PER", "O", "O", "O", "O"]]


def test_label_alignment_all_spreads_a_tag_over_the_pieces(english_tokenizer):
    f = ner.encode_examples([EXAMPLE], english_tokenizer, 10, LABELS, label_alignment="all")
    # [CLS] john ##s live ##s in new york [SEP]: "Johns" is B-PER I-PER, "lives" O O.
    np.testing.assert_array_equal(f.label_ids[0], [-100, 3, 4, 0, 0, 0, 1, 2, -100, -100])
    assert ner.label_list([ner.NerExample(("a", "b"), ("S-PER", "B-LOC"))], "all") == [
        "O", "B-LOC", "I-LOC", "B-PER", "I-PER", "E-PER", "S-PER"]
    with pytest.raises(UserError, match=r"label_alignment 'all' puts 'I-PER' on a word piece "
                                        r"of 'Johns'"):
        ner.encode_examples([EXAMPLE], english_tokenizer, 10, ["O", "B-LOC", "I-LOC", "B-PER"],
                            label_alignment="all")


def test_bad_input_errors(english_tokenizer):
    from tfbert.export.saved_model import ExportSpec
    from tfbert.export.tflite import check_tflite_model
    from tfbert.tasks.ner import NerConfig

    with pytest.raises(UserError, match=r"doc_stride 62 must be in \[1, 62\).*a window stride "
                                        r">= that leaves no overlap"):
        NerConfig(output_dir="x", task_name="people_daily", max_seq_length=64, doc_stride=62)
    with pytest.raises(UserError, match=r"doc_stride 0 must be in \[1, 14\)"):
        ner.encode_examples([EXAMPLE], english_tokenizer, 16, LABELS, long_input="windows",
                            doc_stride=0)
    with pytest.raises(UserError, match=r"doc_stride 14 must be in \[1, 14\)"):
        ExportSpec("ner", 16, LABELS, long_input="windows", doc_stride=14)
    dev = ner.NerExample(("Paris",), ("B-GPE",), source="dev.txt:7")
    with pytest.raises(UserError, match=r"dev.txt:7: tags \['B-GPE'\] are not among the "
                                        r"training labels"):
        ner.encode_examples([dev], english_tokenizer, 16, LABELS)
    model = tfbert.BertTokenClassifier(tfbert.BertEncoder(tfbert.BertConfig(
        vocab_size=11, hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
        intermediate_size=8)), num_classes=5, crf=True)
    check_tflite_model(model, ("float32", "float16", "int8"))  # offered (test_tflite_int8.py)


# --- metrics ---------------------------------------------------------------------------------


def random_tags(rng, scheme: str, length: int) -> list[str]:
    """A random sentence: any tag sequence for BIO (ill-formed ones included), well-formed
    BIOES chunks for BIOES."""
    tags: list[str] = []
    while len(tags) < length:
        kind = str(rng.choice(["PER", "LOC", "ORG"]))
        if scheme == "BIO":
            tags.append(str(rng.choice(["O", f"B-{kind}", f"I-{kind}"])))
            continue
        size = int(rng.integers(0, min(4, length - len(tags) + 1)))
        tags += (["O"] if size == 0 else [f"S-{kind}"] if size == 1 else
                 [f"B-{kind}"] + [f"I-{kind}"] * (size - 2) + [f"E-{kind}"])
    return tags


@pytest.mark.parametrize("scheme", ["BIO", "BIOES"])
def test_entity_metrics_equal_seqeval(scheme):
    from seqeval.metrics import classification_report
    from seqeval.scheme import IOBES

    rng = np.random.default_rng({"BIO": 0, "BIOES": 1}[scheme])
    gold = [random_tags(rng, scheme, int(rng.integers(1, 12))) for _ in range(300)]
    # Predictions: the gold sentence, or (30%) another random one of its length.
    pred = [g if rng.random() < 0.3 else random_tags(rng, scheme, len(g)) for g in gold]
    ours = entity_metrics(gold, pred)
    modes = [{}] if scheme == "BIO" else [{}, {"mode": "strict", "scheme": IOBES}]
    for mode in modes:  # seqeval's default mode (conlleval) and, for BIOES, strict IOBES
        report = classification_report(gold, pred, output_dict=True, zero_division=0, **mode)
        for kind, theirs in report.items():
            if kind in ("micro avg", "macro avg", "weighted avg"):
                continue
            mine = ours["per_type"][kind]
            assert (mine["precision"], mine["recall"], mine["f1"], mine["support"]) == \
                pytest.approx((theirs["precision"], theirs["recall"], theirs["f1-score"],
                               theirs["support"]), abs=1e-12), (mode, kind)
        micro = report["micro avg"]
        assert (ours["precision"], ours["recall"], ours["f1"]) == pytest.approx(
            (micro["precision"], micro["recall"], micro["f1-score"]), abs=1e-12), mode


# --- the export's windows ----------------------------------------------------------------------


def tiny_tagger(vocab_file: str, crf: bool, seed: int = 0):
    keras.utils.set_random_seed(seed)
    vocab_size = len(open(vocab_file, encoding="utf-8").read().splitlines())
    model = tfbert.BertTokenClassifier(tfbert.BertEncoder(tfbert.BertConfig(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, initializer_range=0.2)),
        num_classes=len(PD_LABELS), crf=crf)
    if crf:  # transitions that matter, so Viterbi differs from the argmax
        rng = np.random.default_rng(seed)
        model.crf.transitions.assign(2 * rng.normal(size=(7, 7)).astype("float32"))
        model.crf.start_transitions.assign(rng.normal(size=7).astype("float32"))
    return model


def sentences(n: int) -> list[ner.NerExample]:
    """Real People's Daily text (up to 80 characters each) as character tokens, tags unused."""
    lines = [line[:80] for line in corpora.people_daily_lines()[:n]]
    return [ner.NerExample(tuple(line), ("O",) * len(line), separator="") for line in lines]


def check_windowed_ner(serve_text, model, tokenizer, examples):
    """serving_default on whole sentences equals the Keras model read by the training rules."""
    texts = [e.text for e in examples]
    got = {k: v.numpy() for k, v in serve_text(tf.constant(texts)).items()}
    # Logits per piece = the ids-in helper's windows through Keras, merged by max context.
    batch = window_inputs.make_windows(tokenizer, texts, SEQ, STRIDE)
    assert len(batch.row) > len(texts) + 5  # several sentences need several windows
    merged = window_inputs.merge_ner(batch, model(batch.inputs, training=False).numpy())
    for i, want in enumerate(merged):
        np.testing.assert_allclose(got["logits"][i, :len(want)], want, atol=1e-5)
        assert not got["logits"][i, len(want):].any()
        np.testing.assert_array_equal(got["token_starts"][i, :len(want)], batch.starts[i])
    # Tags: training's decode (CRF: Viterbi over each whole sentence) gives the same entities
    # and, per character, the same word tags.
    features = ner.encode_examples(examples, tokenizer, SEQ, PD_LABELS, long_input="windows",
                                   doc_stride=STRIDE)
    assert features.stats["unpredicted_tokens"] == 0
    viterbi = model.decode if model.crf is not None else None
    tags = ner.decode_logits(features, model(features.inputs(), training=False).numpy(),
                             PD_LABELS, viterbi)
    for i, example in enumerate(examples):
        n = int(got["entity_count"][i])
        have = [(int(s), int(e), t.decode()) for s, e, t in zip(
            got["entity_starts"][i][:n], got["entity_ends"][i][:n], got["entity_labels"][i][:n],
            strict=True)]
        want = [(d["start"], d["end"], d["type"])
                for d in entity_spans(tags[i], example.token_offsets(), example.text)]
        assert have == want, i
        words = int(got["word_count"][i])
        assert [t.decode() for t in got["word_tags"][i][:words]] == tags[i]
        assert got["word_starts"][i][:words].tolist() == [s for s, _ in example.token_offsets()]
    return tags


@pytest.mark.parametrize("graph", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_windowed_crf_export_equals_keras(graph, chinese_vocab_file):
    """The windowed text path with a CRF, eagerly (fast: the same ops without tracing) and as
    the traced signatures."""
    from tfbert.export.saved_model import BertServingModule, ExportSpec

    model = tiny_tagger(chinese_vocab_file, crf=True)
    spec = ExportSpec("ner", SEQ, PD_LABELS, long_input="windows", doc_stride=STRIDE,
                      token_separator="")
    module = BertServingModule(model, chinese_vocab_file, spec)
    serve_text = module.serve_text if graph else module._serve_text
    serve_ids = module.serve_ids if graph else module._serve_ids
    examples = sentences(6)
    examples.append(ner.NerExample(tuple("BERT模型"), ("O",) * 6, separator=""))  # 4 chars, 1 piece
    tokenizer = tfbert.BertTokenizer(chinese_vocab_file)
    tags = check_windowed_ner(serve_text, model, tokenizer, examples)
    features = ner.encode_examples(examples, tokenizer, SEQ, PD_LABELS, long_input="windows",
                                   doc_stride=STRIDE)
    argmax = ner.decode_logits(features, model(features.inputs(), training=False).numpy(),
                               PD_LABELS)
    assert tags != argmax  # the transitions changed paths
    # serve_ids answers per window: Viterbi over each window's pieces.
    batch = window_inputs.make_windows(tokenizer, [examples[0].text], SEQ, STRIDE)
    out = serve_ids({k: tf.constant(v) for k, v in batch.inputs.items()})
    chain = (np.arange(SEQ) >= 1) & (np.arange(SEQ)[None, :]
                                     <= batch.inputs["input_mask"].sum(1)[:, None] - 2)
    np.testing.assert_array_equal(out["tag_ids"].numpy(), model.decode(
        model(batch.inputs, training=False), chain).numpy())
    # An empty batch and an empty text.
    empty = serve_text(tf.constant([], tf.string))
    assert empty["logits"].shape[0] == 0 and empty["word_tags"].shape[0] == 0
    blank = serve_text(tf.constant(["", "北京"]))
    assert blank["tag_ids"].numpy()[0].tolist() == [-1, -1]
    assert int(blank["word_count"][0]) == 0


def test_windowed_classification_export_averages_windows(chinese_vocab_file):
    from tfbert.export.saved_model import BertServingModule, ExportSpec

    keras.utils.set_random_seed(1)
    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").read().splitlines())
    model = tfbert.BertClassifier(tfbert.BertEncoder(tfbert.BertConfig(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, initializer_range=0.2)),
        num_classes=3)
    labels = ["a", "b", "c"]
    texts = corpora.people_daily_lines()[:4] + ["", "好"]
    module = BertServingModule(model, chinese_vocab_file, ExportSpec(
        "classification", SEQ, labels, long_input="windows", doc_stride=STRIDE))
    got = module._serve_text(tf.constant(texts))  # eagerly (the traced form: the slow tests)
    tokenizer = tfbert.BertTokenizer(chinese_vocab_file)
    batch = window_inputs.make_windows(tokenizer, texts, SEQ, STRIDE)
    logits = model(batch.inputs, training=False).numpy()
    rows = [logits[batch.row == i].mean(0) for i in range(len(texts))]  # by hand
    np.testing.assert_allclose(got["logits"].numpy(), rows, atol=1e-5)
    np.testing.assert_allclose(window_inputs.merge_classification(batch, logits), rows,
                               atol=1e-6)
    assert [n for n in np.bincount(batch.row)][:4] == [
        len(tfbert.data.windows.window_spans(len(tokenizer.tokenize([t])[0]), SEQ - 2, STRIDE))
        for t in texts[:4]]
    assert [s.decode() for s in got["labels"].numpy()] == [labels[i] for i in
                                                            np.argmax(rows, axis=1)]
    # A short text is one window, packed as without windows.
    short = tfbert.BertPreprocessor(chinese_vocab_file, SEQ)(tf.constant(["好"]))
    np.testing.assert_array_equal(batch.inputs["input_ids"][batch.row == 5],
                                  short["input_ids"])


@pytest.mark.slow
def test_windowed_pair_classification_export(chinese_vocab_file):
    from tfbert.export.saved_model import BertServingModule, ExportSpec

    keras.utils.set_random_seed(1)
    vocab_size = len(open(chinese_vocab_file, encoding="utf-8").read().splitlines())
    model = tfbert.BertClassifier(tfbert.BertEncoder(tfbert.BertConfig(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64)), num_classes=2)
    lines = corpora.people_daily_lines()[:3]
    texts = [lines[0], "短句", lines[1], lines[2], "", "好"]
    texts_b = ["问", lines[2], "", lines[0], "长", "坏"]
    module = BertServingModule(model, chinese_vocab_file, ExportSpec(
        "classification", SEQ, ["x", "y"], pair=True, long_input="windows", doc_stride=STRIDE))
    got = module.serve_text(tf.constant(texts), tf.constant(texts_b))["logits"].numpy()
    tokenizer = tfbert.BertTokenizer(chinese_vocab_file)
    batch = window_inputs.make_windows(tokenizer, texts, SEQ, STRIDE, texts_b=texts_b)
    logits = model(batch.inputs, training=False).numpy()
    np.testing.assert_allclose(got, window_inputs.merge_classification(batch, logits), atol=1e-5)
    # a' = the first max(T - 3 - len(b), (T - 3) // 2) pieces of a, windows over b.
    segment_a = lambda i: ((batch.inputs["segment_ids"] == 0) & (batch.inputs["input_mask"] == 1)
                           )[batch.row == i].sum(1) - 2  # pieces of a' in each window
    assert segment_a(0).tolist() == [SEQ - 4]  # b = one piece: a keeps T - 4, one window
    b_pieces = len(tokenizer.tokenize([texts_b[1]])[0])
    assert segment_a(1).tolist() == [2] * len(tfbert.data.windows.window_spans(
        b_pieces, SEQ - 5, STRIDE))  # a short: whole in every window over the long b
    assert segment_a(2).tolist() == [SEQ - 3]  # b empty: one window, a cut to T - 3
    assert segment_a(3).tolist() == [(SEQ - 3) // 2] * int((batch.row == 3).sum())
    assert (batch.row == 3).sum() > 1
    assert segment_a(4).tolist() == [0]  # a empty
    short = tfbert.BertPreprocessor(chinese_vocab_file, SEQ)((tf.constant(["好"]),
                                                              tf.constant(["坏"])))
    np.testing.assert_array_equal(batch.inputs["input_ids"][batch.row == 5], short["input_ids"])


@pytest.mark.slow
def test_windowed_export_saved_and_tflite(tmp_path, chinese_vocab_file):
    """The SavedModel file (tfbert.save_pretrained + export_model with windows metadata) gives
    the Keras model's outputs; the CRF model converts to TFLite float32 with builtin ops and
    gives the Keras Viterbi tags for the helper's windows."""
    from tfbert.export import export_model
    from tfbert.export.tflite import make_interpreter, run_tflite

    model = tiny_tagger(chinese_vocab_file, crf=True, seed=3)
    model_dir = str(tmp_path / "model")
    tfbert.save_pretrained(model, model_dir, vocab_file=chinese_vocab_file, metadata={
        "task": "ner", "labels": PD_LABELS, "max_seq_length": SEQ, "lower_case": True,
        "token_separator": "", "long_input": "windows", "doc_stride": STRIDE})
    result = export_model(model_dir, str(tmp_path / "saved_models" / "ner"),
                          tflite=("float32",), text_tflite=False)
    assert result["serving_check"]["ok"], result["serving_check"]["report"]
    assert {"word_tags", "word_starts", "word_ends", "word_count"} <= set(
        result["signatures"]["serving_default"]["outputs"])
    loaded = tfbert.checkpoints.load_model(model_dir)
    serve = tf.saved_model.load(result["export_dir"]).signatures["serving_default"]
    examples = sentences(8)
    tokenizer = tfbert.BertTokenizer(chinese_vocab_file)
    check_windowed_ner(lambda text: serve(text=text), loaded, tokenizer, examples)
    interpreter = make_interpreter(result["tflite"]["model_ids_float32.tflite"]["path"], False)
    batch = window_inputs.make_windows(tokenizer, [e.text for e in examples], SEQ, STRIDE)
    out = run_tflite(interpreter, batch.inputs)
    chain = (np.arange(SEQ) >= 1) & (np.arange(SEQ)[None, :]
                                     <= batch.inputs["input_mask"].sum(1)[:, None] - 2)
    np.testing.assert_array_equal(out["tag_ids"], loaded.decode(
        loaded(batch.inputs, training=False), chain).numpy())


@pytest.mark.slow
def test_whitespace_words_export(tmp_path):
    """token_separator " ": words are the whitespace-separated tokens (several pieces each);
    the word outputs equal training's decode of the same sentence."""
    from tfbert.export.saved_model import BertServingModule, ExportSpec

    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "john", "live", "##s", "in", "new",
              "york", "-", "."]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    model = tiny_tagger(str(vocab), crf=True, seed=4)
    module = BertServingModule(model, str(vocab), ExportSpec(
        "ner", 8, PD_LABELS, long_input="windows", doc_stride=3, token_separator=" "))
    example = ner.NerExample(("Johns", "lives", "in", "New-York", "."), ("O",) * 5)
    tokenizer = tfbert.BertTokenizer(str(vocab))
    features = ner.encode_examples([example], tokenizer, 8, PD_LABELS, long_input="windows",
                                   doc_stride=3)
    tags = ner.decode_logits(features, model.predict(features.inputs(), verbose=0), PD_LABELS,
                             model.decode)
    got = module.serve_text(tf.constant([example.text]))
    n = int(got["word_count"][0])
    assert n == 5
    assert [t.decode() for t in got["word_tags"][0].numpy()] == tags[0]
    assert list(zip(got["word_starts"][0].numpy().tolist(), got["word_ends"][0].numpy().tolist(),
                    strict=True)) == example.token_offsets()


@pytest.mark.slow
def test_run_ner_windows_crf_all_pieces_learns_and_reloads(tmp_path, chinese_vocab_file):
    """run_ner end to end on sentences longer than one window (max_seq_length 8), with a CRF
    and labels on all pieces: it learns, every token is predicted, and an eval-only reload
    scores the same."""
    from tfbert.tasks.ner import NerConfig, run_ner

    lines = learnable_conll_lines()
    train = tmp_path / "train.txt"
    train.write_text("\n".join(lines), encoding="utf-8")
    config = tiny_config_file(tmp_path / "bert_config.json", chinese_vocab_file)
    common = dict(vocab_file=chinese_vocab_file, max_seq_length=8, doc_stride=3,
                  eval_batch_size=32, distribution_strategy="one_device", verbose=0,
                  label_alignment="all")
    results = run_ner(NerConfig(output_dir=str(tmp_path / "out"), train_file=str(train),
                                dev_file=str(train), test_file=str(train),
                                bert_config_file=config, train_batch_size=16,
                                num_train_epochs=6, learning_rate=3e-3, crf=True, **common))
    assert results["test"]["f1"] > 0.9, results["train"]["history"]
    assert results["data"]["test"]["unpredicted_tokens"] == 0
    assert results["data"]["test"]["windows"] == 2 * 96  # window_spans(9, 6, 3): at 0 and 3
    metadata = tfbert.checkpoints.read_metadata(str(tmp_path / "out" / "model"))
    assert (metadata["long_input"], metadata["doc_stride"], metadata["label_alignment"]) == (
        "windows", 3, "all")
    assert metadata["model_config"]["crf"] is True
    again = run_ner(NerConfig(output_dir=str(tmp_path / "eval"), test_file=str(train),
                              init_checkpoint=str(tmp_path / "out" / "model"), do_train=False,
                              do_eval=False, **common))
    assert again["test"]["f1"] == pytest.approx(results["test"]["f1"])
    cut = run_ner(NerConfig(output_dir=str(tmp_path / "cut"), test_file=str(train),
                            init_checkpoint=str(tmp_path / "out" / "model"), do_train=False,
                            do_eval=False, **{**common, "long_input": "truncate"}))
    assert cut["data"]["test"]["unpredicted_tokens"] == 3 * 96  # 6 of 9 tokens kept
    assert cut["test"]["recall"] < results["test"]["recall"]
