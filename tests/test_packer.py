"""tfbert.BertPacker and tfbert.BertPreprocessor: truncation and segment ids equal the reference
(Google's `_truncate_seq_pair`, and transformers' `longest_first`) on every length combination;
core TF ops only."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from tfbert.data import corpora
from tfbert.text.packer import BertPacker
from tfbert.text.preprocessor import BertPreprocessor

CLS, SEP, PAD = 101, 102, 0


def reference_pack(a: list[int], b: list[int] | None, seq_length: int) -> dict[str, list[int]]:
    """Google's create_pretraining_data / run_classifier packing."""
    a = list(a)
    if b is None:
        a = a[:seq_length - 2]
        tokens, segments = [CLS] + a + [SEP], [0] * (len(a) + 2)
    else:
        b = list(b)
        while len(a) + len(b) > seq_length - 3:  # _truncate_seq_pair
            if len(a) > len(b):
                a.pop()
            else:
                b.pop()
        tokens = [CLS] + a + [SEP] + b + [SEP]
        segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    pad = seq_length - len(tokens)
    return {"input_ids": tokens + [PAD] * pad, "input_mask": [1] * len(tokens) + [0] * pad,
            "segment_ids": segments + [0] * pad}


@pytest.mark.parametrize("seq_length", [3, 4, 5, 8, 9, 16])
def test_pairs_of_every_length_combination(seq_length):
    packer = BertPacker(seq_length, cls_id=CLS, sep_id=SEP, pad_id=PAD)
    lengths = [(la, lb) for la in range(seq_length + 4) for lb in range(seq_length + 4)]
    a = [list(range(1000, 1000 + la)) for la, _ in lengths]
    b = [list(range(2000, 2000 + lb)) for _, lb in lengths]
    out = packer((tf.ragged.constant(a, dtype=tf.int32, inner_shape=()),
                  tf.ragged.constant(b, dtype=tf.int32, inner_shape=())))
    for i, (ra, rb) in enumerate(zip(a, b, strict=True)):
        want = reference_pack(ra, rb, seq_length)
        for name in want:
            assert out[name][i].numpy().tolist() == want[name], (seq_length, len(ra), len(rb))
    assert all(v.dtype == tf.int32 and v.shape == (len(lengths), seq_length)
               for v in out.values())


@pytest.mark.parametrize("seq_length", [2, 3, 7])
def test_single_segments(seq_length):
    packer = BertPacker(seq_length, cls_id=CLS, sep_id=SEP, pad_id=PAD)
    rows = [list(range(5, 5 + n)) for n in range(seq_length + 3)]
    out = packer(tf.ragged.constant(rows, dtype=tf.int32, inner_shape=()))
    for i, row in enumerate(rows):
        want = reference_pack(row, None, seq_length)
        assert {k: v[i].numpy().tolist() for k, v in out.items()} == want


def test_matches_transformers_longest_first(minilm_dir):
    """Real sentence pairs through BertPreprocessor equal transformers' Python BertTokenizer
    with truncation="longest_first" and max_length padding. (The Rust `tokenizers` truncation
    gives the shorter segment at most floor(L/2) tokens, so it keeps one token more of B than
    the reference when B is the longer one and L = seq_length - 3 is odd.)"""
    legacy = pytest.importorskip("transformers.models.bert.tokenization_bert_legacy")
    vocab_file = os.path.join(minilm_dir, "vocab.txt")
    reviews = [text for text, _ in corpora.reviews()][:120]
    english = ["The quick brown fox jumps over the lazy dog.",
               "BERT packs two segments into one input.", "Short.",
               "A much longer sentence that will certainly need to be truncated here."]
    texts_a = reviews[:60] + english * 3
    texts_b = reviews[60:120][::-1] + english[::-1] * 3
    hf = legacy.BertTokenizerLegacy(vocab_file, do_lower_case=True)
    for seq_length in (16, 40):
        pre = BertPreprocessor(vocab_file, seq_length)
        out = pre((tf.constant(texts_a), tf.constant(texts_b)))
        want = hf(texts_a, texts_b, truncation="longest_first", max_length=seq_length,
                  padding="max_length", return_token_type_ids=True)
        np.testing.assert_array_equal(out["input_ids"].numpy(), want["input_ids"])
        np.testing.assert_array_equal(out["input_mask"].numpy(), want["attention_mask"])
        np.testing.assert_array_equal(out["segment_ids"].numpy(), want["token_type_ids"])
        single = pre(tf.constant(texts_a))
        want = hf(texts_a, truncation=True, max_length=seq_length, padding="max_length")
        np.testing.assert_array_equal(single["input_ids"].numpy(), want["input_ids"])


def test_input_forms_and_errors():
    packer = BertPacker(6, cls_id=CLS, sep_id=SEP, pad_id=PAD)
    row = packer(tf.constant([7, 8]))  # one unbatched row
    assert row["input_ids"].numpy().tolist() == [CLS, 7, 8, SEP, PAD, PAD]
    pair = packer((tf.constant([7, 8]), tf.constant([9, 10, 11])))
    assert pair["input_ids"].numpy().tolist() == [CLS, 7, 8, SEP, 9, SEP]
    assert pair["segment_ids"].numpy().tolist() == [0, 0, 0, 0, 1, 1]
    dense = packer(tf.constant([[1, 2], [3, 4]], tf.int64))
    assert dense["input_ids"].numpy().tolist() == [[CLS, 1, 2, SEP, PAD, PAD],
                                                  [CLS, 3, 4, SEP, PAD, PAD]]
    empty = packer(tf.ragged.constant([[1]], dtype=tf.int32)[:0])
    assert empty["input_ids"].shape == (0, 6)
    with pytest.raises(ValueError, match="too short"):
        BertPacker(1, cls_id=CLS, sep_id=SEP, pad_id=PAD)
    with pytest.raises(ValueError, match="cannot hold a pair"):
        BertPacker(2, cls_id=CLS, sep_id=SEP, pad_id=PAD)((tf.constant([1]), tf.constant([2])))
    with pytest.raises(ValueError, match="one or two segments"):
        packer((tf.constant([1]),) * 3)


