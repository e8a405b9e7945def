"""The recipe grid (tfbert.training.grid), its command line (common_flags.split_grid_args) and
early stopping (finetune's early_stopping_patience)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from absl import flags
from model_test_utils import tiny_config_file

from tfbert.cli import common_flags
from tfbert.errors import UserError
from tfbert.rundir import RunLock
from tfbert.training import finetune as ft
from tfbert.training import grid as grid_lib
from tfbert.training import outputs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- the command line's grid ----------------------------------------------------------------------


def flag_values():
    values = flags.FlagValues()
    flags.DEFINE_float("learning_rate", 5e-5, "", flag_values=values)
    flags.DEFINE_integer("train_batch_size", 32, "", lower_bound=1, flag_values=values)
    flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "", flag_values=values)
    flags.DEFINE_bool("jit_compile", False, "", flag_values=values)
    flags.DEFINE_string("train_file", None, "", flag_values=values)
    flags.DEFINE_list("tfds_splits", ["train", "dev", "test"], "", flag_values=values)
    return values


def test_grid_args_are_parsed_and_the_first_value_passed_on():
    values = flag_values()
    argv, grid = common_flags.split_grid_args(
        ["prog", "--learning_rate=2e-5,3e-5,5e-5", "--train_batch_size", "16,32",
         "--optimizer=adamw,lamb", "-jit_compile=false,true", "--train_file=a,b.tsv",
         "--tfds_splits=x,y,z", "--", "--learning_rate=1,2"], values)
    assert grid == {"learning_rate": [2e-5, 3e-5, 5e-5], "train_batch_size": [16, 32],
                    "optimizer": ["adamw", "lamb"], "jit_compile": [False, True]}
    assert argv == ["prog", "--learning_rate=2e-5", "--train_batch_size=16", "--optimizer=adamw",
                    "--jit_compile=false", "--train_file=a,b.tsv", "--tfds_splits=x,y,z",
                    "--", "--learning_rate=1,2"]
    assert values(argv) == ["prog", "--learning_rate=1,2"]
    assert values.learning_rate == 2e-5 and values.train_batch_size == 16
    assert values.train_file == "a,b.tsv" and values.tfds_splits == ["x", "y", "z"]
    # One value is a plain flag; no grid.
    assert common_flags.split_grid_args(["prog", "--learning_rate=1e-4"], values) == (
        ["prog", "--learning_rate=1e-4"], {})


def test_grid_args_from_a_flagfile(tmp_path):
    path = tmp_path / "flags.txt"
    path.write_text("--learning_rate=2e-5,4e-5\n--train_batch_size=8\n", encoding="utf-8")
    argv, grid = common_flags.split_grid_args(["prog", f"--flagfile={path}"], flag_values())
    assert grid == {"learning_rate": [2e-5, 4e-5]}
    assert argv == ["prog", "--learning_rate=2e-5", "--train_batch_size=8"]


@pytest.mark.parametrize("arg, message", [
    ("--learning_rate=2e-5,3e-x", r"--learning_rate=2e-5,3e-x: '3e-x' is not a valid value "
                                  r"\(could not convert string to float"),
    ("--train_batch_size=16,0", r"--train_batch_size=16,0: '0' is not a valid value \(0 is not "
                                r"a positive integer\); a comma-separated value is a grid"),
    ("--optimizer=adamw,sgd", r"--optimizer=adamw,sgd: 'sgd' is not a valid value"),
    ("--train_batch_size=16,", r"--train_batch_size=16,: '' is not a valid value"),
    ("--learning_rate=2e-5,2e-05", r"--learning_rate=2e-5,2e-05: '2e-05' is given twice"),
])
def test_bad_grid_values_name_the_flag_and_value(arg, message):
    with pytest.raises(flags.IllegalFlagValueError, match=message):
        common_flags.split_grid_args(["prog", arg], flag_values())


def test_a_grid_flag_given_twice_is_an_error():
    with pytest.raises(flags.IllegalFlagValueError, match="--learning_rate is given more than "
                       "once; a grid takes all its values from one --learning_rate=v1,v2"):
        common_flags.split_grid_args(["prog", "--learning_rate=1e-5,2e-5", "--learning_rate=3e-5"],
                                     flag_values())
    with pytest.raises(flags.IllegalFlagValueError, match="--jit_compile is given more than"):
        common_flags.split_grid_args(["prog", "--nojit_compile", "--jit_compile=true,false"],
                                     flag_values())


@pytest.mark.slow  # (a process start; test_bad_grid_values_name_the_flag_and_value is fast)
def test_bad_grid_value_on_the_command_line_is_one_line(tmp_path):
    """Through run_classifier.py: a bad grid value fails before anything runs, one line, 2."""
    run = subprocess.run(
        [sys.executable, os.path.join(REPO, "run_classifier.py"), f"--output_dir={tmp_path}",
         "--learning_rate=2e-5,fast"], cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == (
        "run_classifier.py: error: --learning_rate=2e-5,fast: 'fast' is not a valid value "
        "(could not convert string to float: 'fast'); a comma-separated value is a grid, one "
        "run per value")
    assert not os.listdir(tmp_path)
    # Pretraining takes no grid: absl's own error for the value.
    run = subprocess.run(
        [sys.executable, os.path.join(REPO, "run_pretraining.py"), f"--output_dir={tmp_path}",
         "--learning_rate=1e-4,2e-4"], cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert run.returncode == 2
    assert "--learning_rate=1e-4,2e-4" in run.stderr.strip().splitlines()[-1]
    assert not os.listdir(tmp_path)


# --- combinations and the search ------------------------------------------------------------------


def test_combinations_order_and_names():
    points = grid_lib.combinations({"learning_rate": [2e-5, 5e-5], "num_train_epochs": [3.0, 4],
                                    "train_batch_size": [16], "optimizer": ["adamw", "lamb"]})
    assert [c.name for c in points] == [
        "1-lr2e-05-ep3-optimizer_adamw", "2-lr2e-05-ep3-optimizer_lamb",
        "3-lr2e-05-ep4-optimizer_adamw", "4-lr2e-05-ep4-optimizer_lamb",
        "5-lr5e-05-ep3-optimizer_adamw", "6-lr5e-05-ep3-optimizer_lamb",
        "7-lr5e-05-ep4-optimizer_adamw", "8-lr5e-05-ep4-optimizer_lamb"]
    assert points[5].values == {"learning_rate": 5e-5, "num_train_epochs": 3.0,
                                "train_batch_size": 16, "optimizer": "lamb"}
    assert [c.index for c in points] == list(range(1, 9))
    wide = grid_lib.combinations({"seed": list(range(10)), "jit_compile": [True]})
    assert wide[0].name == "01-seed0" and wide[9].name == "10-seed9"


def test_check_grid_names_the_bad_key_or_value():
    config = ft.TaskConfig(output_dir="out")
    assert grid_lib.check_grid(config, {"learning_rate": (1e-5, 2e-5)}) == {
        "learning_rate": [1e-5, 2e-5]}
    for bad, message in (({"learnin_rate": [1e-5]}, "grid key 'learnin_rate' is not a field of "
                          "TaskConfig"),
                         ({"output_dir": ["a", "b"]}, "output_dir cannot be a grid key"),
                         ({"learning_rate": 1e-5}, "grid key 'learning_rate': expected a "
                          "non-empty list of values, got 1e-05"),
                         ({"learning_rate": []}, "expected a non-empty list"),
                         ({"train_batch_size": [16, 16]}, "value 16 is given twice"),
                         ({}, "a grid is a dict")):
        with pytest.raises(UserError, match=message):
            grid_lib.check_grid(config, bad)


def test_search_picks_the_best_and_keeps_only_its_model():
    """A train-and-score function of one's own: called with each combination's values in order,
    the first of equal scores wins, only the best model stays referenced."""
    calls = []

    def train(learning_rate, train_batch_size):
        calls.append((learning_rate, train_batch_size))
        score = {(2e-5, 16): 0.5, (2e-5, 32): 0.8, (5e-5, 16): 0.8, (5e-5, 32): 0.6}
        return {"accuracy": score[learning_rate, train_batch_size], "test": 0.1,
                "best_epoch": 2, "model": f"model {learning_rate} {train_batch_size}"}

    result = grid_lib.search(train, {"learning_rate": [2e-5, 5e-5], "train_batch_size": [16, 32]},
                             metric="accuracy", seed=None)
    assert calls == [(2e-5, 16), (2e-5, 32), (5e-5, 16), (5e-5, 32)]
    assert result.best == 1 and result.best_row.name == "2-lr2e-05-bs32"
    assert result.best_model == "model 2e-05 32"
    assert [r.dev for r in result.rows] == [0.5, 0.8, 0.8, 0.6]
    lower = grid_lib.search(lambda x: {"loss": abs(x - 2)}, {"x": [0, 1, 2, 3]}, "loss",
                            higher_is_better=False, seed=None)
    assert lower.best_row.values == {"x": 2}
    with pytest.raises(UserError, match=r"grid combination 1-x_0: no 'f1' to compare \(it gave "
                       r"\['loss'\]\)"):
        grid_lib.search(lambda x: {"loss": 1.0}, {"x": [0, 1]}, "f1", seed=None)


def test_markdown_table_and_json_round_trip():
    rows = [grid_lib.GridRow(1, "1-lr2e-05", {"learning_rate": 2e-5}, 0.71234, 0.7, 3, 3, 12.4,
                             "r1"),
            grid_lib.GridRow(2, "2-lr5e-05", {"learning_rate": 5e-5}, 0.8, None, 1, 2, 9.6,
                             "r2")]
    result = grid_lib.GridResult("accuracy", True, ["learning_rate"], rows, 1, 12345)
    assert result.markdown(folder="grid/") == (
        "Grid search: 2 combinations, picked by dev accuracy (higher is better); seed 12345.\n"
        "\n"
        "| # | learning_rate | dev accuracy | test accuracy | best epoch | epochs run | time (s) "
        "| folder |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---|\n"
        "| 1 | 2e-05 | 0.7123 | 0.7000 | 3 | 3 | 12 | grid/1-lr2e-05 |\n"
        "| **2** (best) | 5e-05 | 0.8000 |  | 1 | 2 | 10 | grid/2-lr5e-05 |\n"
        "\n"
        "Best: #2 (learning_rate=5e-05): dev accuracy 0.8000.\n")
    again = grid_lib.GridResult.from_json(json.loads(json.dumps(result.to_json())))
    assert again == result
    assert result.to_json()["best_values"] == {"learning_rate": 5e-5}
    # Columns no combination fills are left out; lower is better says so.
    loss = grid_lib.GridResult("loss", False, ["x"], [grid_lib.GridRow(1, "1-x_0", {"x": 0}, 0.5,
                                                                       seconds=1.0)], 0, None)
    assert loss.markdown().splitlines()[:4] == [
        "Grid search: 1 combinations, picked by dev loss (lower is better).", "",
        "| # | x | dev loss | time (s) |", "|---:|---:|---:|---:|"]


# --- run_grid over a task runner ------------------------------------------------------------------


def fake_runner(scores, seen):
    """A task runner as the real ones behave (ft.task_run, model/, results.json, predictions),
    scoring dev by the learning rate; it checks the grid holds the top folder's lock."""

    def run(config):
        top = os.path.dirname(os.path.dirname(os.path.dirname(config.output_dir)))
        if os.path.basename(os.path.dirname(config.output_dir)) == "grid":
            with pytest.raises(UserError, match="is in use by"):
                RunLock(top).acquire()
        seen.append((config.learning_rate, config.train_batch_size, config.seed,
                     os.path.relpath(config.output_dir, top)))
        with ft.task_run(config, "classification") as staging:
            os.makedirs(staging.path("model"))
            with open(os.path.join(staging.path("model"), "weights"), "w") as f:
                f.write(f"{config.learning_rate} {config.train_batch_size}")
            with open(staging.path("test_predictions.tsv"), "w") as f:
                f.write(f"{config.learning_rate}\n")
            dev = scores[config.learning_rate, config.train_batch_size]
            if dev is KeyboardInterrupt:
                raise KeyboardInterrupt
            results = {"dev": {"accuracy": dev, "macro_f1": dev / 2},
                       "test": {"accuracy": dev - 0.1},
                       "train": {"best_epoch": 1, "history": [{"epoch": 1}, {"epoch": 2}]},
                       "run_id": staging.run_id}
            ft.write_results(staging.directory, results)
        return results

    return run


