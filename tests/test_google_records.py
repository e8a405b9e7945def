"""google-research/bert format records: read (stored or fresh masks), checked, written.

The golden records in tests/data/google_records/ are google-research/bert's own
create_pretraining_data.py output (tests/make_google_records_golden.py): max_seq_length 32,
max_predictions_per_seq 5, 64 records.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf
from pretrain_test_utils import run_create_pretraining_data

from tfbert.data import corpora
from tfbert.errors import UserError
from tfbert.pretraining_data import google_records, instances, records
from tfbert.pretraining_data.instance_files import create_pretraining_data
from tfbert.pretraining_data.pipeline import pretraining_dataset
from tfbert.pretraining_data.record_formats import RecordLayout, files_layout
from tfbert.pretraining_data.record_scan import scan_records
from tfbert.text.vocab import load_vocab

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "google_records")
RECORDS = os.path.join(GOLDEN, "pretrain.tfrecord")
VOCAB = os.path.join(GOLDEN, "vocab.txt")
SEQ, PRED, NUM_RECORDS = 32, 5, 64


def google_name_to_features(max_seq_length: int, max_predictions_per_seq: int) -> dict:
    """google-research/bert run_pretraining.py's input_fn spec, as it is written there."""
    return {
        "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }


def parse_google(files, seq=SEQ, pred=PRED) -> dict[str, np.ndarray]:
    serialized = list(tf.data.TFRecordDataset(files).as_numpy_iterator())
    parsed = tf.io.parse_example(tf.constant(serialized), google_name_to_features(seq, pred))
    return {k: v.numpy() for k, v in parsed.items()}


def unmasked(features: dict[str, np.ndarray]) -> np.ndarray:
    """The original ids: masked_lm_ids put back at masked_lm_positions (weights 1), in numpy."""
    ids = features["input_ids"].astype(np.int64).copy()
    for row in range(len(ids)):
        for pos, orig, w in zip(features["masked_lm_positions"][row],
                                features["masked_lm_ids"][row],
                                features["masked_lm_weights"][row], strict=True):
            if w > 0:
                ids[row, pos] = orig
    return ids


def read_all(ds) -> dict[str, np.ndarray]:
    batches = list(ds.as_numpy_iterator())
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


@pytest.fixture(scope="module")
def stored() -> dict[str, np.ndarray]:
    return parse_google([RECORDS])


# --------------------------------------------------------------------------- reading


def test_golden_records_are_detected_with_their_shapes():
    [report] = scan_records([RECORDS], max_seq_length=SEQ, max_predictions_per_seq=PRED)
    assert report.layout == RecordLayout("google", SEQ, PRED)
    assert report.records == NUM_RECORDS and report.problem is None
    assert files_layout([RECORDS]).format == "google"


def test_static_masking_yields_the_stored_features(stored):
    ds = pretraining_dataset(RECORDS, VOCAB, SEQ, PRED, 16, seed=3, static_masking=True,
                             shuffle=False, repeat=False, drop_remainder=False)
    out = read_all(ds)
    for name in ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                 "masked_lm_ids"):
        np.testing.assert_array_equal(out[name], stored[name], err_msg=name)
        assert out[name].dtype == np.int32
    np.testing.assert_array_equal(out["masked_lm_weights"], stored["masked_lm_weights"])
    np.testing.assert_array_equal(out["next_sentence_labels"], stored["next_sentence_labels"][:, 0])


def test_restore_original_ids_matches_numpy(stored):
    restored = google_records.restore_original_ids(
        stored["input_ids"], stored["masked_lm_positions"], stored["masked_lm_ids"],
        stored["masked_lm_weights"])
    np.testing.assert_array_equal(restored.numpy(), unmasked(stored))
    assert (unmasked(stored) != stored["input_ids"]).any()  # some stored masks were [MASK]


