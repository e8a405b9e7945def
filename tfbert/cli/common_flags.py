"""absl flags made from the config dataclasses, shared by every command (tfbert/cli/).

A script defines one flag per field of its config (`define_config_flags(PretrainConfig)`): the
flag's name is the field's, its type the field's type, its default the field's default and its
help the field's help (`tfbert.training.config.field`), so a field, its flag and its help are
one definition. Names are the original BERT ones where they exist (bert_config_file,
vocab_file, init_checkpoint, max_seq_length, train_batch_size, learning_rate,
num_train_steps, ...). `config_from_flags` turns the parsed flags back into the config.

Example (a command's top):

    from tfbert.cli import common_flags
    from tfbert.training.pretrain import PretrainConfig

    common_flags.define_config_flags(PretrainConfig)

    def main(argv):
        config = common_flags.config_from_flags(PretrainConfig)

In a fine-tuning command, a numeric, enum or bool flag given a comma-separated list
(`--learning_rate=2e-5,3e-5,5e-5 --train_batch_size=16,32`) is a grid: `run` keeps the lists
aside (`split_grid_args`), absl parses the first value of each, and `run_task` trains every
combination (`tfbert.training.grid.run_grid`) and keeps the best by dev.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import types
import typing
from collections.abc import Callable
from typing import Any

from absl import app, flags, logging

from tfbert.devices import list_devices
from tfbert.errors import EXIT_USER_ERROR, run_cli
from tfbert.fields import Bounds, field_bounds, field_help, field_option

FLAGS = flags.FLAGS
# Flag kinds whose values never hold a comma, so a comma-separated value is a grid.
_GRID_PARSERS = (flags.IntegerParser, flags.FloatParser, flags.EnumParser, flags.BooleanParser)
_grid: dict[str, list[Any]] = {}  # the command line's grid (`run` sets it)
_takes_grid = False  # set by define_finetune_flags: the fine-tuning commands run grids


def run(main: Callable[[list[str]], Any]) -> None:
    """`app.run(main)` with tfbert's error boundary: a bad flag, an unexpected argument or a
    user error from the library prints one line on stderr and exits with 2 (absl's own parser
    prints the whole help and exits with 1); --help prints the help and exits with 0. After
    the flags, TensorFlow's devices are listed once (`tfbert.devices.list_devices`).

    `main`'s module (tfbert/cli/NAME.py) is the command whatever starts it (the top-level
    run_*.py file, the installed console script, `python -m tfbert.cli.NAME`): `--help`
    shows its docstring and its flags. In a fine-tuning command (its flags made by
    `define_finetune_flags`) a grid on the command line (`split_grid_args`) is kept for
    `run_task`; other commands parse their flags as absl does.
    """
    _show_in_help(sys.modules[main.__module__])

    def parse(argv: list[str]) -> list[str]:
        try:
            _grid.clear()
            if _takes_grid:
                argv, grid = split_grid_args(argv)
                _grid.update(grid)
            parsed = FLAGS(argv)
        except flags.Error as e:
            _fail(str(e))
        except SystemExit as e:  # absl exits with 1 after printing the help it was asked for
            if e.code == 1 and _asks_for_help(argv):
                sys.exit(0)
            raise
        # Once, before any work, and before absl's after-init callbacks: one that TensorFlow
        # registers (distribute/combinations.py) lists the GPUs (tfbert/devices.py: why).
        list_devices()
        return parsed

    def guarded(argv: list[str]) -> Any:
        try:
            return run_cli(main, argv)
        except app.UsageError as e:
            _fail(str(e))

    app.run(guarded, flags_parser=parse)


def _asks_for_help(argv: list[str]) -> bool:
    """Whether the command line holds one of absl's help flags (--help, -?, --helpfull, ...)."""
    return any(arg.split("=", 1)[0].lstrip("-") in ("help", "?", "helpshort", "helpfull",
                                                     "helpxml") for arg in argv[1:])


