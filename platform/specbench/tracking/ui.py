"""Start the MLflow UI (a tracking server process) for a store, bound to 127.0.0.1 by default, and stop it:
the server and its uvicorn workers run in their own process group, which `stop` ends as a whole."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.tracking.store import check_artifact_root, local_artifact_root, resolve_tracking_uri

PORTS = "a whole number from 1 to 65535"  # what --port takes (`is_port`), as error messages say it


def is_port(value: int) -> bool:
    """Whether `value` is a TCP port a server can be asked to listen on (1 to 65535)."""
    return 1 <= value <= 65535


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


def http_address(host: str, port: int) -> str:
    """The URL of a server on `host`:`port`, an IPv6 literal in brackets (`http://[::1]:5000`)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def start_ui(tracking_uri: str | None = None, host: str = "127.0.0.1", port: int = 0,
             log_path: Path | None = None, artifacts: Path | None = None,
             store_option: str = "--tracking-uri", allowed: str | None = None
             ) -> tuple[subprocess.Popen, str]:
    """Start `mlflow server` on the store with lean settings (one worker, no job execution); returns
    (process, address) once healthy (`server_command` says with which arguments).

    The host, port and artifact folder are checked first (SpecbenchError naming --host, --port or
    --artifacts); a server that exits before it answers raises with its last lines of output, naming
    `store_option` (the option that chose the store). The output goes to `log_path` when given."""
    uri = resolve_tracking_uri(tracking_uri)
    check_bind_address(host, port)
    port = port or free_port(host)
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    cmd = server_command(uri, host, port, artifacts, allowed)
    out = open(log_path, "ab") if log_path else subprocess.PIPE  # noqa: SIM115 - the child keeps it
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        if log_path:
            out.close()  # type: ignore[union-attr]
    address = http_address(host, port)
    try:
        _keep_tail(proc, log_path)  # inside: a signal from here on stops the server it started
        wait_healthy(address, proc)
    except SpecbenchError as err:
        stop(proc)
        said = output_tail(proc)
        told = f"; its last output:\n{said}" if said else ""
        raise SpecbenchError(f"{err} (store {uri}, from {store_option}){told}\nFix: check the store "
                             f"({store_option}): it must be one `mlflow server` can open; and the --host and "
                             "--port.") from err
    except BaseException:
        stop(proc)
        raise
    return proc, address


def server_command(uri: str, host: str, port: int, artifacts: Path | None = None,
                   allowed: str | None = None) -> list[str]:
    """The `mlflow server` command line for the store `uri`. The server serves artifacts, so clients and Ray
    workers upload them over HTTP, kept in `artifacts` (`--artifacts-destination`, which MLflow takes with any
    backend store; checked: created if missing, writable), by default `.specbench/mlartifacts` for a SQLite
    store and MLflow's own default (`./mlartifacts`) for any other. It answers MLflow's default host names and,
    off loopback or with `allowed` (A,B), those and this machine's."""
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host", host,
           "--port", str(port), "--workers", "1"]
    if artifacts is not None:
        cmd += ["--artifacts-destination", str(check_artifact_root(artifacts))]
    elif uri.startswith("sqlite:"):
        cmd += ["--artifacts-destination", str(local_artifact_root())]
    if allowed is not None or not host.startswith(("127.", "localhost", "::1")):
        names = [host, socket.gethostname(), socket.getfqdn(), *(allowed or "").split(",")]
        with suppress(OSError):
            names += socket.gethostbyname_ex(names[1])[2]
        names = [n if ":" in n or "*" in n else f"{n},{n}:*" for n in map(str.strip, names) if n]  # any port
        from mlflow.server.security_utils import get_default_allowed_hosts  # what --allowed-hosts replaces

        cmd += ["--allowed-hosts", ",".join([*get_default_allowed_hosts(), *names])]
    return cmd


def check_bind_address(host: str, port: int) -> None:
    """Raise a SpecbenchError naming --host or --port unless `host` resolves to an address of this machine
    that `port` (0: any free one) can be bound on, and no server answers there already."""
    if port != 0 and not is_port(port):
        raise SpecbenchError(f"--port {port}: not a port. Fix: give {PORTS} (default 5000).")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        why = getattr(err, "strerror", None) or err
        raise SpecbenchError(f"--host {host!r}: the name does not resolve ({why}). Fix: give an address of this "
                             "machine, e.g. 127.0.0.1 (the default: this machine only).") from err
    family, _, _, _, sockaddr = infos[0]
    in_use = SpecbenchError(f"port {port} on {host} is already in use (another MLflow UI?). Fix: pass --port "
                            "with a free port.")
    with socket.socket(family, socket.SOCK_STREAM) as probe:  # first: is it an address of this machine?
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(sockaddr)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise in_use from err
            raise SpecbenchError(f"--host {host!r} --port {port}: cannot listen there ({err.strerror}). Fix: "
                                 "give an address of this machine (e.g. 127.0.0.1, the default) and a free "
                                 "port from 1024 to 65535.") from err
    if port:
        with socket.socket(family, socket.SOCK_STREAM) as probe:  # a server bound elsewhere on this port
            probe.settimeout(2.0)
            if probe.connect_ex(sockaddr) == 0:
                raise in_use


_TAIL_LINES = 80


def _keep_tail(proc: subprocess.Popen, log_path: Path | None) -> None:
    """Keep the server's last lines of output for `output_tail`: read from its pipe by a daemon thread (which
    drains it for as long as the server runs), or later from `log_path`."""
    lines: deque[str] = deque(maxlen=_TAIL_LINES)
    proc.specbench_tail = (lines, log_path, None)  # type: ignore[attr-defined]
    if proc.stdout is None:
        return

    def drain() -> None:
        for raw in proc.stdout:  # type: ignore[union-attr]
            lines.append(raw.decode("utf-8", errors="replace").rstrip())

    reader = threading.Thread(target=drain, name="mlflow-server-output", daemon=True)
    reader.start()
    proc.specbench_tail = (lines, log_path, reader)  # type: ignore[attr-defined]


def output_tail(proc: subprocess.Popen) -> str:
    """The server's last lines of output (indented), as far as they were kept; '' when none."""
    lines, log_path, reader = getattr(proc, "specbench_tail", (deque(), None, None))
    if reader is not None:
        reader.join(timeout=2.0)  # the server has ended: its last lines are on their way
    if log_path is not None:
        try:
            lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-_TAIL_LINES:]
        except OSError:
            lines = []
    return "\n".join(f"  {line}" for line in _told(list(lines)))


_TOLD_LINES = 6
_TRACEBACK_NOISE = ("Traceback (most recent call last)", "The above exception", "During handling of the above")


def _told(lines: list[str]) -> list[str]:
    """The last few lines that say something: a traceback's frames (indented lines) and headers left out."""
    said = [line for line in lines
            if line.strip() and not line[:1].isspace() and not line.startswith(_TRACEBACK_NOISE)]
    return (said or [line for line in lines if line.strip()])[-_TOLD_LINES:]


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