def test_dynamic_masking_restores_then_masks_afresh(stored):
    vocab = load_vocab(VOCAB)
    mask_id = vocab.index("[MASK]")
    special = np.array([t.startswith("[") and t.endswith("]") for t in vocab])
    original = unmasked(stored)
    eligible = ((stored["input_mask"] == 1) & ~special[original]).sum(axis=1)  # [64]
    budget = np.clip(np.floor(eligible * 0.15), 1, PRED)  # E[clip(floor(x + u), 1, P)]
    expected = budget + np.where((budget < PRED) & (eligible * 0.15 >= 1),
                                 eligible * 0.15 - np.floor(eligible * 0.15), 0.0)

    epochs, chosen, kinds, positions = 12, 0, np.zeros(3), []
    for seed in (1, 2):
        ds = pretraining_dataset(RECORDS, VOCAB, SEQ, PRED, NUM_RECORDS, seed=seed,
                                 shuffle=False, repeat=True)
        for batch in ds.take(epochs // 2).as_numpy_iterator():
            for name in ("input_mask", "segment_ids"):
                np.testing.assert_array_equal(batch[name], stored[name])
            np.testing.assert_array_equal(batch["next_sentence_labels"],
                                          stored["next_sentence_labels"][:, 0])
            np.testing.assert_array_equal(unmasked(batch), original)  # originals restored
            real = batch["masked_lm_weights"] > 0
            rows = np.nonzero(real)[0]
            pos = batch["masked_lm_positions"][real]
            assert not special[original[rows, pos]].any()  # only non-special tokens chosen
            masked = batch["input_ids"][rows, pos]
            kinds += [(masked == mask_id).sum(), (masked == original[rows, pos]).sum(),
                      ((masked != mask_id) & (masked != original[rows, pos])).sum()]
            chosen += real.sum()
            positions.append(batch["masked_lm_positions"])
    assert not all((p == positions[0]).all() for p in positions[1:])  # fresh masks per epoch
    assert chosen == pytest.approx(epochs * expected.sum(), rel=0.03)
    assert chosen / (epochs * eligible.sum()) == pytest.approx(0.15, abs=0.015)
    share = kinds / kinds.sum()
    assert share[0] == pytest.approx(0.8, abs=0.03)
    assert share[1] == pytest.approx(0.1, abs=0.025)
    assert share[2] == pytest.approx(0.1, abs=0.025)


# --------------------------------------------------------------------------- checks


def write_records(path, examples) -> str:
    with tf.io.TFRecordWriter(str(path)) as w:
        for e in examples:
            w.write(e)
    return str(path)


def test_unknown_layout_names_file_features_and_formats(tmp_path):
    odd = tf.train.Example(features=tf.train.Features(feature={
        "tokens": tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 2, 3])),
        "label": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5]))}))
    path = write_records(tmp_path / "odd.tfrecord", [odd.SerializeToString()])
    with pytest.raises(UserError) as e:
        scan_records([path])
    message = str(e.value)
    for part in (path, "tokens (int64 x3)", "label (float x1)", "tfbert", "google",
                 "masked_lm_positions", "text_a"):
        assert part in message, part
    with pytest.raises(UserError, match="tokens"):
        pretraining_dataset(path, VOCAB, SEQ, PRED, 4)


def test_mixed_formats_name_both_files(tmp_path):
    text = write_records(tmp_path / "text.tfrecord", [records.make_example("今天", "很好", 0)])
    for files in ([text, RECORDS], [RECORDS, text]):
        with pytest.raises(UserError) as e:
            scan_records(files)
        message = str(e.value)
        assert "mixed record formats" in message
        assert text in message and RECORDS in message
        assert "tfbert format" in message and "google format" in message
    with pytest.raises(UserError, match="mixed record formats"):
        pretraining_dataset([RECORDS, text], VOCAB, SEQ, PRED, 4)


def test_mixed_shapes_and_wrong_flags_name_file_and_shapes(tmp_path, stored):
    row = {k: v[0] for k, v in stored.items()}
    longer = dict(row, input_ids=np.pad(row["input_ids"], (0, 32)),
                  input_mask=np.pad(row["input_mask"], (0, 32)),
                  segment_ids=np.pad(row["segment_ids"], (0, 32)))
    other = write_records(tmp_path / "seq64.tfrecord", [google_records.make_google_example(longer)])
    with pytest.raises(UserError, match=r"mixed record shapes.*input_ids \[32\].*input_ids \[64\]"):
        scan_records([RECORDS, other])
    with pytest.raises(UserError) as e:
        scan_records([RECORDS], max_seq_length=128)
    assert RECORDS in str(e.value) and "hold 32 values, max_seq_length is 128" in str(e.value)
    with pytest.raises(UserError, match="hold 5 values, max_predictions_per_seq is 20"):
        scan_records([RECORDS], max_seq_length=SEQ, max_predictions_per_seq=20)
    with pytest.raises(UserError, match="max_predictions_per_seq is 20"):
        pretraining_dataset(RECORDS, VOCAB, SEQ, 20, 4, static_masking=True)
    # Fresh masks may use another P than the records hold.
    batch = next(iter(pretraining_dataset(RECORDS, VOCAB, SEQ, 8, 4, seed=0)))
    assert batch["masked_lm_positions"].shape == (4, 8)
    with pytest.raises(UserError, match=r"pretrain.tfrecord: record 0 holds token id \d+, but "
                       "the vocab has 50 tokens"):
        scan_records([RECORDS], vocab_size=50)
    scan_records([RECORDS], vocab_size=len(load_vocab(VOCAB)))
    bad = dict(row, masked_lm_ids=row["masked_lm_ids"][:3])
    broken = write_records(tmp_path / "bad.tfrecord", [google_records.make_google_example(bad)])
    with pytest.raises(UserError, match="inconsistent lengths"):
        scan_records([broken])