def split_grid_args(argv: list[str], flag_values: flags.FlagValues = FLAGS
                    ) -> tuple[list[str], dict[str, list[Any]]]:
    """Takes the grid out of a command line: `--name=v1,v2[,...]` (or `--name v1,v2`) where
    `name` is a defined integer, float, enum or bool flag (string and list flags are left as
    they are: their values may hold commas).

    Each value is parsed and checked by the flag's own parser (type, bounds, enum values);
    --flagfile contents count as given on the command line.

    Args:
        argv: list of str. The command line, program name first.
        flag_values: the flags it is parsed against.

    Returns:
        (argv with each grid flag given its first value, {flag name: [parsed values]} in the
        order the flags appear).

    Raises:
        flags.IllegalFlagValueError: a value the flag's parser rejects, a value given twice,
            or a grid flag that is given again.

    Example:
    >>> values = flags.FlagValues()
    >>> _ = flags.DEFINE_float("learning_rate", 5e-5, "", flag_values=values)
    >>> split_grid_args(["prog", "--learning_rate=2e-5,5e-5", "x"], values)
    (['prog', '--learning_rate=2e-5', 'x'], {'learning_rate': [2e-05, 5e-05]})
    """
    args = flag_values.read_flags_from_files(argv[1:], force_gnu=False)
    out, grid, given = [argv[0]], {}, []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--" or not arg.startswith("-") or arg == "-":
            out.append(arg)
            if arg == "--":
                out += args[i:]
                break
            continue
        name, eq, value = arg.lstrip("-").partition("=")
        flag = flag_values[name] if name in flag_values else None
        if flag is None and name.startswith("no") and name[2:] in flag_values:
            name = name[2:]  # --nodo_train
        given.append(name)
        if flag is None or not isinstance(flag.parser, _GRID_PARSERS) or isinstance(
                flag, flags.MultiFlag):
            out.append(arg)
            continue
        if not eq and not isinstance(flag.parser, flags.BooleanParser) and i < len(args):
            value, eq = args[i], "="  # `--name value`
            i += 1
        if "," not in value:
            out.append(f"--{name}{eq}{value}")
            continue
        parsed = []
        for text in value.split(","):
            try:
                parsed.append(flag.parser.parse(text.strip()))
            except ValueError as e:
                raise flags.IllegalFlagValueError(
                    f"--{name}={value}: {text.strip()!r} is not a valid value ({e}); a "
                    "comma-separated value is a grid, one run per value") from None
            if parsed[-1] in parsed[:-1]:
                raise flags.IllegalFlagValueError(
                    f"--{name}={value}: {text.strip()!r} is given twice")
        grid[name] = parsed
        out.append(f"--{name}={value.split(',')[0].strip()}")
    again = [name for name in grid if given.count(name) > 1]
    if again:
        raise flags.IllegalFlagValueError(
            f"--{again[0]} is given more than once; a grid takes all its values from one "
            f"--{again[0]}=v1,v2,...")
    return out, grid


def run_task(run_fn: Callable[[Any], dict[str, Any]], config: Any, task: str,
             metric: str) -> dict[str, Any]:
    """A fine-tuning command's run: `run_fn(config)`, or with a grid on the command line
    `tfbert.training.grid.run_grid` over it (its table printed); returns the results.

    Args:
        run_fn: the task runner (run_classification, run_ner, run_qa).
        config: its config, from the flags (each grid flag at its first value).
        task: str. The manifest's task ("classification", "ner", "qa").
        metric: str. The dev metric that picks the best combination.
    """
    if not _grid:
        return run_fn(config)
    # Only the fine-tuning commands run grids; run_pretraining's flags load without them.
    from tfbert.training import grid

    results = grid.run_grid(run_fn, config, _grid, metric=metric, task=task)
    if "grid" in results:  # (a grid of one combination is a plain run)
        print(grid.GridResult.from_json(results["grid"]).markdown(folder=f"{grid.GRID_DIR}/"))
    return results


def _show_in_help(module: types.ModuleType) -> None:
    """absl's --help prints the flags of the module named by sys.argv[0] and the docstring of
    __main__; the commands define their flags in tfbert.cli modules, which a shim or a console
    script starts, so their flags are registered for sys.argv[0] too (FlagValues'
    register_key_flag_for_module, absl-py 2.x)."""
    for flag in FLAGS.get_key_flags_for_module(module.__name__):
        FLAGS.register_key_flag_for_module(sys.argv[0], flag)
    main = sys.modules["__main__"]
    if main is not module:
        main.__doc__ = module.__doc__


def _fail(message: str) -> None:
    print(f"{os.path.basename(sys.argv[0])}: error: {message}", file=sys.stderr)
    sys.exit(EXIT_USER_ERROR)


