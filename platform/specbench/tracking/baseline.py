"""Baselines for the nightly: `specbench baseline set RUN_ID` tags one run per (experiment, run name) with
`baseline=true`; `find_baseline` returns it, else the latest finished nightly run of that job, in both cases
only among runs whose `metrics.version` tag (absent: 1) is the version asked for."""

from __future__ import annotations

from mlflow.tracking import MlflowClient

from specbench.errors import ConfigError
from specbench.tracking.queries import resolve_run_id
from specbench.tracking.store import quiet_mlflow, resolve_tracking_uri


def _client(tracking_uri: str | None) -> MlflowClient:
    quiet_mlflow()
    return MlflowClient(tracking_uri=resolve_tracking_uri(tracking_uri))


def set_baseline(run_id: str, tracking_uri: str | None = None, reason: str | None = None) -> tuple[str, str]:
    """Tag `run_id` (a full id or a unique prefix, see `resolve_run_id`) baseline=true (and clear the tag
    on other runs of the same job), with `reason` as its `baseline.reason` tag (why the baseline was reset,
    e.g. a metric that changed meaning); returns (its full run id, its run name)."""
    run_id = resolve_run_id(run_id, tracking_uri)
    client = _client(tracking_uri)
    run = client.get_run(run_id)
    if run.info.status != "FINISHED":
        raise ConfigError(f"run {run_id} has status {run.info.status}: a baseline must be a finished run. Fix: "
                          "pick a FINISHED run of the job from `specbench runs`.")
    name = run.info.run_name or ""
    others = client.search_runs([run.info.experiment_id], filter_string="tags.baseline = 'true'")
    for other in others:
        if other.info.run_name == name and other.info.run_id != run_id:
            client.set_tag(other.info.run_id, "baseline", "false")
    client.set_tag(run_id, "baseline", "true")
    if reason:
        client.set_tag(run_id, "baseline.reason", reason)
    return run_id, name


def find_baseline(experiment_id: str, run_name: str, nightly_id: str, tracking_uri: str | None = None,
                  metrics_version: int | None = None) -> tuple[str, dict[str, float], str] | None:
    """(run id, metrics, how it was chosen) of the baseline of a job's run: the run tagged baseline=true,
    else the latest finished nightly run of the same job before this nightly; with `metrics_version`, only
    runs of that version count. None when there is none."""
    client = _client(tracking_uri)
    name = run_name.replace("'", "")
    for where, why in ((f"tags.baseline = 'true' and attributes.run_name = '{name}'", "baseline=true"),
                       (f"tags.suite = 'nightly' and attributes.run_name = '{name}' and "
                        "attributes.status = 'FINISHED'", "previous nightly")):
        for run in client.search_runs([experiment_id], filter_string=where,
                                      order_by=["attributes.start_time DESC"], max_results=50):
            tag = run.data.tags.get("metrics.version", "1")
            version = int(tag) if tag.isdigit() else None  # a hand-edited, unreadable tag: not a baseline
            if run.data.tags.get("nightly.id") != nightly_id and (metrics_version is None or version == metrics_version):
                return run.info.run_id, dict(run.data.metrics), why
    return None


def note_baseline_reset(run_id: str, reason: str, tracking_uri: str | None = None) -> None:
    """Tag a run `baseline.reason` = `reason`: it starts a new baseline because its metrics changed meaning."""
    _client(tracking_uri).set_tag(run_id, "baseline.reason", reason)


def run_summary(run_id: str, tracking_uri: str | None = None) -> tuple[str, str, dict[str, float]]:
    """(experiment id, run name, metrics) of a run."""
    run = _client(tracking_uri).get_run(run_id)
    return run.info.experiment_id, run.info.run_name or "", dict(run.data.metrics)