def test_run_grid_keeps_only_the_best_model_and_commits_one_output(tmp_path):
    out = tmp_path / "out"
    with outputs.staged(str(out), "classification"):  # a classification run's folder (the
        pass  # ownership rule: a run writes only into a new one or one of its own kind)
    (out / "notes.txt").write_text("mine")  # not the program's: stays
    seen = []
    scores = {(2e-5, 16): 0.6, (2e-5, 32): 0.9, (5e-5, 16): 0.7, (5e-5, 32): 0.8}
    config = ft.TaskConfig(output_dir=str(out), seed=7)
    results = grid_lib.run_grid(fake_runner(scores, seen), config,
                                {"learning_rate": [2e-5, 5e-5], "train_batch_size": [16, 32]},
                                metric="accuracy", task="classification")
    names = ["1-lr2e-05-bs16", "2-lr2e-05-bs32", "3-lr5e-05-bs16", "4-lr5e-05-bs32"]
    assert [s[:3] for s in seen] == [(2e-5, 16, 7), (2e-5, 32, 7), (5e-5, 16, 7), (5e-5, 32, 7)]
    staging = os.path.dirname(os.path.dirname(seen[0][3]))
    assert staging.startswith(outputs.STAGING_PREFIX)
    assert [os.path.relpath(s[3], staging) for s in seen] == [f"grid/{n}" for n in names]

    manifest = outputs.read_manifest(str(out))
    assert manifest["task"] == "classification" and manifest["run_id"] == results["run_id"]
    assert manifest["outputs"] == ["grid", "grid.md", "model", "results.json",
                                   "test_predictions.tsv"]
    assert sorted(os.listdir(out)) == [".tfbert.lock", "grid", "grid.md", "model", "notes.txt",
                                       "results.json", "test_predictions.tsv", "tfbert_run.json"]
    assert (out / "model" / "weights").read_text() == "2e-05 32"
    assert (out / "test_predictions.tsv").read_text() == "2e-05\n"
    for name in names:  # every combination keeps its results and predictions, no model
        folder = out / "grid" / name
        assert not (folder / "model").exists()
        assert (folder / "test_predictions.tsv").exists()
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk == results
    assert results["dev"] == {"accuracy": 0.9, "macro_f1": 0.45}
    table = results["grid"]
    assert table["best"] == "2-lr2e-05-bs32" and table["seed"] == 7
    assert [(c["name"], c["dev"], c["test"], c["epochs"]) for c in table["combinations"]] == [
        (n, d, pytest.approx(d - 0.1), 2) for n, d in zip(names, (0.6, 0.9, 0.7, 0.8), strict=True)]
    assert table["combinations"][1]["run_id"] == json.loads(
        (out / "grid" / names[1] / "results.json").read_text())["run_id"]
    md = (out / "grid.md").read_text()
    assert "| **2** (best) | 2e-05 | 32 | 0.9000 | 0.8000 | 1 | 2 |" in md
    assert md.endswith("Best: #2 (learning_rate=2e-05, train_batch_size=32): dev accuracy "
                       "0.9000, test accuracy 0.8000.\n")


