"""`tracking.runs` against a real MLflow store (SQLite in a temporary folder) and real git: a long param is cut to
MLflow's 6000 characters (also where MLflow would refuse it rather than cut it), a curve without steps is logged
at steps 0, 1, 2, ..., the run keeps the latest value of each metric, a failed run keeps a description it
already had and a 5000-character error tag, the description's lines lose trailing blanks, an experiment of a
SQLite store keeps its artifacts in the work directory, an artifact the job did not write fails the run (not an
outage), a checkout with uncommitted changes is `-dirty`; and
`sync_journals` on hand-written journals: a run whose writer is gone is ended FAILED (with the reason of a torn
or an abandoned journal) unless the server has it ended, and a journal written on another host is left alone;
a run whose server is unreachable goes on offline and keeps its journal unsent, while a store file that is no
database or a server that is not MLflow's is an error; `specbench sync` sends the journals of the servers it
reaches and keeps (and names) those of an unreachable or a wrong one."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from mlflow.tracking import MlflowClient
from mlflow_store import http_server_answering, new_store, store_home

from specbench.cli import main
from specbench.errors import SpecbenchError
from specbench.tracking.journal import Journal, NotMlflowServer, journal_dir, writer
from specbench.tracking.runs import (
    ABANDONED_ERROR,
    DESCRIPTION_TAG,
    TORN_ERROR,
    TrackedRun,
    git_commit,
    sync_journals,
)

pytestmark = pytest.mark.unit
T0 = 1_700_000_000_000  # ms


class Store:
    def __init__(self, folder: Path) -> None:
        self.home = folder / "home"
        self.uri = new_store(folder)
        self.client = MlflowClient(tracking_uri=self.uri)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with store_home(tmp_path_factory, "runs_store") as folder:
        yield Store(folder)


def test_params_curves_and_latest_metrics(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRUNCATE_LONG_VALUES", "false")  # as a store that refuses long values does
    with TrackedRun("runs", "logged", store.uri, {"kind": "test"}) as run:
        run.log_params({"long": "x" * 7000, "beam": 5})
        run.log_curve("recall", [0.5, 0.7, 0.9])
        with pytest.raises(ValueError, match="curve 'precision' has 3 values but 2 steps"):
            run.log_curve("precision", [0.5, 0.7, 0.9], steps=[0, 10])  # no point is dropped silently
        run.log_metrics({"wer": 0.3})
        run.log_metrics({"wer": 0.25, "bleu": 30}, step=1)
        run.set_description(["job: ok   ", "  wer 0.25\t"])
        assert run.metrics == {"wer": 0.25, "bleu": 30.0}
    got = store.client.get_run(run.run_id)
    assert got.data.params["long"] == "x" * 6000 and got.data.params["beam"] == "5"
    assert [(m.step, m.value) for m in store.client.get_metric_history(run.run_id, "recall")] == \
        [(0, 0.5), (1, 0.7), (2, 0.9)]
    assert "precision" not in got.data.metrics
    assert got.data.tags[DESCRIPTION_TAG] == "```text\njob: ok\n  wer 0.25\n```"
    exp = store.client.get_experiment(got.info.experiment_id)
    assert exp.artifact_location == (store.home.resolve() / "mlartifacts" / "runs").as_uri()
    assert got.info.status == "FINISHED"


def test_no_experiment_name_puts_artifacts_outside_the_work_directory_and_a_broken_folder_fails_the_run(
        store: Store, tmp_path: Path) -> None:
    root = store.home.resolve() / "mlartifacts"
    for name, folder in (("../../escaped", "_.._escaped"), ("/Shared/asr", "_Shared_asr"), ("..", "_")):
        with TrackedRun(name, "named", store.uri) as run:
            pass
        assert store.client.get_experiment(run.experiment_id).artifact_location == (root / folder).as_uri()
    (root / "blocked").write_text("a file where the experiment's folder goes")
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(SpecbenchError, match="local MLflow store cannot write .*blocked.*Fix: make that path"):
        with TrackedRun("blocked", "blocked", store.uri) as run:
            run.log_artifact(tmp_path / "a.txt")
    assert not run.offline and store.client.get_run(run.run_id).info.status == "FAILED"
    answer = requests.Response()  # an HTTP server's refusal is an OSError too, but no local store's fault
    answer.status_code = 413

    def refused(*_: object) -> None:
        raise requests.HTTPError("413 Client Error: Request Entity Too Large", response=answer)

    with pytest.MonkeyPatch.context() as patch, pytest.raises(requests.HTTPError, match="413"):
        with TrackedRun("runs", "too big", store.uri) as run:
            patch.setattr("specbench.tracking.runs.apply", refused)
            run.log_artifact(tmp_path / "a.txt")


def test_an_artifact_the_job_did_not_write_fails_the_run_online(store: Store, tmp_path: Path) -> None:
    """A missing file is the job's fault, not an outage: the run is not taken offline, ends FAILED on the
    store, and the error names the file."""
    missing = tmp_path / "never-written.txt"
    with (pytest.raises(SpecbenchError, match="cannot log the artifact .*never-written.txt: no such file"),
          TrackedRun("runs", "missing artifact", store.uri) as run):
        run.log_artifact(missing)
    assert not run.offline and store.client.get_run(run.run_id).info.status == "FAILED"


def test_a_failed_run_keeps_its_description_and_a_long_error(store: Store) -> None:
    with pytest.raises(RuntimeError), TrackedRun("runs", "failing", store.uri) as run:
        run.set_description(["failing: what it did"])
        raise RuntimeError("e" * 6000)
    tags = store.client.get_run(run.run_id).data.tags
    assert tags[DESCRIPTION_TAG] == "```text\nfailing: what it did\n```"
    assert tags["error"] == ("RuntimeError: " + "e" * 6000)[:5000] and tags["error_type"] == "RuntimeError"
    assert store.client.get_run(run.run_id).info.status == "FAILED"


def test_a_run_stopped_by_a_signal_says_so(store: Store) -> None:
    """Ray turns SIGTERM (`ray job stop`) into SystemExit(1): the error tag says the run was stopped."""
    with pytest.raises(SystemExit), TrackedRun("runs", "stopped", store.uri) as run:
        raise SystemExit(1)
    got = store.client.get_run(run.run_id)
    assert got.data.tags["error"] == ("stopped before it finished: the process was asked to exit (SystemExit 1), "
                                      "as Ray's handler does on SIGTERM, e.g. from `ray job stop`")
    assert got.info.status == "FAILED" and got.data.tags["error_type"] == "SystemExit"


def test_an_uncommitted_change_makes_the_commit_dirty(tmp_path: Path) -> None:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,
                              check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "a.txt").write_text("1")
    git("add", "a.txt")
    git("commit", "-q", "-m", "one")
    sha = git("rev-parse", "HEAD")
    assert git_commit(tmp_path) == sha
    (tmp_path / "a.txt").write_text("2")
    assert git_commit(tmp_path) == f"{sha}-dirty"
    assert git_commit(tmp_path / "no-such-folder") == "unknown"


def _dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def _journal(store: Store, name: str, ops: list[dict[str, Any]], *, run_id: str | None = None,
             host: str | None = None, tail: str = "") -> Path:
    """A journal as a job whose process died left it: its create (sent when `run_id` is given), then `ops`."""
    create = {"op": "create", "tracking_uri": store.uri, "experiment": "synced", "run_name": name, "tags": {},
              "start_ms": T0, "host": host or socket.gethostname(), "pid": _dead_pid(), "run_id": run_id,
              "sent": run_id is not None}
    path = journal_dir() / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(op) + "\n" for op in [create, *ops]) + tail)
    return path


def test_sync_ends_abandoned_runs_failed_unless_the_server_ended_them(store: Store) -> None:
    metrics = {"op": "metrics", "metrics": [["wer", 0.5, T0, 0]], "sent": False}
    _journal(store, "abandoned", [metrics])
    _journal(store, "torn", [metrics], tail='{"op": "par')
    exp = store.client.create_experiment("synced-before")
    killed = store.client.create_run(exp, run_name="killed", start_time=T0).info.run_id
    store.client.set_terminated(killed, "KILLED")
    _journal(store, "killed", [metrics], run_id=killed)
    elsewhere = _journal(store, "elsewhere", [metrics], host=socket.gethostname() + "-other")
    report = sync_journals()
    ids = {name.removesuffix(".jsonl"): run_id for name, run_id, _ in report.sent}
    assert set(ids) == {"abandoned", "torn", "killed"} and ids["killed"] == killed
    assert [b for b in report.busy if str(elsewhere) in b and "written on host" in b]
    assert elsewhere.is_file()
    runs = {name: store.client.get_run(run_id) for name, run_id in ids.items()}
    assert runs["abandoned"].info.status == "FAILED" and runs["abandoned"].data.tags["error"] == ABANDONED_ERROR
    assert runs["torn"].info.status == "FAILED" and runs["torn"].data.tags["error"] == TORN_ERROR
    assert runs["killed"].info.status == "KILLED" and "error" not in runs["killed"].data.tags
    assert all(r.data.metrics == {"wer": 0.5} for r in runs.values())
    assert any("the server has it ended (KILLED)" in p for p in report.problems)


def test_a_run_whose_server_is_unreachable_keeps_its_journal(store: Store, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends: nothing listens there
    with TrackedRun("runs", "offline", f"http://127.0.0.1:{port}") as run:
        run.log_metrics({"wer": 0.5})
    assert run.offline and run.run_id == f"offline-{run.journal.path.stem}"
    entries = run.journal.entries()  # kept, with nothing of it sent
    assert [e["op"] for e in entries] == ["create", "metrics", "end"] and not any(e["sent"] for e in entries)
    assert "specbench sync" in capsys.readouterr().err
    run.journal.remove()  # not for the sync of another test


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends: nothing listens there


def test_a_store_that_is_no_database_or_a_server_that_is_not_mlflow_is_an_error(store: Store,
                                                                                 tmp_path: Path) -> None:
    text = tmp_path / "text.db"
    text.write_text("hello")
    with pytest.raises(SpecbenchError, match=f"{text} is not an MLflow store .*Fix: check the path"):
        TrackedRun("runs", "no-store", f"sqlite:///{text}")
    with http_server_answering(404) as uri, pytest.raises(NotMlflowServer) as caught:
        TrackedRun("runs", "not-mlflow", uri)  # not an outage: no offline journal
    assert f"{uri} answers HTTP but is not an MLflow tracking server" in str(caught.value)
    assert "HTTP 404" in str(caught.value) and "`specbench server` prints" in str(caught.value)
    assert text.read_text() == "hello"


def test_sync_keeps_the_journals_of_a_wrong_server_and_sends_the_others(
        store: Store, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    dead = f"http://127.0.0.1:{_closed_port()}"
    with TrackedRun("runs", "mistyped", dead) as lost:
        lost.log_metrics({"wer": 0.5})

    def journal(uri: str) -> Journal:
        kept = Journal()
        kept.add({"op": "create", "tracking_uri": uri, "experiment": "synced", "run_name": "j", "tags": {},
                  "start_ms": T0, "run_id": None, **writer()}, sent=False)
        kept.add({"op": "end", "status": "FINISHED", "end_ms": T0 + 1}, sent=False)
        return kept

    sendable = journal(store.uri)
    with http_server_answering(404) as wrong_uri:
        wrong = journal(wrong_uri)
        assert main(["sync"]) == 2
    out, err = capsys.readouterr()
    assert f"{sendable.path.name}: 2 operations sent" in out and not sendable.path.exists()
    assert f"journal {lost.journal.path}: its MLflow server {dead} is still unreachable" in err
    assert f"mv {lost.journal.path} {lost.journal.path}.unsent" in err
    assert f"journal {wrong.path}: its tracking_uri {wrong_uri} answers HTTP but is not an MLflow" in err
    assert lost.journal.path.is_file() and wrong.path.is_file()
    lost.journal.remove()
    wrong.remove()
