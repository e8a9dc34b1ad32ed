"""Run a job or a suite: load and validate, open one MLflow run per job, run it, print a summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbench.config import SuiteConfig, config_kind, config_to_dict, flatten, load_config
from specbench.pipelines import graph
from specbench.tracking.runs import TrackedRun


def _run_one(path: Path, config: Any, tracking_uri: str | None, suite: str | None,
             force: bool = False) -> list[str]:
    kind = config_kind(config)
    tags = {"kind": kind, "job_file": str(path)}
    if suite:
        tags["suite"] = suite
    with TrackedRun(config.tracking.experiment, f"{kind}-{config.name}", tracking_uri, tags) as run:
        resolved = config_to_dict(config)
        run.log_params(flatten(resolved))
        run.log_dict(resolved, "config.resolved.json")
        run.log_artifact(path, "config")
        if kind == "graph":
            lines = graph.summary(graph.run_graph(config, run, force=force))
        else:  # pragma: no cover - every kind in JOB_KINDS is handled above
            raise NotImplementedError(kind)
        lines.append(f"  MLflow run {run.run_id} in experiment '{config.tracking.experiment}' ({run.tracking_uri})")
        return lines


def run_file(path: Path, tracking_uri: str | None = None, force: bool = False) -> list[str]:
    """Run a job or suite file; returns the summary lines. Raises on the first failing job.

    `force` rebuilds cached artifacts (the graph) even when their input hash matches.
    """
    path = Path(path)
    config = load_config(path)
    if isinstance(config, SuiteConfig):
        for job in config.jobs:
            load_config(job)  # validate every job before running any
        lines = []
        for job in config.jobs:
            lines += _run_one(job, load_config(job), tracking_uri, suite=config.name, force=force)
        return lines
    return _run_one(path, config, tracking_uri, suite=None, force=force)
