"""An MLflow server that goes down in the middle of a run loses nothing: the run continues offline into its
journal and `specbench sync` sends the rest to the same run once the server is back; a server that is down
from the start gets the whole run at sync."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from specbench.cli import main
from specbench.tracking.runs import TrackedRun
from specbench.tracking.ui import free_port

pytestmark = [pytest.mark.integration, pytest.mark.isolated]


def _start(tmp: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "specbench", "server", "--store", str(tmp / "m.db"),
                             "--artifacts", str(tmp / "art"), "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, encoding="utf-8", start_new_session=True)
    assert "http://127.0.0.1" in proc.stdout.readline()
    return proc


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def test_outage_mid_run_and_from_the_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))  # the journal folder of this test
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    server = _start(tmp_path, port)
    with TrackedRun("outage", "mid-run", uri) as run:
        run.log_metrics({"before": 1.0})
        _stop(server)
        run.log_metrics({"after": 2.0}, step=3)
        run.log_text("kept", "note.txt")
        run_id = run.run_id
    err = capsys.readouterr().err
    assert "unreachable" in err and "specbench sync" in err
    with TrackedRun("outage", "down-at-start", uri) as late:
        late.log_params({"k": 3})
        late.log_metrics({"bleu": 30.5})
    assert late.run_id.startswith("offline-")
    assert main(["sync"]) == 2 and "still unreachable" in capsys.readouterr().err  # still down: kept
    server = _start(tmp_path, port)
    try:
        assert main(["sync"]) == 0
        out = capsys.readouterr().out
        assert run_id in out and out.count("operations sent") == 2
        client = mlflow.MlflowClient(tracking_uri=uri)
        first = client.get_run(run_id)
        assert first.data.metrics == {"before": 1.0, "after": 2.0} and first.info.status == "FINISHED"
        assert [a.path for a in client.list_artifacts(run_id)] == ["note.txt"]
        (second,) = [r for r in client.search_runs([first.info.experiment_id]) if r.info.run_name == "down-at-start"]
        assert second.data.metrics["bleu"] == 30.5 and second.data.params["k"] == "3"
        assert main(["sync"]) == 0 and "nothing to send" in capsys.readouterr().out
    finally:
        _stop(server)
    assert not list((tmp_path / "home").rglob("*.jsonl"))
