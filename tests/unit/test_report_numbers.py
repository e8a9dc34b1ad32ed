"""How reports print figures and cells: whole counts in full, undefined values as "-", an error message that
stays in its Markdown row, an IPv6 server address in brackets, and a wildcard listen address replaced by the
machine's name where other machines are told where to log."""

from __future__ import annotations

import math
import re
import socket

import pytest

from specbench.cli.commands import _reachable
from specbench.config import ToleranceRule
from specbench.experiments.nightly import judge
from specbench.reports.nightly import (
    JOB_FAILED,
    Check,
    relative_change,
    render_html,
    render_markdown,
    write_plot,
)
from specbench.reports.numbers import figure
from specbench.tracking.ui import http_address


def test_figures() -> None:
    assert [figure(v) for v in (2345679.0, 16514210, 100.0, 0.123456789, -3.0)] == \
        ["2,345,679", "16,514,210", "100", "0.123457", "-3"]
    assert figure(None) == figure(math.nan) == "-" and (figure(math.inf), figure(-math.inf)) == ("inf", "-inf")
    assert judge(ToleranceRule("graph.arcs", max_rise=0), 2345679.0, 2345678.0) == \
        "rose by 1 from 2,345,678 to 2,345,679 (allowed rise 0)"


def test_a_failed_job_and_a_missing_value_keep_the_report_table_whole() -> None:
    rule = ToleranceRule("graph.states", max_rise=0)
    checks = [Check("a|b.toml", JOB_FAILED, math.nan, None, None, None,
                    "the job failed: KeyError: '<unk>': key 'x' = 'a|b' bad.\nFix: give one of a | b"),
              Check("graph.toml", "graph.states", math.nan, 10.0, "r1", rule, "the job did not log it")]
    table = render_markdown(checks, "n1").strip().splitlines()
    assert len(table) == 2 + 2 + len(checks)  # title, blank, header, rule, one line per check
    assert all(len(re.findall(r"(?<!\\)\|", line)) == 8 for line in table[2:])  # seven cells in every row
    assert "| JOB FAILED | a\\|b.toml | (the job) | - | - | - |" in table[4] and "<br>Fix:" in table[4]
    assert "KeyError: '&lt;unk&gt;'" in table[4]  # not an HTML tag that Markdown would hide
    assert "| 10 | r1 | - |" in table[5] and "nan" not in "\n".join(table)
    page = render_html(checks, "n1")
    assert "<td>10</td><td>r1</td>" in page and "<td>-</td>" in page and "nan" not in page


def test_server_addresses() -> None:
    assert http_address("::1", 5000) == "http://[::1]:5000"
    assert http_address("127.0.0.1", 5000) == "http://127.0.0.1:5000"
    assert _reachable("http://0.0.0.0:5000") == f"http://{socket.gethostname()}:5000"
    assert _reachable("http://[::]:5000") == f"http://{socket.gethostname()}:5000"
    assert _reachable("http://10.0.0.5:5000") == "http://10.0.0.5:5000"


def test_the_plot_shows_a_change_with_its_sign_whatever_the_baseline_sign() -> None:
    rule = ToleranceRule("simul.speculation_gain_bleu", max_drop=1.0)
    cases = ((0.5, -0.5), (-1.0, -0.5), (1.1, 1.0), (1.0, 0.0), (1.0, None), (math.nan, 1.0))
    change = [relative_change(Check("j", "m", new, base, "r", rule, None)) for new, base in cases]
    assert change[:3] == [2.0, -1.0, pytest.approx(0.1)] and change[3:] == [None, None, None]


def test_the_plot_names_what_it_cannot_draw_instead_of_saying_there_is_no_baseline() -> None:
    from matplotlib import image

    rule = ToleranceRule("asr.wer", max_rise=0.01)
    checks = [Check("asr", "asr.wer", math.inf, 0.2, "r", rule, "rose"),
              Check("g", "graph.test_unseen_rate", 0.05, 0.0, "r", rule, "rose")]
    with write_plot(checks) as empty, write_plot([]) as nothing:
        drawn, blank = image.imread(empty), image.imread(nothing)
    assert drawn.shape != blank.shape or (drawn != blank).any()  # a title names both, not the placeholder