def test_an_interrupted_grid_leaves_the_previous_output(tmp_path):
    out = tmp_path / "out"
    config = ft.TaskConfig(output_dir=str(out))
    grid = {"learning_rate": [2e-5, 5e-5], "train_batch_size": [16]}
    first = grid_lib.run_grid(fake_runner({(2e-5, 16): 0.5, (5e-5, 16): 0.6}, []), config, grid,
                              metric="accuracy")
    before = {p: (out / p).read_bytes() for p in ("results.json", "model/weights", "grid.md")}
    with pytest.raises(KeyboardInterrupt):
        grid_lib.run_grid(fake_runner({(2e-5, 16): 0.9, (5e-5, 16): KeyboardInterrupt}, []),
                          config, grid, metric="accuracy")
    assert {p: (out / p).read_bytes() for p in before} == before
    assert outputs.read_manifest(str(out))["run_id"] == first["run_id"]
    assert not [e for e in os.listdir(out) if e.startswith(".tfbert-run-")]


def test_run_grid_plain_run_and_errors(tmp_path):
    seen = []
    config = ft.TaskConfig(output_dir=str(tmp_path / "one"))
    results = grid_lib.run_grid(fake_runner({(3e-5, 32): 0.5}, seen), config,
                                {"learning_rate": [3e-5]}, metric="accuracy")
    assert "grid" not in results and seen[0][:2] == (3e-5, 32)
    assert not (tmp_path / "one" / "grid").exists()  # a plain run in output_dir itself
    with pytest.raises(UserError, match=r"grid combination 2-bs0 \(train_batch_size=0\): "
                       "train_batch_size must be a positive integer"):
        grid_lib.run_grid(fake_runner({}, []), config, {"train_batch_size": [16, 0]})
    with pytest.raises(UserError, match="a grid trains every combination, and do_train is off"):
        grid_lib.run_grid(fake_runner({}, []), config, {"do_train": [True, False]})
    with pytest.raises(UserError, match=r"grid combination 1-lr2e-05: no dev 'f1' to compare "
                       r"\(it gave \['accuracy', 'macro_f1'\]\)"):  # f1: the default metric
        grid_lib.run_grid(fake_runner({(2e-5, 32): 0.5}, []), config,
                          {"learning_rate": [2e-5, 3e-5]}, task="classification")
    assert not (tmp_path / "one" / "grid").exists()  # the failed grid left nothing


