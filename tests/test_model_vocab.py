"""A model and its vocab travel together: a run that tokenizes for a checkpoint with a vocab or
casing other than the checkpoint's own is refused, naming both, unless allow_changed_vocab."""

from __future__ import annotations

import json
import logging
import os
import random
import shutil

import pytest

import tfbert
from tfbert import checkpoints
from tfbert.errors import UserError
from tfbert.tasks.classification import ClassificationConfig, run_classification
from tfbert.text import vocab
from tfbert.training import model_source
from tfbert.training.config import RunConfig
from tfbert.training.pretrain import PretrainConfig, run_pretraining

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
TINY = os.path.join(DATA, "tiny_pretraining")  # HF, vocab.txt (120 tokens), uncased
TINY_VOCAB = os.path.join(TINY, "vocab.txt")
GOOGLE = os.path.join(DATA, "google_heads", "classifier")  # bert_config.json: no do_lower_case
LABELS = ["negative", "positive"]


def _tokens(path: str = TINY_VOCAB) -> list[str]:
    return vocab.load_vocab(path)


def _write_vocab(path, tokens: list[str]) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    return str(path)


@pytest.fixture
def shuffled(tmp_path) -> str:
    """The tiny model's vocab, same size and tokens, words in another order."""
    tokens = _tokens()
    words = tokens[5:]
    random.Random(0).shuffle(words)
    return _write_vocab(tmp_path / "shuffled.txt", tokens[:5] + words)


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory) -> str:
    """A tiny fine-tuned classifier as a run saves it: tfbert.json with task, labels and the
    casing it was trained with, vocab.txt beside."""
    path = str(tmp_path_factory.mktemp("finetuned") / "model")
    model = tfbert.BertClassifier(tfbert.from_pretrained(TINY), num_classes=2)
    tfbert.save_pretrained(model, path, vocab_file=TINY_VOCAB,
                           metadata={"task": "classification", "labels": LABELS,
                                     "max_seq_length": 16, "lower_case": True})
    return path


def _check(init_checkpoint, vocab_file=None, **kwargs) -> None:
    model_source.check_model_vocab(RunConfig(init_checkpoint=init_checkpoint, **kwargs),
                                   vocab_file)


# --- the vocab ---------------------------------------------------------------------------


def test_the_models_own_vocab_passes(tmp_path):
    copy = str(shutil.copy(TINY_VOCAB, tmp_path / "copy.txt"))  # another file, same tokens
    for vocab_file in (TINY_VOCAB, copy, None):
        _check(TINY, vocab_file)
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(b"\r\n".join(t.encode() for t in _tokens()) + b"\r\n")
    _check(TINY, str(crlf))  # other line ends, the same ids


def test_a_shuffled_vocab_is_refused_naming_both(shuffled):
    with pytest.raises(UserError) as error:
        _check(TINY, shuffled)
    message = str(error.value)
    assert message.startswith(f"vocab_file {shuffled} is not the model's own vocab "
                              f"{TINY_VOCAB}: 113 of 120 ids differ (id 5 is ")
    assert "--allow_changed_vocab" in message


def test_a_vocab_of_another_size_is_refused(tmp_path):
    longer = _write_vocab(tmp_path / "longer.txt", _tokens() + ["extra"])
    with pytest.raises(UserError, match=f"vocab_file {longer} has 121 tokens, the model's own "
                                        f"vocab {TINY_VOCAB} 120"):
        _check(TINY, longer)


def test_filled_unused_entries_pass(tmp_path, caplog):
    """google-research/bert adds words to a trained vocab by overwriting [unusedN] lines."""
    model = shutil.copytree(TINY, tmp_path / "model")
    own = _tokens()
    own[100:102] = ["[unused0]", "[unused1]"]
    _write_vocab(model / "vocab.txt", own)
    filled = list(own)
    filled[101] = "newword"
    with caplog.at_level(logging.INFO):
        _check(str(model), _write_vocab(tmp_path / "filled.txt", filled))
    assert "fills [unusedN] entries" in caplog.text
    assert vocab.changed_ids(own, filled) == []
    filled[99] = "other"
    assert vocab.changed_ids(own, filled) == [99]


def test_allow_changed_vocab_warns_instead(shuffled, caplog):
    with caplog.at_level(logging.WARNING):
        _check(TINY, shuffled, allow_changed_vocab=True)
    assert f"vocab_file {shuffled} is not the model's own vocab" in caplog.text
    assert "(allow_changed_vocab)" in caplog.text


def test_a_checkpoint_without_its_own_vocab_has_nothing_to_compare(tmp_path, shuffled):
    bare = shutil.copytree(TINY, tmp_path / "bare")
    os.remove(bare / "vocab.txt")
    _check(str(bare), shuffled)
    _check(None, shuffled)  # random init: no model vocab at all


# --- the casing ------------------------------------------------------------------------------


