"""Command-line options made from a config dataclass, so that a verb and a job file share one set of
defaults: each field (but `name` and `tracking`) becomes `--field-name`, unset unless given; the config is
then built from the defaults and the given options through the same checks as a job file
(`config.build_config`), so an out-of-range option gets the job file's message."""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any

SKIPPED = ("name", "tracking")
POSITIONAL_DEST = "config_positional"  # where a verb's parser keeps which fields are positional arguments

# `specbench bench NAME`: the options are the fields of the benchmark's config (config/benchmarks.py), so
# the verb and a job file of the same kind share one set of defaults.
BENCHES = {
    "graph": ("bench_graph", "graph build time; CSR load vs kaldifst arc iteration"),
    "acoustic": ("bench_acoustic", "synthesis throughput; features + model real-time factor"),
    "decoder": (
        "bench_decoder",
        "Kaldi, CPU, twin and GPU decoders side by side on the same utterances: "
        "real-time factors, speedups, 1-best agreement",
    ),
    "simultrans": (
        "bench_simultrans",
        "speculative beam search speed on test_2016_flickr; batched vs one sentence at a time",
    ),
    "completion": ("bench_completion", "n-best completion of many prefixes batched vs one prefix at a time"),
}
BENCH_POSITIONAL = {"graph": ("graph_job",)}  # fields a bench verb takes as positional arguments


def int_list(text: str) -> list[int]:
    """`1,2,4` -> [1, 2, 4] (positive integers)."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return values


def name_list(text: str) -> list[str]:
    """`cpu,cpu-lattice` -> ["cpu", "cpu_lattice"]."""
    return [x.strip().replace("-", "_") for x in text.split(",") if x.strip()]


def _base_type(hint: Any) -> Any:
    """`Path | None` -> Path; other hints unchanged."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return "none" if value is None else str(value)


def add_config_options(parser: argparse.ArgumentParser, cls: type, positional: tuple[str, ...] = ()) -> None:
    """One option per field of `cls` (fields in `positional` become optional positional arguments)."""
    parser.set_defaults(**{POSITIONAL_DEST: positional})
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if field.name in SKIPPED:
            continue
        typ = _base_type(hints[field.name])
        default = f"default: {_shown(field.default)}"
        if _job_file_field(field):
            default += (" in jobs/" if field.default is not None else "") + (
                "; a relative path is looked up in the working directory, then in jobs/")
        if field.name in positional:
            parser.add_argument(field.name, nargs="?", type=str, help=f"({default})")
            continue
        flag = "--" + field.name.replace("_", "-")
        if typ is bool:
            parser.add_argument(flag, dest=field.name, action="store_true", default=None, help=default)
        elif typing.get_origin(typ) is tuple:
            item = typing.get_args(typ)[0]
            parser.add_argument(
                flag,
                dest=field.name,
                type=int_list if item is int else name_list,
                help=f"comma-separated ({default})",
            )
        else:
            convert = {int: int, float: float}.get(typ, str)
            parser.add_argument(flag, dest=field.name, type=convert, help=default)


def command_line_name(args: argparse.Namespace, field: str) -> str:
    """How the command line names a config field: `argument FIELD` if its verb takes it as a positional
    argument, else `option --field-name`."""
    if field in getattr(args, POSITIONAL_DEST, ()):
        return f"argument {field}"
    return "option --" + field.replace("_", "-")


def _job_file_field(field: dataclasses.Field) -> bool:
    """Whether the field names another job file (`config_input(relative_to="job")`)."""
    return field.metadata.get("input", ("",))[0] == "job"


def config_from_args(cls: type, args: argparse.Namespace, where: str) -> Any:
    """`cls` with the options given in `args` replacing its defaults; paths given on the command line are
    taken relative to the working directory, a job file's also relative to jobs/ (where its default is) when
    the working directory has no such file. Errors name `where` (the command) and the option."""
    from specbench.config import build_config
    from specbench.errors import ConfigError
    from specbench.paths import project_root, resolve_path

    hints = typing.get_type_hints(cls)
    table: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        value = getattr(args, field.name, None)
        if field.name in SKIPPED or value is None:
            continue
        if _base_type(hints[field.name]) is Path and value.strip():  # an empty one: the loader refuses it
            given, shipped = Path(value), project_root() / "jobs" / value
            use_jobs = _job_file_field(field) and not given.exists() and shipped.is_file()
            said = f"{where}: {command_line_name(args, field.name)}"
            value = str(shipped if use_jobs else resolve_path(given, said))
        table[field.name] = value
    try:
        return build_config(Path(where), cls, table)
    except ConfigError as err:  # the loader speaks of a job file's keys; here they are options
        said = re.sub(r"key '(\w+)((?:\[\d+\])?)'", lambda m: command_line_name(args, m[1]) + m[2], str(err))
        said = re.sub(r"Fix: set '(\w+)[^']*'", lambda m: "Fix: set " + command_line_name(args, m[1]), said)
        said = said.replace("top-level keys: ", "options: ").replace("Fix: change those values in the job file.",
                                                                     "Fix: change those options.")
        raise ConfigError(said) from err
