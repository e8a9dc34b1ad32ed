"""Runs logged to a real local MLflow store (SQLite + local artifacts) and read back; failures end FAILED."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from specbench.cli import main
from specbench.tracking.queries import get_run, recent_runs
from specbench.tracking.runs import TrackedRun
from specbench.tracking.store import resolve_tracking_uri
from specbench.tracking.ui import start_ui, stop

pytestmark = [pytest.mark.integration, pytest.mark.isolated]


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = resolve_tracking_uri()
    assert uri == f"sqlite:///{tmp_path / 'home' / 'mlflow.db'}"
    return uri


def test_run_logs_params_tags_metrics_steps_artifacts(store: str, tmp_path: Path) -> None:
    artifact = tmp_path / "table.csv"
    artifact.write_text("a,b\n1,2\n")
    with TrackedRun("unit-exp", "demo", tags={"suite": "nightly"}) as run:
        run.log_params({"lm.order": 3, "name": "x"})
        run.log_metrics({f"m{i}": float(i) for i in range(1500)})  # more than one batch
        run.log_curve("curve", [0.5, 0.25, 0.125], steps=[0, 10, 20])
        run.log_artifact(artifact, "tables")
        run_id = run.run_id
    client = MlflowClient(store)
    got = client.get_run(run_id)
    assert got.info.status == "FINISHED"
    assert got.data.params == {"lm.order": "3", "name": "x"}
    assert got.data.tags["suite"] == "nightly" and got.data.tags["git_commit"] and got.data.tags["host"]
    assert len([k for k in got.data.metrics if k.startswith("m")]) == 1500
    history = client.get_metric_history(run_id, "curve")
    assert [(m.step, m.value) for m in history] == [(0, 0.5), (10, 0.25), (20, 0.125)]
    assert [f.path for f in client.list_artifacts(run_id, "tables")] == ["tables/table.csv"]
    local = Path(client.download_artifacts(run_id, "tables/table.csv", str(tmp_path / "dl")))
    assert local.read_text() == "a,b\n1,2\n"
    assert str(tmp_path / "home" / "mlartifacts") in got.info.artifact_uri


def test_a_job_that_raises_ends_failed_with_the_error(store: str) -> None:
    with pytest.raises(RuntimeError):
        with TrackedRun("unit-exp", "boom") as run:
            run_id = run.run_id
            raise RuntimeError("the decoder exploded")
    row = get_run(run_id)
    assert row.status == "FAILED"
    assert row.tags["error"] == "RuntimeError: the decoder exploded"
    client = MlflowClient(store)
    assert "error.txt" in [f.path for f in client.list_artifacts(run_id)]


def test_cli_bad_data_ends_run_failed_and_exit_nonzero(store: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SPECBENCH_DATA", str(tmp_path / "no-data"))
    job = tmp_path / "graph.toml"
    job.write_text('kind = "graph"\nname = "nodata"\n[tracking]\nexperiment = "graph-test"\n')
    assert main(["run", str(job)]) == 2
    err = capsys.readouterr().err
    assert "specbench: error:" in err and "SPECBENCH_DATA" in err and "Traceback" not in err
    rows = recent_runs(experiment="graph-test")
    assert [r.status for r in rows] == ["FAILED"]
    assert "does not exist" in rows[0].tags["error"]


def test_runs_table_and_ui(store: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with TrackedRun("graph", "graph-slurp") as run:
        run.log_metrics({"graph.states": 1234.0, "graph.ppl_test": 42.5, "other": 1.0})
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    assert run.run_id[:12] in out and "graph.states=1,234" in out and "graph.ppl_test=42.5" in out
    assert "other" not in out
    proc, address = start_ui(log_path=tmp_path / "ui.log")
    try:
        assert address.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{address}/health", timeout=10) as resp:
            assert resp.status == 200
        url = f"{address}/api/2.0/mlflow/runs/get?run_id={run.run_id}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert b"graph.states" in resp.read()
    finally:
        stop(proc)
    assert proc.poll() is not None


def test_ui_refuses_a_port_in_use(store: str) -> None:
    import socket

    from specbench.errors import SpecbenchError

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        with pytest.raises(SpecbenchError, match="already in use"):
            start_ui(port=busy.getsockname()[1])
