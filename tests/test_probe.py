"""tfbert.probe: the linear probes find a planted feature at its layer, the controls behave as
controls, a whole run on a tiny model writes complete outputs, and bad input is one line."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tfbert.errors import UserError
from tfbert.probe import probes, report
from tfbert.probe import tasks as task_data


def planted(layers: int, at: int, n: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Features [layers + 1, n, 16] of 3-class labels: layer `at` holds the label as a
    direction plus noise, every other layer is noise alone."""
    labels = rng.integers(0, 3, size=n)
    x = rng.normal(size=(layers + 1, n, 16)).astype(np.float32)
    x[at, :, :3] += 3.0 * np.eye(3, dtype=np.float32)[labels]
    return x, labels


def test_a_planted_feature_is_found_at_its_layer():
    rng = np.random.default_rng(0)
    train, train_y = planted(4, 3, 600, rng)
    test, test_y = planted(4, 3, 300, rng)
    test[3, :, :3] = 3.0 * np.eye(3, dtype=np.float32)[test_y] + rng.normal(size=(300, 3))
    scores = probes.probe_layers(train, train_y, test, test_y)
    assert probes.best_layer(scores) == 3
    assert scores[3] > 0.9
    chance = probes.majority_score(train_y, test_y)
    for layer in (0, 1, 2, 4):  # noise layers: a probe learns nothing that carries to test
        assert abs(scores[layer] - chance) < 0.1, (layer, scores)


def test_expected_layer_is_the_centre_of_gravity_of_the_gains():
    assert probes.expected_layer([0.2, 0.2, 0.6, 0.6, 1.0]) == pytest.approx(3.0)
    assert probes.expected_layer([0.5, 0.9, 0.9]) == pytest.approx(1.0)
    assert probes.expected_layer([0.5, 0.4, 0.5]) is None  # no net gain over the embeddings


def test_entity_macro_f1_ignores_o_and_rewards_each_class():
    labels = np.array([0, 0, 1, 1, 2, 3])
    assert probes.score("entity_macro_f1", labels, labels, [1, 2, 3]) == 1.0
    assert probes.score("entity_macro_f1", labels, np.zeros(6, int), [1, 2, 3]) == 0.0


def test_control_labels_are_fixed_per_character_and_follow_the_prior():
    rng = np.random.default_rng(1)
    chars = [chr(0x4E00 + i) for i in rng.integers(0, 400, size=20000)]
    labels = rng.choice(4, size=20000, p=[0.5, 0.3, 0.15, 0.05])
    data = task_data.TaskData(labels, ["B", "M", "E", "S"], chars)
    control, again = task_data.control_labels(data, data, seed=3)
    assert control.tolist() == again.tolist()
    first = {}
    for char, label in zip(chars, control.tolist(), strict=True):
        assert first.setdefault(char, label) == label
    by_type = np.bincount([first[c] for c in sorted(first)], minlength=4) / len(first)
    np.testing.assert_allclose(by_type, [0.5, 0.3, 0.15, 0.05], atol=0.07)


def test_sentence_control_is_uniform_over_a_split_ordered_by_hash():
    """The built-in splits assign texts by unsalted hashes, so an unsalted hash of the dev
    reviews falls in one narrow range; the control's salted hash does not."""
    texts, data = task_data.sentiment_data("dev", 1000)
    prior = np.array([0.6, 0.4])
    share = np.mean(task_data.hashed_labels(texts, prior) == 0)
    assert abs(share - 0.6) < 0.05, share
    other = task_data.hashed_labels(texts, prior, seed=1)
    assert 0.3 < np.mean(other != task_data.hashed_labels(texts, prior)) < 0.65


def test_word_labels_give_bmes_and_pos_per_character():
    text, seg, pos = task_data.word_labels([("我们", "r"), ("[中国", "ns"), ("人民", "n]nt"),
                                            ("爱", "v"), ("和平主义", "n")])
    assert text == "我们中国人民爱和平主义"
    assert seg == ["B", "E", "B", "E", "B", "E", "S", "B", "M", "M", "E"]
    assert pos == ["r", "r", "n", "n", "n", "n", "v", "n", "n", "n", "n"]


def test_character_probe_sentences_align_with_their_tags():
    sentences, skipped = task_data.char_sentences("test", 200)
    assert len(sentences) == 200 and skipped < 20
    for s in sentences:
        assert {len(v) for v in s.labels.values()} == {len(s.text)}
        assert s.labels["segmentation"][0] in "BS" and s.labels["segmentation"][-1] in "ES"


