"""The nightly: a real graph job run twice against a real MLflow store (each nightly a parent run with the job
as a nested child run), a baseline, a tolerance that holds and one that breaks, the report artifacts, and the
errors raised before anything runs."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest

from specbench.cli import main
from specbench.config import ToleranceRule
from specbench.experiments.nightly import judge

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

NIGHTLY = """kind = "nightly"
name = "nightly_test"
jobs = ["{graph}"]
[[tolerance]]
metric = "graph.states"
max_drop = 0
max_rise = 0
[[tolerance]]
metric = "graph.arcs"
{arcs_rule}
[[tolerance]]
metric = "graph.ppl_test"
max_rise = 0.5
{unseen}
[tracking]
experiment = "nightly_test"
"""
UNSEEN = """[[tolerance]]
metric = "graph.test_unseen_rate"
max_rise = 0.001"""


def _write(tmp: Path, arcs_rule: str, unseen: str = UNSEEN) -> Path:
    path = tmp / "nightly.toml"
    path.write_text(NIGHTLY.format(graph=ROOT / "jobs" / "graph_slurp.toml", arcs_rule=arcs_rule, unseen=unseen))
    return path


def test_judge_rules() -> None:
    assert judge(ToleranceRule("m", max_drop=0.01), 0.95, 0.955) is None
    assert "fell by" in judge(ToleranceRule("m", max_drop=0.01), 0.9, 0.95)
    assert "rose by" in judge(ToleranceRule("m", max_rise=0.5), 56.6, 56.0)
    assert "below the minimum" in judge(ToleranceRule("m", min=1.0), 0.99, None)
    assert judge(ToleranceRule("m", max_drop=1.0), 3.0, None) is None
    with pytest.raises(ValueError, match="none of"):
        ToleranceRule("m")


def test_nightly_passes_then_names_a_regression(tmp_path: Path, slurp_graph: object,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["--tracking-uri", uri, "nightly", str(_write(tmp_path, "max_drop = 0"))]) == 0
    out = capsys.readouterr().out
    assert "ok (no baseline)" in out and "graph.arcs" in out
    mlflow.set_tracking_uri(uri)
    (parent,) = mlflow.search_runs(experiment_names=["nightly_test"], filter_string="tags.kind = 'nightly'",
                                   output_format="list")
    (first,) = mlflow.search_runs(experiment_names=["nightly_test"], filter_string="tags.kind = 'graph'",
                                  output_format="list")  # the job: a child run of the nightly's parent run
    assert first.data.tags["suite"] == "nightly" and first.data.tags["nightly.id"]
    assert first.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert parent.data.metrics["graph.arcs"] == first.data.metrics["graph.arcs"]
    assert "graph.arcs" in parent.data.tags["mlflow.note.content"]
    assert main(["--tracking-uri", uri, "baseline", "set", first.info.run_id]) == 0
    arcs = int(first.data.metrics["graph.arcs"])
    code = main(["--tracking-uri", uri, "nightly", str(_write(tmp_path, f"max_drop = 0\nmin = {arcs + 1}"))])
    captured = capsys.readouterr()
    assert code == 2
    assert "graph.arcs" in captured.err and f"baseline {arcs:,}" in captured.err  # a count printed in full
    assert f"{arcs:,} is below the minimum {arcs + 1:,}" in captured.err
    reports = mlflow.search_runs(experiment_names=["nightly_test"], filter_string="tags.kind = 'nightly'",
                                 output_format="list", order_by=["attributes.start_time DESC"])
    latest = reports[0]  # the second nightly's parent run holds the report and ends FAILED
    assert latest.data.metrics["nightly.regressions"] == 1.0 and latest.info.status == "FAILED"
    names = {a.path for a in mlflow.MlflowClient().list_artifacts(latest.info.run_id)}
    assert {"regression_report.md", "regression_report.html", "regression_report.png"} <= names


def test_missing_tolerance_or_baseline_fails_before_anything(tmp_path: Path, slurp_graph: object,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["--tracking-uri", uri, "nightly", str(_write(tmp_path, "max_drop = 0", unseen=""))]) == 2
    err = capsys.readouterr().err
    assert "graph.test_unseen_rate" in err and "[[tolerance]]" in err
    mlflow.set_tracking_uri(uri)
    assert mlflow.search_runs(search_all_experiments=True, output_format="list") == []
    assert main(["--tracking-uri", uri, "baseline", "set", "f" * 32]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_change_of_metrics_version_resets_the_baseline_with_the_reason(tmp_path: Path, slurp_graph: object,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Runs of another `metrics.version` are not baselines: the first nightly after a change compares with
    nothing, says why, and tags its job run with the reason; the next nightly compares with that run."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    nightly = _write(tmp_path, "max_drop = 0\nmax_rise = 0")
    assert main(["--tracking-uri", uri, "nightly", str(nightly)]) == 0
    client = mlflow.MlflowClient(uri)
    mlflow.set_tracking_uri(uri)
    (first,) = mlflow.search_runs(experiment_names=["nightly_test"], filter_string="tags.kind = 'graph'",
                                  output_format="list")
    assert first.data.tags["metrics.version"] == "1"
    client.set_tag(first.info.run_id, "metrics.version", "0")  # as if logged before the metrics changed
    capsys.readouterr()
    assert main(["--tracking-uri", uri, "nightly", str(nightly)]) == 0
    out = capsys.readouterr().out
    assert "baseline reset for graph-slurp (metrics version 1" in out and "ok (no baseline)" in out
    second = mlflow.search_runs(experiment_names=["nightly_test"], filter_string="tags.kind = 'graph'",
                                output_format="list", order_by=["attributes.start_time DESC"])[0]
    assert second.data.tags["baseline.reason"].startswith("metrics version 1")
    assert main(["--tracking-uri", uri, "nightly", str(nightly)]) == 0
    out = capsys.readouterr().out
    assert "baseline reset" not in out and f"baseline {int(second.data.metrics['graph.arcs']):,}" in out
