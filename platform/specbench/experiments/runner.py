"""Run a job or a suite: load and validate, open one MLflow run per job, run it, print a summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbench.config import SuiteConfig, config_kind, config_to_dict, flatten
from specbench.experiments.registry import RunOptions, job_kind, load_config
from specbench.tracking.runs import TrackedRun


def run_job(path: Path, config: Any, opts: RunOptions, suite: str | None,
            extra_tags: dict[str, str] | None = None) -> tuple[list[str], str]:
    """Run one loaded job in its own MLflow run; returns (summary lines, run id)."""
    kind = config_kind(config)
    tags = {"kind": kind, "job_file": str(path), **(extra_tags or {})}
    if suite:
        tags["suite"] = suite
    with TrackedRun(config.tracking.experiment, f"{kind}-{config.name}", opts.tracking_uri, tags) as run:
        resolved = config_to_dict(config)
        run.log_params(flatten(resolved))
        run.log_dict(resolved, "config.resolved.json")
        run.log_artifact(path, "config")
        lines = job_kind(kind).load_runner()(config, path, run, opts)
        lines.append(f"  MLflow run {run.run_id} in experiment '{config.tracking.experiment}' ({run.tracking_uri})")
        return lines, run.run_id


def run_file(path: Path, opts: RunOptions = RunOptions()) -> list[str]:
    """Run a job or suite file; returns the summary lines. Raises on the first failing job."""
    path = Path(path)
    config = load_config(path)
    if isinstance(config, SuiteConfig):
        jobs = [(job, load_config(job)) for job in config.jobs]  # validate every job before running any
        lines = []
        for job, job_config in jobs:
            lines += run_job(job, job_config, opts, suite=config.name)[0]
        return lines
    if config_kind(config) == "nightly":  # runs its jobs itself, each in its own MLflow run
        return job_kind("nightly").load_runner()(path, config, opts)  # type: ignore[no-any-return]
    return run_job(path, config, opts, suite=None)[0]
