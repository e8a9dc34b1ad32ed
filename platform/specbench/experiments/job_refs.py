"""Jobs that name other jobs (`speech_job = "speech_slurp.toml"`): paths relative to the naming job's file."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from specbench.errors import ConfigError
from specbench.experiments.registry import load_config

T = TypeVar("T")


def referenced_job(job_path: Path, key: str, ref: Path, cls: type[T]) -> T:
    """Load the job that `job_path`'s `key` names and check its kind."""
    path = ref if ref.is_absolute() else job_path.parent / ref
    kind = cls.KIND  # type: ignore[attr-defined]
    fix = f'Fix: name an existing kind = "{kind}" job file (jobs/ has one of each kind), relative to this one.'
    if not path.is_file():
        raise ConfigError(f"{job_path}: key '{key}' = '{ref}': {path} does not exist. {fix}")
    config = load_config(path)
    if not isinstance(config, cls):
        raise ConfigError(f"{job_path}: key '{key}' = '{ref}' must name a kind = \"{kind}\" job. {fix}")
    return config
