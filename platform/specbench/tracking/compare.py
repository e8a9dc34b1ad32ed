"""`specbench compare RUN_A RUN_B [...]`: params and metrics of several runs side by side, with deltas
against the first run; only what differs unless asked for everything. This module loads the runs; the
terminal and HTML tables are rendered by `reports/compare.py` (the HTML is kept as an artifact of a
`compare` run so the comparison can be opened in the MLflow UI). A metric logged at several steps (a sweep: one
step per k, per epoch, per threshold) shows its last step's value, and its row says so."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from mlflow.tracking import MlflowClient

from specbench.errors import ConfigError
from specbench.tracking.journal import server_checked
from specbench.tracking.queries import logged, resolve_run_ids, stepped_metrics
from specbench.tracking.store import resolve_tracking_uri


@dataclass(frozen=True)
class Row:
    """One param or metric across the runs (None where a run lacks it)."""

    kind: str  # "param" or "metric"
    name: str
    values: tuple[object, ...]
    swept: bool = False  # a metric some run logged at several steps (a sweep): its value is the last step's

    @property
    def differs(self) -> bool:
        first = self.values[0]
        return any(not _same(first, v) for v in self.values[1:])

    def deltas(self) -> tuple[float | None, ...]:
        """value - first value for numeric metrics (None where undefined)."""
        first = self.values[0]
        if self.kind != "metric" or not isinstance(first, float):
            return tuple(None for _ in self.values)
        return tuple(v - first if isinstance(v, float) else None for v in self.values)


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


VERSION_TAG = "metrics.version"  # what a job run's metrics mean, counted per job kind (absent: 1)
VERSIONS_TAG = "metrics.versions"  # a suite's or nightly's parent run: its children's, "graph=1,simultrans=5"


@dataclass(frozen=True)
class Comparison:
    run_ids: tuple[str, ...]
    run_names: tuple[str, ...]
    rows: tuple[Row, ...]
    kinds: tuple[str, ...] = ()  # each run's `kind` tag ('' where it has none)
    versions: tuple[str, ...] = ()  # each run's `metrics.versions`, else `metrics.version` tag (none: "1")
    hardware: tuple[str, ...] = ()  # each run's `hardware` tag ('' where it has none)
    statuses: tuple[str, ...] = ()  # each run's MLflow status (FINISHED, FAILED, RUNNING, KILLED)
    deleted: tuple[bool, ...] = ()  # whether each run is deleted (in MLflow's trash: its id still reads it)

    def shown(self, show_all: bool) -> list[Row]:
        return [r for r in self.rows if show_all or r.differs]

    def version_warning(self) -> str | None:
        """A warning naming the runs and their metrics versions where runs of the same job kind logged
        different metrics versions (their metrics of the same name may not mean the same, so the deltas
        between them do not measure a change of the method); None where none do. Versions count per kind; a
        parent run with `metrics.versions` counts as a run of each of its children's kinds."""
        warnings = []
        runs = [(n, i, k, v) for n, i, kind, vs in zip(self.run_names, self.run_ids, self.kinds,
                                                       self.versions, strict=True)
                for k, v in ([p.partition("=")[::2] for p in vs.split(",")] if "=" in vs else [(kind, vs)])]
        for kind in dict.fromkeys(k for _, _, k, _ in runs):
            same = [(n, i, v) for n, i, k, v in runs if k == kind]
            if len({v for _, _, v in same}) > 1:
                warnings.append(f"warning: these {kind or 'untyped'} runs logged different metrics versions ("
                                + ", ".join(f"{n} [{i[:8]}]: {VERSION_TAG} {v}" for n, i, v in same)
                                + "): a metric's meaning changed between them, so their deltas are not like "
                                "for like. Fix: compare runs of the same metrics version (rerun the older job).")
        return "\n".join(warnings) or None


@server_checked
def compare_runs(run_ids: Sequence[str], tracking_uri: str | None = None, show_all: bool = True) -> Comparison:
    """Load the runs, given by full ids or unique prefixes (`resolve_run_id`: a clear error names a missing
    or ambiguous one); the comparison holds the full ids. Which metrics were logged at several steps is
    looked up for the metrics that differ, or for all with `show_all` (`stepped_metrics`: a history query
    only for a metric whose latest step is not 0)."""
    if len(run_ids) < 2:
        raise ConfigError(f"compare needs at least two run ids, got {len(run_ids)}. Fix: give two or more "
                          "run ids (or prefixes of them) from `specbench runs`.")
    run_ids = resolve_run_ids(run_ids, tracking_uri)
    client = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_uri))
    runs = [client.get_run(run_id) for run_id in run_ids]
    rows: list[Row] = []
    for kind, getter in (("param", lambda r: r.data.params), ("metric", lambda r: r.data.metrics)):
        names = sorted(set().union(*(getter(r).keys() for r in runs)))
        for name in names:
            values = tuple(_value(getter(r).get(name), kind) for r in runs)
            rows.append(Row(kind, name, values))
    asked = {r.name for r in rows if r.kind == "metric" and (show_all or r.differs)}
    swept = set().union(*(stepped_metrics(run_id, tracking_uri, asked) for run_id in run_ids))
    rows = [dataclasses.replace(r, swept=True) if r.kind == "metric" and r.name in swept else r for r in rows]
    return Comparison(tuple(run_ids), tuple(r.info.run_name or r.info.run_id[:8] for r in runs), tuple(rows),
                      tuple(r.data.tags.get("kind", "") for r in runs),
                      tuple(r.data.tags.get(VERSIONS_TAG) or r.data.tags.get(VERSION_TAG, "1") for r in runs),
                      tuple(r.data.tags.get("hardware", "") for r in runs),
                      tuple(r.info.status for r in runs), tuple(r.info.lifecycle_stage == "deleted" for r in runs))


def _value(raw: object, kind: str) -> object:
    if raw is None:
        return None
    return logged(float(raw)) if kind == "metric" else str(raw)