# --------------------------------------------------------------------------- writing


@pytest.fixture(scope="module")
def written(chinese_vocab_file, tmp_path_factory):
    """The same documents and seed written in both formats (google through the CLI)."""
    root = tmp_path_factory.mktemp("both_formats")
    docs = [d for d in corpora.people_daily_documents() if len(d) >= 2][:20]
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")
    common = [f"--input_file={corpus}", f"--vocab_file={chinese_vocab_file}",
              "--max_seq_length=64", "--dupe_factor=2", "--random_seed=5", "--no_progress"]
    run_create_pretraining_data(common + [f"--output_file={root / 'text.tfrecord'}"])
    stats = run_create_pretraining_data(common + [f"--output_file={root / 'google.tfrecord'}",
                                                  "--output_format=google",
                                                  "--max_predictions_per_seq=10"])
    return str(root / "text.tfrecord"), str(root / "google.tfrecord"), stats


def test_google_output_parses_with_google_spec_and_holds_the_same_pairs(written,
                                                                       chinese_vocab_file):
    from tfbert.text.tokenizer import BertTokenizer

    text_file, google_file, stats = written
    assert files_layout([google_file]) == RecordLayout("google", 64, 10)
    g = parse_google([google_file], 64, 10)
    assert len(g["input_ids"]) == stats.instances
    t = {k: [] for k in ("text_a", "text_b", "next_sentence_labels")}
    for batch in records.read_records([text_file]).batch(1024).map(records.parse_examples):
        for k in t:
            t[k].extend(batch[k].numpy().tolist())
    tokenizer = BertTokenizer(chinese_vocab_file)
    a = tokenizer.tokenize(tf.constant(t["text_a"])).to_list()
    b = tokenizer.tokenize(tf.constant(t["text_b"])).to_list()
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    expected = np.zeros_like(g["input_ids"])
    segments = np.zeros_like(g["input_ids"])
    for i, (ids_a, ids_b) in enumerate(zip(a, b, strict=True)):
        row = [cls, *ids_a, sep, *ids_b, sep]
        expected[i, :len(row)] = row
        segments[i, len(ids_a) + 2:len(row)] = 1
    np.testing.assert_array_equal(unmasked(g), expected)
    np.testing.assert_array_equal(g["segment_ids"], segments)
    np.testing.assert_array_equal(g["input_mask"], (expected != 0).astype(np.int64))
    np.testing.assert_array_equal(g["next_sentence_labels"][:, 0], t["next_sentence_labels"])
    weights = g["masked_lm_weights"]
    assert set(np.unique(weights)) <= {0.0, 1.0} and (weights.sum(axis=1) >= 1).all()
    rows, slots = np.nonzero(weights > 0)
    masked = g["input_ids"][rows, g["masked_lm_positions"][rows, slots]]
    mask_share = (masked == load_vocab(chinese_vocab_file).index("[MASK]")).mean()
    assert mask_share == pytest.approx(0.8, abs=0.05)
    assert weights.sum() / (g["input_mask"].sum() - 3 * len(weights)) == pytest.approx(0.15,
                                                                                        abs=0.02)