def test_run_task_runs_the_command_lines_grid(tmp_path, monkeypatch, capsys):
    """common_flags.run_task: a plain run without a grid; with one, run_grid and the table."""
    seen = []
    runner = fake_runner({(2e-5, 32): 0.5, (5e-5, 32): 0.7, (3e-5, 32): 0.1}, seen)
    plain = common_flags.run_task(runner, ft.TaskConfig(output_dir=str(tmp_path / "plain"),
                                                        learning_rate=3e-5), "ner", "accuracy")
    assert "grid" not in plain and len(seen) == 1 and capsys.readouterr().out == ""
    monkeypatch.setattr(common_flags, "_grid", {"learning_rate": [2e-5, 5e-5]})
    results = common_flags.run_task(runner, ft.TaskConfig(output_dir=str(tmp_path / "grid")),
                                    "ner", "accuracy")
    assert results["grid"]["best"] == "2-lr5e-05"
    assert outputs.read_manifest(str(tmp_path / "grid"))["task"] == "ner"
    assert capsys.readouterr().out == (tmp_path / "grid" / "grid.md").read_text() + "\n"


# --- early stopping -------------------------------------------------------------------------------


def fit_with_scores(scores, patience, epochs, higher_is_better=True, metric="accuracy"):
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(16, 4)).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, (x[:, 0] > 0).astype("int32"))).batch(8)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    sequence, snapshots = iter(scores), []

    def evaluate(m):
        snapshots.append([w.copy() for w in m.get_weights()])
        return {metric: next(sequence)}

    result = ft.finetune(model, ds, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                         ft.FinetuneConfig(learning_rate=1e-2, num_train_epochs=epochs,
                                           early_stopping_patience=patience, metric=metric,
                                           higher_is_better=higher_is_better, verbose=0),
                         evaluate_fn=evaluate)
    return result, model, snapshots


