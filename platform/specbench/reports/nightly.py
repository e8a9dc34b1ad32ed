"""The nightly's regression report: Markdown, HTML and a plot of each headline metric's change against its
baseline."""

from __future__ import annotations

import html
import math
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from specbench.config import ToleranceRule
from specbench.reports.numbers import apart
from specbench.reports.numbers import markdown_cell as _cell
from specbench.reports.plots import pyplot


@dataclass(frozen=True)
class Check:
    job: str
    metric: str
    new: float
    baseline: float | None
    baseline_run: str | None
    rule: ToleranceRule | None  # None: a job that failed (`metric` is JOB_FAILED, `problem` its error)
    problem: str | None  # None: within tolerance

    @property
    def verdict(self) -> str:
        if self.rule is None:
            return "JOB FAILED"
        return "REGRESSION" if self.problem else ("ok" if self.baseline is not None else "ok (no baseline)")


JOB_FAILED = "(the job)"  # the metric column of a job that failed: it logged nothing to compare


def _run(check: Check) -> str:
    """The baseline value's run, as a short id ("-" without one)."""
    return check.baseline_run[:8] if check.baseline_run else "-"


def render_markdown(checks: Sequence[Check], nightly_id: str) -> str:
    bad = sum(c.problem is not None for c in checks)
    out = [f"# Nightly {nightly_id}: {bad} regression(s) in {len(checks)} checks", "",
           "| verdict | job | metric | baseline | baseline run | new | why |", "| --- " * 7 + "|"]
    for c in checks:
        baseline, new = apart(c.baseline, c.new)
        out.append(f"| {c.verdict} | {_cell(c.job)} | {_cell(c.metric)} | {baseline} | {_run(c)} | {new} | "
                   f"{_cell(c.problem or '')} |")
    return "\n".join(out) + "\n"


def render_html(checks: Sequence[Check], nightly_id: str) -> str:
    rows = "".join(
        f"<tr class={'bad' if c.problem else 'ok'}><td>{c.verdict}</td><td>{html.escape(c.job)}</td>"
        f"<td>{html.escape(c.metric)}</td><td>{apart(c.baseline, c.new)[0]}</td><td>{_run(c)}</td>"
        f"<td>{apart(c.baseline, c.new)[1]}</td><td>{html.escape(c.problem or '')}</td></tr>" for c in checks)
    return ("<!doctype html><html><head><meta charset=utf-8><title>nightly</title><style>body{font-family:"
            "sans-serif}td,th{border:1px solid #ccc;padding:4px 8px}table{border-collapse:collapse}"
            "tr.bad{background:#fdd}</style></head><body>"
            f"<h1>Nightly {nightly_id}</h1><img src=regression_report.png><table><tr><th>verdict</th><th>job</th>"
            "<th>metric</th><th>baseline</th><th>baseline run</th><th>new</th><th>why</th></tr>"
            f"{rows}</table></body></html>\n")


def relative_change(check: Check) -> float | None:
    """(new - baseline) / |baseline|: positive where the metric rose, whatever the baseline's sign (a gain
    that went from -0.5 to 0.5 rose by 200%, where new / baseline would read -1); None without a finite,
    non-zero baseline or a finite new value."""
    if check.baseline in (None, 0.0) or not (math.isfinite(check.baseline) and math.isfinite(check.new)):
        return None
    return (check.new - check.baseline) / abs(check.baseline)


@contextmanager
def write_plot(checks: Sequence[Check]) -> Iterator[Path]:
    """`regression_report.png` (each metric's relative change against its baseline, in percent; red where it
    is a problem) in a temporary folder, for the block."""
    plt = pyplot()
    shown = [(c, change) for c in checks if (change := relative_change(c)) is not None]
    fig, ax = plt.subplots(figsize=(8, 0.4 * max(len(shown), 1) + 1.5))
    labels = [f"{c.job}: {c.metric}" for c, _ in shown]  # with the job: two jobs may log one metric
    ax.barh(labels, [100 * change for _, change in shown],
            color=["#d33" if c.problem else "#3a3" for c, _ in shown])
    ax.axvline(0.0, color="k", lw=0.8)
    ax.set_xlabel("change against the baseline (% of |baseline|)")
    unplotted = [f"{c.job}: {c.metric} ({'baseline 0' if c.baseline == 0.0 else f'new {c.new}'})"
                 for c in checks if c.baseline is not None and math.isfinite(c.baseline)
                 and (c.baseline == 0.0 or math.isinf(c.new))]  # a NaN new value: not logged (see the table)
    if not shown:
        ax.set_xticks([])
        ax.set_yticks([])
    if not shown and not unplotted:
        ax.text(0.5, 0.5, "no metric has a baseline to compare with", ha="center", va="center",
                transform=ax.transAxes)
    if unplotted:  # compared (the tables give the verdicts) but no relative change to draw
        ax.set_title("not plotted: " + "; ".join(unplotted), fontsize=8, wrap=True)
    fig.tight_layout()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "regression_report.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        yield path
