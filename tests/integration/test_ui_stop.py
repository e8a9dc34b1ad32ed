"""`specbench ui` as a real process on a free port with a temporary SQLite store: SIGTERM or SIGINT stops it
and the MLflow server with its uvicorn workers; nothing holds the port afterwards and no child is left."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from specbench.tracking.ui import free_port

pytestmark = [pytest.mark.integration, pytest.mark.isolated]


def _processes() -> dict[int, tuple[int, int, str]]:
    """{pid: (ppid, pgid, state)} of every process, from /proc."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(stat.parent.name)] = (int(fields[1]), int(fields[2]), fields[0])
    return table


def _descendants(pid: int) -> set[int]:
    table = _processes()
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, (ppid, _, _) in table.items() if ppid in frontier} - found
        found |= frontier
    return found


def _running(pids: set[int]) -> set[int]:
    table = _processes()
    return {p for p in pids if p in table and table[p][2] != "Z"}


def _port_answers(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store for both signals, made here: `ui` reads an existing store (it refuses to create one)."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("ui-stop")
    MlflowClient(f"sqlite:///{path / 'mlflow.db'}").search_experiments()  # creates the store's tables
    return path


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process table from /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_ui_and_its_workers(signum: int, home: Path) -> None:
    port = free_port()
    env = dict(os.environ, SPECBENCH_HOME=str(home))
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.Popen([sys.executable, "-m", "specbench", "--tracking-uri",
                             f"sqlite:///{home / 'mlflow.db'}", "ui", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, encoding="utf-8",
                            env=env, start_new_session=True)
    children: set[int] = set()
    try:
        line = proc.stdout.readline()  # printed once the server answers /health
        assert f"http://127.0.0.1:{port}" in line, line + proc.stdout.read()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as resp:
            assert resp.status == 200
        children = _descendants(proc.pid)
        groups = {_processes()[p][1] for p in _running(children)}
        assert children and proc.pid not in groups  # the server runs in a process group of its own
        proc.send_signal(signum)
        code = proc.wait(timeout=60)
        assert code == 0, proc.stdout.read()
        deadline = time.monotonic() + 5
        while (_running(children) or _port_answers(port)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(children), f"left running: {_running(children)}"
        leftover = {p for p, (_, pgid, state) in _processes().items() if pgid in groups and state != "Z"}
        assert not leftover, f"still in the server's process group: {leftover}"
        assert not _port_answers(port)
        with socket.socket() as s:  # the port can be bound again
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
    finally:
        for pid in _running(children | {proc.pid}):  # a failed test leaves nothing behind
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()
