"""What every results writer (`write_*_results.py`) shares: the run it may write from, numbers rounded for a
small tracked tree, compact JSON that strict readers accept, and a write that never leaves half a file.

- `finished_run`: the run, refused (ConfigError naming it and the fix) unless it ended FINISHED and is of the
  writer's job kind: a mistyped run id must not replace a committed headline file with another job's figures
  or an unfinished run's.
- `rounded`: floats rounded (to significant digits below 0.1), NaN and infinities as `plain_json` has
  them, through dicts and lists.
- `dump` (`text_files.table_json`): one key per line, a list of numbers or strings on one line (tables stay
  compact); NaN refused.
- `write_results`: the text to a temporary file beside the target, then renamed over it.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "platform"))

from specbench.errors import ConfigError
from specbench.text_files import plain_json, table_json
from specbench.tracking.queries import RunRow, get_run


def finished_run(run_id: str, kind: str | tuple[str, ...], tracking_uri: str | None) -> RunRow:
    """The run `run_id`, which must have ended FINISHED and carry the tag `kind` (one of `kind`)."""
    run = get_run(run_id, tracking_uri)
    kinds = (kind,) if isinstance(kind, str) else kind
    found = run.tags.get("kind", "")
    if found not in kinds:
        raise ConfigError(f"run {run_id} is a '{found or 'untagged'}' run ({run.name}), not "
                          f"{' or '.join(repr(k) for k in kinds)}. Fix: give the id of a {kinds[0]} run "
                          "(`specbench runs` lists them).")
    if run.status != "FINISHED":
        raise ConfigError(f"run {run_id} ({run.name}) is {run.status}, not FINISHED: its figures may be "
                          "incomplete. Fix: give a run that finished, or rerun the job.")
    return run


def rounded(value: Any, digits: int = 4) -> Any:
    """`digits` decimals, and at least `digits` significant digits below 0.1 (a max difference of 3e-5 is
    not written as 0); NaN and infinities as `plain_json`; through dicts and lists."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return plain_json(value)
        return round(value, max(digits, digits - 1 - math.floor(math.log10(abs(value)))) if value else digits)
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    return value


dump = table_json  # the results files' layout: one key per line, tables of scalars on one line


def write_results(path: Path, data: Any) -> None:
    """`dump(data)` to `path`, whole or not at all; prints what was written."""
    text = dump(data) + "\n"
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")
