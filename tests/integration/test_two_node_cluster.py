"""A real two-node Ray cluster on one machine: two network namespaces joined by a veth pair (root, iproute2),
the Ray head and `specbench server` in one, a Ray worker in the other inside its own mount namespace where
the checkout, the data folder and the MLflow store are hidden. A job submitted through the Jobs API must run
tasks on both nodes, upload its artifacts to the server over HTTP, and give the results of a local run. The
cluster lives in its own network namespaces, and the job and the local run each work in a work directory of
their own (`specbench submit` passes its SPECBENCH_HOME to the job), so the module runs beside the other
integration tests (`isolated`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import mlflow
import pytest

from specbench.cli import main
from specbench.data.resolver import data_dir

pytestmark = [pytest.mark.integration, pytest.mark.isolated]
ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
HEAD_IP, WORKER_IP = "10.77.0.1", "10.77.0.2"
GCS_PORT, DASHBOARD_PORT, MLFLOW_PORT = 6391, 8291, 5091
JOB = ROOT / "tests" / "jobs" / "simultrans_tiny.toml"

if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
    pytest.skip("needs root, iproute2 and unshare (CI runs as root with them)", allow_module_level=True)


def _run(*cmd: str, check: bool = True, timeout: float = 180, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True, encoding="utf-8", timeout=timeout, **kw)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_ADDRESS")}
    env.update(PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}", RAY_AUTH_MODE="token", PYTHONUTF8="1")
    return env


def _kill_matching(marker: str) -> None:
    """SIGTERM, then SIGKILL, every process whose command line contains `marker`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    if marker.encode() in (entry / "cmdline").read_bytes():
                        pids.append(int(entry.name))
                except OSError:
                    continue
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(2)


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[dict[str, object]]:
    tag = f"sb{os.getpid() % 100000}"
    ns_a, ns_b = f"{tag}a", f"{tag}b"
    temp_a, temp_b = Path(f"/tmp/{tag}A"), Path(f"/tmp/{tag}B")
    store = tmp_path / "store"
    store.mkdir()
    env = _env()
    worker = server = None
    try:
        _run("ip", "netns", "add", ns_a)
        _run("ip", "netns", "add", ns_b)
        _run("ip", "link", "add", f"{tag}va", "type", "veth", "peer", "name", f"{tag}vb")
        _run("ip", "link", "set", f"{tag}va", "netns", ns_a)
        _run("ip", "link", "set", f"{tag}vb", "netns", ns_b)
        for ns, dev, ip in ((ns_a, f"{tag}va", HEAD_IP), (ns_b, f"{tag}vb", WORKER_IP)):
            _run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            _run("ip", "-n", ns, "link", "set", dev, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run("ip", "netns", "exec", ns_a, "ray", "start", "--head", "--node-ip-address", HEAD_IP, "--port",
             str(GCS_PORT), "--dashboard-host", HEAD_IP, "--dashboard-port", str(DASHBOARD_PORT), "--num-cpus",
             "1", "--num-gpus", "0", "--temp-dir", str(temp_a), "--disable-usage-stats", env=env)
        server = subprocess.Popen(["ip", "netns", "exec", ns_a, sys.executable, "-m", "specbench", "server",
                                   "--store", str(store / "m.db"), "--artifacts", str(store / "art"), "--host",
                                   HEAD_IP, "--port", str(MLFLOW_PORT)], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, encoding="utf-8", start_new_session=True)
        assert f"http://{HEAD_IP}:{MLFLOW_PORT}" in server.stdout.readline()
        hide = [ROOT, data_dir().resolve(), store]
        script = "\n".join([
            "set -e",
            f"mkdir -p {temp_b}/venv && mount --bind {ROOT / '.venv'} {temp_b}/venv",
            *(f"mount -t tmpfs tmpfs {p}" for p in hide),
            f"mkdir -p {ROOT / '.venv'} && mount --bind {temp_b}/venv {ROOT / '.venv'}",
            (f"exec ray start --address {HEAD_IP}:{GCS_PORT} --node-ip-address {WORKER_IP} --num-cpus 1 "
             f"--num-gpus 0 --temp-dir {temp_b} --disable-usage-stats --block"),
        ])
        worker = subprocess.Popen(["ip", "netns", "exec", ns_b, "unshare", "--mount", "--propagation", "private",
                                   "sh", "-c", script], env=env, cwd="/", stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        probe = ("import ray, time\nray.init(address='auto')\n"
                 "for _ in range(120):\n    if len([n for n in ray.nodes() if n['Alive']]) == 2: break\n"
                 "    time.sleep(1)\nprint(len([n for n in ray.nodes() if n['Alive']]))")
        alive = _run("ip", "netns", "exec", ns_a, sys.executable, "-c", probe, env=dict(
            env, RAY_ADDRESS=f"{HEAD_IP}:{GCS_PORT}"), cwd="/tmp")
        assert alive.stdout.strip().endswith("2"), alive.stdout + alive.stderr
        yield {"ns": ns_a, "env": env, "store": store, "dashboard": f"http://{HEAD_IP}:{DASHBOARD_PORT}",
               "mlflow": f"http://{HEAD_IP}:{MLFLOW_PORT}"}
    finally:
        for proc in (worker, server):
            if proc is not None and proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for marker in (str(temp_b), str(temp_a)):
            _kill_matching(marker)
        for ns in (ns_a, ns_b):
            _run("ip", "netns", "delete", ns, check=False)
        for temp in (temp_a, temp_b):
            _run("umount", "-l", f"{temp}/venv", check=False)
            shutil.rmtree(temp, ignore_errors=True)


def test_job_runs_on_both_nodes_and_equals_a_local_run(two_nodes: dict, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    ns = two_nodes["ns"]
    # the job's work directory (submit passes it as SPECBENCH_HOME): one of its own, not the checkout's
    env = {**two_nodes["env"], "SPECBENCH_HOME": str(tmp_path / "job-home")}
    submit = _run("ip", "netns", "exec", ns, sys.executable, "-m", "specbench", "submit", str(JOB), "--address",
                  two_nodes["dashboard"], "--tracking-uri", two_nodes["mlflow"], "--follow", env=env, cwd=ROOT,
                  timeout=900, check=False)
    assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-3000:]
    count = ("from ray.util.state import list_tasks\n"
             f"tasks = list_tasks(address='{two_nodes['dashboard']}', filters=[('name', '=', "
             "'run_tasks:decode_shard')], detail=True, limit=10000)\n"
             "import json; print(json.dumps(sorted({t.node_id for t in tasks if t.state == 'FINISHED'})))")
    nodes = _run("ip", "netns", "exec", ns, sys.executable, "-c", count, env=env, cwd="/tmp")
    assert len(json.loads(nodes.stdout.strip().splitlines()[-1])) == 2, nodes.stdout + nodes.stderr
    assert list((two_nodes["store"] / "art").rglob("simultrans_report.json"))  # uploaded over HTTP
    remote_db = f"sqlite:///{two_nodes['store'] / 'm.db'}"
    local_db = f"sqlite:///{tmp_path / 'local.db'}"
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    assert main(["--tracking-uri", local_db, "--ray-address", "local", "run", str(JOB)]) == 0
    metrics = []
    for uri in (remote_db, local_db):
        mlflow.set_tracking_uri(uri)
        (run,) = mlflow.search_runs(experiment_names=["simultrans_tiny"], output_format="list")
        metrics.append({k: v for k, v in run.data.metrics.items() if k.startswith("simul.")})
    # every result equal; the stage times (wall clock, `simul.seconds.<stage>`) logged by both, not compared
    timed = [{k for k in m if k.startswith("simul.seconds.")} for m in metrics]
    assert timed[0] == timed[1] and "simul.seconds.val_grid.waitk" in timed[0]
    results = [{k: v for k, v in m.items() if k not in timed[0]} for m in metrics]
    assert results[0] == results[1] and "simul.bleu_full_pooled" in results[0]
