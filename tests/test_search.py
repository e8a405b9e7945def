"""Semantic search (tfbert/search.py): an index built from a text file, queries answered by
cosine against a brute-force oracle, the folder rules, and retrieve-then-read with a QA
SavedModel."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from export_test_utils import exported
from model_test_utils import tiny_config

import tfbert
from tfbert import search
from tfbert.errors import UserError

PASSAGES = ["北京今天天气很好", "", "上海明天下雨", "人民日报发表新年社论", "  ", "中国队赢得比赛",
            "新华社记者报道北京新闻"]


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory, chinese_vocab_file):
    with open(chinese_vocab_file, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    model = tfbert.BertSentenceEncoder(tfbert.BertEncoder(tiny_config(
        vocab_size=vocab_size, initializer_range=0.2)))
    path = str(tmp_path_factory.mktemp("encoder") / "model")
    tfbert.save_pretrained(model, path, vocab_file=chinese_vocab_file,
                           metadata={"task": "embedding", "max_seq_length": 16,
                                     "lower_case": True})
    return path


def test_index_and_query(tmp_path, encoder_dir, capsys):
    source = tmp_path / "passages.txt"
    source.write_text("\n".join(PASSAGES) + "\n", encoding="utf-8")
    index_dir = str(tmp_path / "index")
    record = search.build_index(encoder_dir, str(source), index_dir, batch_size=2,
                                progress=False)
    assert (record["passages"], record["dim"]) == (5, 32)
    assert sorted(os.listdir(tmp_path)) == ["index", "passages.txt"]  # no staging left
    opened = search.Index.open(index_dir)
    assert [p["line"] for p in opened.passages] == [1, 3, 4, 6, 7]
    np.testing.assert_allclose(np.linalg.norm(opened.vectors, axis=-1), 1.0, atol=1e-6)
    model, preprocessor = search.load_encoder(encoder_dir)
    texts = [p["text"] for p in opened.passages]
    oracle = search.embed(model, preprocessor, texts, batch_size=5)
    np.testing.assert_allclose(opened.vectors, oracle, atol=1e-6)  # batches of 2 = one of 5
    queries = ["上海明天下雨", "北京的新闻"]
    hits = opened.search(queries, top_k=3)
    assert hits[0][0]["text"] == "上海明天下雨" and hits[0][0]["score"] == pytest.approx(1.0)
    q = search.embed(model, preprocessor, queries)
    for i, row in enumerate(hits):
        scores = oracle @ q[i]
        assert [h["text"] for h in row] == [texts[j] for j in np.argsort(-scores)[:3]]
        np.testing.assert_allclose([h["score"] for h in row], np.sort(scores)[::-1][:3],
                                   atol=1e-6)
    with pytest.raises(UserError, match="exists; the index is written to a new folder"):
        search.build_index(encoder_dir, str(source), index_dir, progress=False)
    assert search.main(["query", f"--index_dir={index_dir}", "--query=上海明天下雨",
                        "--top_k=2"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["passages"][0]["line"] == 3 and len(printed["passages"]) == 2


def test_retrieve_then_read(tmp_path, encoder_dir, export_root, chinese_vocab_file):
    """The QA SavedModel reads every passage found; the answer kept is the best-scoring one,
    a span of its passage."""
    _, qa_export, _ = exported("qa", export_root, chinese_vocab_file)
    source = tmp_path / "passages.txt"
    source.write_text("\n".join(PASSAGES) + "\n", encoding="utf-8")
    index_dir = str(tmp_path / "index")
    search.build_index(encoder_dir, str(source), index_dir, progress=False)
    hits = search.Index.open(index_dir).search(["谁报道北京新闻？"], top_k=3)[0]
    answer = search.read_answer("谁报道北京新闻？", hits, qa_export)
    assert answer["passage"] in [h["text"] for h in hits]
    assert answer["answer"] in answer["passage"]
    import tensorflow as tf

    out = tf.saved_model.load(qa_export).signatures["serving_default"](
        text=tf.constant(["谁报道北京新闻？"] * 3), text_b=tf.constant([h["text"] for h in hits]))
    assert answer["score"] == pytest.approx(float(np.max(out["score"].numpy())))


def test_a_model_that_is_no_sentence_encoder(tmp_path, chinese_vocab_file):
    with open(chinese_vocab_file, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    path = str(tmp_path / "encoder")
    tfbert.save_pretrained(tfbert.BertEncoder(tiny_config(vocab_size=vocab_size)), path,
                           vocab_file=chinese_vocab_file)
    with pytest.raises(UserError, match="a BertEncoder, not a sentence encoder"):
        search.load_encoder(path)
