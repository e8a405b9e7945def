"""Settings are checked where they are defined: a config field's bounds (tfbert.fields) refuse
the same values through the Python API, the command-line flags made from the fields, and
config files, each with one line naming the field and the value; NaN and Inf never pass a float
field. And every JSON tfbert writes is valid JSON (NaN and Inf written as null)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys

import pytest
from absl import flags

from tfbert.cli import common_flags
from tfbert.config import BertConfig
from tfbert.errors import UserError
from tfbert.fields import Bounds, check_fields, field, field_bounds, field_kind
from tfbert.fileio import write_json
from tfbert.tasks.classification import ClassificationConfig
from tfbert.tasks.ner import NerConfig
from tfbert.tasks.qa import QAConfig
from tfbert.training.config import RunConfig
from tfbert.training.finetune import FinetuneConfig, TaskConfig
from tfbert.training.pretrain import PretrainConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAN, INF = float("nan"), float("inf")

# Each config class with the fields that make it valid (a bad value is then the only problem).
CONFIGS = {
    RunConfig: {},
    PretrainConfig: {},
    TaskConfig: dict(output_dir="out"),
    ClassificationConfig: dict(output_dir="out", task_name="sentiment"),
    NerConfig: dict(output_dir="out", task_name="people_daily"),
    QAConfig: dict(output_dir="out"),
    FinetuneConfig: {},
    BertConfig: {},
}


def _refused(cls: type, name: str, value) -> str | None:
    """The message `cls(**valid, name=value)` raises (None: accepted)."""
    try:
        cls(**{**CONFIGS[cls], name: value})
    except UserError as e:
        return str(e)
    return None


def test_bounds_refuse_nan_and_inf_and_describe_themselves():
    unit = Bounds(0, 1, high_open=True)
    assert [v in unit for v in (0, 0.5, 1, -0.1, NAN, INF)] == [True, True, False, False, False,
                                                                 False]
    assert NAN not in Bounds() and -INF not in Bounds() and 1e308 in Bounds()
    assert unit.describe(float) == "a number in [0, 1)"
    assert Bounds(0, low_open=True).describe(float) == "a positive finite number"
    assert Bounds(0).describe(float) == "a non-negative finite number"
    assert Bounds().describe(float) == "a finite number"
    assert Bounds(1).describe(int) == "a positive integer"
    assert Bounds(0, 3).describe(int) == "an integer in [0, 3]"
    assert Bounds(2).describe(int) == "an integer >= 2"
    with pytest.raises(TypeError, match="one lower end"):
        field(0.1, lower_bound=0, greater_than=0)


@pytest.mark.parametrize("cls, name, value, message", [
    (RunConfig, "learning_rate", INF, "learning_rate must be a positive finite number, got inf"),
    (RunConfig, "learning_rate", NAN, "learning_rate must be a positive finite number, got nan"),
    (RunConfig, "learning_rate", 0.0, "learning_rate must be a positive finite number, got 0.0"),
    (RunConfig, "weight_decay", -1.0,
     "weight_decay must be a non-negative finite number, got -1.0"),
    (RunConfig, "train_batch_size", 0, "train_batch_size must be a positive integer, got 0"),
    (RunConfig, "train_batch_size", 8.0, "train_batch_size must be a positive integer, got 8.0"),
    (RunConfig, "seed", -1, "seed must be an integer in [0, 4294967295], got -1"),
    (RunConfig, "optimizer", "sgd",
     "optimizer must be one of ('adamw', 'lamb', 'adamw_google'), got 'sgd'"),
    (TaskConfig, "learning_rate", NAN, "learning_rate must be a positive finite number, got nan"),
    (TaskConfig, "num_train_epochs", NAN,
     "num_train_epochs must be a positive finite number, got nan"),
    (TaskConfig, "warmup_proportion", 1.5, "warmup_proportion must be a number in [0, 1], got 1.5"),
    (ClassificationConfig, "dropout", 1.0, "dropout must be a number in [0, 1), got 1.0"),
    (ClassificationConfig, "head_hidden_layers", 4,
     "head_hidden_layers must be an integer in [0, 3], got 4"),
    (NerConfig, "dropout", -0.1, "dropout must be a number in [0, 1), got -0.1"),
    (QAConfig, "n_best_size", 0, "n_best_size must be a positive integer, got 0"),
    (QAConfig, "null_score_diff_threshold", INF,
     "null_score_diff_threshold must be a finite number, got inf"),
    (PretrainConfig, "masked_lm_prob", 1.0, "masked_lm_prob must be a number in (0, 1), got 1.0"),
    (PretrainConfig, "learning_rate", INF, "learning_rate must be a positive finite number, got "
                                           "inf"),
    (FinetuneConfig, "learning_rate", NAN,
     "learning_rate must be a positive finite number, got nan"),
    (FinetuneConfig, "weight_decay", -1.0,
     "weight_decay must be a non-negative finite number, got -1.0"),
    (FinetuneConfig, "clip_norm", 0.0, "clip_norm must be a positive finite number, got 0.0"),
    (BertConfig, "hidden_dropout_prob", 1.0,
     "BertConfig.hidden_dropout_prob must be a number in [0, 1), got 1.0"),
    (BertConfig, "attention_probs_dropout_prob", NAN,
     "BertConfig.attention_probs_dropout_prob must be a number in [0, 1), got nan"),
    (BertConfig, "layer_norm_eps", 0.0,
     "BertConfig.layer_norm_eps must be a positive finite number, got 0.0"),
    (BertConfig, "hidden_act", "gelu2", "BertConfig.hidden_act must be one of ("),
])
def test_the_python_api_refuses_with_one_line_naming_field_and_value(cls, name, value, message):
    refused = _refused(cls, name, value)
    assert refused is not None and refused.startswith(message), refused
    assert "\n" not in refused


@pytest.mark.parametrize("cls", list(CONFIGS))
def test_no_float_field_of_any_config_takes_nan_or_inf(cls):
    floats = [f.name for f in dataclasses.fields(cls) if field_kind(cls, f.name) is float]
    assert floats, cls
    for name in floats:
        for value in (NAN, INF, -INF):
            refused = _refused(cls, name, value) or ""
            assert refused.startswith((f"{name} must be ", f"BertConfig.{name} must be ")), (
                cls, name, value, refused)


def test_the_defaults_are_within_their_bounds():
    for cls in CONFIGS:
        config = cls(**CONFIGS[cls])
        check_fields(config)  # does not raise
        for f in dataclasses.fields(cls):
            bounds = field_bounds(cls, f.name)
            value = getattr(config, f.name)
            if bounds is not None and value is not None:
                assert value in bounds, (cls.__name__, f.name, value)


# A value of each kind of bound, and the edges around them.
PROBES = (NAN, INF, -INF, -1, 0, 0.5, 1, 2, 3, 4, 1e-12, 100)


@pytest.mark.parametrize("cls", [PretrainConfig, ClassificationConfig])
def test_flags_refuse_exactly_what_the_fields_refuse(cls):
    """Every numeric flag made from a field: a probe value is refused by the flag's parser iff
    the dataclass refuses it, and --help names the allowed values."""
    values = flags.FlagValues()
    names = common_flags.define_config_flags(cls, values)
    checked = 0
    for name in names:
        kind = field_kind(cls, name)
        if kind is None:
            continue
        bounds = field_bounds(cls, name) or Bounds()
        parser = values[name].parser
        assert parser.syntactic_help == bounds.describe(kind)
        for probe in PROBES:
            if kind is int and not (math.isfinite(probe) and probe == int(probe)):
                continue
            text = str(int(probe) if kind is int else probe)
            try:
                parser.parse(text)
                flag_refuses = False
            except ValueError:
                flag_refuses = True
            assert flag_refuses == (probe not in bounds), (name, text)
            if flag_refuses:  # the same value through the API (where it is the only problem)
                message = _refused(cls, name, kind(probe))
                assert message is not None and message.startswith(f"{name} must be "), message
            checked += 1
    assert checked > 50
    help_text = values.get_help()
    assert "(a positive finite number)" in help_text  # learning_rate
    assert "(a positive integer)" in help_text  # train_batch_size


def test_a_bad_float_flag_is_an_absl_error_naming_it():
    values = flags.FlagValues()
    common_flags.define_config_flags(TaskConfig, values)
    for arg, message in (("--learning_rate=nan", "nan is not a positive finite number"),
                         ("--learning_rate=inf", "inf is not a positive finite number"),
                         ("--weight_decay=-1", "-1.0 is not a non-negative finite number"),
                         ("--warmup_proportion=2", "2.0 is not a number in [0, 1]")):
        with pytest.raises(flags.IllegalFlagValueError) as error:
            values(["prog", arg])
        assert str(error.value) == f"flag {arg}: {message}"
        values.unparse_flags()
    # A grid's values are checked by the same parser, before anything runs.
    with pytest.raises(flags.IllegalFlagValueError, match=r"'nan' is not a valid value \(nan is "
                       "not a positive finite number"):
        common_flags.split_grid_args(["prog", "--learning_rate=1e-4,nan"], values)


@pytest.mark.parametrize("key, value, message", [
    ("hidden_dropout_prob", 1.0, "BertConfig.hidden_dropout_prob must be a number in [0, 1), "
                                 "got 1.0"),
    ("attention_probs_dropout_prob", "NaN", "BertConfig.attention_probs_dropout_prob must be a "
                                            "number in [0, 1), got nan"),
    ("initializer_range", "-Infinity", "BertConfig.initializer_range must be a positive finite "
                                       "number, got -inf"),
    ("hidden_size", 12.5, "BertConfig.hidden_size must be a positive integer, got 12.5"),
])
def test_config_files_refuse_the_same_values(tmp_path, key, value, message):
    """Google's bert_config.json, HF's config.json and tfbert's own, NaN written as JSON's
    non-standard NaN literal too."""
    google = dict(vocab_size=100, hidden_size=12, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=16, hidden_act="gelu")
    for flavor, values in (("google", google), ("hf", dict(google, model_type="bert")),
                           ("tfbert", dict(google, hidden_act="gelu_tanh", lower_case=True))):
        path = tmp_path / f"{flavor}.json"
        text = json.dumps(values)[:-1] + f', "{key}": ' + (
            value if isinstance(value, str) else json.dumps(value)) + "}"
        path.write_text(text)
        with pytest.raises(UserError) as error:
            BertConfig.from_json_file(str(path))
        assert str(error.value) == f"{path}: {message}"


@pytest.mark.parametrize("args, message", [
    (["--learning_rate=nan"], "flag --learning_rate=nan: nan is not a positive finite number"),
    pytest.param(["--dropout=1.0"], "flag --dropout=1.0: 1.0 is not a number in [0, 1)",
                 marks=pytest.mark.slow),  # (a process each; the API test covers it fast)
])
def test_the_command_line_refuses_with_one_line_and_exit_2(tmp_path, args, message):
    done = subprocess.run([sys.executable, os.path.join(REPO, "run_classifier.py"),
                           f"--output_dir={tmp_path / 'out'}", "--task_name=sentiment", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == f"run_classifier.py: error: {message}"
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_write_json_writes_nan_and_inf_as_null(tmp_path):
    path = tmp_path / "results.json"
    write_json(str(path), {"dev": {"loss": NAN, "f1": 0.5}, "history": [INF, -INF, 1.0],
                           "pair": (NAN, 2)})

    def refuse(constant):
        raise AssertionError(f"not valid JSON: {constant}")

    loaded = json.loads(path.read_text(), parse_constant=refuse)
    assert loaded == {"dev": {"loss": None, "f1": 0.5}, "history": [None, None, 1.0],
                      "pair": [None, 2]}
