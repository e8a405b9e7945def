"""Length buckets (tfbert.data.length_buckets): the bucket lengths, batches of one bucket cut to
its length (nothing lost or repeated, the counted number of batches, seeded order), outputs
with buckets on equal to off in example order for every task's model, end-to-end runs with
and without, and two replicas under MirroredStrategy."""

from __future__ import annotations

import json
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from model_test_utils import script_result, tiny_config, tiny_config_file
from task_test_utils import learnable_conll_lines

from tfbert.data import classification as cdata
from tfbert.data import length_buckets as lb
from tfbert.data import ner
from tfbert.models.encoder import BertEncoder

ATOL = 1e-5  # buckets on vs off: the same model on the same real positions (float noise)


def test_bucket_lengths():
    assert lb.bucket_lengths(128) == [16, 32, 48, 64, 80, 96, 112, 128]
    assert lb.bucket_lengths(384) == [32, 48, 80, 96, 144, 192, 272, 384]
    assert lb.bucket_lengths(512) == [48, 64, 96, 128, 192, 256, 368, 512]
    assert lb.bucket_lengths(40) == [16, 32, 40]
    assert lb.bucket_lengths(5) == [5]
    for t in range(1, 1100):
        lengths = lb.bucket_lengths(t)
        assert lengths[-1] == t and len(lengths) <= lb.MAX_BUCKETS, t
        assert lengths == sorted(set(lengths)), t
        assert all(x % lb.BUCKET_STEP == 0 for x in lengths[:-1]), t
    with pytest.raises(ValueError, match="max_seq_length"):
        lb.bucket_lengths(0)


def test_flag_on_by_default_and_off_by_false():
    from absl import flags

    from tfbert.cli import common_flags
    from tfbert.tasks.ner import NerConfig

    values = flags.FlagValues()
    common_flags.define_config_flags(NerConfig, values)
    assert values["length_buckets"].default is True
    assert NerConfig(output_dir="o", task_name="people_daily").length_buckets is True
    values(["prog", "--length_buckets=false"])
    assert values.length_buckets is False


