"""The Prometheus metric names of running jobs, checked against the Grafana dashboards that query them, and
the recording helper outside Ray (a no-op, as in a plain-loop run; Ray is imported, never started)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specbench.runtime import metrics

pytestmark = pytest.mark.unit
DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards"


def test_the_exported_names_are_the_ones_the_dashboards_query() -> None:
    queried = set()
    for board in DASHBOARDS.glob("*.json"):
        queried |= set(re.findall(r"ray_specbench_[a-z_]+", board.read_text(encoding="utf-8")))
    # Prometheus adds _total to counters
    queried = {q.removesuffix("_total") for q in queried if q != "ray_specbench_"}
    names = metrics.metric_names()
    assert names == sorted(names) and len(names) == len(set(names)) == 9
    assert set(names) == queried


def test_recording_outside_ray_is_a_no_op() -> None:
    import ray

    if ray.is_initialized():
        pytest.skip("Ray was started by another test in this process")
    metrics.record({"utterances_decoded": 3, "frames_per_second": 120.0}, job="j", stage="s")
    metrics.record({"not_a_metric": 1.0})  # nothing is made outside Ray, so nothing is looked up
    assert not ray.is_initialized()
    with pytest.raises(ValueError, match=r"unknown metric 'not_a_metric'; known: active_tokens, beam_narrowings"):
        metrics._metric("not_a_metric")
