"""tfbert.evaluation.baselines: the BiLSTM tagger learns a learnable tagging, softmax and CRF."""

from __future__ import annotations

import numpy as np
import pytest

from bench import quality
from tfbert.data.ner import NerExample
from tfbert.evaluation import baselines

LABELS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]


def learnable_sentences(n: int, seed: int) -> list[NerExample]:
    """Chinese-like character sentences: 北京 is always a LOC, 张三 always a PER, among filler
    characters."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        words = [(c, "O") for c in rng.choice(list("的了是在有我"), size=int(rng.integers(3, 7)))]
        for word in (("北京", "LOC"), ("张三", "PER")):
            words.insert(int(rng.integers(0, len(words) + 1)), word)
        chars = [c for w, _ in words for c in w]
        tags = [t for w, e in words for t in (["O"] if e == "O" else
                                               [f"B-{e}"] + [f"I-{e}"] * (len(w) - 1))]
        out.append(NerExample(tuple(chars), tuple(tags), separator=""))
    return out


def test_encode_pads_cuts_and_maps_unknown_characters():
    train = [NerExample(("北", "京", "的"), ("B-LOC", "I-LOC", "O"), separator="")]
    vocab = baselines.char_vocab(train)
    assert vocab == {"北": 2, "京": 3, "的": 4}
    other = NerExample(("张",), ("B-PER",), separator="")
    ids, tags = baselines.encode(train + [other], vocab, LABELS, max_length=2)
    np.testing.assert_array_equal(ids, [[2, 3], [baselines.UNK, baselines.PAD]])
    np.testing.assert_array_equal(tags, [[1, 2], [3, 0]])


@pytest.mark.parametrize("crf", [pytest.param(False, marks=pytest.mark.slow),  # 8 s each
                                 pytest.param(True, marks=pytest.mark.slow)])
def test_bilstm_learns_a_learnable_tagging(crf):
    """Softmax and CRF (slow: its loops trace for seconds) tag a learnable tagging exactly."""
    train, dev = learnable_sentences(48, 0), learnable_sentences(16, 1)
    result = baselines.train_bilstm(train, dev, dev, LABELS, epochs=3, batch_size=16,
                                    learning_rate=3e-2, embedding_size=16, lstm_units=16,
                                    crf=crf, seed=0)
    assert result["test"]["f1"] == 1.0, result["history"]
    assert result["test"]["num_gold"] == 32
    assert result["train_fit"]["f1"] == 1.0
    assert [h["epoch"] for h in result["history"]] == [1, 2, 3]
    assert result["num_train_steps"] == 3 * 3


def test_quality_table_rows_and_gains(tmp_path):
    """bench.quality's table: one block per setup, the baseline first, each pretrained
    row's test gain over random init in points, the CRF named, checkpoints told apart by
    their pretraining steps (tfbert.json's global_step)."""
    import json

    for steps in (1000, 3000):
        (tmp_path / str(steps)).mkdir()
        (tmp_path / str(steps) / "tfbert.json").write_text(json.dumps({"global_step": steps}))
    assert quality.pretraining_steps(str(tmp_path / "1000")) == 1000
    assert quality.pretraining_steps(str(tmp_path)) is None
    setups = {"ner_crf": quality.SETUPS["ner_crf"]}
    f1 = lambda v: {"f1": v}  # noqa: E731
    rows = [{"setup": "ner_crf", "start": "baseline", "model": "BiLSTM + CRF", "num_train": 3000,
             "seconds": 60, "dev": f1(0.5), "test": f1(0.49)},
            {"setup": "ner_crf", "start": "random_init", "pretraining_steps": 0,
             "learning_rate": 1e-3, "num_train": 3000, "seconds": 90, "dev": f1(0.2),
             "test": f1(0.193)},
            {"setup": "ner_crf", "start": "pretrained", "pretraining_steps": 3000,
             "checkpoint": "c", "learning_rate": 1e-3, "num_train": 3000, "seconds": 91,
             "dev": f1(0.29), "test": f1(0.275)}]
    lines = quality.markdown(rows, setups).splitlines()
    assert len(lines) == 5 and "BiLSTM + CRF" in lines[2]
    assert "BERT, random init + CRF | 0.001 | 90 | 20.00% | 19.30% |" in lines[3]
    assert lines[4].endswith("| BERT, pretrained 3,000 steps + CRF | 0.001 | 91 | 29.00% | "
                             "27.50% (+8.2) |")


def test_quality_rows_name_the_command_line_that_reproduces_them():
    """Each BERT row of the quality table is the run_* script with its defaults and only the
    setup's data flags (python run_ner.py with the line below gives the table's ner row of
    the default checkpoint to every digit)."""
    ner = quality.command_line(quality.SETUPS["ner"],
                               {"init_checkpoint": "output/pretrain_default/model"}, 12345)
    assert ner == ("python run_ner.py --task_name=people_daily --max_train_examples=3000 "
                   "--max_eval_examples=1000 --init_checkpoint=output/pretrain_default/model "
                   "--output_dir=OUT")
    scratch = quality.command_line(quality.SETUPS["sentiment_1000"],
                                   {"bert_config_file": "ckpt/config.json",
                                    "vocab_file": "ckpt/vocab.txt"}, 7, learning_rate=3e-4)
    assert scratch == ("python run_classifier.py --task_name=sentiment --max_seq_length=64 "
                       "--num_train_epochs=4 --max_train_examples=1000 --seed=7 "
                       "--learning_rate=0.0003 --bert_config_file=ckpt/config.json "
                       "--vocab_file=ckpt/vocab.txt --output_dir=OUT")