@pytest.mark.slow
def test_google_output_is_deterministic_and_read_back(written, chinese_vocab_file, tmp_path):
    _, google_file, _ = written
    docs = [d for d in corpora.people_daily_documents() if len(d) >= 2][:12]
    paths = []
    for name in ("x", "y"):
        _, [path] = create_pretraining_data(
            str(tmp_path / f"{name}.tfrecord"), chinese_vocab_file, documents=docs,
            options=instances.InstanceOptions(max_seq_length=64, dupe_factor=1), seed=9,
            progress=False, output_format="google", max_predictions_per_seq=10)
        paths.append(path)
    with open(paths[0], "rb") as x, open(paths[1], "rb") as y:
        assert x.read() == y.read()
    static = read_all(pretraining_dataset(google_file, chinese_vocab_file, 64, 10, 32,
                                          static_masking=True, shuffle=False, repeat=False,
                                          drop_remainder=False))
    np.testing.assert_array_equal(static["input_ids"], parse_google([google_file], 64, 10)[
        "input_ids"])
    with pytest.raises(UserError, match="output_format"):
        create_pretraining_data(str(tmp_path / "z.tfrecord"), chinese_vocab_file,
                                documents=docs, output_format="nvidia",
                                progress=False)


# --------------------------------------------------------------------------- training


def _train_config(output_dir, **overrides):
    from tfbert.training.pretrain import PretrainConfig

    config_file = os.path.join(output_dir, "bert_config.json")
    os.makedirs(output_dir, exist_ok=True)
    with open(config_file, "w") as f:
        json.dump(dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=64, max_position_embeddings=64, hidden_act="gelu",
                       lower_case=True, vocab_size=len(load_vocab(VOCAB))), f)
    values = dict(input_file=RECORDS, vocab_file=VOCAB, bert_config_file=config_file,
                  output_dir=os.path.join(output_dir, "run"), max_seq_length=SEQ,
                  max_predictions_per_seq=PRED, train_batch_size=8, num_train_steps=4,
                  num_warmup_steps=1, learning_rate=1e-2, save_checkpoints_steps=4,
                  log_steps=2, distribution_strategy="one_device", mixed_precision="float32",
                  verbose=0)
    values.update(overrides)
    return PretrainConfig(**values)


@pytest.mark.parametrize("static_masking", [pytest.param(False, marks=pytest.mark.slow), True])
def test_run_pretraining_trains_on_google_records(tmp_path, static_masking):
    from tfbert.training.pretrain import run_pretraining

    results = run_pretraining(_train_config(str(tmp_path), static_masking=static_masking))
    assert results["global_step"] == 4
    assert math.isfinite(results["loss"]) and results["loss"] > 0
    # The masks a resume replays follow static_masking: changing it is a data-settings change.
    with pytest.raises(UserError, match=f"static_masking was {static_masking}, now "
                       f"{not static_masking}"):
        run_pretraining(_train_config(str(tmp_path), static_masking=not static_masking,
                                      num_train_steps=6))


def test_run_pretraining_refuses_other_shapes_before_building(tmp_path):
    from tfbert.training.pretrain import run_pretraining

    config = _train_config(str(tmp_path), max_seq_length=64)
    with pytest.raises(UserError, match="hold 32 values, max_seq_length is 64"):
        run_pretraining(config)
    assert not os.path.exists(os.path.join(config.output_dir, "model"))


@pytest.mark.slow  # (the library runs on these records are fast)
def test_googles_run_pretraining_command_line_runs(tmp_path):
    """google-research/bert's run_pretraining.py flags (--do_train, --do_eval on the training
    files, no --vocab_file: its records hold ids; --use_tpu=False) train and score here."""
    import subprocess
    import sys

    config = _train_config(str(tmp_path))
    with open(VOCAB, "rb") as src, open(tmp_path / "vocab.txt", "wb") as dst:
        dst.write(src.read())  # $BERT_BASE_DIR: bert_config.json with its vocab.txt
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = tmp_path / "google_run"
    cmd = [sys.executable, os.path.join(repo, "run_pretraining.py"), f"--input_file={RECORDS}",
           f"--output_dir={out}", "--do_train=True", "--do_eval=True",
           f"--bert_config_file={config.bert_config_file}", "--train_batch_size=8",
           f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PRED}",
           "--num_train_steps=3", "--num_warmup_steps=1", "--learning_rate=2e-5",
           "--use_tpu=False", "--save_checkpoints_steps=3", "--max_eval_steps=2",
           "--distribution_strategy=one_device", "--mixed_precision=float32"]
    run = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((out / "pretrain_results.json").read_text())
    assert results["global_step"] == 3
    assert results["metrics_from"] == "eval" and math.isfinite(results["masked_lm_accuracy"])
    assert "ignored (no effect" not in run.stderr  # its own checkpoint interval is honoured