def synthetic(n: int, t: int, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """n packed examples of random lengths 1..t: ids 1 + position + 100 * example (0 past the
    length), so every id tells its example and position."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, t + 1, size=n)
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.int32)
    ids = (1 + np.arange(t)[None, :] + 100 * np.arange(n)[:, None]) * mask
    return {"input_ids": ids.astype(np.int32), "input_mask": mask,
            "segment_ids": np.zeros_like(mask)}, lengths


def batch_summary(ds: tf.data.Dataset, t: int, lengths: np.ndarray) -> list[tuple[int, ...]]:
    """Each batch's example ids (from its input_ids), after checking it is one bucket cut to
    that bucket's length, with per-token labels cut alike."""
    table = lb.bucket_lengths(t)
    out = []
    for x, labels, weights in ds:
        ids, width = x["input_ids"].numpy(), x["input_ids"].shape[1]
        examples = ids[:, 0] // 100
        assert width in table
        bucket = table.index(width)
        low = table[bucket - 1] if bucket else 0
        assert all(low < lengths[e] <= width for e in examples), (width, lengths[examples])
        want = (1 + np.arange(width)[None, :] + 100 * examples[:, None]) * (
            np.arange(width)[None, :] < lengths[examples][:, None])
        np.testing.assert_array_equal(ids, want)
        np.testing.assert_array_equal(labels.numpy(), ids % 7)
        assert weights.shape == (len(examples), width)
        out.append(tuple(examples.tolist()))
    return out


def test_training_batches_one_bucket_each_nothing_lost_seeded():
    t, n, batch = 64, 203, 16
    x, lengths = synthetic(n, t)
    labels = x["input_ids"] % 7
    examples = tf.data.Dataset.from_tensor_slices((x, labels, x["input_mask"].astype("float32")))
    make = lambda seed: lb.batch_by_length(examples, batch, t, shuffle=True, seed=seed,
                                           per_token_targets=True)
    ds = make(7)
    steps = lb.num_batches(lengths, t, batch)
    counts = np.bincount(lb.bucket_ids(lengths, t))
    assert steps == sum(-(-c // batch) for c in counts) > -(-n // batch)
    assert int(ds.cardinality()) == steps
    epochs = [batch_summary(ds, t, lengths) for _ in range(2)]
    partial = int(np.sum(counts % batch > 0))
    for epoch in epochs:
        assert len(epoch) == steps
        assert sorted(e for b in epoch for e in b) == list(range(n))  # each example once
        assert [len(b) for b in epoch[:steps - partial]] == [batch] * (steps - partial)
        assert sorted(len(b) for b in epoch[steps - partial:]) == sorted(
            c % batch for c in counts if c % batch)  # each bucket's partial batch at the end
    assert epochs[0] != epochs[1]  # reshuffled each epoch
    widths = [x["input_ids"].shape[1] for x, _, _ in ds.take(8)]
    assert len(set(widths)) > 2, widths  # buckets interleave
    assert batch_summary(make(7), t, lengths) == epochs[0]  # seeded: the same sequence
    assert batch_summary(make(8), t, lengths) != epochs[0]


def test_eval_batches_carry_positions_and_predict_in_order():
    t, n = 48, 61
    x, lengths = synthetic(n, t, seed=1)
    ds = lb.batch_by_length(tf.data.Dataset.from_tensor_slices(x), 8, t)
    positions = np.concatenate([b[lb.INDEX_KEY].numpy() for b in ds])
    assert sorted(positions.tolist()) == list(range(n))
    assert positions.tolist() == np.argsort(lengths, kind="stable").tolist()  # sorted by length
    assert [len(b[lb.INDEX_KEY]) for b in ds] == [8] * 7 + [5] and int(ds.cardinality()) == 8
    cut = np.zeros(n, int)  # each example's batch width: its batch's longest example's bucket
    for b in ds:
        index = b[lb.INDEX_KEY].numpy()
        np.testing.assert_array_equal(b["input_ids"].numpy()[:, 0] // 100, index)
        cut[index] = b["input_ids"].shape[1]
        assert cut[index[0]] == lb.bucket_lengths(t)[lb.bucket_ids(lengths[index], t).max()]
    mask = (np.arange(t)[None, :] < np.array([[10], [20], [40]])).astype(np.int32)
    mixed = {"input_ids": mask * 5, "input_mask": mask, "segment_ids": 0 * mask}
    widths = [b["input_ids"].shape[1] for b in lb.batch_by_length(
        tf.data.Dataset.from_tensor_slices(mixed), 2, t)]
    assert widths == [32, 48], widths  # lengths 10 and 20 (buckets 16, 32) in one batch of 32
    inputs = {k: keras.Input((None,), dtype="int32", name=k) for k in x}
    embedded = keras.layers.Embedding(100 * n + t + 1, 3)(inputs["input_ids"])  # [B, T, 3]
    model = keras.Model(inputs, {"tokens": embedded,
                                 "sum": keras.ops.sum(embedded, axis=1)})  # [B, 3]
    want = model.predict(x, verbose=0)
    got = lb.predict_in_order(model, ds, per_token=True, max_seq_length=t, pad_value=-5.0)
    mask = x["input_mask"][..., None].astype(bool)
    np.testing.assert_allclose(np.where(mask, got["tokens"], 0), np.where(mask, want["tokens"], 0),
                               atol=ATOL)
    assert got["tokens"].shape == (n, t, 3)
    assert all((got["tokens"][i, c:] == -5.0).all() for i, c in enumerate(cut))
    unordered = tf.data.Dataset.from_tensor_slices(x).batch(8)  # no positions: batch order
    np.testing.assert_allclose(lb.predict_in_order(model, unordered)["sum"], want["sum"],
                               atol=ATOL)


# --- the same model, buckets on and off --------------------------------------------------------


@pytest.fixture(scope="module")
def encoder(chinese_vocab_file):
    """One tiny encoder under every task head here (max_position_embeddings 64)."""
    keras.utils.set_random_seed(1)
    return BertEncoder(tiny_config(chinese_vocab_file))


def varied_conll_lines(n: int, seed: int, longest: int = 26) -> list[str]:
    """CoNLL lines of n sentences of 3 to `longest` filler tokens with "bert" (B-ORG) and
    "model c" (B-LOC I-LOC) somewhere in each."""
    return learnable_conll_lines(n, seed, longest)


NER_LABELS = ["O", "B-LOC", "I-LOC", "B-ORG"]


@pytest.fixture(scope="module")
def ner_features(chinese_vocab_file, tmp_path_factory):
    """40 sentences of 6 to 53 word pieces as windows of 32 (the longer ones in two)."""
    from tfbert.text.tokenizer import BertTokenizer

    path = tmp_path_factory.mktemp("ner") / "dev.txt"
    path.write_text("\n".join(varied_conll_lines(40, 2, longest=48)), encoding="utf-8")
    return ner.encode_examples(ner.read_conll(str(path)), BertTokenizer(chinese_vocab_file),
                               32, NER_LABELS, long_input="windows")


def both(make, predict):
    """predict(make(length_buckets)) for False and True."""
    return predict(make(False)), predict(make(True))


def test_classification_single_matches(chinese_vocab_file, encoder):
    from tfbert.evaluation.classification_outputs import predict_logits
    from tfbert.models.classifier import BertClassifier
    from tfbert.text.preprocessor import BertPreprocessor

    model = BertClassifier(encoder, num_classes=3)
    examples = cdata.builtin_examples("sentiment", "dev")[:40]
    pre = BertPreprocessor(chinese_vocab_file, 64)
    off, on = both(lambda on: cdata.make_dataset(examples, pre, None, 16, length_buckets=on),
                   lambda ds: predict_logits(model, ds))
    assert on.shape == (40, 3)
    np.testing.assert_allclose(on, off, atol=ATOL)


@pytest.mark.slow  # 10 s of CPU: tokenizing and tracing twice per form
def test_classification_pairs_and_windows_match(chinese_vocab_file, encoder):
    from tfbert.evaluation.classification_outputs import predict_logits
    from tfbert.models.classifier import BertClassifier, WindowPooledClassifier
    from tfbert.text.preprocessor import BertPreprocessor
    from tfbert.text.tokenizer import BertTokenizer

    model = BertClassifier(encoder, num_classes=3)
    single = cdata.builtin_examples("sentiment", "dev")[:60]
    pairs = [cdata.ClassificationExample(a.text, None, b.text)
             for a, b in zip(single[:30], single[30:], strict=True)]
    off, on = both(lambda on: cdata.make_dataset(pairs, BertPreprocessor(chinese_vocab_file, 64),
                                                 None, 16, length_buckets=on),
                   lambda ds: predict_logits(model, ds))
    np.testing.assert_allclose(on, off, atol=ATOL)
    windows = cdata.encode_windows(single[:30], BertTokenizer(chinese_vocab_file), 32, 16)
    assert windows.stats["documents_over_one_window"] > 0
    pooled = WindowPooledClassifier(model)
    off, on = both(lambda on: cdata.make_window_dataset(windows, None, 8, length_buckets=on),
                   lambda ds: predict_logits(pooled, ds))
    assert on.shape == (30, 3)
    np.testing.assert_allclose(on, off, atol=ATOL)


def test_regression_batches_keep_each_score_with_its_text(chinese_vocab_file):
    from tfbert.tasks.regression import make_dataset
    from tfbert.text.preprocessor import BertPreprocessor

    reviews = cdata.builtin_examples("sentiment", "dev")[:24]
    examples = [cdata.ClassificationExample(e.text, str(i)) for i, e in enumerate(reviews)]
    pre = BertPreprocessor(chinese_vocab_file, 64)
    packed = pre(np.array([e.text for e in examples]))["input_ids"].numpy()
    ds = make_dataset(examples, pre, 8, with_scores=True, shuffle=True, seed=0,
                      length_buckets=True)
    seen = []
    for x, scores in ds:
        rows = scores.numpy().astype(int)  # each score is its example's index
        width = x["input_ids"].shape[1]
        np.testing.assert_array_equal(x["input_ids"], packed[rows, :width])
        assert not packed[rows, width:].any()  # only padding was cut
        seen += rows.tolist()
    assert sorted(seen) == list(range(24)) and int(ds.cardinality()) == len(list(ds))


@pytest.mark.parametrize("crf", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_ner_logits_and_tags_match(ner_features, encoder, crf):
    from tfbert.models.token_classifier import BertTokenClassifier
    from tfbert.tasks.ner import predict_tags

    labels, features = NER_LABELS, ner_features
    assert features.stats["long_examples"] > 0 and features.stats["unpredicted_tokens"] == 0
    model = BertTokenClassifier(encoder, num_classes=len(labels), crf=crf)
    off, on = both(lambda on: ner.make_dataset(features, 8, length_buckets=on),
                   lambda ds: lb.predict_in_order(model, ds, per_token=True,
                                                  max_seq_length=32))
    mask = features.input_mask[..., None].astype(bool)
    np.testing.assert_allclose(np.where(mask, on, 0), np.where(mask, off, 0), atol=ATOL)
    tags_off = predict_tags(model, features, labels, 8)
    tags_on = predict_tags(model, features, labels, 8, length_buckets=True)
    assert tags_on == tags_off  # identical tag paths (Viterbi with the CRF)
    if crf:  # the training loss and Viterbi on a batch cut to its bucket: those of the padded
        loss = model.default_loss()
        labelled = features.label_ids != ner.IGNORE_INDEX
        for x, y, w in ner.make_dataset(features, 8, crf=True, length_buckets=True).take(2):
            rows, width = x[lb.INDEX_KEY].numpy(), x["input_ids"].shape[1]
            logits = off[rows]  # [B, T, C], the padded batch's
            full_y = np.where(labelled, features.label_ids, 0)[rows]
            np.testing.assert_allclose(
                float(loss(y, logits[:, :width], w)),
                float(loss(full_y, logits, labelled[rows].astype("float32"))), rtol=1e-6)
            np.testing.assert_array_equal(
                model.decode(logits[:, :width], x["input_mask"]),
                model.decode(logits, features.input_mask[rows])[:, :width])


@pytest.mark.slow  # 4 s of CPU
def test_qa_logits_match(chinese_vocab_file, encoder):
    from tfbert.data import squad
    from tfbert.data.qa_builtin import builtin_qa_examples
    from tfbert.models.span_labeler import BertSpanLabeler
    from tfbert.tasks.qa import PAST_BUCKET_LOGIT, predict_logits
    from tfbert.text.tokenizer import BertTokenizer

    features, _ = squad.convert_examples(builtin_qa_examples("dev")[:20],
                                         BertTokenizer(chinese_vocab_file), 64, 24, 16)
    model = BertSpanLabeler(encoder)
    off = predict_logits(model, features, 8)
    on = predict_logits(model, features, 8, length_buckets=True)
    mask = np.stack([f.input_mask for f in features]).astype(bool)
    assert len(set(mask.sum(1))) > 1
    for a, b in zip(on, off, strict=True):
        assert a.shape == (len(features), 64)
        np.testing.assert_allclose(np.where(mask, a, 0), np.where(mask, b, 0), atol=ATOL)
        assert (a[~mask] > PAST_BUCKET_LOGIT).sum() > 0  # a bucket's padding keeps its logits


@pytest.mark.slow  # 6 s of CPU
def test_embeddings_match(chinese_vocab_file, encoder):
    from tfbert.models.sentence_encoder import BertSentenceEncoder
    from tfbert.tasks.embedding import _Embedder
    from tfbert.text.preprocessor import BertPreprocessor

    model = BertSentenceEncoder(encoder)
    pre = BertPreprocessor(chinese_vocab_file, 64)
    texts = [e.text for e in cdata.builtin_examples("sentiment", "dev")[:50]]
    off, on = both(lambda on: _Embedder(pre, 16, length_buckets=on),
                   lambda embedder: embedder.embed(model, texts))
    assert on.shape == (50, model.output_shape[-1])
    np.testing.assert_allclose(on, off, atol=ATOL)
    # Contrastive training batches: anchor, positive and negative cut to one length, the
    # bucket of the pair's longest text.
    pairs = _Embedder(pre, 8, length_buckets=True).dataset(
        texts[:20], texts[20:40], texts[30:50], shuffle=True, seed=0)
    table, count = lb.bucket_lengths(64), 0
    for batch in pairs:
        widths = {batch[n]["input_ids"].shape[1] for n in ("anchor", "positive", "negative")}
        longest = max(int(batch[n]["input_mask"].numpy().sum(1).max())
                      for n in ("anchor", "positive", "negative"))
        assert len(widths) == 1 and table[lb.bucket_ids([longest], 64)[0]] in widths
        count += len(batch["anchor"]["input_ids"])
    assert count == 20


# --- end to end, and under MirroredStrategy ----------------------------------------------------


def marker_texts(n: int, seed: int) -> list[str]:
    """JSONL rows of texts of 3 to 28 characters, labelled by their first: yes for 好大多上."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        text = "".join(rng.choice(list("好差大小多少上下"), size=int(rng.integers(3, 29))))
        rows.append(json.dumps({"text": text, "label": "yes" if text[0] in "好大多上" else "no"},
                               ensure_ascii=False) + "\n")
    return rows


E2E_TOLERANCE = 0.05  # dev accuracy / entity F1, buckets on vs off (both near 1)


@pytest.mark.slow  # 4 tiny fine-tuning runs (30 s of CPU)
def test_runs_with_and_without_buckets_agree(tmp_path, chinese_vocab_file):
    from tfbert.tasks.classification import ClassificationConfig, run_classification
    from tfbert.tasks.ner import NerConfig, run_ner

    config = tiny_config_file(tmp_path / "bert_config.json", chinese_vocab_file)
    files = {}
    for name, lines in (("train.jsonl", marker_texts(256, 0)), ("dev.jsonl", marker_texts(64, 1)),
                        ("train.txt", varied_conll_lines(128, 0)),
                        ("dev.txt", varied_conll_lines(48, 1))):
        files[name] = tmp_path / name
        files[name].write_text(("" if name.endswith("jsonl") else "\n").join(lines),
                               encoding="utf-8")
    common = dict(bert_config_file=config, vocab_file=chinese_vocab_file, max_seq_length=32,
                  train_batch_size=16, learning_rate=3e-3, distribution_strategy="one_device",
                  do_predict=False, verbose=0)
    scores = {}
    for on in (False, True):
        classified = run_classification(ClassificationConfig(
            output_dir=str(tmp_path / f"cls{on}"), train_file=str(files["train.jsonl"]),
            dev_file=str(files["dev.jsonl"]), num_train_epochs=6, length_buckets=on,
            **common))
        tagged = run_ner(NerConfig(
            output_dir=str(tmp_path / f"ner{on}"), train_file=str(files["train.txt"]),
            dev_file=str(files["dev.txt"]), num_train_epochs=4, length_buckets=on, **common))
        scores[on] = (classified["dev"]["accuracy"], tagged["dev"]["f1"],
                      classified["train"]["num_train_steps"], tagged["train"]["num_train_steps"])
    (acc_off, f1_off, *steps_off), (acc_on, f1_on, *steps_on) = scores[False], scores[True]
    assert min(acc_off, f1_off) > 0.9, scores
    assert abs(acc_on - acc_off) <= E2E_TOLERANCE and abs(f1_on - f1_off) <= E2E_TOLERANCE, scores
    # Every character and word here is one word piece: a length is the count + [CLS] [SEP].
    text_lengths = [len(json.loads(row)["text"]) + 2 for row in marker_texts(256, 0)]
    sentence_lengths = [len(s.split("\n")) + 2 for s in
                        "\n".join(varied_conll_lines(128, 0)).strip().split("\n\n")]
    assert steps_off == [6 * 256 // 16, 4 * 128 // 16]
    assert steps_on == [6 * lb.num_batches(text_lengths, 32, 16),
                        4 * lb.num_batches(sentence_lengths, 32, 16)]


_MIRRORED = textwrap.dedent("""
    import json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    sys.path.insert(0, {tests!r})
    from model_test_utils import script_result, tiny_config, tiny_config_file
    from tfbert.data import length_buckets as lb
    from tfbert.models.classifier import BertClassifier
    from tfbert.models.encoder import BertEncoder
    from tfbert.training import distribute
    from tfbert.training.finetune import FinetuneConfig, finetune

    t, n = 48, 240
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, t + 1, size=n)
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype("int32")
    ids = rng.integers(5, 90, size=(n, t)).astype("int32")
    labels = rng.integers(0, 2, size=n).astype("int32")
    ids[:, 1] = 90 + labels  # the label's token, after [CLS]
    x = {{"input_ids": ids * mask, "input_mask": mask, "segment_ids": 0 * mask}}
    ds = lb.batch_by_length(tf.data.Dataset.from_tensor_slices((x, labels)), 16, t,
                            shuffle=True, seed=0)
    strategy = distribute.get_strategy("mirrored")
    assert strategy.num_replicas_in_sync == 2
    steps = []
    for inputs, _ in strategy.experimental_distribute_dataset(ds):
        steps.append([list(v.shape) for v in strategy.experimental_local_results(
            inputs["input_ids"])])
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = BertClassifier(BertEncoder(tiny_config()), num_classes=2, dropout=0.0)
    result = finetune(model, ds, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      FinetuneConfig(learning_rate=3e-3, num_train_epochs=5,
                                     gradient_accumulation_steps=2, train_batch_size=32,
                                     warmup_proportion=0.0, verbose=0))
    ordered = lb.predict_in_order(model, lb.batch_by_length(
        tf.data.Dataset.from_tensor_slices(x), 16, t))  # two replicas, gathered in order
    direct = np.asarray(model(x, training=False))
    print("RESULT" + json.dumps({{
        "predict_in_order_error": float(np.abs(ordered - direct).max()),
        "steps": steps, "batches": lb.num_batches(lengths, t, 16),
        "losses": [h["train_loss"] for h in result.history],
        "updates": result.num_train_steps}}))
""")


@pytest.mark.slow  # a child process with 2 logical CPUs, 5 epochs of a tiny model
def test_mirrored_replicas_share_each_step_length_and_accumulation_trains():
    out = script_result(_MIRRORED)
    assert len(out["steps"]) == out["batches"]
    for replicas in out["steps"]:  # [[b0, L], [b1, L]]: one bucket per global batch
        assert len(replicas) == 2 and replicas[0][1] == replicas[1][1], replicas
        assert abs(replicas[0][0] - replicas[1][0]) <= 1
    assert len({r[0][1] for r in out["steps"]}) > 1  # several lengths over the epoch
    assert out["updates"] == round(5 * out["batches"] / 2)
    assert out["predict_in_order_error"] < 1e-5
    losses = out["losses"]
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses
    assert losses[-1] < 0.8 * losses[0], losses  # (0.70 of it on the machine it was set on)
