"""Checks of settings values, shared by every layer: the algorithm packages' settings dataclasses, the data
readers and the job loader.

Every failed check raises `ConfigError` with one message format that names the field, the value, what is
wrong and what is allowed::

    {name} = {value!r}: {problem}; allowed: {allowed}

for example ``layers = 9: out of range; allowed: 1 <= layers <= 4`` or ``UsageSettings.weeks = 1.5: not an
integer; allowed: an integer, UsageSettings.weeks >= 1``. The job loader (`specbench.config.loader`) writes
the same ``{problem}; allowed: {allowed}`` part (from `range_problem` and `choice_problem`) after its own
``{file}: key '{key}' = {value}:`` prefix. Field metadata `config_range` / `config_choices` declare the
bounds a job file may set; the loader enforces them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from specbench.errors import ConfigError

T = TypeVar("T")


def config_range(lo: float | None = None, hi: float | None = None) -> dict[str, Any]:
    """Field metadata: the value must lie in [lo, hi] (None: open on that side)."""
    return {"range": (lo, hi)}


def config_choices(*values: str) -> dict[str, Any]:
    """Field metadata: the value must be one of `values`."""
    return {"choices": values}


def _invalid(name: str, value: Any, problem: str) -> ConfigError:
    """The one message format: `problem` is ``"{what is wrong}; allowed: {what is allowed}"``."""
    return ConfigError(f"{name} = {value!r}: {problem}")


def _bounds(name: str, lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    """`lo <= name <= hi` (with `<` on an open side); one side only where the other is None."""
    below, above = ("<" if lo_open else "<="), ("<" if hi_open else "<=")
    if lo is not None and hi is not None:
        return f"{lo} {below} {name} {above} {hi}"
    if lo is not None:
        return f"{name} {'>' if lo_open else '>='} {lo}"
    if hi is not None:
        return f"{name} {above} {hi}"
    return "any value"


def _typed(kind: str, name: str, lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    """What is allowed for a value of the wrong type: `kind`, and the bounds where there are any."""
    return kind if lo is None and hi is None else f"{kind}, {_bounds(name, lo, hi, lo_open, hi_open)}"


def range_problem(name: str, value: Any, lo: float | None = None, hi: float | None = None, *,
                  lo_open: bool = False, hi_open: bool = False) -> str | None:
    """``"out of range; allowed: {lo} <= {name} <= {hi}"`` when the number `value` lies outside the bounds
    (None: no bound on that side; `lo_open`/`hi_open`: that bound itself excluded), else None. NaN lies
    outside any bound."""
    inside = ((lo is None or (value > lo if lo_open else value >= lo))
              and (hi is None or (value < hi if hi_open else value <= hi)))
    if inside:
        return None
    return f"out of range; allowed: {_bounds(name, lo, hi, lo_open, hi_open)}"


def choice_problem(value: Any, choices: Sequence[Any]) -> str | None:
    """``"not allowed; allowed: 'a', 'b'"`` when `value` is not one of `choices`, else None."""
    if value in choices:
        return None
    return f"not allowed; allowed: {', '.join(map(repr, choices))}"


def check_range(name: str, value: T, lo: float | None = None, hi: float | None = None, *,
                lo_open: bool = False, hi_open: bool = False) -> T:
    """`value` (any comparable number, not converted) if it lies within the bounds (see `range_problem`),
    else `ConfigError`."""
    problem = range_problem(name, value, lo, hi, lo_open=lo_open, hi_open=hi_open)
    if problem is not None:
        raise _invalid(name, value, problem)
    return value


def check_int(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    """`value` as an `int`: a Python or numpy integer (bool rejected) with ``lo <= value <= hi`` (None: no
    bound on that side), else `ConfigError`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        allowed = _typed("an integer", name, lo, hi, False, False)
        raise _invalid(name, value, f"not an integer; allowed: {allowed}")
    return int(check_range(name, value, lo, hi))


def check_float(name: str, value: Any, lo: float | None = None, hi: float | None = None, *,
                lo_open: bool = False, hi_open: bool = False) -> float:
    """`value` as a `float`: a finite Python or numpy number (bool rejected) within the bounds (see
    `range_problem`), else `ConfigError`."""
    number = not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))
    if not number or not math.isfinite(float(value)):
        allowed = _typed("a finite number", name, lo, hi, lo_open, hi_open)
        raise _invalid(name, value, f"not a finite number; allowed: {allowed}")
    check_range(name, value, lo, hi, lo_open=lo_open, hi_open=hi_open)
    return float(value)


def check_pair(name: str, value: Any) -> tuple[Any, Any]:
    """The two items of `value`, a list or tuple of length 2 (items unchecked), else `ConfigError`."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise _invalid(name, value, "not a pair; allowed: a pair [low, high]")
    return value[0], value[1]


def check_choice(name: str, value: T, choices: Sequence[Any]) -> T:
    """`value` if it is one of `choices`, else `ConfigError`."""
    problem = choice_problem(value, choices)
    if problem is not None:
        raise _invalid(name, value, problem)
    return value
