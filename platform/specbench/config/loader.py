"""The strict TOML loader of job and suite files.

It rejects unknown keys, wrong types and out-of-range values with a message naming the file, the key, the
value and what is allowed. Constraints live in field metadata: `range=(lo, hi)` (inclusive; None for open),
`choices=(...)` (`config_range` and `config_choices`, from `specbench.checks`, build them; that module also
words the range and choice problems). Which dataclass a `kind` loads into is the experiment registry's
business (`specbench.experiments.registry.load_config`); this module only builds a given dataclass from a
table.
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from specbench.checks import choice_problem, config_choices, config_range, range_problem
from specbench.errors import ConfigError

__all__ = ["SuiteConfig", "build_config", "config_choices", "config_kind", "config_range", "config_to_dict",
           "flatten", "load_job_file", "read_toml"]


@dataclass(frozen=True)
class SuiteConfig:
    """`kind = "suite"`: jobs run in order, each its own MLflow run tagged with the suite's name."""

    KIND: ClassVar[str] = "suite"
    name: str
    jobs: tuple[Path, ...]



def _fail(path: Path, key: str, value: Any, problem: str) -> ConfigError:
    shown = repr(value) if len(repr(value)) < 80 else repr(value)[:77] + "..."
    return ConfigError(f"{path}: key '{key}' = {shown}: {problem}")


def _check_scalar(path: Path, key: str, value: Any, typ: Any, meta: typing.Mapping[str, Any]) -> Any:
    if typ is bool:
        ok = isinstance(value, bool)
    elif typ is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif typ is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif typ is str:
        ok = isinstance(value, str)
    else:
        raise TypeError(f"unsupported config type {typ} for {key}")
    if not ok:
        raise _fail(path, key, value, f"wrong type {type(value).__name__}; allowed: {typ.__name__}")
    lo, hi = meta.get("range", (None, None))
    problem = range_problem(key, value, lo, hi)
    choices = meta.get("choices")
    if problem is None and choices:
        problem = choice_problem(value, choices)
    if problem is not None:
        raise _fail(path, key, value, problem)
    return value


def _convert(path: Path, key: str, value: Any, typ: Any, meta: typing.Mapping[str, Any]) -> Any:
    origin = typing.get_origin(typ)
    if dataclasses.is_dataclass(typ):
        if not isinstance(value, dict):
            raise _fail(path, key, value, f"must be a table [{key}]")
        return build_config(path, typ, value, prefix=key + ".")
    if origin is tuple:
        if not isinstance(value, list):
            raise _fail(path, key, value, f"wrong type {type(value).__name__}; allowed: a list")
        item_type = typing.get_args(typ)[0]
        return tuple(_convert(path, f"{key}[{i}]", v, item_type, meta) for i, v in enumerate(value))
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        return _convert(path, key, value, args[0], meta)
    if typ is Path:
        if not isinstance(value, str):
            raise _fail(path, key, value, "wrong type; allowed: a path string")
        return Path(value)
    return _check_scalar(path, key, value, typ, meta)


def build_config(path: Path, cls: type, table: dict[str, Any], prefix: str = "") -> Any:
    """`cls` built from a TOML-like table, every value checked; errors name `path` and the key."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in table:
        if key not in fields:
            allowed = ", ".join(sorted(fields)) or "(none)"
            raise _fail(path, prefix + key, table[key], f"unknown key; allowed keys here: {allowed}")
    kwargs = {}
    for name, f in fields.items():
        if name in table:
            kwargs[name] = _convert(path, prefix + name, table[name], hints[name], f.metadata)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{path}: required key '{prefix + name}' is missing")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError, ConfigError) as err:
        raise ConfigError(f"{path}: section '{prefix.rstrip('.') or cls.__name__}': {err}") from err


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; a syntax error names the file and the line."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such job file. Fix: give the path of a .toml job or suite (see jobs/).")
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err}). Fix the syntax at that line.") from err


def load_job_file(path: Path, kinds: typing.Mapping[str, type]) -> Any:
    """Load a job or suite file into its frozen dataclass: `kinds` maps each job kind to its class (the
    experiment registry's mapping); a suite loads into `SuiteConfig`."""
    path = Path(path)
    table = dict(read_toml(path))
    kind = table.pop("kind", None)
    allowed = ", ".join(map(repr, [*kinds, "suite"]))
    if kind is None:
        raise ConfigError(f"{path}: required key 'kind' is missing; allowed: {allowed}")
    if kind == "suite":
        return _load_suite(path, table)
    if kind not in kinds:
        raise _fail(path, "kind", kind, f"unknown job kind; allowed: {allowed}")
    return build_config(path, kinds[kind], table)


def _load_suite(path: Path, table: dict[str, Any]) -> SuiteConfig:
    for key in table:
        if key not in ("name", "jobs"):
            raise _fail(path, key, table[key], "unknown key; allowed keys here: jobs, name")
    jobs = table.get("jobs")
    if not isinstance(jobs, list) or not jobs or not all(isinstance(j, str) for j in jobs):
        raise _fail(path, "jobs", jobs, "must be a non-empty list of job file paths (relative to the suite)")
    resolved = tuple((path.parent / j).resolve() for j in jobs)
    for job, raw in zip(resolved, jobs):
        if not job.is_file():
            raise _fail(path, "jobs", raw, f"{job} does not exist")
        if read_toml(job).get("kind") == "suite":
            raise _fail(path, "jobs", raw, "is itself a suite; a suite lists jobs only")
    name = table.get("name", path.stem)
    if not isinstance(name, str):
        raise _fail(path, "name", name, "wrong type; allowed: str")
    return SuiteConfig(name=name, jobs=resolved)


def config_kind(config: Any) -> str:
    """The `kind` of a loaded config."""
    return type(config).KIND


def config_to_dict(config: Any) -> dict[str, Any]:
    """The resolved config as plain TOML-able data (with its `kind`)."""

    def plain(v: Any) -> Any:
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        if isinstance(v, Path):
            return str(v)
        return v

    out = {"kind": config_kind(config)}
    for key, value in dataclasses.asdict(config).items():
        out[key] = {k: plain(v) for k, v in value.items()} if isinstance(value, dict) else plain(value)
    return out


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """`{"lm": {"order": 3}}` -> `{"lm.order": "3"}`, for MLflow params."""
    out: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return out
