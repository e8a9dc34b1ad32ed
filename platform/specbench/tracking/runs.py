"""One MLflow run per job, with batched logging and an honest end state.

`TrackedRun` opens a run in an experiment (created with a local artifact location when the store is the
embedded SQLite file), logs params, tags and metrics in batches (`log_batch`: one request, not one per
value), and uploads artifacts. Used as a context manager, a job that raises ends its run FAILED with the
error recorded as a tag and an artifact; only a job that returns ends FINISHED.
"""

from __future__ import annotations

import json
import platform as _stdlib_platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from mlflow.tracking import MlflowClient

from specbench.hardware import describe
from specbench.paths import project_root
from specbench.tracking.journal import Journal, apply, is_unreachable
from specbench.tracking.store import local_artifact_root, quiet_mlflow, resolve_tracking_uri

_MAX_PARAM_LEN = 6000


def git_commit(root: Path | None = None) -> str:
    """The checkout's commit (with `-dirty` when it has uncommitted changes), or `unknown`."""
    root = root or project_root()
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, encoding="utf-8",
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, encoding="utf-8", timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def experiment_id(client: MlflowClient, name: str) -> str:
    """The id of experiment `name`, created on first use (local artifacts for a SQLite store)."""
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    location = None
    if client.tracking_uri.startswith("sqlite:") or client.tracking_uri.startswith("file:"):
        location = (local_artifact_root() / name).as_uri()
    return client.create_experiment(name, artifact_location=location)


class TrackedRun:
    """An MLflow run for one job; see the module docstring.

    Every logging call goes through a local journal (tracking.journal): when the tracking server cannot be
    reached, the run carries on offline, keeps what it could not send beside the journal, and says on
    stderr how to send it later (`specbench sync`); nothing is lost and the job is not stopped.
    """

    def __init__(self, experiment: str, run_name: str, tracking_uri: str | None = None,
                 tags: Mapping[str, str] | None = None) -> None:
        quiet_mlflow()
        self.tracking_uri = resolve_tracking_uri(tracking_uri)
        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        base_tags = {
            "git_commit": git_commit(),
            "host": _stdlib_platform.node(),
            "hardware": describe(),
        }
        base_tags.update(tags or {})
        self.journal = Journal()
        self.offline = False
        self._ended = False
        create = {"op": "create", "tracking_uri": self.tracking_uri, "experiment": experiment,
                  "run_name": run_name, "tags": {k: str(v) for k, v in base_tags.items()},
                  "start_ms": int(time.time() * 1000)}
        try:
            exp_id = experiment_id(self.client, experiment)
            run = self.client.create_run(exp_id, run_name=run_name, tags=create["tags"],
                                         start_time=create["start_ms"])
            self.run_id: str = run.info.run_id
            self.experiment_id = exp_id
            self.journal.add({**create, "run_id": self.run_id}, sent=True)
        except Exception as err:  # noqa: BLE001 - only an unreachable server is tolerated
            if not is_unreachable(err):
                raise
            self._go_offline(err)
            self.run_id = f"offline-{self.journal.path.stem}"
            self.experiment_id = ""
            self.journal.add({**create, "run_id": None}, sent=False)

    # -- the journal ---------------------------------------------------------------------------------
    def _go_offline(self, err: BaseException) -> None:
        if not self.offline:
            self.offline = True
            print(f"specbench: warning: the MLflow tracking server {self.tracking_uri} is unreachable "
                  f"({type(err).__name__}); this run continues offline, logged to {self.journal.path}. Send it "
                  "when the server is back with `specbench sync`.", file=sys.stderr, flush=True)

    def _do(self, op: dict[str, Any]) -> None:
        """Send one operation (unless offline) and journal it."""
        sent = False
        if not self.offline:
            try:
                apply(self.client, self.run_id, op)
                sent = True
            except Exception as err:  # noqa: BLE001 - only an unreachable server is tolerated
                if not is_unreachable(err):
                    raise
                self._go_offline(err)
        self.journal.add(op, sent)

    # -- logging -------------------------------------------------------------------------------------
    def log_params(self, params: Mapping[str, Any]) -> None:
        self._do({"op": "params", "params": {k: str(v)[:_MAX_PARAM_LEN] for k, v in params.items()}})

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        if tags:
            self._do({"op": "tags", "tags": {k: str(v) for k, v in tags.items()}})

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        """Log many metrics at one step in batched requests; non-finite values are logged as they are."""
        now = int(time.time() * 1000)
        self._do({"op": "metrics", "metrics": [(k, float(v), now, int(step)) for k, v in metrics.items()]})

    def log_curve(self, name: str, values: list[float], steps: list[int] | None = None) -> None:
        """One metric over steps (a curve's points: step = threshold or k index)."""
        now = int(time.time() * 1000)
        steps = steps if steps is not None else list(range(len(values)))
        self._do({"op": "metrics", "metrics": [(name, float(v), now, int(s)) for v, s in zip(values, steps)]})

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        self._do({"op": "artifact", "path": str(path), "artifact_path": artifact_path})

    def log_text(self, text: str, name: str) -> None:
        """`text` as the artifact `name`, which may hold folders (`tables/sweeps.csv`)."""
        folder, _, filename = name.rpartition("/")
        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / filename
            target.write_text(text, encoding="utf-8")
            self.log_artifact(target, folder or None)

    def log_dict(self, data: Mapping[str, Any], name: str) -> None:
        self.log_text(json.dumps(data, indent=2, sort_keys=True, default=str), name)

    # -- ending --------------------------------------------------------------------------------------
    def _end(self, status: str) -> None:
        self._do({"op": "end", "status": status, "end_ms": int(time.time() * 1000)})
        self._ended = True
        if self.journal.complete:
            self.journal.remove()
        else:
            print(f"specbench: warning: run {self.run_id} is kept in {self.journal.path}; send it with "
                  "`specbench sync` once the MLflow server is back.", file=sys.stderr, flush=True)

    def finish(self) -> None:
        if not self._ended:
            self._end("FINISHED")

    def fail(self, error: BaseException) -> None:
        """End the run FAILED, recording the error message (tag) and the traceback (artifact)."""
        if self._ended:
            return
        message = f"{type(error).__name__}: {error}"
        try:
            self.set_tags({"error": message[:5000], "error_type": type(error).__name__})
            self.log_text("".join(traceback.format_exception(error)), "error.txt")
        finally:
            self._end("FAILED")

    def __enter__(self) -> TrackedRun:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None:
            self.fail(exc)
        else:
            self.finish()


def sync_journals() -> list[tuple[str, str, int]]:
    """Send every kept journal (runs logged while their server was unreachable): [(journal, run id, ops)]."""
    from specbench.tracking.journal import journal_dir, replay

    def create(client: MlflowClient, op: dict[str, Any]) -> str:
        exp = experiment_id(client, op["experiment"])
        return client.create_run(exp, run_name=op["run_name"], tags=op["tags"], start_time=op["start_ms"]).info.run_id

    quiet_mlflow()
    done = []
    for path in sorted(journal_dir().glob("*.jsonl")):
        run_id, count = replay(path, lambda uri: MlflowClient(tracking_uri=uri), create)
        done.append((path.name, run_id, count))
    return done
