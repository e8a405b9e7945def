"""Distillation's mechanism: each loss against a numpy reference on fixed logits, the one-pass
forward against the task models' own calls, the students (every k-th layer copied exactly, a
preset's shape, a vocab mismatch refused), a student that learns the teacher, and the teacher
cache, unlabelled text and augmentation of tfbert/data/distill_data.py."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
from model_test_utils import make_features, tiny_config

import tfbert
from tfbert.data import distill_data
from tfbert.errors import UserError
from tfbert.models import distiller as dst
from tfbert.models import students
from tfbert.models.encoder import BertEncoder

RNG = np.random.default_rng(0)
Z_T = RNG.normal(size=(4, 5)).astype("float32") * 3
Z_S = RNG.normal(size=(4, 5)).astype("float32")


def np_log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def np_kl(t: np.ndarray, s: np.ndarray, temperature: float) -> np.ndarray:
    """Hinton's soft loss per row: KL(softmax(t/T) || softmax(s/T)) * T^2."""
    lt, ls = np_log_softmax(t / temperature), np_log_softmax(s / temperature)
    return (np.exp(lt) * (lt - ls)).sum(-1) * temperature**2


def classifier(layers: int = 2, width: int = 32, heads: int = 4, **head) -> tfbert.BertClassifier:
    config = tiny_config(hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
                         intermediate_size=2 * width)
    return tfbert.BertClassifier(BertEncoder(config), num_classes=head.pop("num_classes", 3),
                                 **head)


# --- the losses against numpy ------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 2.0, 4.0])
def test_kl_at_temperature_is_hinton_soft_loss(temperature):
    got = np.asarray(dst.kl_at_temperature(Z_T, Z_S, temperature))
    np.testing.assert_allclose(got, np_kl(Z_T, Z_S, temperature), rtol=1e-5, atol=1e-6)
    assert np.allclose(np.asarray(dst.kl_at_temperature(Z_T, Z_T, temperature)), 0, atol=1e-6)


def test_multi_label_soft_loss_is_bce_against_the_teachers_sigmoid():
    t = 2.0
    target = 1 / (1 + np.exp(-Z_T / t))
    p = 1 / (1 + np.exp(-Z_S / t))
    reference = -(target * np.log(p) + (1 - target) * np.log(1 - p)).mean(-1) * t**2
    np.testing.assert_allclose(np.asarray(dst.binary_at_temperature(Z_T, Z_S, t)), reference,
                               rtol=1e-5)


def test_token_soft_loss_reads_only_the_masked_positions():
    t_logits = RNG.normal(size=(2, 6, 4)).astype("float32") * 2
    s_logits = RNG.normal(size=(2, 6, 4)).astype("float32")
    mask = np.array([[0, 1, 1, 0, 1, 0], [0, 1, 0, 0, 0, 0]], "float32")
    per_token = np_kl(t_logits, s_logits, 3.0)
    reference = (per_token * mask).sum() / mask.sum()
    got = float(dst.token_soft_loss(t_logits, s_logits, mask, 3.0))
    assert got == pytest.approx(reference, rel=1e-5)
    moved = s_logits.copy()
    moved[mask == 0] += 100.0  # positions outside the mask change nothing
    assert float(dst.token_soft_loss(t_logits, moved, mask, 3.0)) == pytest.approx(got, rel=1e-6)


def test_span_soft_loss_masks_padding():
    t = {k: RNG.normal(size=(2, 5)).astype("float32") for k in ("start_logits", "end_logits")}
    s = {k: RNG.normal(size=(2, 5)).astype("float32") for k in ("start_logits", "end_logits")}
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], "int32")
    reference = []
    for key in ("start_logits", "end_logits"):
        rows = [np_kl(t[key][i, mask[i] == 1], s[key][i, mask[i] == 1], 2.0) for i in range(2)]
        reference.append(np.mean(rows))
    got = float(dst.span_soft_loss(t, s, mask, 2.0))
    assert got == pytest.approx(np.mean(reference), rel=1e-5)


