"""`tracking.journal` against a real MLflow store (SQLite in a temporary folder) and real files: every param and
metric of an operation arrives however many batches it takes, a run's end keeps its time, a replay sends exactly
the operations marked unsent (and counts them), keeps a torn last line at the end of the journal it writes back,
and leaves the journal to the caller when asked; a journal's reading skips blank lines and needs the create's
tracking URI; an unsent artifact is copied beside the journal; whether a journal's writer runs is only told on its
own host; a 504 answer (a gateway timeout) is an unreachable server, while an answer of the server itself is not,
whatever error came before it; a NaN or inf metric is standard JSON, sent as it was."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from mlflow.exceptions import RestException
from mlflow.tracking import MlflowClient
from mlflow_store import http_server_answering, new_store, store_home

from specbench.tracking.journal import (
    DamagedJournal,
    Journal,
    apply,
    is_unreachable,
    owner_alive,
    read_entries,
    replay,
    writer,
)

pytestmark = pytest.mark.unit
T0 = 1_700_000_000_000  # ms


class Store:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.uri = new_store(folder)
        self.client = MlflowClient(tracking_uri=self.uri)
        self.exp = self.client.create_experiment("journal", artifact_location=(folder / "art").as_uri())

    def run(self) -> str:
        return self.client.create_run(self.exp, run_name="r", start_time=T0).info.run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with store_home(tmp_path_factory, "journal_store") as folder:
        yield Store(folder)


def test_many_params_and_metrics_all_arrive_in_batches(store: Store) -> None:
    run_id = store.run()
    # 250 params: batches of 100, 100, 50; 901 metrics: batches of 900 and 1
    apply(store.client, run_id, {"op": "params", "params": {f"p{i:03d}": str(i) for i in range(250)}})
    apply(store.client, run_id, {"op": "metrics", "metrics": [[f"m{i:03d}", float(i), T0, 0] for i in range(901)]})
    data = store.client.get_run(run_id).data
    assert data.params == {f"p{i:03d}": str(i) for i in range(250)}
    assert data.metrics == {f"m{i:03d}": float(i) for i in range(901)}


def test_the_end_operation_keeps_its_status_and_time(store: Store) -> None:
    run_id = store.run()
    apply(store.client, run_id, {"op": "end", "status": "KILLED", "end_ms": T0 + 90_000})
    info = store.client.get_run(run_id).info
    assert (info.status, info.end_time) == ("KILLED", T0 + 90_000)


def _create(client: MlflowClient, op: dict[str, Any]) -> str:
    exp = client.get_experiment_by_name(op["experiment"]).experiment_id
    return client.create_run(exp, run_name=op["run_name"], start_time=op["start_ms"]).info.run_id


def test_a_replay_sends_only_what_is_marked_unsent_and_keeps_a_torn_tail(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    entries = [
        {"op": "create", "tracking_uri": store.uri, "experiment": "journal", "run_name": "replayed",
         "tags": {}, "start_ms": T0, "run_id": None, "sent": False},
        {"op": "params", "params": {"arrived": "before"}, "sent": True},  # marked sent: never sent again
        {"op": "metrics", "metrics": [["wer", 0.25, T0, 0]], "sent": False},
        {"op": "end", "status": "FINISHED", "end_ms": T0 + 60_000, "sent": False},
    ]
    torn = '{"op": "tags", "ta'
    path.write_text("".join(json.dumps(e) + "\n" for e in entries) + torn)
    read, tail = read_entries(path)
    assert tail == torn
    run_id, sent = replay(path, lambda uri: store.client, _create, read, remove=False, torn=tail)
    assert sent == 3  # create, metrics, end
    run = store.client.get_run(run_id)
    assert run.data.params == {} and run.data.metrics == {"wer": 0.25} and run.info.status == "FINISHED"
    assert path.is_file()  # remove=False: the caller removes it
    text = path.read_text()
    assert text.endswith("\n" + torn)  # the torn line is kept, still without its newline
    again, tail = read_entries(path)
    assert tail == torn and all(e["sent"] for e in again) and again[0]["run_id"] == run_id
    assert replay(path, lambda uri: store.client, _create, again, remove=True, torn=tail) == (run_id, 0)
    assert not path.exists()


def test_a_nan_or_inf_metric_is_standard_json_and_sent_as_it_was(store: Store, tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    journal.add({"op": "create", "tracking_uri": store.uri, "experiment": "journal", "run_name": "n",
                 "start_ms": T0}, False)
    journal.add({"op": "metrics", "metrics": [("nan", math.nan, T0, 0), ("inf", math.inf, T0, 0)]}, False)
    json.loads(journal.path.read_text().splitlines()[1], parse_constant=int)  # NaN, Infinity: a ValueError
    metrics = store.client.get_run(replay(journal.path, lambda uri: store.client, _create)[0]).data.metrics
    assert math.isnan(metrics["nan"]) and metrics["inf"] == sys.float_info.max  # MLflow's inf


def test_read_entries_skips_blank_lines_and_needs_the_tracking_uri(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    fields = {"op": "create", "tracking_uri": "sqlite:///x.db", "experiment": "e", "run_name": "r", "tags": {},
              "start_ms": T0, "sent": False}
    metrics = '{"op": "metrics", "metrics": [], "sent": false}\n'
    path.write_text(json.dumps(fields) + "\n\n   \n" + metrics)
    entries, torn = read_entries(path)
    assert [e["op"] for e in entries] == ["create", "metrics"] and torn == ""
    path.write_text('{"op": "metrics", "metrics": [], "sent": false}\n' + metrics)
    with pytest.raises(DamagedJournal, match="line 1 is not the run's `create` operation with its tracking_uri"):
        read_entries(path)
    # a create or another operation without a field the replay needs is damaged, not a KeyError later
    path.write_text(json.dumps({**fields, "experiment": None, "tags": "t"}) + "\n" + metrics)
    with pytest.raises(DamagedJournal, match=r"line 1, a 'create' operation, has no valid experiment \(a str\), "
                                             r"tags \(a dict\); nothing of it was sent"):
        read_entries(path)
    path.write_text(json.dumps(fields) + '\n{"op": "end", "sent": false}\n' + metrics)
    with pytest.raises(DamagedJournal, match=r"line 2, a 'end' operation, has no valid status \(a str\)"):
        read_entries(path)


def test_a_journal_is_complete_only_when_every_operation_was_sent(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    journal.add({"op": "params", "params": {}}, sent=True)
    assert journal.complete
    journal.add({"op": "tags", "tags": {}}, sent=False)
    journal.add({"op": "params", "params": {}}, sent=True)
    assert not journal.complete


def test_an_unsent_artifact_is_copied_beside_the_journal_a_sent_one_is_not(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    source = tmp_path / "report.txt"
    source.write_text("hello")
    journal.add({"op": "artifact", "path": str(source), "artifact_path": None}, sent=True)
    journal.add({"op": "artifact", "path": str(source), "artifact_path": "tables"}, sent=False)
    source.unlink()  # a temporary file, gone after the job
    sent, kept = journal.entries()
    assert sent["path"] == str(source)
    copy = Path(kept["path"])
    assert copy.read_text() == "hello" and copy.name == "report.txt"
    assert copy.is_relative_to(tmp_path / "j") and kept["artifact_path"] == "tables"


def test_a_writers_liveness_is_told_only_on_its_own_host() -> None:
    here = socket.gethostname()
    assert owner_alive({"host": here, "pid": os.getpid()}) is True
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid runs no process now
    assert owner_alive({"host": here, "pid": gone.pid}) is False
    assert owner_alive({"host": here + "-elsewhere", "pid": gone.pid}) is None
    assert owner_alive({"host": here + "-elsewhere", "pid": os.getpid()}) is None
    assert owner_alive({"host": here}) is None


def test_a_pid_another_process_holds_now_is_not_the_writer() -> None:
    # as root too, where os.kill(pid, 0) succeeds on any pid
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert owner_alive(writer()) is True
        assert owner_alive({**writer(), "pid": other.pid}) is False
        assert owner_alive({"host": socket.gethostname(), "pid": other.pid}) is True  # an older journal
    finally:
        other.kill()
        other.wait()


def test_a_pid_held_by_a_process_started_after_the_run_is_not_the_writer() -> None:
    here, now_ms = socket.gethostname(), int(time.time() * 1000)
    later = subprocess.Popen(["sleep", "30"])  # after the run below began; no `started`
    try:
        assert owner_alive({"host": here, "pid": later.pid, "start_ms": now_ms - 60_000}) is False
        assert owner_alive({"host": here, "pid": later.pid, "start_ms": now_ms}) is True
        assert owner_alive({"host": here, "pid": os.getpid(), "start_ms": now_ms}) is True
    finally:
        later.kill()
        later.wait()


@pytest.fixture
def gateway_timeout() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 that answers every request 504, as a proxy whose upstream is down does."""
    with http_server_answering(504) as url:
        yield url


def test_a_504_answer_is_an_unreachable_server(gateway_timeout: str) -> None:
    with pytest.raises(requests.HTTPError) as caught:
        requests.get(gateway_timeout, timeout=5).raise_for_status()
    assert caught.value.response.status_code == 504 and is_unreachable(caught.value)


def test_a_server_answer_after_a_transport_error_is_a_refusal() -> None:
    # the server answered INTERNAL_ERROR (HTTP 500) while a connection error was being handled: the answer
    # decides, it came from a server that is there
    try:
        try:
            raise requests.exceptions.ConnectionError("reset by peer")
        except requests.exceptions.ConnectionError:
            raise RestException({"error_code": "INTERNAL_ERROR", "message": "bad row"}) from None
    except RestException as err:
        assert err.__context__ is not None and err.get_http_status_code() == 500
        assert not is_unreachable(err)
