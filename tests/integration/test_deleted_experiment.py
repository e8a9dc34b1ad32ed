"""A job whose MLflow experiment was deleted in the UI (MLflow keeps it, in the `deleted` stage, and its name
until it is purged) is a specbench error naming `[tracking] experiment` and the fixes, not an MlflowException
traceback; restoring it as the message says lets the job log again. A real SQLite store."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest

from specbench.cli import main
from specbench.errors import SpecbenchError
from specbench.tracking.runs import DeletedExperiment, TrackedRun

pytestmark = [pytest.mark.integration, pytest.mark.isolated]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    return f"sqlite:///{tmp_path / 'm.db'}"


def test_a_deleted_experiment_is_named_with_its_fixes_and_restoring_it_works(store: str) -> None:
    with TrackedRun("speech", "first", store):
        pass
    client = mlflow.MlflowClient(tracking_uri=store)
    exp_id = client.get_experiment_by_name("speech").experiment_id
    client.delete_experiment(exp_id)
    with pytest.raises(DeletedExperiment) as info:
        TrackedRun("speech", "second", store)
    said = str(info.value)
    for part in ('[tracking] experiment = "speech"', f"mlflow experiments restore --experiment-id {exp_id}",
                 f"mlflow gc --backend-store-uri {store} --experiment-ids {exp_id}", store):
        assert part in said, said
    client.restore_experiment(exp_id)  # what `mlflow experiments restore` does
    with TrackedRun("speech", "third", store) as run:
        run.log_metrics({"x": 1.0})
    assert client.get_run(run.run_id).info.status == "FINISHED"


def test_specbench_run_into_a_deleted_experiment_is_one_error_line(
        store: str, capsys: pytest.CaptureFixture[str]) -> None:
    client = mlflow.MlflowClient(tracking_uri=store)
    exp_id = client.create_experiment("speech")
    client.delete_experiment(exp_id)
    assert main(["--tracking-uri", store, "run", str(ROOT / "jobs" / "speech_quick.toml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith('specbench: error: [tracking] experiment = "speech": the MLflow experiment'), err
    assert "Traceback" not in err and f"--experiment-id {exp_id}" in err
    assert client.search_runs([exp_id]) == []  # nothing was logged into it


def test_an_experiment_whose_artifacts_a_server_keeps_is_refused_on_the_local_store(store: str) -> None:
    """Made through `specbench server` over the same SQLite file, its artifact location is mlflow-artifacts:,
    which only the server can write."""
    client = mlflow.MlflowClient(tracking_uri=store)
    client.create_experiment("viahttp", artifact_location="mlflow-artifacts:/1")
    with pytest.raises(SpecbenchError, match='experiment = "viahttp": its artifacts .* Fix: log through that'):
        TrackedRun("viahttp", "local", store)
