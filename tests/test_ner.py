"""NER: CoNLL reading, the built-in People's Daily NER, word-piece alignment, run_ner end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from model_test_utils import REPO, tiny_config_file
from task_test_utils import learnable_conll_lines

from tfbert.data import ner
from tfbert.data.ner import readers
from tfbert.data.tags import spread
from tfbert.evaluation import entity_metrics, get_entities

LABELS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# --- reading ------------------------------------------------------------------------------------


def test_read_conll_sentences_columns_and_docstart(tmp_path):
    path = write(tmp_path, "train.txt",
                 "-DOCSTART- -X- O O\n\nEU NNP B-ORG\nrejects VBZ O\n\n\n"
                 "John\tB-PER\nSmith\tI-PER\n")
    examples = ner.read_conll(path)
    assert [e.tokens for e in examples] == [("EU", "rejects"), ("John", "Smith")]
    assert [e.tags for e in examples] == [("B-ORG", "O"), ("B-PER", "I-PER")]
    assert examples[1].source == f"{path}:7"
    assert examples[1].text == "John Smith"
    assert examples[1].token_offsets() == [(0, 4), (5, 10)]


def test_read_conll_errors_name_file_and_line(tmp_path):
    path = write(tmp_path, "bad.txt", "John\tB-PER\nSmith\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: expected 'token<TAB>tag'"):
        ner.read_conll(path)
    path = write(tmp_path, "bad2.txt", "John\tB-PER\nSmith\tX-PER\n")
    with pytest.raises(ValueError, match=r"bad2.txt:2: invalid NER tag 'X-PER'"):
        ner.read_conll(path)


def test_unknown_tag_in_dev_names_file_and_line(tmp_path):
    dev = ner.read_conll(write(tmp_path, "dev.txt", "a\tO\n\nParis\tB-GPE\n"))
    with pytest.raises(ValueError, match=r"dev.txt:3: tags \['B-GPE'\] are not among"):
        ner.tag_ids(dev[1], LABELS)


def test_label_list_orders_by_type_then_prefix():
    examples = [ner.NerExample(("a", "b", "c", "d"), ("S-PER", "B-LOC", "E-LOC", "B-PER"))]
    assert ner.label_list(examples) == ["O", "B-LOC", "E-LOC", "B-PER", "S-PER"]


# --- People's Daily -------------------------------------------------------------------------------


def test_people_daily_entities_from_pos_tags():
    words = readers._entity_words(
        [("中共中央", "nt"), ("总书记", "n"), ("江", "nr"), ("泽民", "nr"), ("李", "nr"),
         ("鹏", "nr"), ("在", "p"), ("[中央", "n"), ("人民", "n"), ("广播", "vn"),
         ("电台", "n]nt"), ("北京", "ns")], "test")
    assert words == [("中共中央", "ORG"), ("总书记", None), ("江泽民", "PER"), ("李鹏", "PER"),
                     ("在", None), ("中央人民广播电台", "ORG"), ("北京", "LOC")]
    # 陈/nr 方/nr 安生/nr is one person (the second one-char word follows a surname only).
    assert readers._entity_words([("陈", "nr"), ("方", "nr"), ("安生", "nr")], "t") == [
        ("陈方安生", "PER")]


def test_people_daily_sentences_split_and_tags():
    sentences = readers._split_sentences([("他", None), ("说", None), ("：", None), ("“", None),
                                      ("好", None), ("。", None), ("”", None), ("北京", "LOC"),
                                      ("。", None)])
    assert ["".join(w for w, _ in s) for s in sentences] == ["他说：“好。”", "北京。"]
    assert readers._char_tags("北京", "LOC") == ["B-LOC", "I-LOC"]


def test_people_daily_splits_are_disjoint_and_labelled():
    splits = {s: ner.people_daily_ner(s) for s in ("train", "dev", "test")}
    texts = {s: {e.text for e in examples} for s, examples in splits.items()}
    assert not texts["train"] & texts["dev"]
    assert not texts["train"] & texts["test"]
    assert not texts["dev"] & texts["test"]
    total = sum(len(v) for v in splits.values())
    assert total > 40000
    assert 0.07 < len(splits["test"]) / total < 0.13
    first = splits["train"][1]  # 中共中央总书记、国家主席江泽民
    assert first.separator == ""
    assert [(e.type, first.text[e.start:e.end + 1]) for e in get_entities(first.tags)] == [
        ("ORG", "中共中央"), ("PER", "江泽民")]
    types = {e.type for ex in splits["dev"] for e in get_entities(ex.tags)}
    assert types == {"PER", "LOC", "ORG"}


# --- alignment ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def english_vocab(tmp_path_factory):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "john", "live", "##s", "in", "new",
              "york", "北", "京", "１"]
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return str(path)


def test_labels_on_first_word_piece(english_vocab):
    import tfbert

    tokenizer = tfbert.BertTokenizer(english_vocab, lower_case=True)
    example = ner.NerExample(("John", "lives", "in", "New", "York"),
                             ("B-PER", "O", "O", "B-LOC", "I-LOC"))
    f = ner.encode_examples([example], tokenizer, 10, LABELS)
    # [CLS] john live ##s in new york [SEP] [PAD] [PAD]
    np.testing.assert_array_equal(f.input_ids[0], [2, 5, 6, 7, 8, 9, 10, 3, 0, 0])
    np.testing.assert_array_equal(f.input_mask[0], [1, 1, 1, 1, 1, 1, 1, 1, 0, 0])
    np.testing.assert_array_equal(f.label_ids[0], [-100, 3, 0, -100, 0, 1, 2, -100, -100, -100])
    assert f.token_pieces == [[1, 2, 4, 5, 6]]
    # Decoding the gold label ids gives back the gold tags.
    predicted = np.where(f.label_ids < 0, 0, f.label_ids)
    assert ner.decode_predictions(f, predicted, LABELS) == [list(example.tags)]


def test_truncation_is_counted(english_vocab):
    import tfbert

    tokenizer = tfbert.BertTokenizer(english_vocab, lower_case=True)
    example = ner.NerExample(("John", "lives", "in", "New", "York"),
                             ("B-PER", "O", "O", "B-LOC", "I-LOC"))
    f = ner.encode_examples([example], tokenizer, 6, LABELS)  # room for 4 pieces
    # [CLS] john live ##s in [SEP]: New York is cut.
    np.testing.assert_array_equal(f.input_ids[0], [2, 5, 6, 7, 8, 3])
    assert f.stats["truncated_examples"] == 1
    assert f.stats["truncated_entities"] == 1
    assert f.token_pieces == [[1, 2, 4, -1, -1]]
    predicted = np.where(f.label_ids < 0, 0, f.label_ids)
    tags = ner.decode_predictions(f, predicted, LABELS)
    assert tags == [["B-PER", "O", "O", "O", "O"]]
    assert entity_metrics([example.tags], tags)["recall"] == 0.5


def test_piece_spanning_characters_spreads_its_tag(english_vocab):
    import tfbert

    tokenizer = tfbert.BertTokenizer(english_vocab, lower_case=True)
    # Characters written without spaces: "ab" is one [UNK] piece covering two characters.
    example = ner.NerExample(("北", "京", "a", "b"), ("B-LOC", "I-LOC", "B-LOC", "I-LOC"),
                             separator="")
    f = ner.encode_examples([example], tokenizer, 8, LABELS)
    np.testing.assert_array_equal(f.input_ids[0, :5], [2, 11, 12, 1, 3])
    assert f.token_pieces == [[1, 2, 3, 3]]
    assert f.stats["uncovered_tokens"] == 1
    predicted = np.zeros_like(f.input_ids)
    predicted[0, 3] = LABELS.index("B-LOC")
    assert ner.decode_predictions(f, predicted, LABELS) == [["O", "O", "B-LOC", "I-LOC"]]
    assert spread("S-PER", 3) == ["B-PER", "I-PER", "E-PER"]
    assert spread("E-PER", 2) == ["I-PER", "E-PER"]


def test_make_dataset_masks_ignored_positions(english_vocab):
    import tfbert

    tokenizer = tfbert.BertTokenizer(english_vocab, lower_case=True)
    example = ner.NerExample(("John", "lives"), ("B-PER", "O"))
    f = ner.encode_examples([example, example], tokenizer, 6, LABELS)
    inputs, labels, weights = next(iter(ner.make_dataset(f, batch_size=2)))
    assert sorted(inputs) == ["input_ids", "input_mask", "segment_ids"]
    np.testing.assert_array_equal(labels[0], [0, 3, 0, 0, 0, 0])
    np.testing.assert_array_equal(weights[0], [0, 1, 1, 0, 0, 0])


# --- end to end -----------------------------------------------------------------------------------


@pytest.mark.slow  # (the library run is tested fast; this adds the script's flags)
def test_run_ner_script_on_people_daily(tmp_path, chinese_vocab_file):
    """run_ner.py end to end on the built-in data with a tiny random-init model."""
    config = tiny_config_file(tmp_path / "bert_config.json", chinese_vocab_file)
    out = tmp_path / "out"
    cmd = [sys.executable, os.path.join(REPO, "run_ner.py"), f"--output_dir={out}",
           f"--bert_config_file={config}", f"--vocab_file={chinese_vocab_file}",
           "--max_seq_length=32", "--train_batch_size=16", "--num_train_epochs=2",
           "--learning_rate=1e-3", "--max_train_examples=96", "--max_eval_examples=48",
           "--distribution_strategy=one_device"]
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    for split in ("dev", "test"):
        assert {"precision", "recall", "f1", "per_type", "num_gold"} <= set(results[split])
        assert 0.0 <= results[split]["f1"] <= 1.0
    assert results["labels"] == list(ner.PEOPLE_DAILY_LABELS)
    assert results["train"]["num_examples"] == 96
    assert [h["epoch"] for h in results["train"]["history"]] == [1, 2]
    assert results["data"]["test"]["examples"] == 48
    # Sentences longer than 30 pieces are read as windows (the default long_input), none cut.
    test_stats = results["data"]["test"]
    assert test_stats["long_examples"] > 0 and test_stats["windows"] > test_stats["examples"]
    assert test_stats["truncated_examples"] == 0 and test_stats["unpredicted_tokens"] == 0
    # The results match the predictions file, scored again.
    lines = (out / "test_predictions.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 48
    first = json.loads(lines[0])
    assert set(first) == {"index", "text", "entities", "gold_entities"}
    for e in first["gold_entities"]:
        assert first["text"][e["start"]:e["end"]] == e["text"]
    blocks = (out / "test_predictions.conll").read_text(encoding="utf-8").strip().split("\n\n")
    gold = [[line.split("\t")[1] for line in b.splitlines()] for b in blocks]
    pred = [[line.split("\t")[2] for line in b.splitlines()] for b in blocks]
    assert entity_metrics(gold, pred)["f1"] == pytest.approx(results["test"]["f1"])
    from tfbert import checkpoints

    metadata = checkpoints.read_metadata(str(out / "model"))
    assert metadata["task"] == "ner"
    assert metadata["labels"] == list(ner.PEOPLE_DAILY_LABELS)
    assert metadata["max_seq_length"] == 32


@pytest.mark.slow  # 11 s; fast: test_ner_kit's end-to-end runs on the same CoNLL lines
def test_run_ner_learns_conll_file_and_reloads(tmp_path, chinese_vocab_file):
    """A tiny model learns a trivially learnable CoNLL file; eval-only reload gives the same F1."""
    from tfbert.tasks.ner import NerConfig, run_ner

    lines = learnable_conll_lines()
    train = write(tmp_path, "train.txt", "\n".join(lines))
    config = tiny_config_file(tmp_path / "bert_config.json", chinese_vocab_file)
    common = dict(vocab_file=chinese_vocab_file, max_seq_length=16, eval_batch_size=32,
                  distribution_strategy="one_device", verbose=0)
    results = run_ner(NerConfig(output_dir=str(tmp_path / "out"), train_file=train,
                                dev_file=train, test_file=train, bert_config_file=config,
                                train_batch_size=16, num_train_epochs=5, learning_rate=3e-3,
                                **common))
    assert results["test"]["f1"] > 0.9, results["train"]["history"]
    assert set(results["test"]["per_type"]) == {"LOC", "ORG"}
    again = run_ner(NerConfig(output_dir=str(tmp_path / "eval"), test_file=train,
                              init_checkpoint=str(tmp_path / "out" / "model"), do_train=False,
                              do_eval=False, **common))
    assert again["test"]["f1"] == pytest.approx(results["test"]["f1"])


def test_training_loss_averages_over_labelled_pieces_only():
    """run_ner's loss is the cross-entropy's mean over the labelled pieces of the batch:
    padding, [CLS] and [SEP] (weight 0) neither add to it nor dilute it."""
    import keras

    from tfbert.tasks.ner import training_loss

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 6, 5)).astype("float32")
    labels = rng.integers(0, 5, (2, 6))
    weights = np.array([[0, 1, 1, 1, 0, 0], [0, 1, 0, 0, 0, 0]], "float32")
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ce = -np.take_along_axis(log_p, labels[..., None], -1)[..., 0]
    model = keras.Model()  # no CRF head
    loss = float(training_loss(model)(labels, logits, sample_weight=weights))
    assert loss == pytest.approx((ce * weights).sum() / 4, rel=1e-5)
    assert loss != pytest.approx((ce * weights).mean(), rel=1e-2)  # not diluted by padding
