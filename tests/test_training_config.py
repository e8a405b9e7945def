"""The shared run config (tfbert.training.config), the flags made from its fields
(tfbert/cli/common_flags.py) and the runtime helpers both training entries use."""

from __future__ import annotations

import dataclasses
import os
import sys

import pytest
from absl import flags

from tfbert.errors import UserError
from tfbert.tasks.squad import SquadConfig
from tfbert.training import model_source, runtime
from tfbert.training.config import RunConfig, field_help
from tfbert.training.finetune import TaskConfig
from tfbert.training.pretrain import PretrainConfig

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tfbert.cli import common_flags  # noqa: E402


def test_every_field_has_help_and_one_set_of_defaults():
    for cls in (RunConfig, PretrainConfig, TaskConfig):
        for f in dataclasses.fields(cls):
            assert field_help(cls, f.name), (cls.__name__, f.name)
    shared = {f.name for f in dataclasses.fields(RunConfig)}
    pretrain, task = PretrainConfig(), TaskConfig(output_dir="out")
    differ = {n for n in shared if getattr(pretrain, n) != getattr(task, n)}
    # Each difference is an override that says why (output_dir, learning_rate in
    # PretrainConfig; eval_batch_size, mixed_precision in TaskConfig).
    assert differ == {"output_dir", "learning_rate", "eval_batch_size", "mixed_precision"}
    assert pretrain.seed == task.seed == 12345 and pretrain.verbose is task.verbose is None
    # A subclass that only changes a default keeps the base's help.
    assert field_help(SquadConfig, "max_seq_length") == field_help(RunConfig, "max_seq_length")


def test_flags_follow_the_fields():
    values = flags.FlagValues()
    names = common_flags.define_config_flags(PretrainConfig, values)
    assert set(names) == {f.name for f in dataclasses.fields(PretrainConfig)}
    values(["prog", "--learning_rate=2e-4", "--nowhole_word_mask", "--optimizer=lamb",
            "--iterations_per_loop=5"])
    assert values["learning_rate"].value == 2e-4 and values["optimizer"].value == "lamb"
    assert values["num_train_steps"].default == PretrainConfig.num_train_steps
    assert values["mixed_precision"].help.endswith(field_help(PretrainConfig, "mixed_precision"))
    with pytest.raises(flags.IllegalFlagValueError):
        values["optimizer"].parse("sgd")
    with pytest.raises(flags.IllegalFlagValueError):
        values["max_seq_length"].parse("1")
    tasks = flags.FlagValues()
    common_flags.define_config_flags(SquadConfig, tasks)
    assert tasks["max_seq_length"].default == 384 and tasks["seed"].default == 12345
    assert "doc_stride" not in tasks  # the task's own options are its script's flags


def test_steps_follow_the_data_files_given():
    def steps(*args):
        values = flags.FlagValues()
        for name in ("train_file", "dev_file", "test_file"):
            flags.DEFINE_string(name, None, "", flag_values=values)
        for name in ("do_eval", "do_predict"):
            flags.DEFINE_bool(name, True, "", flag_values=values)
        values(["prog", *args])
        return common_flags.steps_for_files(values)

    assert steps() == {}  # a built-in task: every step
    assert steps("--train_file=t") == {"do_eval": False, "do_predict": False}
    assert steps("--train_file=t", "--dev_file=d") == {"do_predict": False}
    assert steps("--train_file=t", "--do_predict") == {"do_eval": False}  # asked for: kept
    assert steps("--train_file=t", "--dev_file=d", "--test_file=x") == {}


def test_shared_validation_names_the_field():
    with pytest.raises(UserError, match="gradient_accumulation_steps must be a positive"):
        RunConfig(gradient_accumulation_steps=0)
    with pytest.raises(UserError, match="give bert_config_file or preset, not both"):
        TaskConfig(output_dir="out", bert_config_file="c.json", preset="bert-mini")
    with pytest.raises(UserError, match="distribution_strategy must be one of"):
        PretrainConfig(distribution_strategy="many")
    with pytest.raises(UserError, match="below the minimum 3: "):
        TaskConfig(output_dir="out", max_seq_length=2)


def test_model_config_order_and_fit_verbosity():
    config = RunConfig(preset="bert-mini", init_checkpoint="ckpt")
    bert_config, source = model_source.model_config(config, 99)
    assert (bert_config.vocab_size, source) == (99, "preset bert-mini")  # overrides the ckpt's
    assert model_source.model_config(RunConfig(init_checkpoint="ckpt"), 99) == (None, "ckpt")
    with pytest.raises(UserError, match="give init_checkpoint"):
        model_source.model_config(RunConfig(), 99)
    fresh, source = model_source.model_config(RunConfig(), 99, {"hidden_size": 64,
                                                                  "num_attention_heads": 2,
                                                                  "intermediate_size": 128})
    assert (fresh.hidden_size, source) == (64, "the built-in default")
    assert runtime.fit_verbosity(0) == 0
    assert runtime.fit_verbosity(None) == (1 if sys.stdout.isatty() else 2)