def test_hidden_loss_through_a_projection():
    student = [RNG.normal(size=(2, 4, 3)).astype("float32") for _ in range(2)]
    teacher = [RNG.normal(size=(2, 4, 5)).astype("float32") for _ in range(2)]
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], "int32")
    projections, reference = [], []
    for s, t in zip(student, teacher, strict=True):
        layer = keras.layers.Dense(5)
        layer.build((None, None, 3))
        kernel, bias = RNG.normal(size=(3, 5)).astype("float32"), RNG.normal(size=5)
        layer.set_weights([kernel, bias.astype("float32")])
        projections.append(layer)
        se = ((s @ kernel + bias - t) ** 2).mean(-1)
        reference.append((se * mask).sum() / mask.sum())
    got = float(dst.hidden_loss(student, teacher, projections, mask))
    assert got == pytest.approx(np.mean(reference), rel=1e-5)
    same = float(dst.hidden_loss(teacher, teacher, None, mask))
    assert same == 0.0


@pytest.mark.parametrize("heads", [(2, 2), (2, 4)])
def test_attention_loss_per_head_or_of_head_means(heads):
    def probs(n):
        return np.exp(np_log_softmax(RNG.normal(size=(2, n, 4, 4)))).astype("float32")

    s, t = probs(heads[0]), probs(heads[1])
    mask = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], "int32")
    if heads[0] != heads[1]:
        s_ref, t_ref = s.mean(1, keepdims=True), t.mean(1, keepdims=True)
    else:
        s_ref, t_ref = s, t
    se = ((s_ref - t_ref) ** 2).sum(-1)  # [B, N, T]: summed over the keys of a row
    m = np.broadcast_to(mask[:, None, :], se.shape)
    reference = (se * m).sum() / m.sum()
    assert float(dst.attention_loss([s], [t], mask)) == pytest.approx(reference, rel=1e-5)


def test_hard_loss_is_the_mean_over_labelled_rows():
    """Unlabelled rows (sample weight 0) neither count nor dilute the hard loss."""
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    y = np.array([0, 2, 1, 0])
    w = np.array([1, 1, 0, 0], "float32")
    got = float(dst._labelled_mean(loss, y, Z_S, w))
    reference = -np_log_softmax(Z_S)[[0, 1], y[:2]].mean()
    assert got == pytest.approx(reference, rel=1e-5)


def test_distiller_losses_on_a_batch_match_the_references():
    teacher, student = classifier(), classifier(1, 16)
    kernel, bias = teacher.output_dense.get_weights()
    teacher.output_dense.set_weights([kernel * 100.0, bias])  # logits far from 0
    d = dst.Distiller(teacher, student, temperature=2.0, hidden_weight=0.5)
    x = make_features(teacher.encoder.config, batch_size=4, seq_length=8)
    y = np.array([0, 1, 2, 0])
    out = d(x, training=False)
    losses = d.losses_of(x, y, out)
    t_logits = np.asarray(teacher(x, training=False))
    s_logits = np.asarray(student(x, training=False))
    np.testing.assert_allclose(np.asarray(out["teacher"]), t_logits, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out["student"]), s_logits, atol=1e-5)
    assert float(losses["soft"]) == pytest.approx(np_kl(t_logits, s_logits, 2.0).mean(), 1e-4)
    assert float(losses["hard"]) == pytest.approx(
        -np_log_softmax(s_logits)[np.arange(4), y].mean(), rel=1e-4)
    assert len(d.projections) == 2 and d.layer_map == [1]  # embeddings + 1 layer; uniform map
    total = float(d.compute_loss(x, y, out))
    assert total == pytest.approx(float(losses["soft"]) + float(losses["hard"])
                                  + 0.5 * float(losses["hidden"]), rel=1e-5)
    # Precomputed teacher outputs give the same losses without running the teacher.
    cached = d({**x, dst.TEACHER_LOGITS: t_logits}, training=False)
    assert "teacher_states" in cached  # intermediate transfer runs the teacher anyway
    plain = dst.Distiller(teacher, student)
    given = plain({**x, dst.TEACHER_LOGITS: t_logits * 0 + 1.0}, training=False)
    np.testing.assert_array_equal(np.asarray(given["teacher"]), np.ones_like(t_logits))


def test_one_pass_forward_matches_each_task_models_call():
    config = tiny_config()
    x = make_features(config, batch_size=3, seq_length=10)
    models = [tfbert.BertClassifier(BertEncoder(config), num_classes=3, head_hidden_layers=1,
                                    head_hidden_size=8),
              tfbert.BertTokenClassifier(BertEncoder(config), num_classes=5, crf=True),
              tfbert.BertSpanLabeler(BertEncoder(config))]
    for model in models:
        out = dst.forward_with_states(model, x, training=False, attention=True)
        expected = model(x, training=False)
        for got, want in zip(keras.tree.flatten(out["logits"]), keras.tree.flatten(expected),
                             strict=True):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)
        assert len(out["states"]) == 3 and len(out["attention"]) == 2
        np.testing.assert_allclose(np.asarray(out["states"][-1]), np.asarray(
            model.encoder(x)["sequence_output"]), atol=1e-5)


