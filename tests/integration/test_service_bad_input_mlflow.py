"""Bad input to the service verbs against a real MLflow SQLite store (and a real `mlflow server` process):
`specbench sync` sends the journals it can read and names the ones it cannot; a torn journal's run ends
FAILED, not RUNNING; a job given a Ray cluster that is not there ends its MLflow run FAILED in seconds, and
`decode --workers` is refused one (both in a process of their own, as a user runs them); the UI
server's own last words reach the user; the embedded default store that does not exist yet has no runs."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from specbench.cli import main
from specbench.experiments.graph_recipe import GraphArtifacts
from specbench.tracking.runs import ABANDONED_ERROR, TORN_ERROR

pytestmark = [pytest.mark.integration, pytest.mark.isolated]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return tmp_path / "home"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dead_pid() -> int:
    """The pid of a process of this host that has ended."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


METRIC = {"op": "metrics", "metrics": [["m", 1.0, 1000, 0]], "sent": False}
END = {"op": "end", "status": "FINISHED", "end_ms": 2000, "sent": False}


def journal_folder(home: Path) -> Path:
    folder = home / "journal"
    folder.mkdir(parents=True)
    return folder


def _journal(uri: str, name: str, ops: list[dict], tail: str = "", pid: int | None = None) -> str:
    """A journal as a run on this host writes it (its writer `pid`: by default one that has ended)."""
    create = {"op": "create", "tracking_uri": uri, "experiment": "sync", "run_name": name, "tags": {},
              "start_ms": 1000 if pid is None else int(time.time() * 1000), "sent": False, "run_id": None,
              "host": socket.gethostname(), "pid": dead_pid() if pid is None else pid}
    return "".join(json.dumps(op) + "\n" for op in [create, *ops]) + tail


