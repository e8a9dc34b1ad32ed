"""Reading a text file the user gives as UTF-8 (a clear error otherwise); writing JSON strict readers accept;
replacing a file's text whole or not at all; refusing an output path that cannot be written."""

from __future__ import annotations

import json
import math
import numbers
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specbench.errors import DataError


def read_utf8(path: Path, name: str, fix: str = "Fix: save it as UTF-8") -> str:
    """The text of `path`; a DataError naming `name` (how the message calls the file), the line and the byte
    that is not UTF-8, and `fix`, when it is not UTF-8."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise DataError(f"{name}: cannot be read ({err.strerror or err}). Fix: give a file this user can read "
                        "(check the path, its permissions and the disk)") from err
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise DataError(f"{name}, line {line}: not UTF-8 text (byte {data[err.start]:#04x} at offset "
                        f"{err.start}). {fix}") from err


def plain_json(value: Any) -> Any:
    """`value` with NaN as None (null), infinities as "inf"/"-inf" (`float` reads them back), through dicts,
    lists and tuples (a numpy float as a float): the rule of every JSON file specbench writes."""
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        value = float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value) if math.isinf(value) else None
    if isinstance(value, dict):
        return {k: plain_json(v) for k, v in value.items()}
    return [plain_json(v) for v in value] if isinstance(value, (list, tuple)) else value


def json_text(value: Any, **options: Any) -> str:
    """`json.dumps(plain_json(value))`; a NaN it missed is a ValueError."""
    return json.dumps(plain_json(value), allow_nan=False, **options)


def json_number(value: Any) -> float:
    """The float `plain_json` wrote as `value`."""
    return math.nan if value is None else float(value)


def own_temp_path(path: Path) -> Path:
    """A temporary file beside `path` that only this call writes (process id and a random part), for a write
    that ends in an atomic rename onto `path`: two writers of one output never write into the same temporary
    file, so neither can rename the other's half-written file into place."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """The block writes the yielded temporary file (`own_temp_path`); when it ends without an error the file
    is renamed onto `path`, and when it raises the temporary file is removed and `path` left as it was."""
    tmp = own_temp_path(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def replace_text(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` through a temporary file beside it and a rename, so that a reader never
    sees half of it and a crash leaves the old file (and no temporary one)."""
    tmp = own_temp_path(path)  # the umask's mode
    try:
        with tmp.open("x", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def table_json(value: Any, level: int = 0, default: Any = None) -> str:
    """JSON with one key per line, but a list of scalars, and an object whose values are all scalars, on one
    line: a model card's or results file's tables stay compact and diff by row. A NaN is refused (give
    `plain_json(value)`); `default` as `json.dumps` takes it."""
    pad, inner = " " * level, " " * (level + 1)
    if isinstance(value, dict) and any(isinstance(v, (dict, list, tuple)) for v in value.values()):
        items = [f"{inner}{json.dumps(k)}: {table_json(v, level + 1, default)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, (list, tuple)) and any(isinstance(v, (dict, list, tuple)) for v in value):
        return "[\n" + ",\n".join(f"{inner}{table_json(v, level + 1, default)}" for v in value) + f"\n{pad}]"
    return json.dumps(value, allow_nan=False, default=default)


def check_output_path(output: Path | None, command: str, option: str = "--output", file: str = "a JSON file",
                 example: str = "bench.json") -> None:
    """Refuse, before anything is measured or decoded, an output `option` that cannot be written: a folder, a
    path under a file, a folder without write permission (a temporary file beside it is created and
    removed). The fix asks for `file`, e.g. `example` in the folder given."""
    if output is None:
        return
    example_path = output / example if output.is_dir() else output.with_suffix(Path(example).suffix)
    fix = f"Fix: name {file} in a folder you can write, e.g. {example_path}"
    if output.is_dir():
        raise DataError(f"{command}: option {option} = {output} is a folder. {fix}")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        problem: OSError | None = err
    else:
        problem = write_problem(output.parent)
    if problem is not None:
        raise DataError(f"{command}: option {option} = {output} cannot be written ({problem.strerror}: "
                        f"{problem.filename}). {fix}") from problem


def write_problem(folder: Path) -> OSError | None:
    """Why a file cannot be written in `folder` (or in its nearest existing parent, where the writer would
    make the rest), found by writing and removing a temporary file of its own there; None when it can."""
    folder = Path(folder).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    probe = own_temp_path(folder / "write-check")
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        return err
    return None