def test_pairs_that_cannot_distil_are_refused():
    teacher = classifier()
    with pytest.raises(UserError, match="num_classes is 2, the teacher's 3"):
        dst.Distiller(teacher, classifier(num_classes=2))
    other_vocab = tfbert.BertClassifier(BertEncoder(tiny_config(vocab_size=50)), num_classes=3)
    with pytest.raises(UserError, match="vocab_size is 50, the teacher's 97"):
        dst.Distiller(teacher, other_vocab)
    with pytest.raises(UserError, match="same|one task class"):
        dst.Distiller(teacher, tfbert.BertTokenClassifier(BertEncoder(tiny_config()), 3))
    with pytest.raises(UserError, match="layer_map"):
        dst.Distiller(teacher, classifier(1), layer_map=[5])
    with pytest.raises(UserError, match="nothing to train"):
        dst.Distiller(teacher, classifier(1), soft_weight=0, hard_weight=0)


# --- students ------------------------------------------------------------------------------------


def _same(a, b) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_every_kth_layer_init_copies_exactly_the_chosen_weights():
    teacher = classifier(layers=4, head_hidden_layers=1, head_hidden_size=8)
    student, layers = students.student_from_teacher_layers(teacher, every=2)
    assert layers == [1, 3] and student.encoder.config.num_hidden_layers == 2
    t, s = teacher.encoder, student.encoder
    assert _same(s.embeddings.get_weights(), t.embeddings.get_weights())
    for j, i in enumerate(layers):
        assert _same(s.transformer_layers[j].get_weights(), t.transformer_layers[i].get_weights())
        assert not _same(s.transformer_layers[j].get_weights(),
                         t.transformer_layers[i - 1].get_weights())
    assert _same(s.pooler.get_weights(), t.pooler.get_weights())
    assert _same([w.numpy() for w in students.head_weights(student)],
                 [w.numpy() for w in students.head_weights(teacher)])
    assert student.head_hidden_layers == 1 and student.num_classes == 3
    # Every layer taken: the very same function.
    whole, _ = students.student_from_teacher_layers(teacher, every=1)
    x = make_features(teacher.encoder.config)
    np.testing.assert_allclose(np.asarray(whole(x)), np.asarray(teacher(x)), atol=1e-6)
    with pytest.raises(UserError, match="leaves none"):
        students.student_from_teacher_layers(teacher, every=5)


def test_preset_and_config_students_keep_the_teachers_vocab_head_and_crf(tmp_path):
    teacher = tfbert.BertTokenClassifier(BertEncoder(tiny_config()), num_classes=5, crf=True,
                                         dropout=0.2)
    teacher.crf.set_weights([w + 1.5 for w in teacher.crf.get_weights()])
    student = students.student_from_preset(teacher, "bert-tiny")
    config = student.encoder.config
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size,
            config.max_position_embeddings) == (2, 128, 97, 64)
    assert (student.num_classes, student.use_crf, student.dropout) == (5, True, 0.2)
    assert _same(student.crf.get_weights(), teacher.crf.get_weights())
    counts = students.model_parameters(student)
    assert counts["total"] == student.count_params()
    assert counts["head"] == 128 * 5 + 5 + 5 * 5 + 2 * 5
    path = tmp_path / "student.json"
    tiny_config(vocab_size=98, num_hidden_layers=1).to_json_file(str(path))
    with pytest.raises(UserError, match="vocab_size 98, the teacher's vocab 97"):
        students.student_from_config(teacher, str(path))


PRETRAINED = os.path.join(os.path.dirname(__file__), "data", "tiny_pretraining")  # vocab 120