def test_early_stopping_stops_after_patience_epochs_without_improvement():
    result, model, snapshots = fit_with_scores([0.5, 0.9, 0.7, 0.9, 0.95, 0.99], 2, 6)
    assert result.stopped_epoch == 4  # epochs 3 and 4 did not beat 0.9 (equal is no better)
    assert [h["epoch"] for h in result.history] == [1, 2, 3, 4]
    assert result.best_epoch == 2 and result.best_metrics == {"accuracy": 0.9}
    assert result.num_train_steps == 8  # 4 epochs of 2 batches
    for now, best in zip(model.get_weights(), snapshots[1], strict=True):
        np.testing.assert_array_equal(now, best)
    # Improving in time: no stop; a loss (lower is better) with patience 1.
    assert fit_with_scores([0.5, 0.4, 0.6, 0.7], 2, 4)[0].stopped_epoch is None
    result = fit_with_scores([1.0, 0.8, 0.9, 0.1], 1, 4, False, "loss")[0]
    assert (result.stopped_epoch, result.best_epoch) == (3, 2)


def test_early_stopping_config_and_flag():
    config = ft.TaskConfig(output_dir="out", early_stopping_patience=2)
    assert config.finetune_config("f1").early_stopping_patience == 2
    assert ft.early_stopping(config.finetune_config("f1")).patience == 2
    assert ft.early_stopping(ft.FinetuneConfig()) is None
    stopper = ft.early_stopping(ft.FinetuneConfig(metric="loss", higher_is_better=False,
                                                  early_stopping_patience=3))
    assert (stopper.monitor, stopper.mode, stopper.restore_best_weights) == ("val_loss", "min",
                                                                               False)
    for bad in (0, 1.5, True):
        with pytest.raises(UserError, match="early_stopping_patience must be a positive"):
            ft.TaskConfig(output_dir="out", early_stopping_patience=bad)
    values = flags.FlagValues()
    common_flags.define_config_flags(ft.TaskConfig, values)
    values(["prog", "--early_stopping_patience=3"])
    assert values.early_stopping_patience == 3 and values["early_stopping_patience"].default is None
    with pytest.raises(flags.IllegalFlagValueError):
        values["early_stopping_patience"].parse("0")


