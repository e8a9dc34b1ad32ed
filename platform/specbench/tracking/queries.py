"""Read runs back from the tracking store (for `specbench runs` and tests), and resolve the run ids that
verbs are given (any unique prefix of an id, as `specbench runs` prints it) to full ids."""

from __future__ import annotations

import json
import math
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mlflow.entities import ViewType
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from specbench.errors import ConfigError
from specbench.tracking.journal import server_checked
from specbench.tracking.store import quiet_mlflow, resolve_tracking_uri


def logged(value: float) -> float:
    """A metric value as it was logged: MLflow's SQL stores keep an infinity as the largest finite float
    (+-1.7976931348623157e308, and hand that back), so those two read as the infinities they stand for."""
    return math.copysign(math.inf, value) if abs(value) == sys.float_info.max else value


def logged_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """`logged` of each value."""
    return {k: logged(v) for k, v in metrics.items()}


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
    params: dict[str, str] = field(default_factory=dict)  # filled by `get_run`


def all_experiments(client: MlflowClient, view: int = ViewType.ACTIVE_ONLY) -> list[Any]:
    """Every experiment of the store (MLflow hands them back 1,000 at a time)."""
    found, token = [], None
    while True:
        page = client.search_experiments(view_type=view, page_token=token)
        found += page
        if not (token := page.token):
            return found


@server_checked
def recent_runs(tracking_uri: str | None = None, limit: int = 20, experiment: str | None = None,
                metric_names: Sequence[str] = ()) -> list[RunRow]:
    """The latest `limit` runs (newest first), optionally of one experiment, with the named metrics."""
    quiet_mlflow()
    client = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_uri))
    experiments = all_experiments(client)
    if experiment is not None:
        experiments = [e for e in experiments if e.name == experiment]
    if not experiments:
        return []
    names = {e.experiment_id: e.name for e in experiments}
    runs = client.search_runs(list(names), order_by=["attributes.start_time DESC"], max_results=limit)
    rows = []
    for r in runs:
        started = datetime.fromtimestamp(r.info.start_time / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
        wanted = {k: logged(v) for k, v in r.data.metrics.items() if not metric_names or k in metric_names}
        rows.append(RunRow(r.info.run_id, names[r.info.experiment_id], r.info.run_name or "", r.info.status,
                           started, wanted, dict(r.data.tags)))
    return rows


@server_checked
def experiment_names(tracking_uri: str | None = None, deleted: bool = False) -> dict[str, str]:
    """The store's experiments (or its deleted ones), name: id."""
    quiet_mlflow()
    view = ViewType.DELETED_ONLY if deleted else ViewType.ACTIVE_ONLY
    client = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_uri))
    return {e.name: e.experiment_id for e in all_experiments(client, view)}


@server_checked
def get_run(run_id: str, tracking_uri: str | None = None) -> RunRow:
    """One run by id, with all its metrics and params."""
    quiet_mlflow()
    client = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_uri))
    r = client.get_run(run_id)
    exp = client.get_experiment(r.info.experiment_id)
    started = datetime.fromtimestamp(r.info.start_time / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
    return RunRow(r.info.run_id, exp.name, r.info.run_name or "", r.info.status, started,
                  logged_metrics(r.data.metrics), dict(r.data.tags), dict(r.data.params))


@server_checked
def stepped_metrics(run_id: str, tracking_uri: str | None = None, names: Iterable[str] | None = None) -> set[str]:
    """The run's metrics (of `names`, when given) logged at more than one step (a sweep, one step per point):
    the run's value of such a metric is only its last step's. The run's latest values carry their (highest)
    step: one history query per metric whose latest step is not 0 (specbench logs no step below 0, so a metric
    whose latest step is 0 was logged at that step alone), none for the others."""
    quiet_mlflow()
    client = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_uri))
    keys = {m.key for m in client.get_run(run_id).data.to_proto().metrics if m.step != 0}
    if names is not None:
        keys = keys & set(names)
    return {k for k in keys if len({m.step for m in client.get_metric_history(run_id, k)}) > 1}


