"""`reports.compare`: which rows the `specbench compare` tables show (the headline metrics first and always,
a param that shares a headline's name is not one, the rest only where they differ unless `--all`), what each
cell says (whole numbers in full, other figures to six significant digits, deltas against the first run with
their sign, whole ones in full and others to four significant digits, none where zero or undefined, "nan"
for a logged NaN), the notes beside a row's name (which way a headline improves, a swept metric), the header,
the message when nothing differs, the warnings (metrics versions; timed metrics only where runs of different
hardware both logged them) and the HTML page (escaped values, differing rows marked). Comparisons are built by
hand; every expected string is worked out in the comments."""

from __future__ import annotations

import math
import re

import pytest

from specbench.reports.compare import render_html, render_text, shown_rows, warnings
from specbench.tracking.compare import Comparison, Row

pytestmark = pytest.mark.unit
NAN = math.nan
IDS = ("aaaaaaaa1111", "bbbbbbbb2222")
ROWS = (
    Row("param", "asr.wer", ("x", "x")),  # a param, not the headline metric of that name; equal: hidden
    Row("param", "beam", ("8", "<b>")),
    Row("metric", "asr.wer", (0.25, 0.25)),  # headline, equal: shown all the same
    Row("metric", "graph.states", (1000.0, 13345.0)),  # headline, delta 12345
    Row("metric", "m.same", (1.0, 1.0)),
    Row("metric", "m.frac", (0.1, 0.2234567)),  # delta 0.1234567
    Row("metric", "m.nan", (1.0, NAN)),
    Row("metric", "m.swept", (3.0, 1.0), swept=True),
)


def _comparison(rows: tuple[Row, ...] = ROWS, names: tuple[str, str] = ("eval_am", "eval_am"),
                versions: tuple[str, str] = ("1", "1"), hardware: tuple[str, str] = ("h100", "h100")) -> Comparison:
    return Comparison(IDS, names, rows, ("eval_am", "eval_am"), versions, hardware)


def _cells(text: str) -> dict[str, list[str]]:
    """Each body line's first column -> its other cells (columns are joined by two spaces or more; the header
    and the rule under it are left out)."""
    lines = text.splitlines()
    body = lines[lines.index(next(line for line in lines if set(line) == {"-", " "})) + 1:]
    return {cells[0]: cells[1:] for line in body if len(cells := re.split(r"\s{2,}", line)) > 1}


def test_headline_metrics_come_first_and_are_shown_even_when_equal() -> None:
    comparison = _comparison()
    assert [(r.kind, r.name) for r in shown_rows(comparison)] == [
        ("metric", "asr.wer"), ("metric", "graph.states"),  # the headlines, in the comparison's order
        ("param", "beam"), ("metric", "m.frac"), ("metric", "m.nan"), ("metric", "m.swept")]  # those that differ
    assert [(r.kind, r.name) for r in shown_rows(comparison, show_all=True)] == [
        ("metric", "asr.wer"), ("metric", "graph.states"), ("param", "asr.wer"), ("param", "beam"),
        ("metric", "m.same"), ("metric", "m.frac"), ("metric", "m.nan"), ("metric", "m.swept")]
    cells = _cells(render_text(comparison, show_all=True))
    assert cells["param asr.wer"] == ["x", "x"]  # no "(lower is better)": only the metric is the headline
    assert cells["metric m.same"] == ["1", "1"]


def test_text_table_cells_deltas_and_notes() -> None:
    text = render_text(_comparison())
    lines = text.splitlines()
    assert re.split(r"\s{2,}", lines[0].strip()) == ["eval_am [aaaaaaaa]", "eval_am [bbbbbbbb]"]
    assert set(lines[1]) == {"-", " "}
    assert _cells(text) == {
        "metric asr.wer (lower is better)": ["0.25", "0.25"],  # delta 0: no parentheses
        "metric graph.states": ["1,000", "13,345 (+12,345)"],  # a count: no direction; 13345 - 1000, in full
        "param beam": ["8", "<b>"],  # params have no delta
        "metric m.frac": ["0.1", "0.223457 (+0.1235)"],  # 0.2234567 to 6 digits; 0.1234567 to 4
        "metric m.nan": ["1", "nan"],  # NaN - 1 is no delta
        "metric m.swept (last step of a sweep)": ["3", "1 (-2)"],
    }
    assert lines[-1] == "(in parentheses: each run's value minus the first run's; - where a run has no such value)"
    assert "different jobs" not in text  # both runs are eval_am


def test_runs_of_different_jobs_are_noted_once_per_job_in_order() -> None:
    rows = (Row("metric", "m", (1.0, 2.0, 3.0)),)
    comparison = Comparison(("i1", "i2", "i3"), ("graph", "eval_am", "graph"), rows, ("", "", ""), ("1", "1", "1"),
                            ("", "", ""))
    assert render_text(comparison).splitlines()[-1] == (
        "note: these runs are of different jobs (graph, eval_am), so many of their params and metrics differ by design")


def test_nothing_differs_says_so_and_offers_all_only_without_it() -> None:
    same = _comparison(rows=(Row("metric", "m", (1.0, 1.0)), Row("param", "p", ("a", "a"))))
    assert render_text(same) == "the runs have the same params and metrics (use --all to list them)"
    assert render_text(_comparison(rows=()), show_all=True) == "the runs have the same params and metrics"
    assert _cells(render_text(same, show_all=True))["param p"] == ["a", "a"]


def test_timed_metrics_warn_only_where_runs_of_different_hardware_both_logged_them() -> None:
    rows = (Row("metric", "decoder.rtfx", (10.0, 20.0)), Row("metric", "decoder.cpu_vs_kaldi", (1.5, 1.5)),
            Row("metric", "decoder.speedup_vs_kaldi", (3.0, None)),  # one run only: nothing to compare
            Row("metric", "asr.wer", (0.2, 0.3)))  # not timed
    assert warnings(_comparison(rows=rows)) is None  # same hardware
    hardware = warnings(_comparison(rows=rows, hardware=("h100", "")))
    assert hardware == (
        "warning: these runs were measured on different hardware (eval_am [aaaaaaaa]: h100, eval_am [bbbbbbbb]: "
        "no hardware tag): their timed metrics (decoder.cpu_vs_kaldi, decoder.rtfx) depend on the machine, so "
        "those deltas are not like for like. Fix: compare speed between runs of the same hardware.")
    both = _comparison(rows=rows, versions=("1", "2"), hardware=("h100", ""))
    lines = warnings(both).splitlines()
    assert lines == [both.version_warning(), hardware] and "metrics.version 2" in lines[0]
    assert render_text(both).splitlines()[:2] == lines  # the warnings head the table


def test_html_page_escapes_values_and_marks_the_rows_that_differ() -> None:
    page = render_html(_comparison(hardware=("h100", "")))
    assert "<td>&lt;b&gt;<span class=d></span></td>" in page and "<b>" not in page
    assert "<tr><td>metric</td><td>asr.wer <span class=d>(lower is better)</span></td>" in page  # equal: plain
    assert "<tr class=diff><td>param</td><td>beam</td>" in page
    assert "<td>13,345<span class=d> (+12,345)</span></td>" in page
    assert "<tr><td>param</td><td>asr.wer</td>" not in page  # equal and not a headline: hidden
    assert "<p class=warn>" not in page  # no timed metric among the rows
