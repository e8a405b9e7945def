"""The built-in splits' near-copy rule (tfbert.data.splits) and the clean pretraining corpus:
no dev/test text of a built-in task shares a 12-character run with the corpus or with its own
task's training split."""

from __future__ import annotations

import functools
import re
import subprocess
import sys

import pytest

from tfbert.data import corpora, splits
from tfbert.data.classification.builtin import builtin_examples
from tfbert.data.distill_data import builtin_unlabelled
from tfbert.data.ner.readers import people_daily_ner
from tfbert.data.qa_builtin import builtin_qa_examples
from tfbert.tasks.embedding import builtin_pairs

RUN = splits.NEAR_COPY_CHARS


def _pieces(text: str) -> set[str]:
    flat = re.sub(r"\s+", "", text)
    return {flat[i:i + RUN] for i in range(len(flat) - RUN + 1)}


def _pool(texts) -> set[str]:
    pool: set[str] = set()
    for text in texts:
        pool |= _pieces(text)
    return pool


def _leaks(texts, pool) -> list[str]:
    return [t for t in texts if _pieces(t) & pool]


def _task_texts(task: str, split: str) -> list[str]:
    if task == "sentiment":
        return [e.text for e in builtin_examples("sentiment", split)]
    if task == "people_daily_ner":  # people_daily_types has the same sentences
        return [e.text for e in people_daily_ner(split)]
    if task == "qa":
        return [t for e in builtin_qa_examples(split) for t in (e.question, e.context)]
    pairs = builtin_pairs(task, split)
    return list(pairs.anchors) + list(pairs.positives)


TASKS = ("sentiment", "people_daily_ner", "qa", "headline_lead")


@functools.lru_cache(maxsize=1)
def _corpus_pool() -> frozenset[str]:
    return frozenset(_pool(s for doc in splits.pretraining_documents() for s in doc))


def test_near_copy_groups_chain_shared_runs_and_nothing_shorter():
    texts = ["甲乙丙丁戊己庚辛壬癸子丑寅卯",      # 0
             "一二三甲乙丙丁戊己庚辛壬癸子丑四五",  # 1: shares 14 characters with 0
             "丑寅卯辰巳午未申酉戌亥天地人",        # 2: shares 3 with 0: alone
             "七八甲乙丙丁戊 己庚辛壬癸子丑",       # 3: 12 with 0 once whitespace goes
             "九十甲乙丙丁戊己庚辛壬癸九十",        # 4: 10 with 0: alone
             "短句", "短句", "短"]                   # 5, 6: identical short texts join
    groups = splits.near_copy_groups(texts)
    assert groups == [0, 0, 2, 0, 4, 5, 5, 7]
    assert splits.near_copy_groups(texts, extra_links=[(2, 4)])[4] == 2


def test_a_group_takes_one_split_and_a_chained_giant_goes_to_train():
    texts = [f"{i:04d}共同的十二个字符的片段啊{i:04d}" for i in range(300)] + \
            [f"独立文本编号{i:05d}号的内容" for i in range(700)]
    groups = splits.near_copy_groups(texts)
    assert len(set(groups[:300])) == 1 and len(set(groups[300:])) == 700
    split = splits.group_splits(texts, groups)
    assert set(split[:300]) == {"train"}  # 30% of the texts > MAX_HELD_OUT_GROUP_SHARE
    held_out = sum(s != "train" for s in split[300:]) / 700
    assert 0.14 < held_out < 0.26  # 10% dev + 10% test by the hash
    small = splits.group_splits(texts[:3] + texts[300:], splits.near_copy_groups(
        texts[:3] + texts[300:]), max_group_share=0.5)
    assert len(set(small[:3])) == 1  # one group, one split, wherever its hash puts it


@pytest.mark.parametrize("task", TASKS)
def test_no_dev_or_test_text_shares_a_run_with_the_corpus_or_its_training_split(task):
    held_out = _task_texts(task, "dev") + _task_texts(task, "test")
    assert len(held_out) > 200
    assert _leaks(held_out, _corpus_pool()) == []
    assert _leaks(held_out, _pool(_task_texts(task, "train"))) == []


def test_split_sizes_follow_from_the_rule():
    sizes = {task: tuple(len(_task_texts(task, s)) for s in ("train", "dev", "test"))
             for task in ("sentiment", "people_daily_ner")}
    assert sizes == {"sentiment": (13885, 1752, 1726), "people_daily_ner": (39837, 3696, 3519)}
    line_splits = splits.people_daily_line_splits()
    assert len(line_splits) == len(corpora.people_daily_lines())
    share = {s: line_splits.count(s) / len(line_splits) for s in ("dev", "test")}
    # 10% each of the groups, less the chained giant (8% of the lines) that goes to train
    assert 0.06 < share["dev"] < 0.11 and 0.06 < share["test"] < 0.11, share


def test_corpus_holds_training_text_and_the_distillation_text_only():
    pool = _corpus_pool()
    train_reviews = _task_texts("sentiment", "train")
    assert sum(bool(_pieces(t) & pool) for t in train_reviews[:500]) > 400  # task-adaptive
    for source in ("reviews", "people_daily"):
        texts = [u.text for u in builtin_unlabelled(source)][:2000]
        assert _leaks(texts, frozenset(_pool(_task_texts(
            "sentiment" if source == "reviews" else "people_daily_ner", "test")))) == []


def test_builtin_corpus_tool_writes_the_text_whose_sha256_models_record(tmp_path):
    out = tmp_path / "corpus.txt"
    proc = subprocess.run([sys.executable, "data_tools/builtin_corpus.py",
                           f"--output_file={out}"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text(encoding="utf-8")
    documents = splits.pretraining_documents()
    assert text == splits.corpus_text(documents)
    assert splits.corpus_sha256(documents) in proc.stdout
    assert text.count("\n\n") == len(documents)
    users = tmp_path / "notes.txt"
    users.write_text("a user's file", encoding="utf-8")
    refused = subprocess.run([sys.executable, "data_tools/builtin_corpus.py",
                              f"--output_file={users}"], capture_output=True, text=True)
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1
    assert "exists and tfbert did not write it" in refused.stderr
    assert users.read_text(encoding="utf-8") == "a user's file"
