"""A local journal of a run's logging, so that an MLflow server that is down during a job loses nothing.

Every logging call of a `TrackedRun` becomes an operation (create, params, tags, metrics, artifact, end)
appended to `.specbench/journal/<id>.jsonl` with whether it reached the server. When the server is
unreachable the run goes on offline (artifacts are copied beside the journal); `specbench sync` later sends
every operation that did not reach it, in order, to the same run (created then if it never was). A journal
whose operations all arrived is deleted when its run ends.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from specbench.paths import work_dir

UNREACHABLE_HINTS = ("Max retries exceeded", "Connection refused", "Failed to establish", "Connection aborted",
                     "Connection reset", "Read timed out", "RemoteDisconnected", "503", "502")


def journal_dir() -> Path:
    return work_dir() / "journal"


def is_unreachable(err: BaseException) -> bool:
    """Whether an error means the tracking server could not be reached (not a refused request)."""
    if isinstance(err, (ConnectionError, OSError)):
        return True
    text = str(err)
    return isinstance(err, MlflowException) and any(h in text for h in UNREACHABLE_HINTS) or (
        type(err).__module__.startswith(("requests", "urllib3")))


class Journal:
    """The operations of one run, one JSON line each: {"op", "sent", ...}."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or journal_dir() / f"{uuid.uuid4().hex}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def add(self, op: dict[str, Any], sent: bool) -> None:
        if op["op"] == "artifact" and not sent:  # temp files vanish: keep a copy for the replay
            keep = self.path.with_suffix("") / uuid.uuid4().hex / Path(op["path"]).name
            keep.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(op["path"], keep)
            op = dict(op, path=str(keep))
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({**op, "sent": sent}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def entries(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]

    @property
    def complete(self) -> bool:
        return all(e["sent"] for e in self.entries())

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        shutil.rmtree(self.path.with_suffix(""), ignore_errors=True)


def apply(client: MlflowClient, run_id: str, op: dict[str, Any]) -> None:
    """Send one operation to the server (not `create`, which `replay` handles)."""
    kind = op["op"]
    if kind == "params":
        items = [Param(k, v) for k, v in op["params"].items()]
        for i in range(0, len(items), 100):
            client.log_batch(run_id, params=items[i:i + 100])
    elif kind == "tags":
        client.log_batch(run_id, tags=[RunTag(k, v) for k, v in op["tags"].items()])
    elif kind == "metrics":
        items = [Metric(k, v, ts, step) for k, v, ts, step in op["metrics"]]
        for i in range(0, len(items), 900):
            client.log_batch(run_id, metrics=items[i:i + 900])
    elif kind == "artifact":
        client.log_artifact(run_id, op["path"], op.get("artifact_path"))
    elif kind == "end":
        client.set_terminated(run_id, op["status"], end_time=op.get("end_ms"))
    else:
        raise ValueError(f"unknown journal operation {kind!r}")


def replay(path: Path, client_for: Callable[[str], MlflowClient],
           create: Callable[[MlflowClient, dict[str, Any]], str]) -> tuple[str, int]:
    """Send the unsent operations of one journal; returns (run id, operations sent). The journal is
    removed once everything arrived."""
    journal = Journal(path)
    entries = journal.entries()
    first = entries[0]
    client = client_for(first["tracking_uri"])
    run_id = first.get("run_id")
    sent = 0
    if not first["sent"]:
        run_id = create(client, first)
        sent += 1
    for entry in entries[1:]:
        if not entry["sent"]:
            apply(client, run_id, entry)
            sent += 1
    journal.remove()
    return run_id, sent
