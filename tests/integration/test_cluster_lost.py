"""A Ray cluster that stops while a stage waits on it: the stage fails with an error naming the cluster,
before Ray itself ends the process (60 s after it loses the GCS), which would leave the job's MLflow run
RUNNING with only Ray's log lines to tell why; and `logs --follow` on a cluster that stops is an error naming
the job, not a traceback."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster_processes import start_head, stop_cluster

from specbench.cli import main

pytestmark = [pytest.mark.integration, pytest.mark.isolated]
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import os, time
from specbench.runtime import connect, run_tasks, stages
from specbench.errors import SpecbenchError
connect(temp_dir=os.environ["CLUSTER_TEMP"], num_cpus=2)
stages.CLUSTER_LOST_S = 1.0
stages.WAIT_POLL_S = 0.5

def nap(path):
    open(path, "w").close()
    time.sleep(600)

try:
    run_tasks(nap, [os.environ["STARTED"] + "1", os.environ["STARTED"] + "2"], progress="napping")
except SpecbenchError as err:
    print("error:", err, flush=True)
"""


def test_a_cluster_stopped_mid_stage_is_an_error_naming_it(tmp_path: Path) -> None:
    temp = Path("/tmp") / f"sbl{os.getpid()}"  # Ray's socket paths must stay short
    env = {**os.environ, "SPECBENCH_HOME": str(tmp_path), "PYTHONPATH": str(ROOT / "platform"),
           "CLUSTER_TEMP": str(temp), "STARTED": str(tmp_path / "started")}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started1").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # a task runs: the driver waits on the cluster
        assert (tmp_path / "started1").exists(), proc.communicate(timeout=60)
        started = time.monotonic()
        os.kill(_gcs_pid(temp), signal.SIGKILL)  # the head's GCS dies
        out, err = proc.communicate(timeout=45)
    finally:
        proc.kill()
        stop_cluster(temp)
    assert "error: run_tasks(nap) (napping): lost the Ray cluster at " in out, (out, err[-3000:])
    assert "with 2 item(s) unfinished" in out and "Fix: start the cluster again" in out, out
    assert time.monotonic() - started < 40  # well before Ray's own 60 s


def test_following_a_job_whose_cluster_stops_is_an_error(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from specbench.runtime.jobs import client

    temp = Path("/tmp") / f"sbf{os.getpid()}"
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_AUTH_MODE="token",
               SPECBENCH_HOME=str(tmp_path), PYTHONPATH=str(ROOT / "platform"))
    try:
        address = start_head(env, temp)
        assert main(["jobs", "--address", address]) == 0
        assert f"no jobs at {address}" in capsys.readouterr().out
        job = client(address).submit_job(entrypoint="echo started; sleep 40")
        follow = subprocess.Popen([sys.executable, "-m", "specbench", "logs", job, "--address", address,
                                   "--follow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=env)
        seen, deadline = "", time.monotonic() + 120  # following once the job's line is out, however slowly
        while "\nstarted\n" not in f"\n{seen}" and time.monotonic() < deadline and follow.poll() is None:
            if select.select([follow.stdout], [], [], 1)[0]:
                seen += os.read(follow.stdout.fileno(), 1 << 16).decode()
        stop_cluster(temp)
        out, err = follow.communicate(timeout=30)
    finally:
        stop_cluster(temp)
    assert follow.returncode == 2, (out, err)
    assert f"stopped answering while following job {job}" in err and "Traceback" not in err, err


def _gcs_pid(temp: Path) -> int:
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"gcs_server" in cmdline.split(b"\0")[0] and str(temp).encode() in cmdline:
            return int(entry.name)
    raise AssertionError(f"no GCS process of the cluster in {temp}")