def test_pretrained_student_keeps_its_encoder_and_takes_the_teachers_head(tmp_path):
    teacher = tfbert.BertTokenClassifier(BertEncoder(tiny_config(vocab_size=120)),
                                         num_classes=5, crf=True, dropout=0.2)
    teacher.crf.set_weights([w + 1.5 for w in teacher.crf.get_weights()])
    from tfbert.tasks.distill import pretrained_student

    vocab = os.path.join(PRETRAINED, "vocab.txt")
    student = pretrained_student(teacher, PRETRAINED, vocab)
    pretrained = tfbert.from_pretrained(PRETRAINED)
    encoder = getattr(pretrained, "encoder", pretrained)
    assert _same(student.encoder.get_weights(), encoder.get_weights())
    assert (student.encoder.config.num_hidden_layers, student.encoder.config.hidden_size) == (
        encoder.config.num_hidden_layers, encoder.config.hidden_size)
    assert (student.num_classes, student.use_crf, student.dropout) == (5, True, 0.2)
    assert _same(student.crf.get_weights(), teacher.crf.get_weights())
    other = tmp_path / "vocab.txt"  # the same size, two ids swapped
    tokens = open(vocab, encoding="utf-8").read().splitlines()
    tokens[10], tokens[11] = tokens[11], tokens[10]
    other.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match="its vocab is not the teacher's .*2 of 120 ids differ"):
        pretrained_student(teacher, PRETRAINED, str(other))
    small = tfbert.BertClassifier(BertEncoder(tiny_config()), num_classes=2)  # vocab 97
    with pytest.raises(UserError, match="vocab_size 120, the teacher's vocab 97"):
        pretrained_student(small, PRETRAINED, vocab)


# --- training ------------------------------------------------------------------------------------


def _agreement(a, b, x) -> float:
    return float(np.mean(np.argmax(a(x), -1) == np.argmax(b(x), -1)))


def test_student_learns_the_teacher_on_unlabelled_text():
    """A tiny teacher with decisive outputs; a 1-layer student trained on its soft targets over
    unlabelled random sequences agrees with it far more than before training (and than the
    teacher's majority class), and its soft loss falls."""
    keras.utils.set_random_seed(1)
    teacher = classifier(layers=2, width=32)
    kernel, bias = teacher.output_dense.get_weights()
    teacher.output_dense.set_weights([kernel * 300.0, bias])  # confident, input-dependent
    student = classifier(layers=1, width=16, heads=2)
    config = teacher.encoder.config
    x = make_features(config, batch_size=384, seq_length=8, seed=3)
    held_out = make_features(config, batch_size=256, seq_length=8, seed=4)
    before = _agreement(student, teacher, held_out)
    classes = np.bincount(np.argmax(teacher(held_out), -1), minlength=3)
    d = dst.Distiller(teacher, student, temperature=1.0, hard_weight=0.0)
    d.compile(optimizer=keras.optimizers.Adam(3e-3))
    history = d.fit(x, epochs=10, batch_size=32, verbose=0).history
    after = _agreement(student, teacher, held_out)
    assert history["soft_loss"][-1] < 0.2 * history["soft_loss"][0]
    # (measured: agreement 0.11 before, 0.92 after; the teacher's majority class is 0.70)
    assert after >= 0.85 and after > before + 0.5 and after > classes.max() / classes.sum() + 0.1, (
        before, after, classes)


def test_token_distillation_with_labelled_and_unlabelled_rows():
    """A CRF token teacher: soft loss on the distill mask, hard loss (CRF NLL) from the
    labelled rows only."""
    keras.utils.set_random_seed(2)
    config = tiny_config()
    teacher = tfbert.BertTokenClassifier(BertEncoder(config), num_classes=4, crf=True)
    student = tfbert.BertTokenClassifier(BertEncoder(tiny_config(num_hidden_layers=1)), 4,
                                         crf=True)
    x = make_features(config, batch_size=8, seq_length=8, seed=5)
    y = RNG.integers(0, 4, size=(8, 8)).astype("int32")
    w = x["input_mask"].astype("float32")
    w[4:] = 0.0  # unlabelled rows
    mask = np.zeros((8, 8), "float32")
    mask[:, 1:4] = 1.0
    x[dst.DISTILL_MASK] = mask
    d = dst.Distiller(teacher, student, temperature=2.0)
    out = d(x, training=False)
    losses = d.losses_of(x, y, out, w)
    labelled = float(student.default_loss()(y[:4], out["student"][:4], sample_weight=w[:4]))
    assert float(losses["hard"]) == pytest.approx(labelled, rel=1e-4)
    reference = np_kl(np.asarray(out["teacher"]), np.asarray(out["student"]), 2.0)
    assert float(losses["soft"]) == pytest.approx((reference * mask).sum() / mask.sum(), 1e-4)


# --- data: unlabelled text, augmentation, the teacher cache -------------------------------------


