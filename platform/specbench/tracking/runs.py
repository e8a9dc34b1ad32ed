"""One MLflow run per job, with batched logging and an honest end state.

`TrackedRun` opens a run in an experiment (created with a local artifact location when the store is the
embedded SQLite file), logs params, tags and metrics in batches (`log_batch`: one request, not one per
value), and uploads artifacts. Used as a context manager, a job that raises ends its run FAILED with the
error recorded as a tag and an artifact; only a job that returns ends FINISHED.
"""

from __future__ import annotations

import json
import platform as _stdlib_platform
import subprocess
import tempfile
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from specbench.hardware import describe
from specbench.paths import project_root
from specbench.tracking.store import local_artifact_root, quiet_mlflow, resolve_tracking_uri

_MAX_PARAM_LEN = 6000
_BATCH = 900  # MLflow accepts at most 1000 metrics per log_batch request


def git_commit(root: Path | None = None) -> str:
    """The checkout's commit (with `-dirty` when it has uncommitted changes), or `unknown`."""
    root = root or project_root()
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, encoding="utf-8",
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, encoding="utf-8", timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def experiment_id(client: MlflowClient, name: str) -> str:
    """The id of experiment `name`, created on first use (local artifacts for a SQLite store)."""
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    location = None
    if client.tracking_uri.startswith("sqlite:") or client.tracking_uri.startswith("file:"):
        location = (local_artifact_root() / name).as_uri()
    return client.create_experiment(name, artifact_location=location)


class TrackedRun:
    """An MLflow run for one job; see the module docstring."""

    def __init__(self, experiment: str, run_name: str, tracking_uri: str | None = None,
                 tags: Mapping[str, str] | None = None) -> None:
        quiet_mlflow()
        self.tracking_uri = resolve_tracking_uri(tracking_uri)
        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        base_tags = {
            "git_commit": git_commit(),
            "host": _stdlib_platform.node(),
            "hardware": describe(),
        }
        base_tags.update(tags or {})
        exp_id = experiment_id(self.client, experiment)
        run = self.client.create_run(exp_id, run_name=run_name,
                                     tags={k: str(v) for k, v in base_tags.items()})
        self.run_id: str = run.info.run_id
        self.experiment_id = exp_id
        self._ended = False

    # -- logging -------------------------------------------------------------------------------------
    def log_params(self, params: Mapping[str, Any]) -> None:
        items = [Param(k, str(v)[:_MAX_PARAM_LEN]) for k, v in params.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[i:i + 100])

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        items = [RunTag(k, str(v)) for k, v in tags.items()]
        if items:
            self.client.log_batch(self.run_id, tags=items)

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        """Log many metrics at one step in batched requests; non-finite values are logged as they are."""
        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step) for k, v in metrics.items()]
        for i in range(0, len(items), _BATCH):
            self.client.log_batch(self.run_id, metrics=items[i:i + _BATCH])

    def log_curve(self, name: str, values: list[float], steps: list[int] | None = None) -> None:
        """One metric over steps (a curve's points: step = threshold or k index)."""
        now = int(time.time() * 1000)
        steps = steps if steps is not None else list(range(len(values)))
        items = [Metric(name, float(v), now, int(s)) for v, s in zip(values, steps)]
        for i in range(0, len(items), _BATCH):
            self.client.log_batch(self.run_id, metrics=items[i:i + _BATCH])

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_text(self, text: str, name: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / name
            target.write_text(text, encoding="utf-8")
            self.log_artifact(target)

    def log_dict(self, data: Mapping[str, Any], name: str) -> None:
        self.log_text(json.dumps(data, indent=2, sort_keys=True, default=str), name)

    # -- ending --------------------------------------------------------------------------------------
    def finish(self) -> None:
        if not self._ended:
            self.client.set_terminated(self.run_id, "FINISHED")
            self._ended = True

    def fail(self, error: BaseException) -> None:
        """End the run FAILED, recording the error message (tag) and the traceback (artifact)."""
        if self._ended:
            return
        message = f"{type(error).__name__}: {error}"
        try:
            self.set_tags({"error": message[:5000], "error_type": type(error).__name__})
            self.log_text("".join(traceback.format_exception(error)), "error.txt")
        finally:
            self.client.set_terminated(self.run_id, "FAILED")
            self._ended = True

    def __enter__(self) -> TrackedRun:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None:
            self.fail(exc)
        else:
            self.finish()