def define_config_flags(cls: type, flag_values: flags.FlagValues = FLAGS) -> list[str]:
    """Defines one flag per field of dataclass `cls` that has help text (`field_help`) in
    `flag_values`; returns their names. A field without help (a task's own option, defined by
    its script) is left out.

    Types: bool, int, float and str fields (optional or not) become DEFINE_bool, _integer,
    _float and _string flags; a field with `choices` an enum. A numeric flag refuses what its
    field's bounds refuse (`tfbert.fields`; a float flag NaN and Inf too), naming the allowed
    values in --help and in the error.
    """
    names = []
    for f in dataclasses.fields(cls):
        help_text = field_help(cls, f.name)
        if help_text is not None:
            define_field_flag(cls, f.name, help_text, flag_values)
            names.append(f.name)
    return names


def define_field_flag(cls: type, name: str, help_text: str,
                      flag_values: flags.FlagValues = FLAGS) -> None:
    """Defines the flag of field `name` of dataclass `cls`: the field's type, default, choices
    and bounds (see `define_config_flags`), with `help_text` (for a task's own option, whose
    help its command gives)."""
    f = cls.__dataclass_fields__[name]
    kind = _flag_type(typing.get_type_hints(cls)[name], name)
    choices = field_option(cls, name, "choices")
    where = {"flag_values": flag_values}
    if choices:
        flags.DEFINE_enum(name, f.default, list(choices), help_text, **where)
    elif kind is bool:
        flags.DEFINE_bool(name, f.default, help_text, **where)
    elif kind in (int, float):
        parser = bounded_parser(kind, field_bounds(cls, name) or Bounds())
        flags.DEFINE(parser, name, f.default, help_text, serializer=flags.ArgumentSerializer(),
                     **where)
    else:
        flags.DEFINE_string(name, f.default, help_text, **where)


class _Bounded:
    """Mixin for absl's numeric parsers: refuses the values outside a field's `Bounds` (for a
    float NaN and Inf too) and names the allowed values in --help."""

    kind: type

    def __init__(self, bounds: Bounds) -> None:
        super().__init__()
        self.bounds, self.syntactic_help = bounds, bounds.describe(self.kind)

    def is_outside_bounds(self, val: float) -> bool:
        return val not in self.bounds


class _BoundedFloatParser(_Bounded, flags.FloatParser):
    kind = float


class _BoundedIntegerParser(_Bounded, flags.IntegerParser):
    kind = int


def bounded_parser(kind: type, bounds: Bounds) -> flags.ArgumentParser:
    """The flag parser of a numeric field: int or float `kind` within `bounds`.

    Example:
    >>> bounded_parser(float, Bounds(0, 1, high_open=True)).parse("1.0")
    Traceback (most recent call last):
    ...
    ValueError: 1.0 is not a number in [0, 1)
    """
    return (_BoundedIntegerParser if kind is int else _BoundedFloatParser)(bounds)


def _flag_type(hint: Any, name: str) -> type:
    """bool, int, float or str from a field's type hint (`X | None` is X)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        kinds = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(kinds) != 1:
            raise TypeError(f"field {name}: no flag type for {hint}")
        hint = kinds[0]
    if hint not in (bool, int, float, str):
        raise TypeError(f"field {name}: no flag type for {hint}")
    return hint


def define_finetune_flags(cls: type, train_help: str, dev_help: str, test_help: str) -> None:
    """Every flag a fine-tuning script shares: the fields of TaskConfig (tfbert.training.
    finetune) with the task's defaults (from `cls`, a TaskConfig subclass), and its data files.

    Args:
        cls: a TaskConfig subclass (e.g. ClassificationConfig), whose defaults the flags take.
        train_help, dev_help, test_help: str. What the task's data files hold.
    """
    global _takes_grid
    _takes_grid = True  # (`run_task` runs a grid given on the command line)
    define_config_flags(cls)
    flags.DEFINE_string("train_file", None, train_help)
    flags.DEFINE_string("dev_file", None, dev_help)
    flags.DEFINE_string("test_file", None, test_help)
    flags.mark_flag_as_required("output_dir")


def steps_for_files(flag_values: flags.FlagValues = FLAGS) -> dict[str, bool]:
    """With data files of one's own (--train_file/--dev_file/--test_file), do_eval and
    do_predict are off where their file is not given and the command line does not ask for
    them: `--train_file=x --dev_file=y` trains and scores dev instead of failing for want of a
    test file. ({} without data files: a built-in task runs every step.)"""
    given = flag_values
    if not (given.train_file or given.dev_file or given.test_file):
        return {}
    return {step: False for step, file in (("do_eval", "dev_file"), ("do_predict", "test_file"))
            if not given[file].value and not given[step].present}


def config_from_flags(cls: type, **overrides: Any) -> Any:
    """An instance of dataclass `cls` from the parsed flags whose names are its fields.

    Args:
        cls: a dataclass type (e.g. PretrainConfig).
        **overrides: field values that win over the flags.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"config_from_flags needs a dataclass type, got {cls!r}")
    values = {f.name: FLAGS[f.name].value for f in dataclasses.fields(cls) if f.name in FLAGS}
    values.update(overrides)
    try:
        return cls(**values)
    except (TypeError, ValueError) as e:
        raise app.UsageError(str(e)) from None


