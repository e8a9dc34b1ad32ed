"""Read runs back from the tracking store (for `specbench runs` and tests)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from mlflow.tracking import MlflowClient

from specbench.tracking.store import quiet_mlflow, resolve_tracking_uri


@dataclass(frozen=True)
class RunRow:
    """One run with the headline metrics it has."""

    run_id: str
    experiment: str
    name: str
    status: str
    started: str
    metrics: dict[str, float]
    tags: dict[str, str]


def recent_runs(tracking_uri: str | None = None, limit: int = 20, experiment: str | None = None,
                metric_names: Sequence[str] = ()) -> list[RunRow]:
    """The latest `limit` runs (newest first), optionally of one experiment, with the named metrics."""
    quiet_mlflow()
    client = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_uri))
    experiments = client.search_experiments()
    if experiment is not None:
        experiments = [e for e in experiments if e.name == experiment]
    if not experiments:
        return []
    names = {e.experiment_id: e.name for e in experiments}
    runs = client.search_runs(list(names), order_by=["attributes.start_time DESC"], max_results=limit)
    rows = []
    for r in runs:
        started = datetime.fromtimestamp(r.info.start_time / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
        wanted = {k: v for k, v in r.data.metrics.items() if not metric_names or k in metric_names}
        rows.append(RunRow(r.info.run_id, names[r.info.experiment_id], r.info.run_name or "", r.info.status,
                           started, wanted, dict(r.data.tags)))
    return rows


def get_run(run_id: str, tracking_uri: str | None = None) -> RunRow:
    """One run by id, with all its metrics."""
    quiet_mlflow()
    client = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_uri))
    r = client.get_run(run_id)
    exp = client.get_experiment(r.info.experiment_id)
    started = datetime.fromtimestamp(r.info.start_time / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
    return RunRow(r.info.run_id, exp.name, r.info.run_name or "", r.info.status, started,
                  dict(r.data.metrics), dict(r.data.tags))