def test_unlabelled_file_lines(tmp_path):
    path = tmp_path / "u.txt"
    path.write_text("好 评\t不错\n\n差\t很差\n", encoding="utf-8")
    texts = distill_data.read_unlabelled(str(path), pair=True)
    assert [(t.text, t.text_b, t.source) for t in texts] == [
        ("好 评", "不错", f"{path}:1"), ("差", "很差", f"{path}:3")]
    path.write_text("好\t不错\n只有一段\n", encoding="utf-8")
    with pytest.raises(UserError, match=rf"{path}:2: .* this one has 0 tabs"):
        distill_data.read_unlabelled(str(path), pair=True)
    path.write_text("\n \n", encoding="utf-8")
    with pytest.raises(UserError, match="no unlabelled examples"):
        distill_data.read_unlabelled(str(path), pair=False)


def test_builtin_unlabelled_text_is_train_split_only():
    from tfbert.data import classification as data

    test_texts = {e.text for e in data.builtin_examples("sentiment", "test")}
    train = data.builtin_examples("sentiment", "train")
    texts = distill_data.builtin_unlabelled("reviews", exclude={e.text for e in train[:100]})
    assert not test_texts & {t.text for t in texts}
    assert len(texts) == len(train) - 100  # every training review but the excluded ones


@pytest.mark.slow  # jieba's dictionary and POS model load in ~5 s of CPU
def test_augmentation_replaces_same_length_words_reproducibly():
    text = "这个酒店的服务很好，房间也很干净。"
    a = distill_data.augment_texts([text, "hello world"], 4, 0.5, seed=7)
    b = distill_data.augment_texts([text, "hello world"], 4, 0.5, seed=7)
    assert a == b and a[1] == []  # nothing Chinese to replace
    assert 1 <= len(a[0]) <= 4 and len(set(a[0])) == len(a[0])
    for copy in a[0]:
        assert copy != text and len(copy) == len(text)
        assert copy[-1] == "。" and copy[9] == "，"  # punctuation kept in place


def _cache_inputs(seed: int) -> dict[str, np.ndarray]:
    return make_features(tiny_config(), batch_size=6, seq_length=8, seed=seed)


def test_teacher_cache_round_trip_and_refusals(tmp_path, caplog):
    path = str(tmp_path / "cache.tfrecord")
    inputs, weights = _cache_inputs(0), [np.arange(6.0), np.ones((2, 2))]
    logits = RNG.normal(size=(6, 3)).astype("float32")
    calls = []

    def compute(value=logits):
        calls.append(1)
        return value

    key = distill_data.cache_key(weights, inputs, teacher_dir="t", data="d")
    got, status = distill_data.teacher_outputs(path, key, compute)
    assert status == "cache written" and len(calls) == 1 and os.path.isfile(path)
    got, status = distill_data.teacher_outputs(path, key, compute)
    assert status == "cache reused" and len(calls) == 1
    np.testing.assert_array_equal(got, logits)
    # Another teacher (one weight changed): recomputed and replaced, with a warning.
    other = distill_data.cache_key([np.arange(6.0), np.ones((2, 2)) * 2], inputs)
    got, status = distill_data.teacher_outputs(path, other, lambda: compute(logits + 1))
    assert status.startswith("cache recomputed: the teacher's weights") and len(calls) == 2
    np.testing.assert_array_equal(got, logits + 1)
    assert "does not fit this run" in caplog.text
    # Other data: the inputs' fingerprint differs.
    moved = distill_data.cache_key(weights, _cache_inputs(1))
    assert "packed inputs" in distill_data.key_difference(other, moved)
    assert "max_seq_length (8 there, 5 here)" in distill_data.key_difference(
        other, {**other, "max_seq_length": 5})
    # A copy tfbert did not write (no record beside it) is never replaced.
    foreign = str(tmp_path / "copy.tfrecord")
    with open(path, "rb") as src, open(foreign, "wb") as dst_file:
        dst_file.write(src.read())
    assert distill_data.teacher_outputs(foreign, other, compute)[1] == "cache reused"
    with pytest.raises(UserError, match="made for other settings.*did not write"):
        distill_data.teacher_outputs(foreign, moved, compute)
    (tmp_path / "notes.txt").write_text("not a cache")
    with pytest.raises(UserError, match="not a TFRecord file|not a teacher cache"):
        distill_data.teacher_outputs(str(tmp_path / "notes.txt"), key, compute)
