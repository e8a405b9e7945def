"""The shared run config (tfbert.training.config), the flags made from its fields
(tfbert/cli/common_flags.py) and the runtime helpers both training entries use."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest
from absl import flags

from tfbert import BertConfig
from tfbert.errors import UserError
from tfbert.tasks.classification import ClassificationConfig
from tfbert.tasks.ner import NerConfig
from tfbert.tasks.qa import QAConfig
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
    assert field_help(QAConfig, "max_seq_length") == field_help(RunConfig, "max_seq_length")


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
    common_flags.define_config_flags(QAConfig, tasks)
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


@pytest.mark.parametrize("task", ["classifier", "ner", "squad"])
def test_default_learning_rate_follows_the_model(task, tmp_path):
    """No --learning_rate: 1e-3 for a small random-init model and from a checkpoint of
    bert-tiny's width (5e-5 leaves the built-in tiny model untrained in a short run), BERT's
    5e-5 from a wider checkpoint or for a BERT-base-wide model; a given rate always wins."""
    config_cls, common = {
        "classifier": (ClassificationConfig, {"task_name": "sentiment"}),
        "ner": (NerConfig, {"task_name": "people_daily"}),
        "squad": (QAConfig, {}),
    }[task]
    common = dict(common, output_dir=str(tmp_path / "o"))
    small = str(tmp_path / "bert_config.json")
    BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
               intermediate_size=64).to_json_file(small)

    def rate(**kwargs):
        return config_cls(**common, **kwargs).learning_rate

    assert rate(bert_config_file=small) == 1e-3
    assert rate(preset="bert-mini") == 1e-3
    assert rate(preset="bert-base-chinese") == 5e-5
    # From a checkpoint (its config.json): BERT's rate above bert-tiny's width of 128.
    wide = tmp_path / "wide"
    wide.mkdir()
    (wide / "config.json").write_text(json.dumps(dict(
        json.loads(Path(small).read_text()), hidden_size=256, intermediate_size=1024)))
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    (tiny / "config.json").write_text(json.dumps(dict(
        json.loads(Path(small).read_text()), hidden_size=128, intermediate_size=512)))
    assert rate(init_checkpoint=str(wide)) == 3e-4  # hidden 256: tfbert-chinese
    assert rate(init_checkpoint="tfbert-chinese") == 3e-4  # by its shipped name too
    assert rate(init_checkpoint=str(tiny)) == 1e-3
    assert rate(init_checkpoint=str(wide), bert_config_file=small) == 3e-4
    assert rate(bert_config_file=small, learning_rate=3e-5) == 3e-5
