"""`specbench sync` against a real MLflow SQLite store with journals as runs write them: a journal that
another sync is sending (it holds the journal's lock) is left to it, so two syncs at once never send one
journal twice; an offline child run whose parent still runs waits for the sync that sends its parent, and one
sent in a later sync than its parent still finds it."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from specbench.cli import main
from specbench.tracking.runs import PARENT_TAG, TrackedRun
from specbench.tracking.ui import free_port

pytestmark = [pytest.mark.integration, pytest.mark.isolated]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path / "home"


def dead_pid() -> int:
    """The pid of a process of this host that has ended."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def journal(uri: str, name: str, tags: dict[str, str] | None = None) -> str:
    """The journal of an ended run logged offline (its writer gone): create, a metric, end; nothing sent."""
    create = {"op": "create", "tracking_uri": uri, "experiment": "sync", "run_name": name, "tags": tags or {},
              "start_ms": 1000, "sent": False, "run_id": None, "host": socket.gethostname(), "pid": dead_pid()}
    ops = [create, {"op": "metrics", "metrics": [["m", 1.0, 1000, 0]], "sent": False},
           {"op": "end", "status": "FINISHED", "end_ms": 2000, "sent": False}]
    return "".join(json.dumps(op) + "\n" for op in ops)


def runs(uri: str) -> dict[str, object]:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("sync")
    return {} if exp is None else {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}


def test_a_journal_another_sync_holds_is_skipped_and_nothing_of_it_sent(
        tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    folder = home / "journal"
    folder.mkdir(parents=True)
    held, free = folder / "a-held.jsonl", folder / "b-free.jsonl"
    held.write_text(before := journal(uri, "held"))
    free.write_text(journal(uri, "free"))
    fd = os.open(held.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o644)  # as another sync holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert main(["sync"]) == 0
        out = capsys.readouterr().out
        assert f"{held}: another `specbench sync` is sending it now (left alone for now)" in out
        assert "b-free.jsonl: 3 operations sent" in out and "a-held.jsonl: 3 operations sent" not in out
        assert set(runs(uri)) == {"free"}  # nothing of the held journal reached the store
        assert held.read_text() == before  # untouched: still all unsent
    finally:
        os.close(fd)  # the other sync is done
    assert main(["sync"]) == 0
    assert "a-held.jsonl: 3 operations sent" in capsys.readouterr().out
    assert set(runs(uri)) == {"free", "held"} and not held.exists() and not list(folder.iterdir())


def _send_to(journal_file: Path, uri: str) -> None:
    """Point a journal's run at the store `uri` (its `create` line names where the run goes)."""
    lines = journal_file.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[0] = json.dumps(json.loads(lines[0]) | {"tracking_uri": uri}) + "\n"
    journal_file.write_text("".join(lines), encoding="utf-8")


def test_a_child_whose_parent_is_still_running_is_sent_with_its_parent_and_nested(
        tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A suite logged offline: its first job's child run has ended, the suite's parent run still goes when
    `specbench sync` runs. The child is kept until the sync that sends its parent, then nested under it
    (sent alone, it would point for ever at the parent's offline id)."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # the down server is noticed at once
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there: both runs go offline
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    with TrackedRun("sync", "suite", down, {"kind": "suite"}) as parent:
        with TrackedRun("sync", "job", down, {"kind": "graph"}, parent=parent) as child:
            child.log_metrics({"graph.states": 3.0})
        assert parent.run_id.startswith("offline-") and child.run_id.startswith("offline-")
        for journal_file in (parent.journal.path, child.journal.path):
            _send_to(journal_file, uri)  # the store the journals are sent to: a SQLite file, not a server
        capsys.readouterr()
        assert main(["sync"]) == 0  # the parent's process (this one) still runs
        out = capsys.readouterr().out
        assert f"{child.journal.path}: the journal of its parent run ({parent.run_id}) is not sent yet" in out
        assert "operations sent" not in out and child.journal.path.exists() and runs(uri) == {}
        parent.log_metrics({"graph.states": 3.0})
    assert main(["sync"]) == 0  # the suite has ended: parent and child go, the child nested under the parent
    assert capsys.readouterr().out.count("operations sent") == 2
    sent = runs(uri)
    assert sent["job"].data.tags[PARENT_TAG] == sent["suite"].info.run_id  # type: ignore[attr-defined]
    assert sent["job"].data.metrics == {"graph.states": 3.0}  # type: ignore[attr-defined]
    assert not list((home / "journal").glob("*.jsonl"))


def test_a_child_sent_in_a_later_sync_than_its_parent_is_nested_under_it(
        tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The parent's journal goes in one sync (the child's is held by another sync then), the child's in the
    next: the child still finds its parent's new run (by the `offline.id` tag sync puts on every run it
    creates), instead of keeping the parent's offline id for ever."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    folder = home / "journal"
    folder.mkdir(parents=True)
    parent, child = folder / "p-suite.jsonl", folder / "c-job.jsonl"
    parent.write_text(journal(uri, "suite"))
    child.write_text(journal(uri, "job", {PARENT_TAG: "offline-p-suite"}))
    fd = os.open(child.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert main(["sync"]) == 0  # sends the parent only
    finally:
        os.close(fd)
    assert set(runs(uri)) == {"suite"} and not parent.exists()
    assert main(["sync"]) == 0
    assert "c-job.jsonl: 3 operations sent" in capsys.readouterr().out
    sent = runs(uri)
    assert sent["job"].data.tags[PARENT_TAG] == sent["suite"].info.run_id  # type: ignore[attr-defined]
    assert sent["suite"].data.tags["offline.id"] == "offline-p-suite"  # type: ignore[attr-defined]