def test_casing_against_the_models_is_refused():
    stated = os.path.join(TINY, "tokenizer_config.json")
    assert checkpoints.stated_lower_case(TINY) == (True, stated)
    _check(TINY, TINY_VOCAB, do_lower_case=True)
    _check(TINY, TINY_VOCAB, do_lower_case=None)
    with pytest.raises(UserError) as error:
        _check(TINY, TINY_VOCAB, do_lower_case=False)
    assert str(error.value).startswith(
        f"--nodo_lower_case tokenizes against the model's casing: {TINY} is uncased "
        f"(lower_case=True), as {stated} says. A model and its vocab travel together")
    _check(TINY, TINY_VOCAB, do_lower_case=False, allow_changed_vocab=True)


def test_both_problems_in_one_message(shuffled):
    with pytest.raises(UserError) as error:
        _check(TINY, shuffled, do_lower_case=False)
    assert str(error.value).count("; --nodo_lower_case tokenizes against") == 1


def test_stated_casing_sources(tmp_path, finetuned):
    # tfbert.json's lower_case (what fine-tuning tokenized with) first.
    assert checkpoints.stated_lower_case(finetuned) == (
        True, os.path.join(finetuned, "tfbert.json"))
    # Hugging Face config.json's do_lower_case.
    hf = shutil.copytree(TINY, tmp_path / "hf")
    os.remove(hf / "tokenizer_config.json")
    assert checkpoints.stated_lower_case(str(hf)) is None  # nothing says: readers guess
    _check(str(hf), TINY_VOCAB, do_lower_case=False)  # so nothing to refuse
    values = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**values, "do_lower_case": False}))
    assert checkpoints.stated_lower_case(str(hf)) == (False, str(hf / "config.json"))
    with pytest.raises(UserError, match=r"^--do_lower_case tokenizes against the model's "
                                        r"casing: .* is cased \(lower_case=False\)"):
        _check(str(hf), TINY_VOCAB, do_lower_case=True)
    # Google: bert_config.json's do_lower_case, else Google's rule for its released models.
    assert checkpoints.stated_lower_case(GOOGLE) is None
    named = shutil.copytree(GOOGLE, tmp_path / "cased_L-2_H-32_A-4")
    assert checkpoints.stated_lower_case(str(named / "bert_model.ckpt")) == (
        False, "Google's rule for its model cased_L-2_H-32_A-4")
    config = json.loads((named / "bert_config.json").read_text())
    (named / "bert_config.json").write_text(json.dumps({**config, "do_lower_case": True}))
    assert checkpoints.stated_lower_case(str(named)) == (
        True, str(named / "bert_config.json"))


# --- where runs build their model ------------------------------------------------------------


def _classifier(tmp_path, **kwargs) -> ClassificationConfig:
    return ClassificationConfig(output_dir=str(tmp_path / "out"), task_name="sentiment",
                                max_seq_length=16, max_train_examples=8, max_eval_examples=8,
                                distribution_strategy="one_device", verbose=0, **kwargs)


def test_eval_of_a_finetuned_model_with_another_vocab_is_refused(tmp_path, finetuned,
                                                                 shuffled):
    with pytest.raises(UserError, match=f"^vocab_file {shuffled} is not the model's own vocab "
                                        f"{finetuned}/vocab.txt"):
        run_classification(_classifier(tmp_path, init_checkpoint=finetuned, do_train=False,
                                       vocab_file=shuffled))
    with pytest.raises(UserError, match=rf"^--nodo_lower_case tokenizes against the model's "
                                        rf"casing: {finetuned} is uncased"):
        run_classification(_classifier(tmp_path, init_checkpoint=finetuned, do_train=False,
                                       do_lower_case=False))
    assert not os.path.exists(tmp_path / "out" / "results.json")


def test_eval_with_allow_changed_vocab_runs(tmp_path, finetuned, shuffled):
    results = run_classification(_classifier(tmp_path, init_checkpoint=finetuned, do_train=False,
                                             do_predict=False, vocab_file=shuffled,
                                             allow_changed_vocab=True))
    assert results["dev"]["num_examples"] == 8


def test_finetuning_from_a_checkpoint_with_another_vocab_is_refused(tmp_path, shuffled):
    with pytest.raises(UserError, match=f"^vocab_file {shuffled} is not the model's own vocab"):
        run_classification(_classifier(tmp_path, init_checkpoint=TINY, vocab_file=shuffled))


def test_pretraining_from_a_checkpoint_with_another_vocab_is_refused(tmp_path, shuffled):
    records = os.path.join(DATA, "google_records", "pretrain.tfrecord")
    config = PretrainConfig(output_dir=str(tmp_path / "out"), init_checkpoint=TINY,
                            input_file=records, vocab_file=shuffled, max_seq_length=32,
                            num_train_steps=1, num_warmup_steps=0,
                            distribution_strategy="one_device", verbose=0)
    with pytest.raises(UserError, match=f"^vocab_file {shuffled} is not the model's own vocab"):
        run_pretraining(config)
    missing = PretrainConfig(output_dir=str(tmp_path / "out2"),
                             init_checkpoint=str(tmp_path / "nothere"), input_file=records,
                             num_train_steps=1, num_warmup_steps=0)
    with pytest.raises(UserError, match=f"^init_checkpoint {tmp_path}/nothere: no such file"):
        run_pretraining(missing)
    assert not os.path.exists(tmp_path / "out2")