def test_in_graph_config_and_core_ops_only(minilm_dir):
    packer = BertPacker(8, cls_id=CLS, sep_id=SEP, pad_id=PAD)
    clone = BertPacker.from_config(packer.get_config())
    assert clone.get_config() == packer.get_config()

    spec = tf.RaggedTensorSpec([None, None], tf.int32, ragged_rank=1, row_splits_dtype=tf.int64)

    @tf.function(input_signature=[spec, spec])
    def pack(a, b):
        return packer((a, b))

    a = tf.ragged.constant([[1, 2, 3, 4, 5], [6]], dtype=tf.int32, row_splits_dtype=tf.int64)
    b = tf.ragged.constant([[7, 8], [9, 10, 11, 12, 13, 14]], dtype=tf.int32,
                           row_splits_dtype=tf.int64)
    assert pack(a, b)["input_ids"].numpy().tolist() == packer((a, b))["input_ids"].numpy().tolist()
    graph = pack.get_concrete_function().graph.as_graph_def()
    ops = {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
    assert all(hasattr(tf.raw_ops, op) for op in ops), sorted(ops)  # no TF Text op

    pre = BertPreprocessor(os.path.join(minilm_dir, "vocab.txt"), 8)
    ds = tf.data.Dataset.from_tensor_slices((["hello world", "中文"], ["a b c d e f", "x"]))
    batch = next(iter(ds.batch(2).map(lambda x, y: pre((x, y)))))
    assert batch["input_ids"].numpy().tolist() == [
        [101, 7592, 2088, 102, 1037, 1038, 1039, 102], [101, 1746, 1861, 102, 1060, 102, 0, 0]]
    assert pre(tf.constant("hello"))["input_ids"].numpy().tolist() == [101, 7592, 102] + [0] * 5
    config = pre.get_config()
    assert BertPreprocessor.from_config(config)(tf.constant(["hello"]))["input_ids"].shape == (1, 8)


_TF1_SCRIPT = r"""
import json, sys
import tensorflow as tf
tf.compat.v1.disable_v2_behavior()
from tfbert.text.packer import BertPacker
from tfbert.text.preprocessor import BertPreprocessor
from tfbert.text.tokenizer import BertTokenizer

vocab, texts_a, texts_b = json.loads(sys.stdin.read())
tokenizer = BertTokenizer(vocab)
packer = BertPacker.from_tokenizer(tokenizer, 12)
pre = BertPreprocessor(vocab, seq_length=12)
a = tf.compat.v1.placeholder(tf.string, [None])
b = tf.compat.v1.placeholder(tf.string, [None])
ids = tokenizer.tokenize(a)
fetch = {"ids": ids.to_tensor(-1), "one": packer(ids), "pair": packer((ids, tokenizer.tokenize(b))),
         "pre": pre((a, b))}
with tf.compat.v1.Session() as session:
    out = session.run(fetch, {a: texts_a, b: texts_b})
print(json.dumps(out, default=lambda x: x.tolist()))
"""


@pytest.mark.slow  # 11 s (a TF1 graph session)
def test_tf1_graph_mode_gives_the_same_ids():
    """With `tf.compat.v1.disable_v2_behavior()` (graph mode, a Session) the tokenizer, packer
    and preprocessor give the TF2 ids: [CLS]/[SEP] come from tf.equal, not Python `==`."""
    import json
    import subprocess
    import sys

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s", "今", "天",
             "e", "cafe", ",", "!"]
    texts_a = ["hello worlds, hello!", "今天 Café", "", "x" * 120 + " hello"]
    texts_b = ["world", "天天天天天天天天天天", "hello", "今"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", _TF1_SCRIPT], input=json.dumps(
        [vocab, texts_a, texts_b]), capture_output=True, text=True, cwd=root, timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=""))
    assert done.returncode == 0, done.stderr[-3000:]
    tf1 = json.loads(done.stdout.strip().splitlines()[-1])

    from tfbert.text.tokenizer import BertTokenizer

    tokenizer = BertTokenizer(vocab)
    packer = BertPacker.from_tokenizer(tokenizer, 12)
    ids = tokenizer.tokenize(tf.constant(texts_a))
    tf2 = {"ids": ids.to_tensor(-1), "one": packer(ids),
           "pair": packer((ids, tokenizer.tokenize(tf.constant(texts_b)))),
           "pre": BertPreprocessor(vocab, seq_length=12)((tf.constant(texts_a),
                                                          tf.constant(texts_b)))}
    assert tf1["ids"] == tf2["ids"].numpy().tolist()
    for key in ("one", "pair", "pre"):
        for name, value in tf2[key].items():
            assert tf1[key][name] == value.numpy().tolist(), (key, name)
    assert all(row[0] == tokenizer.cls_id for row in tf1["one"]["input_ids"])