def test_early_stopping_needs_a_dev_set():
    import keras
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((np.zeros((4, 2), "float32"), np.zeros(4))).batch(2)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
    with pytest.raises(UserError, match="early_stopping_patience=2 watches the dev metric, and "
                       "there is no dev set to score"):
        ft.finetune(model, ds, "mse", ft.FinetuneConfig(early_stopping_patience=2, verbose=0))


# --- end to end through run_classification --------------------------------------------------------


def tiny_classifier_config(tmp_path, vocab_file, **overrides):
    from tfbert.tasks.classification import ClassificationConfig

    return ClassificationConfig(**{
        "output_dir": str(tmp_path / "out"), "task_name": "sentiment",
        "bert_config_file": tiny_config_file(tmp_path / "bert_config.json", vocab_file),
        "vocab_file": vocab_file, "max_seq_length": 16, "train_batch_size": 16,
        "num_train_epochs": 1, "learning_rate": 1e-3, "max_train_examples": 64,
        "max_eval_examples": 32, "distribution_strategy": "one_device", "verbose": 0,
        **overrides})


@pytest.mark.slow  # (a minute; test_run_grid_keeps_only_the_best_model_and_commits_one_output
# is the fast counterpart, over a runner that stages outputs as run_classification does)
def test_run_grid_through_run_classifier_and_its_command_line(tmp_path, chinese_vocab_file):
    """Two combinations of a tiny random-init model on the built-in sentiment task: the best one's
    model, predictions and scores are output_dir's, its model scores the same again, and
    run_classifier.py with the same grid on the command line gives the same table."""
    from tfbert import checkpoints
    from tfbert.tasks.classification import run_classification

    config = tiny_classifier_config(tmp_path, chinese_vocab_file)
    results = grid_lib.run_grid(run_classification, config, {"learning_rate": [1e-3, 1e-5]},
                                task="classification")
    out = tmp_path / "out"
    table = results["grid"]
    names = ["1-lr0.001", "2-lr1e-05"]
    assert table["metric"] == "accuracy"  # ClassificationConfig's best_metric
    assert [c["name"] for c in table["combinations"]] == names
    best = table["combinations"][names.index(table["best"])]
    assert best["dev"] == results["dev"]["accuracy"] == max(
        c["dev"] for c in table["combinations"])
    assert best["test"] == results["test"]["accuracy"]
    assert checkpoints.read_metadata(str(out / "model"))["run_id"] == best["run_id"]
    assert not any((out / "grid" / name / "model").exists() for name in names)
    assert (out / "test_predictions.tsv").read_bytes() == (
        out / "grid" / best["name"] / "test_predictions.tsv").read_bytes()
    again = run_classification(tiny_classifier_config(
        tmp_path, chinese_vocab_file, output_dir=str(tmp_path / "eval"), do_train=False,
        init_checkpoint=str(out / "model")))
    assert again["test"]["accuracy"] == pytest.approx(results["test"]["accuracy"])

    cli_out = tmp_path / "cli"
    run = subprocess.run(
        [sys.executable, os.path.join(REPO, "run_classifier.py"), f"--output_dir={cli_out}",
         f"--bert_config_file={config.bert_config_file}", f"--vocab_file={chinese_vocab_file}",
         "--max_seq_length=16", "--train_batch_size=16", "--num_train_epochs=1",
         "--learning_rate=1e-3,1e-5", "--max_train_examples=64", "--max_eval_examples=32",
         "--distribution_strategy=one_device", "--verbose=0"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 0, run.stderr[-3000:]
    cli = json.loads((cli_out / "results.json").read_text(encoding="utf-8"))["grid"]
    same = ("name", "values", "dev", "test", "best_epoch", "epochs")
    assert [{k: c[k] for k in same} for c in cli["combinations"]] == [
        {k: c[k] for k in same} for c in table["combinations"]]  # the same seed, the same scores
    assert "| # | learning_rate | dev accuracy | test accuracy |" in run.stdout
    assert (cli_out / "grid.md").read_text(encoding="utf-8") in run.stdout


@pytest.mark.slow  # (two processes of two tiny runs each; the grid logic is tested fast above)
@pytest.mark.parametrize("script, args, task", [
    ("run_ner.py", ["--max_seq_length=32", "--learning_rate=1e-3,1e-4"], "ner"),
    ("run_squad.py", ["--max_seq_length=64", "--doc_stride=24", "--max_query_length=24",
                      "--learning_rate=1e-3", "--train_batch_size=16,32"], "qa"),
])
def test_ner_and_squad_command_lines_run_a_grid(tmp_path, chinese_vocab_file, script, args,
                                                task):
    """run_ner.py and run_squad.py on their built-in data: the grid picks by dev F1, early
    stopping applies in every combination, output_dir holds the best model."""
    from tfbert import checkpoints

    out = tmp_path / "out"
    config = tiny_config_file(tmp_path / "bert_config.json", chinese_vocab_file)
    run = subprocess.run(
        [sys.executable, os.path.join(REPO, script), f"--output_dir={out}",
         f"--bert_config_file={config}",
         f"--vocab_file={chinese_vocab_file}", "--max_train_examples=32",
         "--max_eval_examples=16", "--num_train_epochs=3", "--early_stopping_patience=1",
         "--distribution_strategy=one_device", "--verbose=0", *args],
        cwd=REPO, capture_output=True, text=True, timeout=900,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    grid = results["grid"]
    assert grid["metric"] == "f1" and len(grid["combinations"]) == 2
    assert outputs.read_manifest(str(out))["task"] == task
    best = next(c for c in grid["combinations"] if c["name"] == grid["best"])
    assert best["dev"] == results["dev"]["f1"] == max(c["dev"] for c in grid["combinations"])
    assert checkpoints.read_metadata(str(out / "model"))["run_id"] == best["run_id"]
    for c in grid["combinations"]:
        history = json.loads((out / "grid" / c["name"] / "results.json").read_text(
            encoding="utf-8"))["train"]["history"]
        assert c["epochs"] == len(history) <= 3
        f1 = [h["f1"] for h in history]
        # Early stopping with patience 1: training ends at the first epoch without a new best.
        stops = [i for i in range(1, len(f1)) if f1[i] <= max(f1[:i])]
        assert len(history) == (stops[0] + 1 if stops else 3)