def refuse_flags_outside(command_config: type, config: type, what: str) -> None:
    """UsageError naming the flags given on the command line that are fields of the command's
    config dataclass `command_config` but not of `config`, the config of the task `what`
    selects (they would be silently ignored)."""
    own = {f.name for f in dataclasses.fields(config)}
    given = [f"--{f.name}" for f in dataclasses.fields(command_config)
             if f.name not in own and f.name in FLAGS and FLAGS[f.name].present]
    if given:
        raise app.UsageError(f"{', '.join(given)} do(es) not apply to {what}")


# --- google-research/bert's Estimator/TPU flags -------------------------------------------------
# Its scripts share these; they are accepted so its command lines run. --use_tpu with --tpu_name
# select tfbert's TPU strategy; the rest has no counterpart here (Keras fit drives the TPU, the
# cluster resolver finds zone, project and cores, checkpoints are tfbert's best-epoch model).
_GOOGLE_TPU_FLAGS = {  # name: (default, help)
    "use_tpu": (False, "google-research/bert's: run on a TPU (here: "
                "--distribution_strategy=tpu)."),
    "tpu_name": (None, "google-research/bert's: the Cloud TPU name or grpc:// address (here: "
                 "--tpu; used with --use_tpu)."),
    "tpu_zone": (None, "google-research/bert's; no effect here (the resolver finds it)."),
    "gcp_project": (None, "google-research/bert's; no effect here (the resolver finds it)."),
    "master": (None, "google-research/bert's TensorFlow master URL; no effect here."),
    "num_tpu_cores": (8, "google-research/bert's; no effect here (the strategy uses every "
                      "core)."),
    "save_checkpoints_steps": (1000, "google-research/bert's Estimator checkpoint interval; no "
                               "effect here (the fine-tuned model is saved at the end)."),
    "iterations_per_loop": (1000, "google-research/bert's Estimator steps per TPU loop; no "
                            "effect here."),
    "keep_checkpoint_max": (5, "Step checkpoints to keep; no effect in fine-tuning (the "
                            "fine-tuned model is saved at the end)."),
}


_defined_google_flags: list[str] = []  # the ones define_google_tpu_flags defined


def define_google_tpu_flags() -> None:
    """Defines google-research/bert's Estimator/TPU flags (`google_tpu_overrides` reads them);
    a name the script's config already has (pretraining's save_checkpoints_steps, ...) keeps
    the config's flag and meaning."""
    for name, (default, help_text) in _GOOGLE_TPU_FLAGS.items():
        if name in FLAGS:
            continue
        _defined_google_flags.append(name)
        if isinstance(default, bool):
            flags.DEFINE_bool(name, default, help_text)
        elif isinstance(default, int):
            flags.DEFINE_integer(name, default, help_text)
        else:
            flags.DEFINE_string(name, default, help_text)


def google_tpu_overrides() -> dict[str, Any]:
    """Config overrides from `define_google_tpu_flags`' flags: --use_tpu gives
    distribution_strategy "tpu" and tpu --tpu_name (where --distribution_strategy / --tpu are not
    given). Logs one warning naming the flags given with a non-default value that do nothing."""
    overrides: dict[str, Any] = {}
    unused = []
    if FLAGS.use_tpu:
        if not FLAGS["distribution_strategy"].present:
            overrides["distribution_strategy"] = "tpu"
        if FLAGS.tpu_name and not FLAGS["tpu"].present:
            overrides["tpu"] = FLAGS.tpu_name
    elif FLAGS.tpu_name:
        unused.append("tpu_name")
    unused += [name for name in _defined_google_flags
               if name not in ("use_tpu", "tpu_name")
               and FLAGS[name].value != _GOOGLE_TPU_FLAGS[name][0]]
    if unused:
        logging.warning("ignored (no effect in tfbert): %s",
                        ", ".join(f"--{n}={FLAGS[n].value}" for n in unused))
    return overrides
