"""Start the MLflow UI (a tracking server process) for a store, bound to 127.0.0.1 by default, and stop it:
the server and its uvicorn workers run in their own process group, which `stop` ends as a whole."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.tracking.store import local_artifact_root, resolve_tracking_uri


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 90.0) -> None:
    """Poll `url/health` until it answers; raise with the server's output if it exits or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SpecbenchError(f"the MLflow server exited with code {proc.returncode} before answering at {url}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise SpecbenchError(f"the MLflow server did not answer at {url}/health within {timeout:.0f} s")


def start_ui(tracking_uri: str | None = None, host: str = "127.0.0.1", port: int = 0,
             log_path: Path | None = None, artifacts: Path | None = None) -> tuple[subprocess.Popen, str]:
    """Start `mlflow server` on the store with lean settings (one worker, no job execution); returns
    (process, address) once healthy. With a SQLite store it also serves artifacts (`--artifacts-destination`,
    default `.specbench/mlartifacts`), so clients and Ray workers upload them over HTTP."""
    uri = resolve_tracking_uri(tracking_uri)
    if port:
        with socket.socket() as probe:
            if probe.connect_ex((host, port)) == 0:
                raise SpecbenchError(f"port {port} on {host} is already in use (another MLflow UI?). "
                                     "Fix: pass --port with a free port.")
    port = port or free_port(host)
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host", host,
           "--port", str(port), "--workers", "1"]
    if uri.startswith("sqlite:"):
        cmd += ["--artifacts-destination", str(artifacts or local_artifact_root())]
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - the child keeps it
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        if log_path:
            out.close()  # type: ignore[union-attr]
    address = f"http://{host}:{port}"
    try:
        wait_healthy(address, proc)
    except BaseException:
        stop(proc)
        raise
    return proc, address


def stop(proc: subprocess.Popen, timeout: float = 15.0) -> None:
    """Stop the server and its workers (its own process group): SIGTERM to the group, wait up to `timeout`
    seconds for every process of the group to end, then SIGKILL what is left."""
    pgid = proc.pid  # start_ui starts it as the leader of a new session, hence of its own group
    if proc.poll() is not None and not _group_alive(pgid):
        return
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None and not _group_alive(pgid):
            return
        time.sleep(0.1)
    _signal_group(pgid, signal.SIGKILL)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (zombies, which hold no port, do not count)."""
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc_dir.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it ended meanwhile
        if int(fields[2]) == pgid and fields[0] != "Z":  # fields after the name: state, ppid, pgrp, ...
            return True
    return False


@contextmanager
def interrupted_by_signals() -> Iterator[None]:
    """Within: the first SIGTERM or SIGINT raises KeyboardInterrupt (so that the caller stops its server
    with `stop`); later ones are ignored while it stops (`stop` escalates to SIGKILL on its own). The
    previous handlers come back on exit."""
    fired = False

    def handler(signum: int, frame: object) -> None:
        nonlocal fired
        if not fired:
            fired = True
            raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
