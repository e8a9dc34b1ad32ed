"""The tables of `specbench compare`: plain text for the terminal and a standalone HTML page (kept as an
MLflow artifact), one column per run, deltas against the first run. The headline metrics
(`reports.headline`) come first and are always shown, equal or not: they are what two runs, two suites' parent
runs above all, are compared by; the other params and metrics follow, only those that differ unless asked
for all."""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

from specbench.reports.headline import BETTER, HEADLINE_METRICS, TIMED_METRICS
from specbench.reports.numbers import figure

if TYPE_CHECKING:
    from specbench.tracking.compare import Comparison, Row


def _fmt(value: object) -> str:
    """A cell: "-" where the run has no such value, "nan", "inf" or "-inf" where it logged one, else the
    figure."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (int, float)) and not isinstance(value, bool):
        return figure(value)
    return str(value)


def _fmt_delta(delta: float | None) -> str:
    if delta is None or delta == 0 or not math.isfinite(delta):
        return ""
    return f" ({delta:+,.0f})" if float(delta).is_integer() else f" ({delta:+.4g})"


def _is_headline(row: Row) -> bool:
    return row.kind == "metric" and row.name in HEADLINE_METRICS


SWEPT = "last step of a sweep"  # beside a metric logged at several steps: its value is not the run's result


def _notes(row: Row) -> list[str]:
    """What is said beside a row's name: for a headline metric, which way it improves; for a swept one,
    that."""
    better = BETTER.get(row.name) if _is_headline(row) else None
    return ([f"{better} is better"] if better else []) + ([SWEPT] if row.swept else [])


def _label(row: Row) -> str:
    """The row's kind and name, with its notes in parentheses (the terminal table's first column)."""
    return f"{row.kind} {row.name}" + "".join(f" ({note})" for note in _notes(row))


def shown_rows(comparison: Comparison, show_all: bool = False) -> list[Row]:
    """The headline metrics any of the runs has, then the other rows that differ (every row with
    `show_all`)."""
    return ([r for r in comparison.rows if _is_headline(r)]
            + [r for r in comparison.shown(show_all) if not _is_headline(r)])


def warnings(comparison: Comparison) -> str | None:
    """The comparison's warnings, one a line: a run given twice, runs that did not finish, deleted runs, metrics versions
    that differ (`Comparison.version_warning`), and timed metrics (`reports.headline.TIMED_METRICS`) logged by
    runs measured on different hardware."""
    ids = comparison.run_ids
    lines = [f"warning: run {i[:8]} is given more than once, so its deltas against itself are 0. Fix: give "
             "the runs to compare once each." for i in dict.fromkeys(i for i in ids if ids.count(i) > 1)]
    lines += [f"warning: run {n} [{i[:8]}] is {s}, not FINISHED: its metrics are what it logged before it "
              "stopped, and some may be missing." for n, i, s in
              zip(comparison.run_names, ids, comparison.statuses, strict=False) if s != "FINISHED"]
    lines += [f"warning: run {n} [{i[:8]}] is deleted: it is compared as it was logged. Fix: restore it "
              f"(`mlflow runs restore --run-id {i}`) if it is still meant to count, or leave it out." for n, i, d in
              zip(comparison.run_names, ids, comparison.deleted, strict=False) if d]
    lines.append(comparison.version_warning())
    timed = sorted({r.name for r in comparison.rows if r.kind == "metric" and r.name in TIMED_METRICS
                    and len({h for h, v in zip(comparison.hardware, r.values, strict=True) if v is not None}) > 1})
    if timed:
        runs = ", ".join(f"{n} [{i[:8]}]: {h or 'no hardware tag'}" for n, i, h in
                         zip(comparison.run_names, comparison.run_ids, comparison.hardware, strict=True))
        lines.append(f"warning: these runs were measured on different hardware ({runs}): their timed metrics "
                     f"({', '.join(timed)}) depend on the machine, so those deltas are not like for like. Fix: "
                     "compare speed between runs of the same hardware.")
    return "\n".join(line for line in lines if line) or None


def render_text(comparison: Comparison, show_all: bool = False) -> str:
    """A plain table: one column per run, deltas in parentheses against the first run."""
    header = ["", *(f"{n} [{i[:8]}]" for n, i in zip(comparison.run_names, comparison.run_ids, strict=True))]
    body = []
    for row in shown_rows(comparison, show_all):
        cells = [_label(row)]
        for value, delta in zip(row.values, row.deltas(), strict=True):
            cells.append(_fmt(value) + _fmt_delta(delta))
        body.append(cells)
    warning = warnings(comparison)
    if not body:
        same = "the runs have the same params and metrics" + ("" if show_all else " (use --all to list them)")
        return "\n".join(filter(None, (warning, same)))
    widths = [max(len(r[c]) for r in [header, *body]) for c in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in [header, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("(in parentheses: each run's value minus the first run's; - where a run has no such value)")
    if warning:
        lines.insert(0, warning)
    if len(set(comparison.run_names)) > 1:
        lines.append("note: these runs are of different jobs (" + ", ".join(dict.fromkeys(comparison.run_names))
                     + "), so many of their params and metrics differ by design")
    return "\n".join(lines)


def render_html(comparison: Comparison, show_all: bool = False) -> str:
    """The same table as a standalone HTML page (differences highlighted)."""
    head = "".join(f"<th>{html.escape(n)}<br><code>{html.escape(i)}</code></th>"
                   for n, i in zip(comparison.run_names, comparison.run_ids, strict=True))
    rows = []
    for row in shown_rows(comparison, show_all):
        cells = "".join(f"<td>{html.escape(_fmt(v))}<span class=d>{html.escape(_fmt_delta(d))}</span></td>"
                        for v, d in zip(row.values, row.deltas(), strict=True))
        cls = " class=diff" if row.differs else ""
        notes = "".join(f" <span class=d>({html.escape(note)})</span>" for note in _notes(row))
        rows.append(f"<tr{cls}><td>{row.kind}</td><td>{html.escape(row.name)}{notes}</td>{cells}</tr>")
    style = ("body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
             "padding:4px 8px}tr.diff{background:#fff6d5}.d{color:#666}.warn{color:#a00}")
    warning = warnings(comparison)
    note = "".join(f"<p class=warn>{html.escape(line)}</p>" for line in (warning or "").splitlines())
    return (f"<!doctype html><html><head><meta charset=utf-8><title>specbench compare</title><style>{style}"
            f"</style></head><body><h1>Run comparison</h1>{note}"
            f"<table><tr><th>kind</th><th>name</th>{head}</tr>"
            f"{''.join(rows)}</table></body></html>\n")