def test_sync_sends_what_it_can_and_names_the_damaged_journals(tmp_path: Path, home: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    metric, end, folder = METRIC, END, journal_folder(home)
    (folder / "a-empty.jsonl").write_text("")
    (folder / "b-torn.jsonl").write_text(_journal(uri, "torn", [metric], tail='{"op": "par'))
    (folder / "c-bad.jsonl").write_text(_journal(uri, "bad", [metric]).replace('"metrics"', "oops", 1) + "x\n")
    (folder / "d-good.jsonl").write_text(_journal(uri, "good", [metric, end]))
    assert main(["sync"]) == 2
    captured = capsys.readouterr()
    assert "b-torn.jsonl: 2 operations sent" in captured.out and "d-good.jsonl: 3 operations sent" in captured.out
    err = captured.err
    for damaged, said in (("a-empty.jsonl", "it is empty"), ("c-bad.jsonl", "line 2 is not valid JSON")):
        assert f"journal {folder / damaged} is damaged: {said}" in err and "move it aside" in err
        assert (folder / damaged).exists()  # kept, unsent
    assert f"journal {folder / 'b-torn.jsonl'} had a half-written last line" in err and "ended FAILED" in err
    assert (folder / "b-torn.torn").read_text() == '{"op": "par'
    client = MlflowClient(uri)
    runs = {r.info.run_name: r for r in client.search_runs([client.get_experiment_by_name("sync").experiment_id])}
    assert runs["good"].info.status == "FINISHED" and runs["good"].data.metrics == {"m": 1.0}
    assert runs["torn"].info.status == "FAILED" and runs["torn"].data.tags["error"] == TORN_ERROR
    assert runs["torn"].data.metrics == {"m": 1.0} and set(runs) == {"good", "torn"}


def test_sync_leaves_a_live_run_alone_and_ends_a_dead_one(tmp_path: Path, home: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    metric, end, folder = METRIC, END, journal_folder(home)
    (folder / "live.jsonl").write_text(_journal(uri, "live", [metric], pid=os.getpid()))  # this process runs
    (folder / "dead.jsonl").write_text(_journal(uri, "dead", [metric]))  # no end, and its writer is gone
    elsewhere = json.loads(_journal(uri, "elsewhere", []).splitlines()[0]) | {"host": "another-host"}
    (folder / "elsewhere.jsonl").write_text(json.dumps(elsewhere) + "\n")
    assert main(["sync"]) == 2  # the dead run's end is reported
    captured = capsys.readouterr()
    assert f"{folder / 'live.jsonl'}: its run has not ended and the process that writes it still runs" in captured.out
    assert "it was written on host another-host: sync there" in captured.out
    assert (folder / "live.jsonl").exists() and (folder / "elsewhere.jsonl").exists()
    assert not (folder / "dead.jsonl").exists()
    assert "records no end of its run and the process that wrote it is gone" in captured.err
    client = MlflowClient(uri)
    runs = {r.info.run_name: r for r in client.search_runs([client.get_experiment_by_name("sync").experiment_id])}
    assert set(runs) == {"dead"}  # nothing of the live run, or of the other host's, was sent
    assert runs["dead"].info.status == "FAILED" and runs["dead"].data.tags["error"] == ABANDONED_ERROR
    (folder / "live.jsonl").write_text(_journal(uri, "live", [metric, end], pid=os.getpid()))  # the job ended
    (folder / "elsewhere.jsonl").unlink()
    assert main(["sync"]) == 0
    assert "live.jsonl: 3 operations sent" in capsys.readouterr().out and not (folder / "live.jsonl").exists()


def test_a_deleted_run_is_reported_for_its_journal_and_the_others_are_sent(
        tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("sync"), run_name="deleted")
    client.delete_run(run.info.run_id)
    metric, end, folder = METRIC, END, journal_folder(home)
    created = json.loads(_journal(uri, "deleted", []).splitlines()[0]) | {"sent": True, "run_id": run.info.run_id}
    (folder / "a-deleted.jsonl").write_text(json.dumps(created) + "\n" + json.dumps(metric) + "\n")
    (folder / "b-good.jsonl").write_text(_journal(uri, "good", [metric, end]))
    assert main(["sync"]) == 2
    captured = capsys.readouterr()
    assert "b-good.jsonl: 3 operations sent" in captured.out
    assert f"journal {folder / 'a-deleted.jsonl'}: the server refused it" in captured.err
    assert "Traceback" not in captured.err and (folder / "a-deleted.jsonl").exists()


def test_a_job_given_an_absent_ray_cluster_fails_fast_and_ends_its_run_failed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    address = f"127.0.0.1:{closed_port()}"
    start = time.monotonic()
    assert main(["--tracking-uri", uri, "--ray-address", address, "run",
                 str(ROOT / "jobs" / "simultrans_quick.toml")]) == 2
    assert time.monotonic() - start < 30
    err = capsys.readouterr().err
    assert f"cannot reach the Ray cluster at {address}" in err and "ray start --head" in err
    client = MlflowClient(uri)
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.status == "FAILED" and "cannot reach the Ray cluster" in run.data.tags["error"]


def _specbench(*argv: str, home: Path) -> subprocess.CompletedProcess:
    """`python -m specbench ARGV` in a process of its own (no Ray yet, as a user's), in the work directory
    `home`."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    return subprocess.run([sys.executable, "-m", "specbench", *argv], cwd=ROOT, capture_output=True, text=True,
                          encoding="utf-8", timeout=300, env=dict(env, SPECBENCH_HOME=str(home)))


def test_jobs_that_start_ray_themselves_are_refused_an_absent_ray_cluster_too(tmp_path: Path, home: Path) -> None:
    """The real-speech job maps its stages without an address of its own: --ray-address is joined by the
    job runner, inside the run, before the job does any work (not a local Ray started instead)."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    address = f"127.0.0.1:{closed_port()}"
    start = time.monotonic()
    proc = _specbench("--tracking-uri", uri, "--ray-address", address, "run",
                      str(ROOT / "jobs" / "real_speech_quick.toml"), home=home)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert time.monotonic() - start < 60
    assert f"cannot reach the Ray cluster at {address}" in proc.stderr and "ray start --head" in proc.stderr
    assert "Traceback" not in proc.stderr
    client = MlflowClient(uri)
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.status == "FAILED" and "cannot reach the Ray cluster" in run.data.tags["error"]


def test_decode_on_workers_is_refused_an_absent_ray_cluster(tmp_path: Path, home: Path,
                                                           slurp_graph: GraphArtifacts) -> None:
    """`decode --workers 2` joins --ray-address (a local Ray started instead would decode on this machine as
    if the cluster were there); with one worker, which needs no Ray, a named cluster is still checked."""
    import numpy as np

    graph = slurp_graph
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "scores.npz", **{f"u{i}": np.log(rng.dirichlet(np.ones(40), size=30)).astype(np.float32)
                                         for i in range(4)})
    address = f"127.0.0.1:{closed_port()}"
    out = tmp_path / "out.jsonl"
    for workers in ("2", "1"):  # one worker decodes here, but the cluster was asked for: refused all the same
        proc = _specbench("--ray-address", address, "decode", "--graph", str(graph.tlg), "--scores",
                          str(tmp_path / "scores.npz"), "--frame-shift-ms", "40", "--out", str(out), "--workers",
                          workers, "--backend", "cpu_numpy", home=home)
        assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
        assert f"cannot reach the Ray cluster at {address}" in proc.stderr and "drop --ray-address" in proc.stderr
        assert "Traceback" not in proc.stderr and not out.exists()


def test_the_ui_passes_on_what_the_server_said_when_it_exits(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "not-a-store.db"  # SQLite, but its schema is at a revision MLflow does not know
    with sqlite3.connect(store) as db:
        db.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        db.execute("INSERT INTO alembic_version VALUES ('0123456789ab')")
    assert main(["--tracking-uri", f"sqlite:///{store}", "ui", "--port", str(closed_port())]) == 2
    err = capsys.readouterr().err
    assert "exited with code" in err and "Can't locate revision" in err and "--tracking-uri" in err, err
    store.write_text("hello, not SQLite\n")  # no database at all: refused before a server starts
    assert main(["--tracking-uri", f"sqlite:///{store}", "ui", "--port", str(closed_port())]) == 2
    err = capsys.readouterr().err
    assert "is not an MLflow store (the file is not a SQLite database)" in err and "exited" not in err, err


def test_the_default_store_that_does_not_exist_yet_has_no_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs"]) == 0
    assert "no runs yet" in capsys.readouterr().out
