"""Pretraining data end to end: instances, the CLI, TFRecords, and the tf.data pipeline.

The records are written once per module from real text (People's Daily articles and reviews of
the built-in corpus) with the real tokenizer and vocab; the statistics cover > 100k tokens.
"""

from __future__ import annotations

import gzip as gzip_lib
import random

import numpy as np
import pytest
import tensorflow as tf
from pretrain_test_utils import run_create_pretraining_data

from tfbert.data import corpora
from tfbert.pretraining_data import instances, records
from tfbert.pretraining_data.documents import (
    Sentence,
    bert_word_spans,
    jieba_word_starts,
    tokenize_documents,
)
from tfbert.pretraining_data.instance_files import create_pretraining_data

SEQ, PRED = 128, 20


@pytest.fixture(scope="module")
def documents() -> list[list[str]]:
    """Long articles and many one-sentence reviews, mixed (as the NSP balance needs)."""
    docs = corpora.people_daily_documents()[:300] + corpora.review_documents()[:1200]
    random.Random(0).shuffle(docs)
    return docs


@pytest.fixture(scope="module")
def text_file(documents, tmp_path_factory) -> str:
    """The documents in the reference's input format."""
    path = tmp_path_factory.mktemp("text") / "corpus.txt"
    path.write_text("\n\n".join("\n".join(doc) for doc in documents) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def record_files(text_file, chinese_vocab_file, tmp_path_factory) -> tuple[list[str], object]:
    """Three GZIP shards with jieba word starts, written by the command line."""
    out = tmp_path_factory.mktemp("records") / "pretrain.tfrecord"
    stats = run_create_pretraining_data([
        f"--input_file={text_file}", f"--output_file={out}", f"--vocab_file={chinese_vocab_file}",
        f"--max_seq_length={SEQ}", "--short_seq_prob=0.1", "--dupe_factor=1",
        "--random_seed=7", "--num_shards=3", "--whole_word_mask", "--gzip", "--no_progress"])
    return records.expand_file_pattern(f"{out}-*"), stats


def read_all(files: list[str]) -> dict[str, list]:
    rows = {key: [] for key in records.FEATURE_SPEC}
    for batch in records.read_records(files).batch(512).map(records.parse_examples):
        for key in rows:
            value = batch[key]
            rows[key].extend(value.to_list() if isinstance(value, tf.RaggedTensor)
                             else value.numpy().tolist())
    rows["text_a"] = [t.decode() for t in rows["text_a"]]
    rows["text_b"] = [t.decode() for t in rows["text_b"]]
    return rows


# --------------------------------------------------------------------------- instances


def shortest_gap(text: str, a: str, b: str) -> str | None:
    """The shortest text between an occurrence of `a` and a later occurrence of `b`."""
    best = None
    start = text.find(a)
    while start >= 0:
        end = start + len(a)
        found = text.find(b, end)
        if found >= 0 and (best is None or found - end < len(best)):
            best = text[end:found]
        start = text.find(a, start + 1)
    return best


def make_instances(documents, vocab_file, seed=1, **options):
    spans = bert_word_spans(vocab_file)
    opts = instances.InstanceOptions(max_seq_length=SEQ, dupe_factor=1, **options)
    stats = instances.Stats()
    made = list(instances.create_instances_multi_pass(
        lambda: tokenize_documents(iter(documents), spans), opts, seed, stats=stats))
    return made, stats


def test_instances_follow_the_reference(documents, chinese_vocab_file):
    from tfbert.text.tokenizer import BertTokenizer

    made, stats = make_instances(documents, chinese_vocab_file)
    assert stats.instances == len(made) > 1000
    doc_text = [instances.join_sentences(doc) for doc in documents]
    labels = np.array([inst.next_sentence_label for inst in made])
    assert abs(labels.mean() - 0.5) < 0.03, labels.mean()  # balanced NSP
    tokenizer = BertTokenizer(chinese_vocab_file)
    len_a = tokenizer.tokenize(tf.constant([i.text_a for i in made])).row_lengths().numpy()
    len_b = tokenizer.tokenize(tf.constant([i.text_b for i in made])).row_lengths().numpy()
    gaps = []
    for inst, la, lb in zip(made, len_a, len_b, strict=True):
        # Re-tokenizing the stored text gives exactly the counted tokens, so pairs always fit.
        assert (la, lb) == (inst.num_tokens_a, inst.num_tokens_b)
        assert la >= 1 and lb >= 1 and la + lb <= SEQ - 3
        text = doc_text[inst.document_a]
        start_a = text.find(inst.text_a)
        assert start_a >= 0, "segment A is not a span of its document"
        if inst.is_random_next:
            assert inst.document_b != inst.document_a
            assert inst.text_b in doc_text[inst.document_b]
            if len(inst.text_b) >= 8:
                assert inst.text_b not in text
        else:
            assert inst.document_b == inst.document_a
            gap = shortest_gap(text, inst.text_a, inst.text_b)
            assert gap is not None, "IsNext B does not follow A in the same document"
            # B is the actual continuation: right after A, but for what truncation removed
            # from A's end or B's start (at most the sentence that overflowed the target).
            assert len(gap) <= max(len(s) for s in documents[inst.document_a]) + 1
            gaps.append(gap)
    assert np.mean([g.strip() == "" for g in gaps]) > 0.3
    # Short targets (short_seq_prob) exist, and most pairs use the full length.
    total = len_a + len_b
    assert (total < 40).mean() > 0.02 and (total > 100).mean() > 0.5


def test_instances_are_deterministic_and_reference_nsp_is_unbalanced(documents,
                                                                     chinese_vocab_file):
    docs = documents[:400]
    a, _ = make_instances(docs, chinese_vocab_file, seed=3)
    b, _ = make_instances(docs, chinese_vocab_file, seed=3)
    c, _ = make_instances(docs, chinese_vocab_file, seed=4)
    assert a == b
    assert a != c
    # The reference rule: every one-sentence chunk is NotNext, so the share exceeds 50% here.
    _, stats = make_instances(docs, chinese_vocab_file, seed=3, balance_next_sentence=False)
    assert stats.not_next / stats.instances > 0.58


def test_instances_stream_with_bounded_memory(documents, chinese_vocab_file):
    spans = bert_word_spans(chinese_vocab_file)
    read = []

    documents = documents[:300]

    def lazily():
        for doc in documents:
            read.append(doc)
            yield doc

    options = instances.InstanceOptions(max_seq_length=64, dupe_factor=1,
                                        shuffle_buffer_documents=20, random_pool_documents=30,
                                        shuffle_buffer_instances=10)
    stream = instances.create_instances(
        tokenize_documents(lazily(), spans, batch_sentences=32), options, seed=0)
    first = next(stream)
    assert first.text_a and len(read) < 80  # nothing like the whole corpus was read
    rest = list(stream)
    assert len(read) == len(documents) and len(rest) > 300


def test_in_memory_documents_in_source_order(chinese_vocab_file, tmp_path):
    """Articles first, one-sentence reviews after: shuffled whole, NSP stays balanced."""
    docs = corpora.people_daily_documents()[:300] + corpora.review_documents()[:1200]
    stats, paths = create_pretraining_data(
        str(tmp_path / "mem.tfrecord"), chinese_vocab_file, documents=docs, seed=3,
        options=instances.InstanceOptions(max_seq_length=SEQ, dupe_factor=1), progress=False)
    assert abs(stats.not_next / stats.instances - 0.5) < 0.03
    assert len(read_all(paths)["text_a"]) == stats.instances
    with pytest.raises(ValueError, match="not both"):
        create_pretraining_data("x", chinese_vocab_file, ["a.txt"], documents=docs)


def test_truncation_cuts_at_word_boundaries():
    def spans(texts):
        return [np.array([[i, i + 1, 1] for i in range(len(t))], np.int32) for t in texts]

    rng = random.Random(0)
    a = instances._Segment.join([Sentence("abcdefgh", spans(["abcdefgh"])[0])])
    b = instances._Segment.join([Sentence("xyz", spans(["xyz"])[0])])
    assert instances.truncate_pair(a, b, 6, rng)
    text_a, _ = a.cut()
    assert a.num_tokens == 3 and len(text_a) == 3 and text_a in "abcdefgh"
    assert b.cut()[0] == "xyz"
    assert instances.joiner("中国", "人民") == "" and instances.joiner("end", "Next") == " "
    assert instances.joiner("end.", "Next") == ""


# --------------------------------------------------------------------------- records, CLI


def test_cli_writes_sharded_records(record_files, documents):
    files, stats = record_files
    assert len(files) == 3
    assert all(f.endswith(f"pretrain.tfrecord-{i:05d}-of-00003") for i, f in enumerate(files))
    for f in files:
        with open(f, "rb") as handle:
            assert handle.read(2) == b"\x1f\x8b"  # --gzip
    rows = read_all(files)
    assert len(rows["text_a"]) == stats.instances > 1000
    assert stats.documents == len(documents)
    assert abs(np.mean(rows["next_sentence_labels"]) - 0.5) < 0.03
    assert stats.not_next == sum(rows["next_sentence_labels"])
    # Word starts are jieba's (of the whole sentences), relative to the stored, cut text.
    agree = total = 0
    for text, starts in zip(rows["text_a"][:300], rows["word_starts_a"][:300], strict=True):
        assert starts[0] == 0 and all(0 < s < len(text) for s in starts[1:])
        assert starts == sorted(set(starts))
        again = set(jieba_word_starts(text).tolist())
        agree += len(again & set(starts))
        total += len(again | set(starts))
    assert agree / total > 0.95


def test_corrupt_and_truncated_files_are_named(record_files, chinese_vocab_file, tmp_path,
                                               capfd):
    from tfbert.pretraining_data import pretraining_dataset

    files, _ = record_files
    plain = tmp_path / "plain.tfrecord"
    with records.ShardedWriter(str(plain)) as writer:
        for raw in records.read_records(files[:1]).take(300):
            writer.write(raw.numpy())
    data = plain.read_bytes()
    truncated = tmp_path / "truncated.tfrecord"
    truncated.write_bytes(data[: len(data) // 2 + 5])
    corrupt = tmp_path / "corrupt.tfrecord"
    flipped = bytearray(data)
    flipped[len(data) // 3] ^= 0x55
    corrupt.write_bytes(bytes(flipped))
    cut_gzip = tmp_path / "cut.tfrecord.gz"
    with open(files[0], "rb") as f:
        cut_gzip.write_bytes(f.read()[:20000])
    for bad in (truncated, corrupt, cut_gzip):
        with pytest.raises(tf.errors.InvalidArgumentError, match=str(bad)):
            for _ in records.read_records([str(plain), str(bad)]):
                pass
    with pytest.raises(tf.errors.InvalidArgumentError, match="truncated.tfrecord"):
        for _ in pretraining_dataset(str(truncated), chinese_vocab_file, SEQ, PRED, 16,
                                     repeat=False):
            pass
    # skip_corrupt: the good records of the file are used, the loss is reported.
    n = sum(1 for _ in records.read_records([str(truncated)], skip_corrupt=True))
    assert 100 < n < 300
    err = capfd.readouterr().err
    assert "truncated.tfrecord" in err and "records) lost" in err
    n = sum(1 for _ in records.read_records([str(plain), str(corrupt)], skip_corrupt=True))
    assert 300 < n < 600
    assert "corrupt.tfrecord" in capfd.readouterr().err


def test_file_patterns(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing-here"):
        records.expand_file_pattern(str(tmp_path / "nothing-here*"))
    assert records.shard_paths("x", 1) == ["x"]
    assert records.shard_paths("x", 2) == ["x-00000-of-00002", "x-00001-of-00002"]


def test_sharding_for_tf_distribute(record_files):
    files, stats = record_files

    def texts(**kw):
        return [r for b in records.read_records(files, **kw).batch(4096) for r in b.numpy()]

    everything = sorted(texts())
    by_file = [texts(num_shards=2, shard_index=i) for i in range(2)]  # 3 files >= 2
    by_record = [texts(num_shards=4, shard_index=i) for i in range(4)]  # 3 files < 4
    for parts in (by_file, by_record):
        assert sorted(sum(parts, [])) == everything
        assert all(parts)
    assert len(everything) == stats.instances


# --------------------------------------------------------------------------- pipeline


def reference_packing(rows: dict, tokenizer) -> np.ndarray:
    """[CLS] A [SEP] B [SEP] [PAD]... of the unmasked tokens, packed by hand."""
    ids_a = tokenizer.tokenize(tf.constant(rows["text_a"])).to_list()
    ids_b = tokenizer.tokenize(tf.constant(rows["text_b"])).to_list()
    out = np.full((len(ids_a), SEQ), tokenizer.pad_id, np.int32)
    for i, (a, b) in enumerate(zip(ids_a, ids_b, strict=True)):
        row = [tokenizer.cls_id, *a, tokenizer.sep_id, *b, tokenizer.sep_id]
        out[i, :len(row)] = row
    return out


def collect(ds) -> dict[str, np.ndarray]:
    batches = list(ds)
    return {k: np.concatenate([b[k].numpy() for b in batches]) for k in batches[0]}


def test_pipeline_statistics(record_files, chinese_vocab_file):
    from tfbert.pretraining_data import pretraining_dataset
    from tfbert.pretraining_data.masking import special_token_flags
    from tfbert.text.tokenizer import BertTokenizer

    files, stats = record_files
    tokenizer = BertTokenizer(chinese_vocab_file)
    ds = pretraining_dataset(files, chinese_vocab_file, SEQ, PRED, batch_size=64, seed=3,
                             repeat=False, shuffle=False, drop_remainder=False)
    spec = ds.element_spec
    assert spec["input_ids"].shape.as_list() == [None, SEQ]
    assert spec["masked_lm_weights"].dtype == tf.float32
    out = collect(ds)
    rows = read_all(files)
    original = reference_packing(rows, tokenizer)
    assert len(original) == len(out["input_ids"]) == stats.instances

    special = special_token_flags(tokenizer.vocab)
    real = original != tokenizer.pad_id
    np.testing.assert_array_equal(out["input_mask"], real.astype(np.int32))
    sep_first = np.argmax(original == tokenizer.sep_id, axis=1)
    expected_segments = (np.arange(SEQ)[None, :] > sep_first[:, None]) & real
    np.testing.assert_array_equal(out["segment_ids"], expected_segments.astype(np.int32))
    np.testing.assert_array_equal(out["next_sentence_labels"], rows["next_sentence_labels"])
    assert abs(out["next_sentence_labels"].mean() - 0.5) < 0.03

    weights = out["masked_lm_weights"]
    chosen = np.zeros(original.shape, bool)
    r, s = np.nonzero(weights > 0)
    chosen[r, out["masked_lm_positions"][r, s]] = True
    eligible = real & ~special[original]
    assert eligible.sum() > 100_000
    assert abs(chosen.sum() / eligible.sum() - 0.15) < 0.005
    assert not (chosen & ~eligible).any(), "a special token was selected"
    assert set(np.unique(weights)) == {0.0, 1.0}
    assert (weights.sum(axis=1) <= PRED).all()
    np.testing.assert_array_equal(out["masked_lm_ids"][r, s],
                                  original[r, out["masked_lm_positions"][r, s]])
    np.testing.assert_array_equal(out["input_ids"][~chosen], original[~chosen])
    new, old = out["input_ids"][chosen], original[chosen]
    masked, unchanged = np.mean(new == tokenizer.mask_id), np.mean(new == old)
    assert abs(masked - 0.8) < 0.015 and abs(unchanged - 0.1) < 0.015
    assert abs(1 - masked - unchanged - 0.1) < 0.015
    assert not special[new[(new != tokenizer.mask_id) & (new != old)]].any()


def test_masks_are_fresh_each_epoch_and_fixed_by_the_seed(record_files, chinese_vocab_file):
    from tfbert.pretraining_data import pretraining_dataset

    files, _ = record_files

    def make(seed, shuffle):
        return pretraining_dataset(files, chinese_vocab_file, SEQ, PRED, batch_size=32,
                                   seed=seed, repeat=False, shuffle=shuffle).take(6)

    # The same records in the same order (no shuffle), two epochs: different masks.
    ds = make(1, shuffle=False)
    e1, e2 = collect(ds), collect(ds)
    np.testing.assert_array_equal(e1["next_sentence_labels"], e2["next_sentence_labels"])
    np.testing.assert_array_equal(e1["input_mask"], e2["input_mask"])
    assert np.mean(e1["masked_lm_positions"] != e2["masked_lm_positions"]) > 0.5
    # A new dataset with the same seed: the same shuffle and the same masks, epoch by epoch.
    shuffled = make(11, shuffle=True)
    s1 = collect(shuffled)
    assert not np.array_equal(s1["input_mask"], e1["input_mask"])
    again = make(11, shuffle=True)
    a1 = collect(again)
    for key in s1:
        np.testing.assert_array_equal(s1[key], a1[key])


def test_whole_word_masking_in_the_pipeline(record_files, chinese_vocab_file):
    from tfbert.pretraining_data import pretraining_dataset
    from tfbert.pretraining_data.masking import special_token_flags
    from tfbert.text.tokenizer import BertTokenizer

    files, _ = record_files
    tokenizer = BertTokenizer(chinese_vocab_file)
    rows = read_all(files)
    n = 640
    out = collect(pretraining_dataset(files, chinese_vocab_file, SEQ, PRED, batch_size=64,
                                      whole_word_mask=True, seed=5, repeat=False,
                                      shuffle=False).take(n // 64))
    special = special_token_flags(tokenizer.vocab)
    words = []  # per example: the word index of each token of A (B)
    eligible_total = 0
    for side in ("a", "b"):
        texts = tf.constant(rows[f"text_{side}"][:n])
        ids, starts, _ = tokenizer.tokenize_with_offsets(texts)
        eligible_total += int((~special[ids.flat_values.numpy()]).sum())
        words.append([np.searchsorted(ws, st, side="right") - 1
                      for ws, st in zip(rows[f"word_starts_{side}"][:n], starts.to_list(),
                                        strict=True)])
    cut = whole = multi = 0
    chosen_total = 0
    for i in range(n):
        a, b = words[0][i], words[1][i]
        groups = [-1, *a, -2, *(np.asarray(b) + 10_000), -3]
        groups += [-4] * (SEQ - len(groups))
        groups = np.asarray(groups)
        w = out["masked_lm_weights"][i]
        chosen = set(out["masked_lm_positions"][i][w > 0].tolist())
        chosen_total += len(chosen)
        for g in set(groups[[*chosen]].tolist()):
            members = set(np.nonzero(groups == g)[0].tolist())
            if members <= chosen:
                whole += 1
                multi += len(members) > 1
            else:
                cut += 1
    assert cut == 0, f"{cut} words were masked partly"
    assert whole > 1000 and multi / whole > 0.3  # jieba words of 2+ characters masked whole
    assert abs(chosen_total / eligible_total - 0.15) < 0.01, chosen_total / eligible_total


def test_distribute_datasets_from_function(record_files, chinese_vocab_file):
    from tfbert.pretraining_data import pretraining_dataset

    files, _ = record_files
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    dist = strategy.distribute_datasets_from_function(
        lambda ctx: pretraining_dataset(files, chinese_vocab_file, SEQ, PRED,
                                        ctx.get_per_replica_batch_size(16), seed=1,
                                        input_context=ctx))
    batch = next(iter(dist))
    assert batch["masked_lm_positions"].shape == (16, PRED)


@pytest.mark.slow
def test_builtin_corpus_end_to_end(chinese_vocab_file, tmp_path):
    """The command line on the whole built-in corpus (no --input_file), then the pipeline."""
    from tfbert.pretraining_data import pretraining_dataset

    out = tmp_path / "builtin.tfrecord"
    stats = run_create_pretraining_data([
        f"--output_file={out}", f"--vocab_file={chinese_vocab_file}", "--dupe_factor=1",
        "--num_shards=4", "--whole_word_mask", "--no_progress"])
    assert stats.documents > 20_000 and stats.instances > 30_000
    assert abs(stats.not_next / stats.instances - 0.5) < 0.03
    ds = pretraining_dataset(f"{out}-*", chinese_vocab_file, SEQ, PRED, 32, whole_word_mask=True,
                             seed=0)
    batch = next(iter(ds))
    assert batch["input_ids"].shape == (32, SEQ)


def test_gzip_detection(tmp_path):
    path = tmp_path / "x.tfrecord"
    with records.ShardedWriter(str(path), gzip=True) as writer:
        writer.write(records.make_example("a", "b", 1))
    assert gzip_lib.decompress(path.read_bytes())  # a real gzip stream
    assert records.file_info(str(path))[0] == "GZIP"
    parsed = records.parse_examples(next(iter(records.read_records([str(path)]).batch(1))))
    assert parsed["next_sentence_labels"].numpy().tolist() == [1]
    assert parsed["word_starts_a"].to_list() == [[]]


@pytest.mark.slow
def test_bert_pretrainer_fits_on_the_pipeline(record_files, chinese_vocab_file):
    """The contract end to end: BertPretrainer.fit reads the feature dict as it comes."""
    import keras

    from tfbert import BertConfig, BertEncoder, BertPretrainer
    from tfbert.pretraining_data import pretraining_dataset
    from tfbert.text.vocab import load_vocab

    files, _ = record_files
    config = BertConfig(vocab_size=len(load_vocab(chinese_vocab_file)), hidden_size=32,
                        num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=SEQ)
    model = BertPretrainer(BertEncoder(config))
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=False)
    ds = pretraining_dataset(files, chinese_vocab_file, SEQ, PRED, batch_size=16, seed=0)
    history = model.fit(ds, steps_per_epoch=3, epochs=1, verbose=0, shuffle=False)
    assert np.isfinite(history.history["loss"][-1])
    assert 0.0 <= history.history["next_sentence_accuracy"][-1] <= 1.0
