"""`specbench server`: a real MLflow server process on 127.0.0.1 with a SQLite store; a run logged over HTTP
keeps its artifact in the server's artifact folder; SIGTERM stops the server and its workers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from specbench.cli import main
from specbench.tracking.journal import Journal, writer
from specbench.tracking.runs import TrackedRun
from specbench.tracking.ui import free_port

pytestmark = [pytest.mark.integration, pytest.mark.isolated]


def test_server_serves_runs_and_artifacts_then_stops(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "specbench", "server", "--store", str(tmp_path / "m.db"),
                             "--artifacts", str(tmp_path / "art"), "--port", str(port), "--host", "0.0.0.0",
                             "--allowed-hosts", "mlflow.example.com"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, encoding="utf-8",
                            start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert f"--tracking-uri http://{socket.gethostname()}:{port}" in line, line
        url = f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search?max_results=1"
        assert [requests.get(url, headers={"Host": f"{name}:{port}"}, timeout=30).status_code for name in
                ("mlflow.example.com", socket.gethostname(), "example.org")] == [200, 200, 403]
        assert main(["--tracking-uri", f"http://127.1:{port}", "runs"]) == 2  # 127.0.0.1, a name not allowed
        assert "403). Fix: start it with `specbench server --allowed-hosts 127.1`" in capsys.readouterr().err
        monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))  # a journal for that name: sync says so too
        kept = Journal()
        kept.add({"op": "create", "tracking_uri": f"http://127.1:{port}", "experiment": "e", "run_name": "j",
                  "tags": {}, "start_ms": 1_700_000_000_000, "run_id": None, **writer()}, sent=False)
        kept.add({"op": "end", "status": "FINISHED", "end_ms": 1_700_000_000_001}, sent=False)  # not being written
        assert main(["sync"]) == 2 and kept.path.is_file()
        assert "refuses the host name '127.1' (HTTP 403); the journal is kept" in capsys.readouterr().err
        with TrackedRun("server_test", "r", f"http://127.0.0.1:{port}") as run:
            run.log_metrics({"x": 1.0})
            run.log_text("hello", "note.txt")
        stored = list((tmp_path / "art").rglob("note.txt"))
        assert len(stored) == 1 and stored[0].read_text() == "hello"
        assert (tmp_path / "m.db").stat().st_size > 0
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # the server's workers are gone too
