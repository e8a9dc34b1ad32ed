"""`specbench compare RUN_A RUN_B [...]`: params and metrics of several runs side by side, with deltas
against the first run; only what differs unless asked for everything. Rendered for the terminal and as
HTML, which is kept as an artifact of a `compare` run so the comparison can be opened in the MLflow UI."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from specbench.errors import ConfigError
from specbench.tracking.store import quiet_mlflow, resolve_tracking_uri


@dataclass(frozen=True)
class Row:
    """One param or metric across the runs (None where a run lacks it)."""

    kind: str  # "param" or "metric"
    name: str
    values: tuple[object, ...]

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


@dataclass(frozen=True)
class Comparison:
    run_ids: tuple[str, ...]
    run_names: tuple[str, ...]
    rows: tuple[Row, ...]

    def shown(self, show_all: bool) -> list[Row]:
        return [r for r in self.rows if show_all or r.differs]


def compare_runs(run_ids: Sequence[str], tracking_uri: str | None = None) -> Comparison:
    """Load the runs (every id must exist: a clear error names the missing one)."""
    if len(run_ids) < 2:
        raise ConfigError("compare needs at least two run ids")
    quiet_mlflow()
    client = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_uri))
    runs = []
    for run_id in run_ids:
        try:
            runs.append(client.get_run(run_id))
        except MlflowException as err:
            raise ConfigError(f"run {run_id!r} does not exist in {resolve_tracking_uri(tracking_uri)}. Fix: list "
                              "runs with `specbench runs`") from err
    rows: list[Row] = []
    for kind, getter in (("param", lambda r: r.data.params), ("metric", lambda r: r.data.metrics)):
        names = sorted(set().union(*(getter(r).keys() for r in runs)))
        for name in names:
            values = tuple(_value(getter(r).get(name), kind) for r in runs)
            rows.append(Row(kind, name, values))
    return Comparison(tuple(run_ids), tuple(r.info.run_name or r.info.run_id[:8] for r in runs), tuple(rows))


def _value(raw: object, kind: str) -> object:
    if raw is None:
        return None
    return float(raw) if kind == "metric" else str(raw)


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _fmt_delta(delta: float | None) -> str:
    return "" if delta is None or delta == 0 else f" ({delta:+.4g})"


def render_text(comparison: Comparison, show_all: bool = False) -> str:
    """A plain table: one column per run, deltas in parentheses against the first run."""
    header = ["", *(f"{n} [{i[:8]}]" for n, i in zip(comparison.run_names, comparison.run_ids, strict=True))]
    body = []
    for row in comparison.shown(show_all):
        cells = [f"{row.kind} {row.name}"]
        for value, delta in zip(row.values, row.deltas(), strict=True):
            cells.append(_fmt(value) + _fmt_delta(delta))
        body.append(cells)
    if not body:
        return "the runs have the same params and metrics" + ("" if show_all else " (use --all to list them)")
    widths = [max(len(r[c]) for r in [header, *body]) for c in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in [header, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_html(comparison: Comparison, show_all: bool = False) -> str:
    """The same table as a standalone HTML page (differences highlighted)."""
    head = "".join(f"<th>{html.escape(n)}<br><code>{html.escape(i)}</code></th>"
                   for n, i in zip(comparison.run_names, comparison.run_ids, strict=True))
    rows = []
    for row in comparison.shown(show_all):
        cells = "".join(f"<td>{html.escape(_fmt(v))}<span class=d>{html.escape(_fmt_delta(d))}</span></td>"
                        for v, d in zip(row.values, row.deltas(), strict=True))
        cls = " class=diff" if row.differs else ""
        rows.append(f"<tr{cls}><td>{row.kind}</td><td>{html.escape(row.name)}</td>{cells}</tr>")
    style = ("body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
             "padding:4px 8px}tr.diff{background:#fff6d5}.d{color:#666}")
    return (f"<!doctype html><html><head><meta charset=utf-8><title>specbench compare</title><style>{style}"
            f"</style></head><body><h1>Run comparison</h1><table><tr><th>kind</th><th>name</th>{head}</tr>"
            f"{''.join(rows)}</table></body></html>\n")
