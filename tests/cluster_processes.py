"""Processes that integration tests start and stop themselves: `ray start` clusters of their own (free ports,
stopping only their processes) and a `specbench server` on a store of its own."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specbench.tracking.ui import free_port

RAY = str(Path(sys.executable).with_name("ray"))


def unused_ports(count: int, rng: random.Random) -> list[int]:
    """`count` distinct ports that are free now, between Ray's worker ports (10002-19999) and the kernel's
    ephemeral range (32768 and up), which the other tests' clusters draw from all the time: the session's
    local Ray holds Ray's default ports, and its connections and bind-to-0 servers take ephemeral ones."""
    ports: list[int] = []
    while len(ports) < count:
        port = rng.randrange(20000, 32768)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if port not in ports:
            ports.append(port)
    return ports


def start_head(env: dict[str, str], temp: Path, attempts: int = 3) -> str:
    """`ray start --head` on ports of its own; the dashboard's address. A port can still be taken between
    the check and Ray's bind (the integration tests beside this module start processes all the time), so a
    start that fails is cleaned up and tried again on new ports; the last failure's output is the error."""
    rng = random.Random(os.getpid())
    for _ in range(attempts):
        gcs, dashboard, listen, grpc, metrics, runtime_env, client = unused_ports(7, rng)
        cmd = [RAY, "start", "--head", "--port", str(gcs), "--dashboard-host", "127.0.0.1",
               "--dashboard-port", str(dashboard), "--dashboard-agent-listen-port", str(listen),
               "--dashboard-agent-grpc-port", str(grpc), "--metrics-export-port", str(metrics),
               "--runtime-env-agent-port", str(runtime_env), "--ray-client-server-port", str(client),
               "--num-cpus", "2", "--num-gpus", "0", "--temp-dir", str(temp), "--disable-usage-stats"]
        started = subprocess.run(cmd, env=env, capture_output=True, text=True, encoding="utf-8", timeout=180,
                                 check=False)
        if started.returncode == 0:
            return f"http://127.0.0.1:{dashboard}"
        said = started.stdout[-2000:] + started.stderr[-2000:] + "".join(
            f.read_text(errors="replace")[-1500:] for f in temp.glob("session_latest/logs/*.err"))
        stop_cluster(temp)
    raise RuntimeError(f"`ray start --head` failed {attempts} times; the last one said:\n{said}")


def stop_cluster(temp: Path) -> None:
    """Stop only one cluster's processes (those whose command line names its temp dir), then remove the dir:
    `ray stop` would also stop the session's local Ray of other tests."""
    mine = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if str(temp).encode() in (entry / "cmdline").read_bytes():
                mine.append(int(entry.name))
        except OSError:
            continue
    # Ray's GCS server and raylet outlive a SIGTERM by far more than a test should wait: 3 s, then SIGKILL
    for sig, grace in ((signal.SIGTERM, 3), (signal.SIGKILL, 15)):
        for pid in mine:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(running(pid) for pid in mine):
            time.sleep(0.2)
    shutil.rmtree(temp, ignore_errors=True)


def running(pid: int) -> bool:
    """Whether `pid` still runs: a zombie has exited (`ray start` daemonizes, and in a container nobody may
    reap it), so waiting for its /proc entry to go would wait for nothing."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@contextmanager
def specbench_server(folder: Path) -> Iterator[str]:
    """A real MLflow server (`specbench server`) on a SQLite store and artifact folder under `folder`; yields
    its address and stops it (SIGTERM) on the way out."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "specbench", "server", "--store", str(folder / "m.db"),
                             "--artifacts", str(folder / "art"), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, encoding="utf-8",
                            start_new_session=True)
    try:
        assert "http://127.0.0.1" in proc.stdout.readline()
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
