"""run_pretraining / run_pretraining.py end to end on real Chinese text with a tiny BERT."""

from __future__ import annotations

import glob
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from model_test_utils import REPO, NaNWeightsAt, tiny_config
from pretrain_test_utils import free_ports, pretrain_config, pretrain_flags, saved_weights

from tfbert.config import BertConfig
from tfbert.pretraining_data import builtin as builtin_data
from tfbert.training import pretrain, pretrain_model, reports, runtime
from tfbert.training.pretrain import PretrainConfig, run_pretraining


def test_auto_precision_follows_the_hardware(monkeypatch):
    monkeypatch.setattr(runtime.tf.config, "list_physical_devices", lambda kind=None: [])
    monkeypatch.setattr(runtime.tf.config, "list_logical_devices", lambda kind=None: [])
    for name in ("float32", "bfloat16", "float16"):
        assert runtime.resolve_precision(name) == name
    monkeypatch.setattr(runtime, "_cpu_flags", lambda: {"avx512f", "amx_bf16", "amx_tile"})
    assert runtime.resolve_precision("auto") == "bfloat16"
    monkeypatch.setattr(runtime, "_cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})
    assert runtime.resolve_precision("auto") == "bfloat16"
    monkeypatch.setattr(runtime, "_cpu_flags", lambda: {"avx512f", "avx2"})
    assert runtime.resolve_precision("auto") == "float32"
    with pytest.raises(ValueError, match="mixed_precision must be one of"):
        PretrainConfig(mixed_precision="bf16").validate()


def test_sinusoidal_position_init():
    """The table's spread is BERT's initializer_range, and row t + k is the same rotation of
    row t's (sin, cos) pairs for every t (what makes relative positions linear to learn)."""
    from tfbert import BertConfig, BertEncoder

    table = pretrain_model.sinusoidal_positions(64, 32, 0.02)
    assert table.shape == (64, 32) and table.dtype == np.float32
    np.testing.assert_allclose(table.std(), 0.02, rtol=1e-5)
    pairs = table.reshape(64, 16, 2)[..., ::-1].astype("float64")  # (cos, sin) per frequency
    angle = lambda t: np.arctan2(pairs[t, :, 1], pairs[t, :, 0])  # noqa: E731
    shift = np.angle(np.exp(1j * (angle(13) - angle(10))))
    for t in (0, 20, 50):
        np.testing.assert_allclose(np.angle(np.exp(1j * (angle(t + 3) - angle(t)))), shift,
                                   atol=1e-5)
    encoder = BertEncoder(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=4, intermediate_size=64,
                                     max_position_embeddings=64))
    before = encoder.embeddings.position_embeddings.embeddings.numpy()
    pretrain.init_position_embeddings(encoder, "random")
    np.testing.assert_array_equal(encoder.embeddings.position_embeddings.embeddings, before)
    pretrain.init_position_embeddings(encoder, "sinusoidal")
    np.testing.assert_array_equal(encoder.embeddings.position_embeddings.embeddings, table)
    with pytest.raises(ValueError, match="position_embedding_init must be one of"):
        PretrainConfig(position_embedding_init="sine").validate()
    # auto: sinusoids for the built-in default model, BERT's random table for one's own config.
    assert PretrainConfig().position_init == "sinusoidal"
    assert PretrainConfig(bert_config_file="bert_config.json").position_init == "random"
    assert PretrainConfig(preset="bert-mini", position_embedding_init="sinusoidal"
                          ).position_init == "sinusoidal"


def test_builtin_default_schedule():
    """The built-in run: 90% of its steps at 32 tokens, then 128; off with one's own records
    (they would need records at the shorter length) or with phase1_seq_length=0."""
    default = PretrainConfig()
    assert (default.phase1_length, default.phase1_steps, default.num_train_steps) == \
        (32, 2700, 3000)
    assert default.phase1_predictions == 5 and default.phase1().max_seq_length == 32
    assert PretrainConfig(input_file="x.tfrecord", vocab_file="v").phase1_steps == 0
    assert PretrainConfig(phase1_seq_length=0).phase1_steps == 0
    assert PretrainConfig(max_seq_length=32).phase1_steps == 0
    assert PretrainConfig(phase1_seq_length=64, phase1_fraction=0.5,
                          num_train_steps=100, num_warmup_steps=10).phase1_steps == 50


