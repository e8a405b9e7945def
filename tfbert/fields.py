"""Config dataclass fields that carry their help and their bounds, checked where they are defined.

A field says what values it takes (`field(0.1, "Dropout.", lower_bound=0, less_than=1)`), and
that one statement is what every way into tfbert checks: constructing the dataclass
(`check_fields`, called by the configs' `validate`), the command-line flag made from the field
(tfbert/cli/common_flags.py gives it a parser that refuses the same values and names them in
`--help`), and a config file read into the dataclass. A float field is always finite: NaN and
Inf are refused with or without bounds (NaN compares false with everything, so `x <= 0` lets it
through; `x in Bounds(...)` does not).

Example:
>>> import dataclasses
>>> @dataclasses.dataclass
... class Example:
...     rate: float = field(0.1, "Dropout rate.", lower_bound=0, less_than=1)
...     def __post_init__(self):
...         check_fields(self)
>>> Example(rate=float("nan"))
Traceback (most recent call last):
...
tfbert.errors.UserError: rate must be a number in [0, 1), got nan
>>> field_bounds(Example, "rate").describe(float)
'a number in [0, 1)'
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import Any

from tfbert.errors import UserError

__all__ = ["Bounds", "check_fields", "field", "field_bounds", "field_help", "field_option"]


@dataclasses.dataclass(frozen=True)
class Bounds:
    """An interval of allowed values: `low` .. `high`, each end closed or open.

    `value in bounds` is False for NaN and for +-Inf (also when an end is infinite).
    """

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def describe(self, kind: type = float) -> str:
        """The allowed values in words: "a positive integer", "a number in [0, 1)", ..."""
        low, high = _number(self.low), _number(self.high)
        if kind is int:
            start = math.floor(self.low) + 1 if self.low_open else math.ceil(self.low)
            if math.isfinite(self.high):
                end = math.ceil(self.high) - 1 if self.high_open else math.floor(self.high)
                return f"an integer in [{start}, {end}]"
            if math.isfinite(self.low):
                return {1: "a positive integer", 0: "a non-negative integer"}.get(
                    start, f"an integer >= {start}")
            return "an integer"
        if math.isfinite(self.low) and math.isfinite(self.high):
            return (f"a number in {'(' if self.low_open else '['}{low}, "
                    f"{high}{')' if self.high_open else ']'}")
        if math.isfinite(self.low):
            if self.low == 0:
                return f"a {'positive' if self.low_open else 'non-negative'} finite number"
            return f"a finite number {'>' if self.low_open else '>='} {low}"
        if math.isfinite(self.high):
            return f"a finite number {'<' if self.high_open else '<='} {high}"
        return "a finite number"


def _number(value: float) -> str:
    return str(int(value)) if math.isfinite(value) and value == int(value) else str(value)


def field(default: Any, help: str | None = None, *, lower_bound: float | None = None,
          upper_bound: float | None = None, greater_than: float | None = None,
          less_than: float | None = None, **options: Any) -> Any:
    """A dataclass field with its help text, its bounds and its flag's options (`choices`).

    Args:
        default: the default value.
        help: str or None. Documentation and flag help; a field with help gets a flag made from
            it (tfbert/cli/common_flags.py), one without is a setting of the Python API (or a
            flag its command defines itself).
        lower_bound, upper_bound: numbers. Closed ends: value >= lower_bound, <= upper_bound.
        greater_than, less_than: numbers. Open ends: value > greater_than, < less_than.
        **options: other flag options, e.g. choices=[...].
    """
    metadata = dict(options)
    if help is not None:
        metadata["help"] = help
    if lower_bound is not None and greater_than is not None or \
            upper_bound is not None and less_than is not None:
        raise TypeError("give one lower end (lower_bound or greater_than) and one upper end")
    if any(v is not None for v in (lower_bound, upper_bound, greater_than, less_than)):
        low = greater_than if greater_than is not None else lower_bound
        high = less_than if less_than is not None else upper_bound
        metadata["bounds"] = Bounds(-math.inf if low is None else low,
                                    math.inf if high is None else high,
                                    low_open=greater_than is not None,
                                    high_open=less_than is not None)
    return dataclasses.field(default=default, metadata=metadata)


def field_option(cls: type, name: str, option: str) -> Any:
    """Option `option` of field `name`, from the nearest class in `cls`'s MRO that gives one (a
    subclass that only changes a default keeps its base's help and bounds); None where none
    does."""
    for klass in cls.__mro__:
        f = getattr(klass, "__dataclass_fields__", {}).get(name)
        if f is not None and option in f.metadata:
            return f.metadata[option]
    return None


def field_help(cls: type, name: str) -> str | None:
    """The help text of field `name` (see `field_option`)."""
    return field_option(cls, name, "help")


def field_bounds(cls: type, name: str) -> Bounds | None:
    """The bounds of field `name` (see `field_option`); None: any value of its type."""
    return field_option(cls, name, "bounds")


def field_kind(cls: type, name: str) -> type | None:
    """int or float for a numeric field (`X | None` is X), else None."""
    return _kinds(cls).get(name)


@functools.cache
def _kinds(cls: type) -> dict[str, type]:
    kinds = {}
    for name, hint in typing.get_type_hints(cls).items():
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            hint = args[0] if len(args) == 1 else None
        if hint in (int, float):
            kinds[name] = hint
    return kinds


def check_fields(config: Any, prefix: str = "") -> None:
    """Raises UserError naming the first field of dataclass `config` whose value is not one of
    its `choices`, or (a numeric field) not of its type or not within its bounds (a float
    field: not finite). None passes a field whose default is None (an optional field's "not
    given").

    Args:
        config: a dataclass instance.
        prefix: str. Put before the field's name in the message (e.g. "BertConfig.").
    """
    cls = type(config)
    for f in dataclasses.fields(cls):
        kind = field_kind(cls, f.name)
        value = getattr(config, f.name)
        choices = field_option(cls, f.name, "choices")
        given = value is not None or f.default is not None  # None: an optional field not given
        if choices is not None and given and value not in choices:
            raise UserError(f"{prefix}{f.name} must be one of {tuple(choices)}, got {value!r}")
        if kind is None or value is None:
            continue
        bounds = field_bounds(cls, f.name) or Bounds()
        typed = not isinstance(value, bool) and isinstance(value, int if kind is int
                                                           else (int, float))
        if not typed or value not in bounds:
            raise UserError(f"{prefix}{f.name} must be {bounds.describe(kind)}, got {value!r}")
