"""Prometheus metrics through Ray's metrics API: a real decoding stage on Ray and real Ray tasks, then a
scrape of the node's metrics endpoint must hold every metric the Grafana dashboards query."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pytest

from specbench.decoder.stage import DecoderStage
from specbench.experiments.graph_recipe import GraphArtifacts

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def dashboard_metrics() -> set[str]:
    names = set()
    for path in (ROOT / "dashboards").glob("*.json"):
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel["targets"]:
                names |= set(re.findall(r"\bray_specbench_[a-z_]+", target["expr"]))
    return names


def scrape_names(port: int) -> set[str]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line.startswith("ray_specbench_")}


def test_every_dashboard_metric_is_exported_by_a_real_job(ray_cluster: object, slurp_graph: GraphArtifacts,
                                                          real_test_scores: list) -> None:
    import ray

    from specbench.runtime import run_ray, run_tasks
    from specbench.runtime.metrics import metric_names, record

    wanted = dashboard_metrics()
    assert len(wanted) >= 8
    exported = {n for n in metric_names()} | {f"{n}_total" for n in metric_names()}
    assert wanted <= exported, wanted - exported  # the dashboards ask only for names we define
    items = real_test_scores[:6]
    table = pa.table({"utt_id": [u for u, _ in items], "num_frames": [len(m) for _, m in items],
                      "num_classes": [m.shape[1] for _, m in items],
                      "loglikes": [m.reshape(-1) for _, m in items]})
    out = run_ray(DecoderStage(slurp_graph.tlg, "cpu", beam=15.0, max_active=150), table, batch_size=3,
                  mode="actors", num_actors=1)
    assert set(out.column("status").to_pylist()) == {"ok"}
    assert sum(out.column("beam_narrowings").to_pylist()) > 0
    from stages_for_tests import translated_metrics

    run_tasks(sorted, [[2, 1], [3]], metrics=translated_metrics)
    for outcome, count in (("success", 3), ("failure", 1), ("none", 2)):  # as the predictive-ASR driver does
        record({"prefetch_outcomes": count}, job="predictive_asr_test", outcome=outcome)
    port = ray.nodes()[0]["MetricsExportPort"]
    deadline, seen = time.monotonic() + 90, set()
    while time.monotonic() < deadline:
        seen = scrape_names(port)
        if wanted <= seen:
            break
        time.sleep(2)
    assert wanted <= seen, f"not exported: {sorted(wanted - seen)}"
