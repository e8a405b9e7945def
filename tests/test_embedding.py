"""The embedding task (tfbert/tasks/embedding.py): pair files and their errors, the built-in
retrieval tasks, and run_embedding.py end to end on pairs no word overlap can match."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from model_test_utils import tiny_config_file

from tfbert.errors import UserError
from tfbert.tasks.embedding import EmbeddingConfig, builtin_pairs, read_pairs, retrieval_set

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_pair_files_tsv_and_jsonl(tmp_path):
    (tmp_path / "rank.tsv").write_text("anchor\tpositive\tnegative\n北京\t首都\t上海\n\n"
                                       "天气\t晴朗\t下雨\n", encoding="utf-8")
    pairs = read_pairs(str(tmp_path / "rank.tsv"))
    assert (pairs.anchors, pairs.positives, pairs.negatives) == (
        ["北京", "天气"], ["首都", "晴朗"], ["上海", "下雨"])
    assert pairs.scores is None
    (tmp_path / "sts.jsonl").write_text('{"text": "a", "text_b": "b", "score": 4.5}\n'
                                        '{"text": "c", "text_b": "d", "score": 0}\n',
                                        encoding="utf-8")
    scored = read_pairs(str(tmp_path / "sts.jsonl"))
    np.testing.assert_array_equal(scored.scores, [4.5, 0.0])
    (tmp_path / "bad.jsonl").write_text('{"text": "a", "text_b": "b", "score": "high"}\n',
                                        encoding="utf-8")
    with pytest.raises(UserError, match=r"bad.jsonl:1: score 'high' is not a finite number"):
        read_pairs(str(tmp_path / "bad.jsonl"))
    (tmp_path / "empty.tsv").write_text("anchor\tpositive\nx\t\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"empty.tsv:2: positive is missing or empty"):
        read_pairs(str(tmp_path / "empty.tsv"))
    (tmp_path / "cols.tsv").write_text("query\tdoc\nx\ty\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"columns \['doc', 'query'\]; expected anchor"):
        read_pairs(str(tmp_path / "cols.tsv"))
    with pytest.raises(UserError, match="needs scored pairs"):
        EmbeddingConfig(output_dir="o", task_name="qa_paragraphs", loss="cosent")


def test_builtin_tasks_are_disjoint_and_corpora_deduplicated():
    for task, sizes in (("qa_paragraphs", (9005, 816, 755)), ("headline_lead", (2342, 191, 149))):
        splits = [builtin_pairs(task, s) for s in ("train", "dev", "test")]
        assert tuple(len(p) for p in splits) == sizes, task
        train, dev = set(splits[0].positives), set(splits[1].positives)
        assert not train & dev, task
        queries, corpus, relevant = retrieval_set(splits[1])
        assert len(corpus) == len(set(corpus)) and len(queries) == len(relevant)
        assert all(corpus[next(iter(r))] == p for r, p in zip(relevant, splits[1].positives,
                                                              strict=True))


def _mapped_pairs(path, n, seed):
    """Anchors of 4 characters from one alphabet; each positive writes the same characters
    through a fixed one-to-one map into another alphabet, so no anchor shares a character with
    any positive: BM25 finds nothing, a trained encoder learns the map."""
    source, target = "山水风雨花草树木日月星云", "甲乙丙丁戊己庚辛壬癸子丑"
    rng = np.random.default_rng(seed)
    lines = ["anchor\tpositive"]
    for _ in range(n):
        word = "".join(rng.choice(list(source), 4))
        lines.append(f"{word}\t{word.translate(str.maketrans(source, target))}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_run_embedding_learns_what_bm25_cannot_see(tmp_path, chinese_vocab_file):
    out = tmp_path / "out"
    cmd = [sys.executable, os.path.join(REPO, "run_embedding.py"),
           f"--train_file={_mapped_pairs(tmp_path / 'train.tsv', 512, 0)}",
           f"--dev_file={_mapped_pairs(tmp_path / 'dev.tsv', 64, 1)}",
           f"--test_file={_mapped_pairs(tmp_path / 'test.tsv', 64, 2)}",
           f"--vocab_file={chinese_vocab_file}",
           f"--bert_config_file={tiny_config_file(tmp_path / 'c.json', chinese_vocab_file)}",
           "--max_seq_length=8", "--train_batch_size=32", "--num_train_epochs=6",
           "--learning_rate=3e-3", f"--output_dir={out}", "--distribution_strategy=one_device"]
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=400,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    test = results["test"]
    assert test["bm25"]["recall@10"] <= 0.3 and test["bm25"]["num_queries"] == 64
    assert test["start"]["recall@10"] < 0.5, test["start"]
    assert test["model"]["recall@10"] > 0.8, test
    assert test["model"]["mrr@10"] > test["start"]["mrr@10"] + 0.3
    assert results["train"]["num_train_steps"] == 96
    metadata = json.loads((out / "model" / "tfbert.json").read_text(encoding="utf-8"))
    assert (metadata["task"], metadata["model_class"]) == ("embedding", "BertSentenceEncoder")


def test_export_serves_embeddings_and_similarity(tmp_path, chinese_vocab_file):
    """A saved sentence encoder's SavedModel: serving_default gives the Keras vectors for raw
    text, similarity gives their cosine matrix for queries against passages."""
    import tensorflow as tf

    import tfbert
    from tfbert.export import export_model
    from tfbert.text.preprocessor import BertPreprocessor

    config = tfbert.BertConfig.from_json_file(
        tiny_config_file(tmp_path / "c.json", chinese_vocab_file, initializer_range=0.2))
    model = tfbert.BertSentenceEncoder(tfbert.BertEncoder(config), pooling="mean",
                                       normalize=False)
    tfbert.save_pretrained(model, str(tmp_path / "model"), vocab_file=chinese_vocab_file,
                           metadata={"task": "embedding", "max_seq_length": 16,
                                     "lower_case": True})
    result = export_model(str(tmp_path / "model"), str(tmp_path / "saved" / "1"), check=False)
    assert set(result["signatures"]) == {"serving_default", "serve_ids", "similarity"}
    assert result["signatures"]["similarity"]["inputs"] == ["passages", "queries"]
    loaded = tf.saved_model.load(result["export_dir"])
    queries, passages = ["北京天气很好", "今天下雨"], ["天气预报", "北京新闻", "下雨了"]
    served = loaded.signatures["serving_default"](text=tf.constant(queries))["embeddings"]
    want = model(BertPreprocessor(chinese_vocab_file, 16)(tf.constant(queries)))
    np.testing.assert_allclose(served.numpy(), want.numpy(), atol=1e-5)
    p = model(BertPreprocessor(chinese_vocab_file, 16)(tf.constant(passages))).numpy()
    q = want.numpy()
    cosine = (q / np.linalg.norm(q, axis=-1, keepdims=True)) @ (
        p / np.linalg.norm(p, axis=-1, keepdims=True)).T
    scores = loaded.signatures["similarity"](queries=tf.constant(queries),
                                             passages=tf.constant(passages))["scores"]
    assert scores.shape == (2, 3)
    np.testing.assert_allclose(scores.numpy(), cosine, atol=1e-5)
