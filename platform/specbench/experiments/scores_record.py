"""What an `eval_am` job's score files came from (`scores/<name>/scores.json`), so that a job reading them
(`word_confidence`) decodes them only while they are what its `scores_job` would write now.

The record is written after the devel and test scores (and removed before they are written again), so its
presence means the scores are whole. It holds a digest of the eval job's resolved config and of the
acoustic model checkpoint, and the acoustic scale that job chose on devel.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from specbench.config import EvalAmConfig, config_to_dict
from specbench.errors import DataError

RECORD = "scores.json"


def config_digest(config: EvalAmConfig) -> str:
    """sha256 of the eval job's resolved config (every key, so every setting that shapes its scores)."""
    return hashlib.sha256(json.dumps(config_to_dict(config), sort_keys=True).encode()).hexdigest()


def checkpoint_digest(checkpoint: Path) -> str:
    with checkpoint.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def forget(out_dir: Path) -> None:
    """Remove the record before the scores are written again (a run that stops half-way leaves none)."""
    (out_dir / RECORD).unlink(missing_ok=True)


def write(out_dir: Path, config: EvalAmConfig, checkpoint: Path, acoustic_scale: float) -> None:
    """The record of scores just written (atomically: a new file renamed over the old)."""
    record = {"eval_job": config.name, "config_sha256": config_digest(config),
              "checkpoint_sha256": checkpoint_digest(checkpoint), "acoustic_scale": float(acoustic_scale)}
    tmp = out_dir / f"{RECORD}.tmp{os.getpid()}"
    tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, out_dir / RECORD)


def check(out_dir: Path, config: EvalAmConfig, checkpoint: Path, eval_path: Path) -> dict[str, Any]:
    """The record of the scores in `out_dir`, after checking that `config` (the eval job `eval_path` as it
    is now) and its `checkpoint` would write the same scores; a DataError naming the fix otherwise."""
    path = out_dir / RECORD
    fix = f"Fix: run `specbench run {eval_path}` again (a suite lists it before this job)"
    if not path.is_file():
        raise DataError(f"{path} does not exist, so where the scores in {out_dir} came from is unknown (an eval "
                        f"run that stopped half-way, or one older than the record). {fix}")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        written = (record["config_sha256"], record["checkpoint_sha256"], float(record["acoustic_scale"]))
    except (ValueError, KeyError, TypeError) as err:
        raise DataError(f"{path} is damaged ({err}). {fix}") from err
    if written[0] != config_digest(config):
        raise DataError(f"{out_dir}: the scores were written by another version of {eval_path} (its settings "
                        f"changed since). {fix}")
    if not checkpoint.is_file() or written[1] != checkpoint_digest(checkpoint):
        raise DataError(f"{out_dir}: the scores come from another acoustic model than {checkpoint}. {fix}")
    return record
