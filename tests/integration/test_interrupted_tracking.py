"""Interrupted logging against a real MLflow server (`specbench server` on a SQLite store), reached through a
small HTTP proxy that the test controls: it forwards every request to the server until told that the server
is down (it then answers 503, as a reverse proxy before a stopped server does) or to hold one request (a
server that hangs).

- `specbench sync` that the server fails half-way, after it created the run and sent some operations, is
  resumed by the next sync: still one run, ended FINISHED or FAILED as the journal says, every metric once.
- `specbench run` stopped by SIGTERM while its run is open ends that run FAILED (not RUNNING for ever).
- A nightly whose server goes down between a job and its baseline lookup reports the job not compared.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import nullcontext
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import mlflow
import pytest
import requests
from cluster_processes import specbench_server

from specbench.cli import main
from specbench.tracking.runs import TrackedRun

pytestmark = [pytest.mark.integration, pytest.mark.isolated]
ROOT = Path(__file__).resolve().parents[2]
HOP_BY_HOP = {"host", "connection", "content-length", "accept-encoding", "keep-alive", "transfer-encoding"}


class Proxy:
    """An HTTP proxy to `upstream`. `down`: answer 503 to everything; `batches_left`: how many more
    `runs/log-batch` requests go through before it goes down (None: no limit); `hold_next_batch`: hold the
    next `runs/log-batch` request (setting `held`) until `release` is set."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.down = False
        self.batches_left: int | None = None
        self.hold_next_batch = False
        self.held = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                batch = self.path.split("?")[0].endswith("/runs/log-batch")
                with proxy.lock:
                    if batch and proxy.batches_left is not None:
                        if proxy.batches_left == 0:
                            proxy.down = True
                        proxy.batches_left -= 1
                    down = proxy.down
                    hold = batch and proxy.hold_next_batch
                    proxy.hold_next_batch = proxy.hold_next_batch and not hold
                if hold:
                    proxy.held.set()
                    proxy.release.wait(120)
                if down:
                    self._send(503, b"<html>503 Service Unavailable</html>", "text/html")
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                answer = requests.request(self.command, proxy.upstream + self.path, data=body,
                                          headers=headers, timeout=60)
                kind = answer.headers.get("Content-Type", "text/plain")
                self._send(answer.status_code, answer.content, kind)

            def _send(self, status: int, data: bytes, kind: str) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client is gone (a process stopped while its request was held)
                    pass

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.uri = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real MLflow server (`specbench server`) on a SQLite store of its own; its address."""
    with specbench_server(tmp_path_factory.mktemp("mlflow")) as uri:
        yield uri


@pytest.fixture()
def proxy(server: str) -> Iterator[Proxy]:
    p = Proxy(server)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture(autouse=True)
def _own_work_dir_and_fast_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))  # this test's journals
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # a 503 fails at once, not after minutes
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")


def _journal(tmp_path: Path) -> tuple[Path, list[dict]]:
    (path,) = (tmp_path / "home" / "journal").glob("*.jsonl")
    return path, [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("status", ["FINISHED", "FAILED"])
def test_a_sync_the_server_fails_half_way_is_resumed_on_the_same_run(
        status: str, server: str, proxy: Proxy, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    experiment = f"resume_{status.lower()}"
    proxy.down = True  # the whole run is logged offline
    with pytest.raises(RuntimeError) if status == "FAILED" else nullcontext():
        with TrackedRun(experiment, "resumed", proxy.uri) as run:
            run.log_params({"a": 1})
            run.log_metrics({"m1": 1.0})
            run.log_metrics({"m2": 2.0}, step=1)
            run.log_curve("curve", [0.1, 0.2, 0.3])
            if status == "FAILED":
                raise RuntimeError("the job broke")
    assert run.run_id.startswith("offline-")
    capsys.readouterr()

    proxy.down, proxy.batches_left = False, 2  # the server takes the run, params and m1, then goes down
    assert main(["sync"]) == 2 and "still unreachable" in capsys.readouterr().err
    path, entries = _journal(tmp_path)
    run_id = entries[0]["run_id"]
    assert entries[0]["sent"] and run_id and not run_id.startswith("offline-")
    assert [e["sent"] for e in entries[:3]] == [True, True, True] and not any(e["sent"] for e in entries[3:])
    client = mlflow.MlflowClient(tracking_uri=server)
    exp_id = client.get_experiment_by_name(experiment).experiment_id
    (partial,) = client.search_runs([exp_id])
    assert partial.info.run_id == run_id and partial.info.status == "RUNNING"
    assert partial.data.metrics == {"m1": 1.0}

    proxy.down, proxy.batches_left = False, None  # the server is back
    assert main(["sync"]) == 0
    out = capsys.readouterr().out
    assert f"{len(entries) - 3} operations sent to run {run_id}" in out
    (done,) = client.search_runs([exp_id])  # still one run: the one the first sync created
    assert done.info.run_id == run_id and done.info.status == status
    assert done.data.params == {"a": "1"}
    for key, points in (("m1", 1), ("m2", 1), ("curve", 3)):
        assert len(client.get_metric_history(run_id, key)) == points, key  # each sent once
    if status == "FAILED":
        assert done.data.tags["error"] == "RuntimeError: the job broke"
        assert [a.path for a in client.list_artifacts(run_id)] == ["error.txt"]
    assert not path.exists()
    assert main(["sync"]) == 0 and "nothing to send" in capsys.readouterr().out


def test_sigterm_during_specbench_run_ends_its_run_failed(server: str, proxy: Proxy, tmp_path: Path) -> None:
    proxy.hold_next_batch = True  # the job's first logging call (its params) hangs: the run is open
    env = dict(os.environ, SPECBENCH_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT / "platform"),
               PYTHONUTF8="1")
    job = subprocess.Popen([sys.executable, "-m", "specbench", "--tracking-uri", proxy.uri, "run",
                            str(ROOT / "jobs" / "speech_quick.toml")], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, encoding="utf-8", start_new_session=True)
    try:
        assert proxy.held.wait(180), "the job never logged its params"
        client = mlflow.MlflowClient(tracking_uri=server)
        (running,) = client.search_runs([client.get_experiment_by_name("speech").experiment_id])
        assert running.info.status == "RUNNING"
        job.send_signal(signal.SIGTERM)
        proxy.release.set()
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert job.returncode == 128 + signal.SIGTERM, out + err
    assert "specbench: interrupted (SIGTERM)" in err
    ended = client.get_run(running.info.run_id)
    assert ended.info.status == "FAILED" and ended.data.tags["error"] == "KeyboardInterrupt: SIGTERM"


def test_a_nightly_whose_server_goes_down_after_a_job_reports_it_not_compared(
        proxy: Proxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server answers while the job runs and stops answering before its baseline is looked up: the
    lookup's failure is reported as 'not compared' for every metric (a failed nightly, so no baseline is made
    of it), not a traceback that would stop the later jobs and leave no report; the rest goes to journals."""
    from specbench.experiments import graph as graph_job
    from specbench.experiments.nightly import RegressionError, run_nightly
    from specbench.experiments.registry import RunOptions, load_config

    rules = {"graph.states": "max_rise = 0\nmax_drop = 0", "graph.arcs": "max_drop = 0",
             "graph.ppl_test": "max_rise = 0.5", "graph.test_unseen_rate": "max_rise = 0.001"}
    path = tmp_path / "nightly.toml"
    path.write_text(f'kind = "nightly"\nname = "nightly_down"\njobs = ["{ROOT / "jobs" / "graph_slurp.toml"}"]\n'
                    + "".join(f'[[tolerance]]\nmetric = "{m}"\n{r}\n' for m, r in rules.items())
                    + '[tracking]\nexperiment = "nightly_down"\n')

    def graph_then_server_down(config: object, job_path: Path, run: object, opts: object) -> list[str]:
        run.log_metrics({"graph.states": 10.0, "graph.arcs": 20.0, "graph.ppl_test": 100.0,  # type: ignore[attr-defined]
                         "graph.test_unseen_rate": 0.01})
        proxy.down = True
        return ["graph logged, then the server went down"]

    monkeypatch.setattr(graph_job, "execute", graph_then_server_down)
    with pytest.raises(RegressionError) as error:
        run_nightly(path, load_config(path), RunOptions(tracking_uri=proxy.uri))
    message = str(error.value)
    assert message.count("not compared with a baseline: the tracking server could not be reached") == 4, message
    assert "graph.ppl_test (graph-slurp): baseline -, new 100: not compared" in message
    assert list((tmp_path / "home" / "journal").glob("*.jsonl"))  # what the server did not get waits for sync
