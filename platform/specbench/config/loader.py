"""The strict TOML loader of job and suite files.

It rejects unknown keys, wrong types and out-of-range values with a message naming the file, the key, the
value and what is allowed. Constraints live in field metadata: `range=(lo, hi)` (inclusive; None for open),
`choices=(...)` (`config_range` and `config_choices`, from `specbench.checks`, build them; that module also
words the range and choice problems). A list (`tuple[X, ...]`) holds each value once, unless its metadata
says `repeats=True` (layer widths). Which dataclass a `kind` loads into is the experiment registry's
business (`specbench.experiments.registry.load_config`); this module only builds a given dataclass from a
table.

A field that names a file the job reads (a model, another job file) carries `config_input` metadata;
`check_inputs` checks that every such file exists and is a file (a folder only where the metadata allows
one) before a job is run or reported valid, so that a job pointing at a missing model fails at once with the
key and the fix, before any MLflow run is opened. Those paths resolve as the run resolves them
(`paths.from_root`: `.specbench/...` in the work directory, `SPECBENCH_HOME` when set).
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from specbench.checks import choice_problem, config_choices, config_range, range_problem
from specbench.errors import ConfigError, DataError
from specbench.paths import from_root, resolve_path
from specbench.text_files import write_problem

__all__ = ["SuiteConfig", "build_config", "check_inputs", "config_choices", "config_input", "config_kind",
           "config_range", "config_to_dict", "flatten", "load_job_file", "member_jobs", "read_toml"]


@dataclass(frozen=True)
class SuiteConfig:
    """`kind = "suite"`: jobs run in order, each its own MLflow run tagged with the suite's name."""

    KIND: ClassVar[str] = "suite"
    name: str
    jobs: tuple[Path, ...]



def _plain(value: Any) -> Any:
    """`value` with its paths as strings, as the job file wrote them (no PosixPath('...') in a message)."""
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return str(value) if isinstance(value, Path) else value


def _fail(path: Path, key: str, value: Any, problem: str, fix: str | None = None) -> ConfigError:
    """The message of a bad value: the file, the key, the value, the problem and the fix (by default: give
    the key an allowed value)."""
    shown = repr(_plain(value))
    shown = shown if len(shown) < 80 else shown[:77] + "..."
    fix = fix or f"Fix: set '{key}' to an allowed value."
    return ConfigError(f"{path}: key '{key}' = {shown}: {problem}. {fix}")


def _check_scalar(path: Path, key: str, value: Any, typ: Any, meta: typing.Mapping[str, Any]) -> Any:
    if typ is bool:
        ok = isinstance(value, bool)
    elif typ is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif typ is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok and isinstance(value, int) and abs(value) > 2**1023:  # float() would overflow
            raise _fail(path, key, value, "too large for a number")
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
        item_type = typing.get_args(typ)[0]
        if not isinstance(value, list):
            tables = f"Fix: write each table as [[{key}]]." if dataclasses.is_dataclass(item_type) else None
            raise _fail(path, key, value, f"wrong type {type(value).__name__}; allowed: a list", tables)
        items = tuple(_convert(path, f"{key}[{i}]", v, item_type, meta) for i, v in enumerate(value))
        if typing.get_args(typ)[-1] is Ellipsis and not meta.get("repeats"):  # choices, not a [low, high] pair
            twice = next((b for i, b in enumerate(items) if b in items[:i]), None)
            if twice is not None:  # each value would be run, trained or counted once more under one name
                raise _fail(path, key, value, f"{_plain(twice)!r} is listed twice",
                            f"Fix: list each value of '{key}' once.")
        return items
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        return _convert(path, key, value, args[0], meta)
    if typ is Path:
        if not isinstance(value, str):
            raise _fail(path, key, value, "wrong type; allowed: a path string")
        if not value.strip():
            raise _fail(path, key, value, "an empty path (it would mean the project folder itself)",
                        f"Fix: set '{key}' to the path of a file, or remove the key to use its default.")
        if "\x00" in value:  # no file system takes it: every later use of the path would fail
            raise _fail(path, key, value, "a path with a NUL character (\\u0000)", "Fix: remove it.")
        return Path(value)
    return _check_scalar(path, key, value, typ, meta)


