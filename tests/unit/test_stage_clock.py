"""A stage's wall time adds up over its blocks, and a block that raises still counts."""

from __future__ import annotations

import time

import pytest

from specbench.experiments.stage_clock import clock, stage_printer


def test_a_stage_adds_up_its_blocks_and_counts_one_that_raises() -> None:
    timings: dict[str, float] = {}
    for _ in range(2):
        with clock(timings, "decode"):
            time.sleep(0.02)
    with pytest.raises(ValueError), clock(timings, "score"):
        time.sleep(0.01)
        raise ValueError("bad row")
    assert set(timings) == {"decode", "score"}
    assert timings["decode"] >= 0.04 and timings["score"] >= 0.01
    assert timings["decode"] < 5 and timings["score"] < 5


def test_a_graph_build_prints_each_stage_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    step = stage_printer("graph sphinx")
    step("composing L o G")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("[graph sphinx ")
    assert captured.err.endswith("s] composing L o G\n")