def _events(directory: str) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(glob.glob(os.path.join(directory, "events*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                number = float(tf.make_ndarray(value.tensor))
                out.setdefault(value.tag, []).append((event.step, number))
    return out


def test_tiny_pretraining_learns_and_writes_results(tiny_data, tmp_path):
    import tfbert
    from tfbert import checkpoints

    out = tmp_path / "run"
    results = run_pretraining(pretrain_config(tiny_data, out))
    on_disk = json.loads((out / "pretrain_results.json").read_text())
    assert on_disk == pytest.approx(results, nan_ok=True)
    for key in ("masked_lm_accuracy", "next_sentence_accuracy", "loss", "global_step",
                "examples_per_second", "mlm_loss", "nsp_loss"):
        assert key in results, key
    assert results["global_step"] == 40 and results["metrics_from"] == "eval"
    assert results["examples_per_second"] > 0
    # Loss falls on real text: from ln(V) + ln(2) at initialisation.
    history = json.loads((out / "pretrain_history.json").read_text())
    assert [h["step"] for h in history] == [20, 40]
    start = math.log(tiny_data["vocab_size"]) + math.log(2)
    assert history[-1]["loss"] < history[0]["loss"] < start
    assert results["mlm_loss"] < math.log(tiny_data["vocab_size"]) - 0.5
    assert history[-1]["val_mlm_loss"] < history[0]["val_mlm_loss"]
    assert 0 < results["masked_lm_accuracy"] < 1 and 0 < results["next_sentence_accuracy"] < 1
    # TensorBoard scalars against the global step, train and eval.
    train = _events(str(out / "logs" / "train"))
    for tag in ("loss", "mlm_loss", "nsp_loss", "masked_lm_accuracy", "next_sentence_accuracy",
                "learning_rate", "examples_per_second"):
        assert tag in train, tag
    assert [s for s, _ in train["learning_rate"]] == [10, 20, 30, 40]
    lr = dict(train["learning_rate"])
    # google-research/bert's schedule: warmup 4, then peak * (1 - step / 40).
    assert lr[20] == pytest.approx(1e-2 * (1 - 20 / 40), rel=1e-4)
    assert [s for s, _ in _events(str(out / "logs" / "eval"))["masked_lm_accuracy"]] == [20, 40]
    table = reports.results_markdown(str(out))
    assert "| 40 | {:.3f} |".format(history[-1]["val_masked_lm_accuracy"]) in table
    # Checkpoints and the saved model, which fine-tuning reads directly.
    assert sorted(os.path.basename(p) for p in glob.glob(str(out / "checkpoints" / "*.index"))) \
        == ["ckpt-20.index", "ckpt-40.index"]
    encoder = tfbert.from_pretrained(str(out / "model"))
    assert encoder.config.hidden_size == 32
    assert type(checkpoints.load_model(str(out / "model"))).__name__ == "BertPretrainer"
    assert checkpoints.read_metadata(str(out / "model"))["global_step"] == 40

    # A larger num_train_steps continues from step 40; the same one has nothing left to do.
    more = run_pretraining(pretrain_config(tiny_data, out, num_train_steps=50))
    assert more["global_step"] == 50
    assert [h["step"] for h in json.loads((out / "pretrain_history.json").read_text())] \
        == [20, 40, 50]
    again = run_pretraining(pretrain_config(tiny_data, out, num_train_steps=50))
    assert again["global_step"] == 50 and again["examples_trained"] == 0


@pytest.mark.slow  # fast: test_sequence_length_schedule_... resumes a crashed run exactly
def test_resume_after_kill_matches_uninterrupted_run(tiny_data, tmp_path):
    """kill -9 a real run_pretraining.py process after a checkpoint, rerun the same command:
    it ends at the requested step with the weights of an uninterrupted run."""
    reference = tmp_path / "uninterrupted"
    run_pretraining(pretrain_config(tiny_data, reference, num_train_steps=40,
                                    save_checkpoints_steps=5, eval_input_file=None))

    out = tmp_path / "killed"
    config = pretrain_config(tiny_data, out, num_train_steps=40, save_checkpoints_steps=5,
                             eval_input_file=None)
    command = [sys.executable, os.path.join(REPO, "run_pretraining.py"), *pretrain_flags(config)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    try:
        while not glob.glob(str(out / "checkpoints" / "ckpt-10.index")):
            assert proc.poll() is None, f"run ended before the kill: {proc.stderr.read()[-3000:]}"
            assert time.time() < deadline, "no checkpoint within 240 s"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "pretrain_results.json").exists()
    # The kill may land while ckpt-10 is being written: the last complete one is then ckpt-5.
    saved = tf.train.latest_checkpoint(str(out / "checkpoints"))
    killed_at = int(saved.rsplit("-", 1)[1])
    assert 5 <= killed_at < 40

    rerun = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"resumed from {saved}" in rerun.stderr
    results = json.loads((out / "pretrain_results.json").read_text())
    assert results["global_step"] == 40
    assert results["examples_trained"] == (40 - killed_at) * 8
    expected, actual = saved_weights(str(reference / "model")), saved_weights(str(out / "model"))
    assert expected.keys() == actual.keys()
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)


class _CrashAt(keras.callbacks.Callback):
    """Raises after optimizer step `step` (a crash between checkpoints)."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.step, self.seen = step, 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.step:
            raise KeyboardInterrupt(f"crash after step {self.step}")


def test_sequence_length_schedule_trains_short_first_and_resumes_exactly(tiny_data, tmp_path):
    """phase1_seq_length: the first half of the steps on 16-token sequences (the same text
    records, packed shorter), the rest at 32; a crash inside the first phase resumes to the
    weights of an uninterrupted run."""
    phased = dict(num_train_steps=20, save_checkpoints_steps=5, phase1_seq_length=16,
                  phase1_fraction=0.5, phase1_input_file=tiny_data["train"])
    reference = tmp_path / "uninterrupted"
    results = run_pretraining(pretrain_config(tiny_data, reference, **phased))
    assert results["global_step"] == 20
    history = json.loads((reference / "pretrain_history.json").read_text())
    assert [(h["step"], h["seq_length"]) for h in history] == [
        (5, 16), (10, 16), (15, 32), (20, 32)]
    # No first-phase eval set given: scored only at max_seq_length.
    assert ["val_mlm_loss" in h for h in history] == [False, False, True, True]
    settings = json.loads((reference / "pretrain_config.json").read_text())
    assert settings["phase1"]["seq_length"] == 16
    assert settings["phase1"]["max_predictions_per_seq"] == round(5 * 16 / 32)

    out = tmp_path / "crashed"
    with pytest.raises(KeyboardInterrupt):
        run_pretraining(pretrain_config(tiny_data, out, **phased), callbacks=[_CrashAt(8)])
    assert tf.train.latest_checkpoint(str(out / "checkpoints")).endswith("ckpt-5")
    resumed = run_pretraining(pretrain_config(tiny_data, out, **phased))
    assert resumed["global_step"] == 20 and resumed["examples_trained"] == 15 * 8
    expected, actual = saved_weights(str(reference / "model")), saved_weights(str(out / "model"))
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    # Turning the first phase off on resume changes the batches still to come: refused.
    with pytest.raises(ValueError, match="phase1 was .* now 'off'"):
        run_pretraining(pretrain_config(tiny_data, out, num_train_steps=25))


@pytest.mark.parametrize("overrides, message", [
    (dict(phase1_seq_length=32), r"phase1_seq_length 32 must be in \[8, max_seq_length=32\)"),
    (dict(phase1_seq_length=16, phase1_fraction=1.0),
     r"phase1_fraction must be a number in \(0, 1\), got 1.0"),
    (dict(phase1_seq_length=16), "needs phase1_input_file"),
    (dict(phase1_seq_length=16, phase1_max_predictions_per_seq=17, phase1_input_file="x"),
     "phase1_max_predictions_per_seq 17 is larger than phase1_seq_length 16"),
    (dict(phase1_input_file="x"), "need phase1_seq_length"),
])
def test_sequence_length_schedule_bad_settings(tiny_data, tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        run_pretraining(pretrain_config(tiny_data, tmp_path / "bad", **overrides))


@pytest.mark.slow  # 24 s; fast: test_training.py's test_callbacks_..._stop_on_nan
def test_nan_loss_stops_keeps_last_good_checkpoint_and_resumes(tiny_data, tmp_path):
    out = tmp_path / "nan"
    config = pretrain_config(tiny_data, out, num_train_steps=16, save_checkpoints_steps=5,
                             eval_input_file=None)
    with pytest.raises(FloatingPointError, match=r"loss became nan at step 13; .* last good "
                       r"checkpoint \(step 10\)"):
        run_pretraining(config, callbacks=[NaNWeightsAt(13)])
    assert tf.train.latest_checkpoint(str(out / "checkpoints")).endswith("ckpt-10")
    assert not (out / "pretrain_results.json").exists()
    results = run_pretraining(config)  # the rerun resumes from step 10
    assert results["global_step"] == 16 and results["examples_trained"] == 6 * 8
    assert math.isfinite(results["loss"])


@pytest.mark.slow  # the exact check on a plain model is in test_training.py (default run)
def test_gradient_accumulation_matches_full_batch(tiny_data, tmp_path):
    """2 micro-batches of 4 vs batches of 8, dropout off: the same loss trajectory, and updates
    that agree to a few percent of their size.

    Not bit-equal: the model normalises the MLM loss by the masked-token count of each
    micro-batch (as the reference does per TPU core), so two halves with 19 and 21 masked tokens
    weigh their tokens slightly differently from the batch of 40. (tests/test_training.py shows
    exact equality where the loss is a plain mean.)
    """
    import keras

    no_dropout = json.loads(open(tiny_data["config"]).read())
    no_dropout.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(no_dropout))
    data = dict(tiny_data, config=str(config_file))
    runs = {}
    for k in (1, 2):
        out = tmp_path / f"k{k}"
        run_pretraining(pretrain_config(data, out, num_train_steps=6, iterations_per_loop=1,
                                        gradient_accumulation_steps=k, eval_input_file=None))
        runs[k] = (json.loads((out / "pretrain_history.json").read_text()),
                   saved_weights(str(out / "model")))
    losses = {k: [h["loss"] for h in runs[k][0]] for k in runs}
    np.testing.assert_allclose(losses[2], losses[1], rtol=2e-3)
    # The initial weights (same seed): the update of each run is its distance from them.
    from tfbert import checkpoints

    keras.utils.set_random_seed(12345)
    initial = pretrain.build_pretrainer(BertConfig(**no_dropout), None)
    init_dir = tmp_path / "init"
    checkpoints.save_pretrained(initial, str(init_dir))
    w0 = saved_weights(str(init_dir))
    full = np.concatenate([(runs[1][1][n] - w0[n]).ravel() for n in sorted(w0)])
    accumulated = np.concatenate([(runs[2][1][n] - w0[n]).ravel() for n in sorted(w0)])
    assert np.linalg.norm(full) > 0.1
    assert np.abs(full).max() < 6 * 1e-2  # Adam moves a weight at most ~lr per step: w0 is right
    assert np.linalg.norm(accumulated - full) < 0.05 * np.linalg.norm(full)  # measured: 1.1%


@pytest.mark.parametrize("precision", [
    "bfloat16", pytest.param("float16", marks=pytest.mark.slow)])
def test_mixed_precision_trains_with_float32_master_weights(tiny_data, tmp_path, precision):
    from tfbert.models.encoder import BertEncoder
    from tfbert.models.pretrainer import BertPretrainer

    out = tmp_path / precision
    results = run_pretraining(pretrain_config(tiny_data, out, num_train_steps=20,
                                              mixed_precision=precision,
                                              save_checkpoints_steps=10, eval_input_file=None))
    history = json.loads((out / "pretrain_history.json").read_text())
    assert math.isfinite(results["loss"]) and history[-1]["loss"] < history[0]["loss"]
    reader = tf.train.load_checkpoint(str(out / "checkpoints"))
    kernels = [n for n in reader.get_variable_to_dtype_map() if "kernel" in n or "gamma" in n]
    assert kernels and {reader.get_variable_to_dtype_map()[n] for n in kernels} == {tf.float32}
    assert keras.config.dtype_policy().name == "float32"  # the run restored the global policy
    with runtime.dtype_policy(precision):
        config = BertConfig.from_json_file(tiny_data["config"])
        model = BertPretrainer(BertEncoder(config, output_attention_probs=True))
    assert {v.dtype for v in model.trainable_variables} == {"float32"}
    norms = [layer for layer in model._flatten_layers()
             if isinstance(layer, keras.layers.LayerNormalization)]
    assert norms and {layer.compute_dtype for layer in norms} == {"float32"}
    ids = np.full((2, 8), 7, "int32")
    outputs = model.encoder({"input_ids": ids, "input_mask": np.ones_like(ids),
                             "segment_ids": np.zeros_like(ids)})
    assert {str(p.dtype) for p in outputs["attention_probs"]} == {"<dtype: 'float32'>"}


def test_bad_input_fails_before_training(tiny_data, tmp_path, monkeypatch):
    out = tmp_path / "bad"
    with pytest.raises(FileNotFoundError, match="no file matches .*missing"):
        run_pretraining(pretrain_config(tiny_data, out,
                                        input_file=str(tmp_path / "missing*.tfrecord")))
    wrong = tmp_path / "wrong_vocab.json"
    tiny_config(vocab_size=tiny_data["vocab_size"] + 7).to_json_file(str(wrong))
    with pytest.raises(ValueError, match=f"has {tiny_data['vocab_size']} tokens but the BERT "
                       f"config .* vocab_size {tiny_data['vocab_size'] + 7}"):
        run_pretraining(pretrain_config(tiny_data, out, bert_config_file=str(wrong)))
    empty = tmp_path / "empty.tfrecord"
    with tf.io.TFRecordWriter(str(empty)):
        pass
    with pytest.raises(ValueError, match="input_file .*empty.tfrecord.* holds 0 records"):
        run_pretraining(pretrain_config(tiny_data, out, input_file=str(empty)))
    with pytest.raises(ValueError, match="train_batch_size 8 is not a multiple of "
                       "gradient_accumulation_steps 3"):
        run_pretraining(pretrain_config(tiny_data, out, gradient_accumulation_steps=3))
    from tfbert.data import splits

    monkeypatch.setattr(splits, "pretraining_documents", lambda: [])
    with pytest.raises(ValueError, match="built-in corpus is empty"):
        builtin_data.default_data(str(tmp_path / "cache"))
    assert not glob.glob(str(out / "checkpoints" / "*"))
    assert not glob.glob(str(tmp_path / "cache" / "pretrain_data" / "*"))


def test_default_data_is_built_once_and_cached(tmp_path, monkeypatch):
    from tfbert.data import corpora, splits

    # Source order as the built-in corpus has it: multi-sentence articles, then one-sentence
    # reviews (always NotNext in the reference); the NotNext share must still be about 50%.
    docs = [d for d in corpora.people_daily_documents() if len(d) >= 2][:150]
    docs += [[text] for text, _ in corpora.reviews()[:150]]
    calls = []
    monkeypatch.setattr(splits, "pretraining_documents", lambda: calls.append(1) or docs)
    first = builtin_data.default_data(str(tmp_path), max_seq_length=128, vocab_size=1500,
                                  dupe_factor=1, eval_fraction=0.1, num_shards=2)
    second = builtin_data.default_data(str(tmp_path), max_seq_length=128, vocab_size=1500,
                                   dupe_factor=1, eval_fraction=0.1, num_shards=2)
    assert first == second and len(calls) == 1
    assert len(first.train_files.split(",")) == 2
    manifest = json.loads(open(os.path.join(first.directory, "manifest.json")).read())
    assert manifest["train_instances"] > 0 and manifest["eval_instances"] > 0
    assert abs(manifest["train_not_next_share"] - 0.5) < 0.05, manifest
    assert os.listdir(os.path.join(str(tmp_path), "pretrain_data")) == [
        os.path.basename(first.directory)]  # no temporary directory left behind
    vocab = open(first.vocab_file, encoding="utf-8").read().split("\n")
    assert "[CLS]" in vocab and "人" in vocab


_MIRRORED = textwrap.dedent("""
    import json, os, sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from tfbert.training.pretrain import PretrainConfig, run_pretraining
    out = {}
    for strategy in ("one_device", "mirrored"):
        config = PretrainConfig(**json.loads(sys.argv[1]), distribution_strategy=strategy,
                                output_dir=os.path.join(sys.argv[2], strategy))
        run_pretraining(config)
        with open(os.path.join(config.output_dir, "pretrain_history.json")) as f:
            out[strategy] = [h["loss"] for h in json.load(f)]
    print("RESULT" + json.dumps(out))
""")


@pytest.mark.slow  # test_training.py checks MirroredStrategy exactly on a plain model
@pytest.mark.slow  # (test_training.py's fast mirrored test pins the optimizer's replica parity)
def test_mirrored_two_cpus_matches_one_device(tiny_data, tmp_path):
    """BertPretrainer under MirroredStrategy over 2 logical CPUs follows the one-device loss
    trajectory at the same global batch (dropout off; per-replica MLM normalisation as in
    the gradient accumulation test)."""
    no_dropout = json.loads(open(tiny_data["config"]).read())
    no_dropout.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(no_dropout))
    config = vars(pretrain_config(dict(tiny_data, config=str(config_file)), tmp_path,
                                  num_train_steps=6, iterations_per_loop=1, eval_input_file=None))
    config = {k: v for k, v in config.items() if k not in ("distribution_strategy", "output_dir")}
    proc = subprocess.run([sys.executable, "-c", _MIRRORED, json.dumps(config), str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=400,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads([x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1][6:])
    assert len(out["mirrored"]) == 6
    np.testing.assert_allclose(out["mirrored"], out["one_device"], rtol=2e-3)


@pytest.mark.slow
def test_multi_worker_two_processes(tiny_data, tmp_path):
    """MultiWorkerMirroredStrategy: two worker processes on localhost with TF_CONFIG reach the
    same step; the chief writes the checkpoints and results, the other worker none."""
    out = tmp_path / "mw"
    config = pretrain_config(tiny_data, out, num_train_steps=4, save_checkpoints_steps=2,
                             distribution_strategy="multi_worker", eval_input_file=None)
    command = [sys.executable, os.path.join(REPO, "run_pretraining.py"), *pretrain_flags(config)]
    cluster = {"worker": [f"localhost:{p}" for p in free_ports(2)]}
    procs = []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        env = dict(os.environ, TF_CONFIG=tf_config, TF_CPP_MIN_LOG_LEVEL="2")
        procs.append(subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_, stderr) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, stderr[-3000:]
    steps = [json.loads(stdout[stdout.index("{"):])["global_step"] for stdout, _ in outputs]
    assert steps == [4, 4]
    assert sorted(os.path.basename(p) for p in glob.glob(str(out / "checkpoints" / "*.index"))) \
        == ["ckpt-2.index", "ckpt-4.index"]
    assert not glob.glob(str(out / "checkpoints" / ".worker_*"))
    assert json.loads((out / "pretrain_results.json").read_text())["global_step"] == 4