def build_config(path: Path, cls: type, table: dict[str, Any], prefix: str = "") -> Any:
    """`cls` built from a TOML-like table, every value checked; errors name `path` and the key."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in table:
        if key not in fields:
            allowed = ", ".join(sorted(fields)) or "(none)"
            raise _fail(path, prefix + key, table[key], f"unknown key; allowed keys here: {allowed}",
                        "Fix: correct its spelling to one of the allowed keys, or remove it.")
    kwargs = {}
    for name, f in fields.items():
        if name in table:
            kwargs[name] = _convert(path, prefix + name, table[name], hints[name], f.metadata)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{path}: required key '{prefix + name}' is missing. Fix: add it.")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError, ConfigError) as err:
        where = f"section [{prefix.rstrip('.')}]" if prefix else "top-level keys"
        problem = str(err).rstrip(".")
        fix = "" if "Fix:" in problem else " Fix: change those values in the job file."
        raise ConfigError(f"{path}: {where}: {problem}.{fix}") from err


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; a syntax error names the file and the line."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: a folder, not a job file. Fix: give the path of a .toml job or suite in it "
                          "(see jobs/).")
    if not path.is_file():
        what = "a symbolic link that loops or leads nowhere" if path.is_symlink() else "no such job file"
        raise ConfigError(f"{path}: {what}. Fix: give the path of a .toml job or suite (see jobs/).")
    try:
        with path.open("rb") as fh:
            if fh.read(3) == b"\xef\xbb\xbf":
                raise ConfigError(f"{path}: starts with a byte-order mark, which TOML does not allow. Fix: save "
                                  "the file as UTF-8 without a BOM (most editors call it \"UTF-8\", not "
                                  "\"UTF-8 with BOM\").")
            fh.seek(0)
            return tomllib.load(fh)
    except RecursionError as err:
        raise ConfigError(f"{path}: nested too deeply to read. Fix: nest it less deeply.") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err}). Fix: correct the syntax at that line.") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not a UTF-8 text file (byte {err.start}: {err.reason}). Fix: save the job "
                          "file as UTF-8 TOML.") from err
    except OSError as err:
        raise ConfigError(f"{path}: cannot be read ({err.strerror or err}). Fix: give a job file this user can "
                          "read (check its permissions and the disk).") from err


def load_job_file(path: Path, kinds: typing.Mapping[str, type]) -> Any:
    """Load a job or suite file into its frozen dataclass: `kinds` maps each job kind to its class (the
    experiment registry's mapping); a suite loads into `SuiteConfig`."""
    path = Path(path)
    table = dict(read_toml(path))
    kind = table.pop("kind", None)
    allowed = ", ".join(map(repr, [*kinds, "suite"]))
    if kind is None:
        raise ConfigError(f"{path}: required key 'kind' is missing; allowed: {allowed}. Fix: add a line "
                          'kind = "..." at the top, e.g. kind = "graph".')
    if not isinstance(kind, str):
        raise _fail(path, "kind", kind,
                    f"wrong type {type(kind).__name__}; allowed: a string, one of {allowed}",
                    'Fix: give one kind as a quoted string, e.g. kind = "graph".')
    if kind == "suite":
        return _load_suite(path, table)
    if kind not in kinds:
        raise _fail(path, "kind", kind, f"unknown job kind; allowed: {allowed}")
    return build_config(path, kinds[kind], table)


def _load_suite(path: Path, table: dict[str, Any]) -> SuiteConfig:
    for key in table:
        if key not in ("name", "jobs"):
            raise _fail(path, key, table[key], "unknown key; allowed keys here: jobs, name",
                    "Fix: correct its spelling to one of the allowed keys, or remove it.")
    jobs = table.get("jobs")
    if not isinstance(jobs, list) or not jobs or not all(isinstance(j, str) for j in jobs):
        raise _fail(path, "jobs", jobs, "must be a non-empty list of job file paths (relative to the suite)")
    resolved = tuple(resolve_path(path.parent / j, f"{path}: key 'jobs'") for j in jobs)
    if len(set(resolved)) < len(resolved):  # its runs would be logged twice under one name
        raise _fail(path, "jobs", jobs, "a job file is listed twice", "Fix: list each job file once.")
    for job, raw in zip(resolved, jobs):
        if not job.is_file():
            raise _fail(path, "jobs", raw, f"{job} is a directory, not a job file" if job.is_dir()
                        else f"{job} does not exist", "Fix: list existing job files, relative to the suite file.")
        kind = read_toml(job).get("kind")
        if kind in ("suite", "nightly"):
            raise _fail(path, "jobs", raw, f"is itself a {kind}; a suite lists jobs only",
                        f"Fix: list that {kind}'s jobs here instead" + (" (or run it with `specbench nightly`)."
                                                                        if kind == "nightly" else "."))
    name = table.get("name", path.stem)
    if not isinstance(name, str):
        raise _fail(path, "name", name, "wrong type; allowed: str")
    if not name.strip() or name != name.strip():  # the suite's MLflow experiment, which MLflow refuses empty
        raise _fail(path, "name", name, "an empty name or spaces around it (the name is the suite's MLflow "
                    "experiment)", f"Fix: write name = {(name.strip() or path.stem)!r}, or remove the key to use "
                    "the file's name.")
    if name == "nightly":  # its runs would be tagged suite = nightly, and taken for a nightly's baselines
        raise _fail(path, "name", name, "a plain suite may not be named 'nightly' (the nightly regression "
                    "suite's runs are found by that name)", "Fix: write another name = \"...\" here, or make it "
                    'kind = "nightly" and run it with `specbench nightly`.')
    return SuiteConfig(name=name, jobs=resolved)


def config_input(fix: str, relative_to: str = "project", kind: str | None = None,
                 unless: str | None = None, reads: str | None = None,
                 folder_when: tuple[Any, ...] | None = None) -> dict[str, Any]:
    """Field metadata: the field names a file the job reads, relative to the project root (`"project"`,
    resolved by `paths.from_root`: `.specbench/...` is in the work directory) or to the job file (`"job"`);
    `fix` ("Fix: ...") says how to make it; `kind`: the file is a job file of that kind; `unless`: another
    field of the same section that, when set, replaces this one (the file is then not read); `reads`: the
    kind of model file it must hold (a key of `input_files.KINDS`); `folder_when`: (field, value): it may
    name a folder instead of a file where that field of the same section has that value (otherwise it must
    be a file; a third item: the fix there). `check_inputs` checks it exists (and is of that kind, or holds
    that kind of model)."""
    if relative_to not in ("project", "job"):
        raise ValueError(f"relative_to must be 'project' or 'job', got {relative_to!r}")
    if folder_when is not None and (kind is not None or reads is not None):
        raise ValueError("folder_when is for data folders, not job files or models")
    meta: dict[str, Any] = {"input": (relative_to, fix, kind, unless, reads)}
    if folder_when is not None:
        meta["input_folder_when"] = folder_when
    return meta


def check_inputs(path: Path, config: Any, load: Callable[[Path], Any],
                 where: Callable[[Path, str], str] | None = None) -> None:
    """Check that every input file (`config_input` fields, in nested sections too) of the job at `path`, or
    of every job of a suite or nightly file (each loaded with `load`), exists; else a `DataError` naming the
    job file, the key, the missing file and the fix. A folder where a file is needed (every input but one
    whose `folder_when` holds) is a `ConfigError` with the same parts. `where(job_path, key)` words where a
    bad value was given (default: "<job file>: key '<key>'"; a command line names its option instead).

    In a suite or nightly, a file an earlier job of it writes (its `output`, or a model its `written_models`
    names, such as `<output stem>_nopersonal.pt`) counts as present, the job that needs it runs after it is
    written, when it is the kind of model the key reads."""
    path = Path(path)
    written: dict[Path, str | None] = {}  # the files earlier jobs write -> the kind of model (None: not one)
    where = where or (lambda job_path, key: f"{job_path}: key '{key}'")
    for job_path, job_config in member_jobs(path, config, load):
        for key, value, file, fix, kind, reads, folder in _inputs(job_path, job_config):
            if not file.exists():
                real = resolve_path(file, where(job_path, key))
                if real not in written:
                    raise DataError(f"{where(job_path, key)} = '{value}': {file} does not exist. {fix}")
                writes = written[real]
                if reads is not None and writes is not None and writes != reads:
                    a = "an" if reads[0] in "aeiou" else "a"
                    raise DataError(f"{where(job_path, key)} = '{value}': an earlier job of {path} writes {file} "
                                    f"as a {writes}; this key reads {a} {reads}. Fix: point it at {a} {reads}.")
                continue
            if not file.is_file() and not (folder is True and file.is_dir()):
                what = "a folder" if file.is_dir() else "not a regular file"
                needs = "a job file" if kind is not None else "a file"
                if isinstance(folder, str):
                    needs += f" (a folder only with {folder})"
                raise ConfigError(f"{where(job_path, key)} = '{value}': {file} is {what}; it must name "
                                  f"{needs}. {fix}")
            if kind is not None:
                found = config_kind(load(file))
                if found != kind:
                    raise ConfigError(f"{where(job_path, key)} = '{value}' names a kind = \"{found}\" job; it "
                                      f"must name a kind = \"{kind}\" job. {fix}")
            if reads is not None:
                from specbench.input_files import problem

                wrong = problem(reads, file)
                if wrong is not None:
                    a = "an" if reads[0] in "aeiou" else "a"
                    raise DataError(f"{where(job_path, key)} = '{value}': {file} is not {a} {reads}: {wrong}. "
                                    f"Fix: point it at {a} {reads}.")
        for file, writes in getattr(job_config, "written_models", list)():
            written[_check_output(where(job_path, "output"), job_config.output, file, writes,
                                  job_config.name)] = writes
        output = getattr(job_config, "output", None)
        if isinstance(output, Path):
            written.setdefault(resolve_path(from_root(output), where(job_path, "output")), None)


def _check_output(where: str, value: Path, file: Path, writes: str, name: str) -> Path:
    """Refuse a training job's output path that would lose something: a checkpoint (`file`, relative to the
    project root, the job's `output` = `value` or a model written beside it) must be a .pt file, not a folder,
    and where a file is there already it must hold the kind of model the job writes (`writes`, a key of
    `input_files.KINDS`), which retraining replaces; anything else there (another kind of model, any other
    file) is refused before the job starts, not overwritten after it trained. `name`: the job's name.
    Returns its resolved path."""
    path = from_root(file)
    named = "" if file == value else f" (the model written beside it: {file})"
    example = f"models/{name}.pt" if from_root(Path(f"models/{name}.pt")) != path else f"models/{name}_new.pt"
    if path.parent.exists() and not path.parent.is_dir():
        raise ConfigError(f"{where} = '{value}'{named}: {path.parent} is a file, so nothing can be written in it. "
                          f"Fix: name a file in a folder, e.g. {example}.")
    if path.is_dir():
        raise ConfigError(f"{where} = '{value}'{named}: {path} is a folder; it must name the checkpoint file the "
                          f"job writes. Fix: name a file, e.g. {example}.")
    if path.suffix != ".pt":
        raise ConfigError(f"{where} = '{value}'{named}: a checkpoint's name must end in .pt (its model card is "
                          f"written beside it as <name>.json and <name>.md). Fix: name a .pt file, e.g. {example}.")
    if path.exists() and not path.is_file():
        raise ConfigError(f"{where} = '{value}'{named}: {path} is not a regular file. Fix: name a new .pt file.")
    if path.is_file():
        from specbench.input_files import problem

        wrong = problem(writes, path)
        if wrong is not None:
            raise DataError(f"{where} = '{value}'{named}: {path} already holds something this job would replace "
                            f"with a {writes} ({wrong}). Fix: give the job an output of its own, e.g. {example}, "
                            f"or move {path} away first if it may be replaced.")
    if (problem := write_problem(path.parent)) is not None:  # refused now, not after the training
        raise ConfigError(f"{where} = '{value}'{named}: nothing can be written there ({problem.strerror}: "
                          f"{problem.filename}). Fix: name a file in a folder you can write, e.g. {example}.")
    return resolve_path(path, where)


def member_jobs(path: Path, config: Any, load: Callable[[Path], Any]) -> list[tuple[Path, Any]]:
    """(job file, config) of a job, or of each job of a suite or nightly file in order."""
    if isinstance(config, SuiteConfig):
        return [(job, load(job)) for job in config.jobs]
    if config_kind(config) == "nightly":
        jobs = [job if job.is_absolute() else resolve_path(path.parent / job, f"{path}: key 'jobs'")
                for job in config.jobs]
        return [(job, load(job)) for job in jobs if job.is_file()]  # the nightly names a missing one itself
    return [(path, config)]


def _inputs(job_path: Path, config: Any,
            prefix: str = "") -> Iterator[tuple[str, Path, Path, str, str | None, str | None, bool | str]]:
    """(key, value, resolved path, fix, job kind, model kind, folder) of every `config_input` field that is
    set, nested sections too; folder: True where it may name a folder, else False, or the setting that would
    allow one (`key = "value"`, for the message)."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            yield from _inputs(job_path, value, f"{prefix}{f.name}.")
        elif "input" in f.metadata and isinstance(value, Path):
            relative_to, fix, kind, unless, reads = f.metadata["input"]
            if unless is not None and getattr(config, unless) is not None:
                continue
            resolved = from_root(value) if relative_to == "project" else value if value.is_absolute() else (
                resolve_path(job_path.parent / value, f"{job_path}: key '{prefix}{f.name}'"))
            folder: bool | str = False
            if "input_folder_when" in f.metadata:
                other, wanted, *there = f.metadata["input_folder_when"]
                folder = getattr(config, other) == wanted or f'{prefix}{other} = "{wanted}"'
                fix = there[0] if there and folder is True else fix
            yield prefix + f.name, value, resolved, fix, kind, reads, folder


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


def settings_dict(config: Any) -> dict[str, Any]:
    """`config_to_dict` without the `[tracking]` section: the settings that shape what a job writes, which
    the caches key on (the MLflow experiment a run is logged to changes no artifact)."""
    return {key: value for key, value in config_to_dict(config).items() if key != "tracking"}


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