def test_claim_scales_with_depth():
    assert report.claimed_layers(12) == {"lexical": [3, 4], "syntactic": [6, 9],
                                         "semantic": [10, 12]}
    assert report.claimed_layers(6)["semantic"] == [5.0, 6.0]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, chinese_vocab_file) -> str:
    import keras
    from model_test_utils import tiny_config

    import tfbert

    keras.utils.set_random_seed(7)
    path = str(tmp_path_factory.mktemp("probe") / "model")
    tfbert.save_pretrained(tfbert.BertEncoder(tiny_config(chinese_vocab_file,
                                                          max_position_embeddings=128)),
                           path, vocab_file=chinese_vocab_file)
    return path


def test_a_run_on_a_tiny_model_writes_every_output(tiny_model, tmp_path):
    from tfbert.probe import run

    out = str(tmp_path / "probe")
    result = run(tiny_model, out, attention="中国人民银行今天宣布降低利率。",
                 max_train_sentences=60, max_test_sentences=300, max_seq_length=64,
                 progress=False)
    names = set(os.listdir(out))
    assert {"probe.json", "probe.md", "probe.png", "attention_heads.png",
            "attention_layer1.png", "attention_layer2.png"} <= names
    with open(os.path.join(out, "probe.json"), encoding="utf-8") as f:
        saved = json.load(f)
    assert saved["tasks"].keys() == {"segmentation", "pos", "entity", "sentiment"}
    for task, entry in saved["tasks"].items():
        for kind in ("model", "random_init", "control"):
            assert len(entry[kind]) == 3 and all(0.0 <= v <= 1.0 for v in entry[kind]), task
        assert entry["best_layer"] == int(np.argmax(entry["model"]))
    # the sentence control cannot be memorised (test reviews are unseen): chance, within noise
    sentiment = saved["tasks"]["sentiment"]
    assert all(abs(v - 0.5) < 0.12 for v in sentiment["control"]), sentiment["control"]
    heads = saved["attention"]["heads"]
    assert np.array(heads["cls"]).shape == (2, 4)
    shares = np.array(heads["cls"]) + np.array(heads["sep"])
    assert np.all(shares <= 1.0 + 1e-6) and np.all(np.array(heads["entropy"]) >= 0)
    assert result["ordering"]["sentence"] in open(os.path.join(out, "probe.md"),
                                                  encoding="utf-8").read()
    # a rerun replaces the earlier probe run in the same folder
    run(tiny_model, out, tasks=["sentiment"], max_train_sentences=20, max_test_sentences=20,
        max_seq_length=32, progress=False)
    with open(os.path.join(out, "probe.json"), encoding="utf-8") as f:
        assert list(json.load(f)["tasks"]) == ["sentiment"]


def test_bad_input_is_one_line_and_exit_2(tiny_model, tmp_path, capsys):
    from tfbert.probe.__main__ import main

    cases = [
        ([f"--model={tmp_path / 'missing'}"], "no such model"),
        ([f"--model={tiny_model}", "--tasks=syntax"], "unknown probe task"),
        ([f"--model={tiny_model}", "--attention=   "], "--attention text is empty"),
        ([f"--model={tiny_model}", "--attention=\u200b\u200b"], "tokenizes to no tokens"),
    ]
    user_dir = tmp_path / "mine"
    user_dir.mkdir()
    (user_dir / "notes.txt").write_text("keep me", encoding="utf-8")
    cases.append(([f"--model={tiny_model}", f"--output_dir={user_dir}"], "notes.txt"))
    for flags, expected in cases:
        flags = flags if any(f.startswith("--output_dir") for f in flags) else \
            [*flags, f"--output_dir={tmp_path / 'out'}"]
        with pytest.raises(SystemExit) as exit_:
            main([*flags, "--no_progress"])
        assert exit_.value.code == 2, flags
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0], (flags, err)
    assert (user_dir / "notes.txt").read_text(encoding="utf-8") == "keep me"


def test_a_model_without_hidden_states_is_refused(monkeypatch):
    from tfbert.models import pretrained
    from tfbert.probe import features

    monkeypatch.setattr(pretrained, "from_pretrained", lambda path: object())
    with pytest.raises(UserError, match="no per-layer hidden states"):
        features.load_encoder("somewhere")