@server_checked
def run_minutes(run_id: str, tracking_uri: str | None = None) -> float | None:
    """Wall-clock minutes from the run's start to its end (None while it runs)."""
    quiet_mlflow()
    info = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_uri)).get_run(run_id).info
    return None if not info.end_time else (info.end_time - info.start_time) / 60000


def json_artifact(run_id: str, name: str, tracking_uri: str | None = None) -> Any:
    """A JSON artifact of a run (as `TrackedRun.log_dict` wrote it), parsed."""
    return json.loads(text_artifact(run_id, name, tracking_uri))


@server_checked
def text_artifact(run_id: str, name: str, tracking_uri: str | None = None) -> str:
    """A text artifact of a run (a JSON or CSV file it logged)."""
    quiet_mlflow()
    client = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_uri))
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(run_id, name, tmp)
        except MlflowException as exc:
            raise ConfigError(f"run {run_id} has no artifact {name!r} ({exc.message}). Fix: give the run id of a "
                              "finished run of the job that writes it") from exc
        return Path(path).read_text(encoding="utf-8")


_SHOWN_MATCHES = 20
_FULL_ID_LENGTH = 32


@server_checked
def resolve_run_id(prefix: str, tracking_uri: str | None = None, shown: int = _SHOWN_MATCHES) -> str:
    """The full id of the one run whose id starts with `prefix` (any unique prefix, such as the 12
    characters `specbench runs` prints; a full 32-character id is looked up directly, deleted runs
    included). Raises `ConfigError` when no run matches, or when several do (listing the newest `shown`
    of them: id, experiment, name; then "... and more" when there are more)."""
    quiet_mlflow()
    uri = resolve_tracking_uri(tracking_uri)
    wanted = prefix.strip().lower()
    if not wanted or any(c not in "0123456789abcdef" for c in wanted):
        raise ConfigError(f"{prefix!r} is not a run id (run ids are hexadecimal, e.g. the first column of "
                          "`specbench runs`). Fix: pick a run id, or a prefix of one, from `specbench runs`.")
    client = MlflowClient(tracking_uri=uri)
    if len(wanted) == _FULL_ID_LENGTH:
        try:
            return client.get_run(wanted).info.run_id
        except MlflowException as err:
            if err.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            raise _unknown(prefix, uri) from err
    names = {e.experiment_id: e.name for e in all_experiments(client)}
    matches = client.search_runs(list(names), filter_string=f"attributes.run_id LIKE '{wanted}%'",
                                 order_by=["attributes.start_time DESC"],
                                 max_results=shown + 1) if names else []
    if not matches:
        gone = client.search_runs([e.experiment_id for e in all_experiments(client, ViewType.ALL)],
                                  filter_string=f"attributes.run_id LIKE '{wanted}%'", run_view_type=ViewType.ALL,
                                  max_results=1)
        if gone:
            run = gone[0].info
            raise ConfigError(f"run id prefix {prefix!r} matches only run {run.run_id} ({run.run_name or '-'}) in "
                              f"{uri}, which is deleted (or its experiment is): a prefix names active runs only. "
                              f"Fix: give its full id to read it as it is, or restore it (`mlflow runs restore "
                              f"--run-id {run.run_id}`, or `mlflow experiments restore`).")
        raise _unknown(prefix, uri)
    if len(matches) == 1:
        return matches[0].info.run_id
    lines = [f"  {r.info.run_id}  {names.get(r.info.experiment_id, r.info.experiment_id)}  "
             f"{r.info.run_name or '-'}" for r in matches[:shown]]
    more = "\n  ... and more" if len(matches) > shown else ""
    raise ConfigError(f"run id prefix {prefix!r} is ambiguous: it matches several runs in {uri} "
                      "(id, experiment, name):\n" + "\n".join(lines) + more +
                      "\nFix: give more characters of the run id.")


def resolve_run_ids(prefixes: Sequence[str], tracking_uri: str | None = None) -> list[str]:
    """`resolve_run_id` of each prefix, in order."""
    return [resolve_run_id(p, tracking_uri) for p in prefixes]


def _unknown(prefix: str, uri: str) -> ConfigError:
    return ConfigError(f"run {prefix!r} does not exist in {uri} (no run id starts with it). Fix: pick a run "
                       "id, or a prefix of one, from `specbench runs` (with the same --tracking-uri).")
