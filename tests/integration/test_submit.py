"""`specbench submit`, `jobs` and `logs` against a real Ray head started with `ray start` (token auth, the
Jobs API on its dashboard): the project travels as the job's working_dir and the run lands in MLflow, its
artifacts in the client's work directory (passed as SPECBENCH_HOME), which outlives the working_dir Ray deletes.
Each test works in a work directory of its own (the job in the submitting test's), so the module runs beside
the other integration tests (`isolated`)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import mlflow
import pytest
from cluster_processes import start_head, stop_cluster
from ray._raylet import AuthenticationTokenLoader

from specbench.cli import main
from specbench.errors import SpecbenchError

pytestmark = [pytest.mark.integration, pytest.mark.isolated]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One Ray head of its own for this module's tests (started with `ray start`, as a user would)."""
    temp = Path("/tmp") / f"sbh{os.getpid()}"  # Ray's socket paths must stay short
    # the job's entrypoint runs `python` from the PATH the cluster was started with: the project's environment
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_AUTH_MODE="token", PATH=path)
    try:
        yield start_head(env, temp)
    finally:
        stop_cluster(temp)


@pytest.fixture(autouse=True)
def own_work_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))


def test_submitted_job_runs_on_the_cluster_and_logs_to_mlflow(ray_head: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    job = ROOT / "tests" / "jobs" / "simultrans_tiny.toml"
    assert main(["submit", str(job), "--address", ray_head, "--tracking-uri", uri, "--follow"]) == 0
    out = capsys.readouterr().out
    job_id = out.split(" as ", 1)[1].split(" ", 1)[0]
    assert "SUCCEEDED" in out
    assert main(["jobs", "--address", ray_head]) == 0
    out = capsys.readouterr().out
    assert job_id in out and "STARTED (UTC)" in out.splitlines()[0], out
    assert main(["logs", job_id, "--address", ray_head]) == 0
    assert "speculation-only gain" in capsys.readouterr().out  # the job summary, followed
    mlflow.set_tracking_uri(uri)
    run = mlflow.search_runs(experiment_names=["simultrans_tiny"], output_format="list")[0]
    assert run.info.status == "FINISHED" and "simul.bleu_full_pooled" in run.data.metrics
    # the artifacts outlive the job: in this client's work directory, not in Ray's unpacked working_dir
    artifacts = Path(run.info.artifact_uri.removeprefix("file://"))
    assert artifacts.is_relative_to(tmp_path / "home" / "mlartifacts"), run.info.artifact_uri
    assert "_ray_pkg_" not in str(artifacts)
    for name in ("config.resolved.json", "config/simultrans_tiny.toml"):
        assert (artifacts / name).is_file(), (name, sorted(p.name for p in artifacts.rglob("*")))
    assert list(artifacts.rglob("simultrans_report.json")), sorted(p.name for p in artifacts.rglob("*"))


def test_a_local_store_inside_rays_working_dir_is_refused_before_any_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A job started in Ray's unpacked working_dir without SPECBENCH_HOME (e.g. by `ray job submit`): its
    work directory, and with a SQLite store its artifacts, would be deleted with the job."""
    package = tmp_path / "runtime_resources" / "working_dir_files" / "_ray_pkg_0123abcd"
    monkeypatch.setenv("SPECBENCH_HOME", str(package / ".specbench"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["--tracking-uri", uri, "run", str(ROOT / "tests" / "jobs" / "simultrans_tiny.toml")]) == 2
    err = capsys.readouterr().err
    assert f"inside the working_dir that Ray unpacked for the job ({package})" in err, err
    assert "specbench submit" in err and "SPECBENCH_HOME" in err and "Fix:" in err
    assert not (tmp_path / "mlflow.db").exists()  # refused before any experiment or run was created


def test_bad_submissions_fail_before_anything_starts(ray_head: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from specbench.runtime.jobs import status

    bad = ROOT / "tests" / "jobs" / "simultrans_tiny.toml"
    assert main(["submit", str(bad), "--address", "http://127.0.0.1:9"]) == 2
    assert "cannot reach the Ray Jobs API" in capsys.readouterr().err
    outside = tmp_path / "job.toml"
    outside.write_text(bad.read_text())
    assert main(["submit", str(outside), "--address", ray_head]) == 2
    err = capsys.readouterr().err
    assert "inside the project" in err and f"Fix: copy it into {ROOT / 'jobs'}/" in err
    broken = tmp_path / "broken.toml"
    broken.write_text('kind = "simultrans"\nbeam = 3\n')
    assert main(["submit", str(broken), "--address", ray_head]) == 2
    assert "unknown key" in capsys.readouterr().err
    for follow in ([], ["--follow"]):
        assert main(["logs", "nope", "--address", ray_head, *follow]) == 2
        err = capsys.readouterr().err
        assert f"no job 'nope' at {ray_head}. Fix: list its jobs with `specbench jobs" in err, err
    with pytest.raises(SpecbenchError, match="no job 'nope' at"):  # not a cluster that stopped answering
        status(ray_head, "nope")


def test_a_followed_job_that_fails_and_a_refused_token_are_said_so(
        ray_head: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from specbench.runtime.jobs import client, follow_logs, status

    job = client(ray_head).submit_job(entrypoint="seq 3000; sleep 2; echo started; exit 3")
    assert main(["logs", job, "--address", ray_head, "--follow"]) == 1
    out = capsys.readouterr().out  # each line once, in order, across a quiet spell (Ray's own lines beside)
    lines = [line for line in out.splitlines() if line.isdigit() or line == "started"]
    assert lines == [*map(str, range(1, 3001)), "started"] and out.endswith(f"\njob {job}: FAILED\n"), out
    jobs, reads = client(ray_head), []
    whole_log = jobs.get_job_logs
    jobs.get_job_logs = lambda job_id: reads.append(job_id) or whole_log(job_id)  # counted, still real
    job = jobs.submit_job(entrypoint="for i in 1 2 3 4; do echo line $i; sleep 1; done")
    text = "".join(follow_logs(ray_head, job, True, jobs=jobs))
    assert [line for line in text.splitlines() if line.startswith("line")] == [f"line {i}" for i in range(1, 5)]
    assert reads == [job]  # streamed: the whole log read once, at the end, not once a second

    streamed = jobs.tail_job_logs

    async def closed_early(job_id: str) -> AsyncIterator[str]:  # as a proxy that closes the stream cleanly
        async for text in streamed(job_id):
            yield text
            return

    jobs.tail_job_logs = closed_early
    job = jobs.submit_job(entrypoint="echo first; sleep 2; for i in 1 2 3; do echo after $i; sleep 1; done")
    text = "".join(follow_logs(ray_head, job, True, jobs=jobs))
    assert [line for line in text.splitlines() if line.startswith("after")] == [f"after {i}" for i in (1, 2, 3)]
    assert status(ray_head, job) == "SUCCEEDED"  # followed to the end, not left while RUNNING

    async def no_websocket(job_id: str) -> AsyncIterator[str]:  # as behind a proxy that refuses websockets
        raise RuntimeError(f"websocket for {job_id} refused")
        yield ""

    jobs.tail_job_logs = no_websocket
    job = jobs.submit_job(entrypoint="for i in 1 2 3; do echo polled $i; sleep 1; done")
    text = "".join(follow_logs(ray_head, job, True, jobs=jobs))
    assert [line for line in text.splitlines() if line.startswith("polled")] == ["polled 1", "polled 2", "polled 3"]
    assert reads.count(job) >= 2  # polled while it ran
    loader = AuthenticationTokenLoader.instance()  # Ray's cache of the token
    with monkeypatch.context() as patch:
        patch.setenv("RAY_AUTH_TOKEN", "not-its-token")
        loader.reset_cache()
        assert main(["jobs", "--address", ray_head]) == 2
    loader.reset_cache()
    err = capsys.readouterr().err
    assert "refused the connection for its token auth" in err and "start the cluster" not in err, err


def test_following_a_job_on_a_frozen_dashboard_ends_with_an_error(ray_head: str) -> None:
    """A dashboard frozen (SIGSTOP) while a job is followed: the follower gives up after POLL_WAIT_S, where
    Ray's client would wait for ever. Last in the module, as it freezes the dashboard."""
    from specbench.runtime.jobs import POLL_WAIT_S, client

    job = client(ray_head).submit_job(entrypoint="echo started; sleep 60")
    port = ray_head.rsplit(":", 1)[1]
    dashboard = next(int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()
                     and b"dashboard.py" in (cmd := _cmdline(entry)) and f"--port={port}".encode() in cmd)
    env = dict(os.environ, RAY_AUTH_MODE="token", PYTHONPATH=str(ROOT / "platform"))
    follow = subprocess.Popen([sys.executable, "-m", "specbench", "logs", job, "--address", ray_head, "--follow"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        seen, deadline = "", time.monotonic() + 60
        while "started" not in seen and time.monotonic() < deadline and follow.poll() is None:
            if select.select([follow.stdout], [], [], 1)[0]:
                seen += os.read(follow.stdout.fileno(), 1 << 16).decode()
        os.kill(dashboard, signal.SIGSTOP)
        frozen = time.monotonic()
        out, err = follow.communicate(timeout=POLL_WAIT_S + 20)
        waited = time.monotonic() - frozen
    finally:
        follow.kill()
        os.kill(dashboard, signal.SIGCONT)
    assert follow.returncode == 2 and "started" in seen, (seen, out, err)
    assert f"{ray_head} stopped answering while following job {job}" in err and "Traceback" not in err, err
    assert f"no answer within {POLL_WAIT_S:g} s" in err, err
    assert waited < POLL_WAIT_S + 10, waited


def _cmdline(entry: Path) -> bytes:
    try:
        return (entry / "cmdline").read_bytes()
    except OSError:
        return b""
