"""One MLflow run per job, with batched logging and an honest end state.

`TrackedRun` opens a run in an experiment (created with a local artifact location when the store is the
embedded SQLite file), logs params, tags and metrics in batches (`log_batch`: one request, not one per
value), and uploads artifacts. Used as a context manager, a job that raises ends its run FAILED with the
error recorded as a tag and an artifact; only a job that returns ends FINISHED.

A run opened with `parent=` is a nested child run of that one (MLflow's `mlflow.parentRunId` tag, what
`mlflow.start_run(nested=True)` sets): a suite is one parent run with a child run per job, all in the
suite's experiment, so that the MLflow UI lists the children under their parent. `set_description` writes
the run's description (`mlflow.note.content`, shown on the run's page).
"""

from __future__ import annotations

import platform as _stdlib_platform
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from mlflow.tracking import MlflowClient

from specbench.errors import SpecbenchError
from specbench.hardware import describe, git_commit
from specbench.text_files import json_text
from specbench.tracking.journal import (
    LASTING_LOCAL_FAULTS,
    Journal,
    apply,
    foreign_status,
    is_unreachable,
    mlflow_server,
    not_mlflow,
    refused_host,
    writer,
)
from specbench.tracking.store import (
    check_sqlite_store,
    local_artifact_root,
    quiet_mlflow,
    resolve_tracking_uri,
)

_MAX_PARAM_LEN = 6000
PARENT_TAG = "mlflow.parentRunId"  # what MLflow's nested runs carry
DESCRIPTION_TAG = "mlflow.note.content"  # the run's description in the MLflow UI (Markdown)
OFFLINE_PREFIX = "offline-"  # the id of a run that could not be created yet: offline-<journal name>
OFFLINE_ID_TAG = "offline.id"  # on a run `specbench sync` created from a journal: the offline id it had


def experiment_id(client: MlflowClient, name: str) -> str:
    """The id of experiment `name`, created on first use (local artifacts for a SQLite store). An experiment
    of that name that was deleted (MLflow keeps it, and its name, until `mlflow gc`) is a SpecbenchError
    that says how to restore it, purge it or pick another name: MLflow would refuse runs in it with a bare
    error."""
    exp = client.get_experiment_by_name(name)
    if exp is not None and exp.lifecycle_stage == "deleted":
        uri, number = client.tracking_uri, exp.experiment_id
        store = (f"--backend-store-uri {uri}" if not uri.startswith(("http:", "https:")) else
                 "--backend-store-uri STORE (the server's own database, on its machine)")
        raise DeletedExperiment(
            f'[tracking] experiment = "{name}": the MLflow experiment {name!r} (id {number}) in {uri} was '
            "deleted (in the MLflow UI, or `mlflow experiments delete`); MLflow logs no run to a deleted "
            "experiment, and its name stays taken until it is purged. Fix: restore it "
            f"(`MLFLOW_TRACKING_URI={uri} mlflow experiments restore --experiment-id {number}`); or delete "
            f"it for good, its runs and artifacts with it (`MLFLOW_TRACKING_URI={uri} mlflow gc {store} "
            f"--experiment-ids {number}`), after which the job creates it afresh; or give the job another "
            'name under [tracking] experiment = "...".')
    local = client.tracking_uri.startswith(("sqlite:", "file:"))
    if exp is not None and local and str(exp.artifact_location).startswith("mlflow-artifacts:"):
        raise SpecbenchError(  # MLflow would fail the job's first artifact with its own words
            f'[tracking] experiment = "{name}": its artifacts ({exp.artifact_location}) are kept by an MLflow '
            f"server (it was created through `specbench server`), which a local store ({client.tracking_uri}) "
            "cannot write to. Fix: log through that server (--tracking-uri http://HOST:PORT), or give the job "
            'another name under [tracking] experiment = "...".')
    if exp is not None:
        return exp.experiment_id
    location = None
    if local:
        location = (local_artifact_root() / artifact_folder(name)).as_uri()
    return client.create_experiment(name, artifact_location=location)


def artifact_folder(experiment: str) -> str:
    """The local artifact folder of `experiment`: one path component whatever the name holds (a `/`, `..`),
    so that no name puts artifacts outside `local_artifact_root()`."""
    return re.sub(r"[^\w.-]", "_", experiment).lstrip(".") or "_"


def _local_fault(err: OSError) -> SpecbenchError:
    """A local store's lasting write error (`is_unreachable` does not tolerate it), naming the path."""
    return SpecbenchError(f"the local MLflow store cannot write {err.filename!r}: {err.strerror}. Fix: make "
                          "that path a writable folder, or point SPECBENCH_HOME or --tracking-uri elsewhere")


class DeletedExperiment(SpecbenchError):
    """The experiment a job logs to was deleted in MLflow (and not purged): see `experiment_id`."""


class TrackedRun:
    """An MLflow run for one job; see the module docstring.

    Every logging call goes through a local journal (tracking.journal): when the tracking server cannot be
    reached, the run carries on offline, keeps what it could not send beside the journal, and says on
    stderr how to send it later (`specbench sync`); nothing is lost and the job is not stopped. The child
    of an offline parent starts offline too, so that `specbench sync` can point it at the parent's new id.

    `metrics` holds the latest value of every metric logged with `log_metrics` (the suite's parent run
    reads its children's headline metrics from it, online or not).
    """

    def __init__(self, experiment: str, run_name: str, tracking_uri: str | None = None,
                 tags: Mapping[str, str] | None = None, parent: TrackedRun | None = None) -> None:
        quiet_mlflow()
        self.tracking_uri = resolve_tracking_uri(tracking_uri)
        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        base_tags = {
            "git_commit": git_commit(),
            "host": _stdlib_platform.node(),
            "hardware": describe(),
        }
        base_tags.update(tags or {})
        if parent is not None:
            base_tags[PARENT_TAG] = parent.run_id
        self.experiment = experiment
        self.run_name = run_name
        self.hardware = base_tags["hardware"]  # the machine the run measures on (the nightly matches speed by it)
        self.metrics: dict[str, float] = {}
        self.journal = Journal()
        self.offline = False
        self._ended = False
        self._described = False
        create = {"op": "create", "tracking_uri": self.tracking_uri, "experiment": experiment,
                  "run_name": run_name, "tags": {k: str(v) for k, v in base_tags.items()},
                  "start_ms": int(time.time() * 1000), **writer()}
        try:
            with mlflow_server(tracking_uri):  # a server that is not MLflow's is an error, not an outage
                if parent is not None and parent.offline:
                    raise ConnectionError(f"the parent run {parent.run_id} is offline")
                exp_id = experiment_id(self.client, experiment)
                run = self.client.create_run(exp_id, run_name=run_name, tags=create["tags"],
                                             start_time=create["start_ms"])
            self.run_id: str = run.info.run_id
            self.experiment_id = exp_id
            self.journal.add({**create, "run_id": self.run_id}, sent=True)
        except Exception as err:  # noqa: BLE001 - only an unreachable server is tolerated
            if isinstance(err, OSError) and err.errno in LASTING_LOCAL_FAULTS:
                raise _local_fault(err) from err
            if not is_unreachable(err):
                raise
            self._go_offline(err)
            self.run_id = f"{OFFLINE_PREFIX}{self.journal.path.stem}"
            self.experiment_id = ""
            self.journal.add({**create, "run_id": None}, sent=False)

    # -- the journal ---------------------------------------------------------------------------------
    def _go_offline(self, err: BaseException) -> None:
        if not self.offline:
            self.offline = True
            print(f"specbench: warning: the MLflow tracking server {self.tracking_uri} is unreachable; "
                  f"this run continues offline, logged to {self.journal.path}. Send it "
                  "when the server is back with `specbench sync`.", file=sys.stderr, flush=True)

    def _do(self, op: dict[str, Any]) -> None:
        """Send one operation (unless offline) and journal it."""
        sent = False
        if not self.offline:
            try:
                apply(self.client, self.run_id, op)
                sent = True
            except Exception as err:  # noqa: BLE001 - only an unreachable server is tolerated
                if isinstance(err, OSError) and err.errno in LASTING_LOCAL_FAULTS:
                    raise _local_fault(err) from err
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

    def set_description(self, lines: list[str]) -> None:
        """The run's description in the MLflow UI: `lines` (a job's or suite's summary, as the command line
        prints it) as a preformatted block."""
        body = "\n".join(line.rstrip() for line in lines)
        self.set_tags({DESCRIPTION_TAG: f"```text\n{body}\n```"})
        self._described = True

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        """Log many metrics at one step in batched requests; non-finite values are logged as they are."""
        now = int(time.time() * 1000)
        self.metrics.update({k: float(v) for k, v in metrics.items()})
        self._do({"op": "metrics", "metrics": [(k, float(v), now, int(step)) for k, v in metrics.items()]})

    def log_curve(self, name: str, values: list[float], steps: list[int] | None = None) -> None:
        """One metric over steps (a curve's points: step = threshold or k index); `steps`, when given, holds
        one step per value (ValueError otherwise, before anything is logged)."""
        now = int(time.time() * 1000)
        steps = steps if steps is not None else list(range(len(values)))
        if len(steps) != len(values):
            raise ValueError(f"curve {name!r} has {len(values)} values but {len(steps)} steps; give one step per value")
        self._do({"op": "metrics", "metrics": [(name, float(v), now, int(s)) for v, s in zip(values, steps)]})

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        # checked here: MLflow's copy would raise FileNotFoundError, an OSError that reads as a store outage
        if not Path(path).exists():
            raise SpecbenchError(f"cannot log the artifact {path}: no such file or folder (the job did not write "
                                 "it), so nothing was sent or journaled for it")
        self._do({"op": "artifact", "path": str(path), "artifact_path": artifact_path})

    def log_text(self, text: str, name: str) -> None:
        """`text` as the artifact `name`, which may hold folders (`tables/sweeps.csv`)."""
        folder, _, filename = name.rpartition("/")
        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / filename
            target.write_text(text, encoding="utf-8")
            self.log_artifact(target, folder or None)

    def log_dict(self, data: Mapping[str, Any], name: str) -> None:
        self.log_text(json_text(data, indent=2, sort_keys=True, default=str), name)

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
        if isinstance(error, SystemExit):  # once Ray is connected, its SIGTERM handler raises SystemExit(1)
            message = (f"stopped before it finished: the process was asked to exit (SystemExit {error}), as "
                       "Ray's handler does on SIGTERM, e.g. from `ray job stop`")
        try:
            self.set_tags({"error": message[:5000], "error_type": type(error).__name__})
            if not self._described:
                self.set_description([f"{self.run_name}: FAILED", f"  {message[:2000]}"])
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


@dataclass(frozen=True)
class SyncReport:
    """What `sync_journals` did: `sent` [(journal, run id, operations sent)], and `problems`, one message per
    journal that could not be sent whole (a damaged one, left in place and unsent; a torn one, whose
    complete operations were sent)."""

    sent: list[tuple[str, str, int]]
    problems: list[str]
    busy: list[str]  # journals of runs that may still be going, each with why: left for a later sync
    kept: list[str] = field(default_factory=list)  # journals whose server is unreachable, each with the fix
    down: dict[str, str] = field(default_factory=dict)  # server URI -> why it is unreachable (this sync)


ABANDONED_ERROR = ("the job's process stopped before it ended its run (its journal records no end, and the "
                   "process that wrote it is gone), so `specbench sync` ended it FAILED")
TORN_ERROR = ("the job's process stopped while writing its journal (its last line is half-written), so the "
              "run never ended; `specbench sync` ended it FAILED")


def sync_journals() -> SyncReport:
    """Send every kept journal (runs logged while their server was unreachable). A child run whose parent was
    offline too is sent after its parent and pointed at the parent's new run id; while the parent's journal is
    not sent (its job still runs, say), the child's is kept and listed in `busy`, and goes in the sync that
    sends the parent (sent alone, it would keep the parent's offline id for ever).

    A journal that records its run's end is sent and removed. One that does not is sent only when the process
    that wrote it is known to be gone (same host, pid no longer running): its run is then ended FAILED with
    the reason as its `error` tag, unless the server has it ended, rather than left RUNNING for ever; while
    that process runs, or where it cannot be told (written on another host, or by a specbench that did not
    record its writer), the journal is left alone and listed in `busy` with why. A journal that another
    `specbench sync` is sending (it holds the journal's lock, `journal.replay_lock`) is left to it and listed
    in `busy` too, so that two syncs at once never send it twice. A damaged journal (empty, or
    with a line that is not an operation) is reported and left in place. A journal whose last line is
    half-written (a crash while writing it) has its complete operations sent; the half line is kept as
    `<journal>.torn`. A refusal of the server for one journal (its run deleted, say) is reported for that
    journal and does not stop the others; so is a server that is not MLflow's. Each journal's server is tried
    on its own: a journal whose server is unreachable is kept and listed in `kept` (with its server and the
    fix; later journals of that server are kept without trying it again), and the others are sent. A journal
    is removed only once all of it is on the server; what arrived before a stop (the run's id first of all) is
    written back to it as sent as the replay goes (`journal.replay`), so a later sync resumes the same run and
    sends only the rest."""
    from specbench.tracking.journal import journal_dir

    quiet_mlflow()
    report = SyncReport([], [], [])
    new_ids: dict[str, str] = {}  # offline-<journal name> -> the run id the replay created
    waiting: dict[Path, str] = {}  # child journal -> its parent's offline id, whose journal is not sent yet
    for path in sorted(journal_dir().glob("*.jsonl")):
        parent = _sync_locked(path, report, new_ids)
        if parent is not None:
            waiting[path] = parent
    while ready := [path for path, parent in waiting.items() if parent in new_ids]:  # parents sent later on
        for path in ready:
            del waiting[path]
            _sync_locked(path, report, new_ids)
    for path, parent in waiting.items():
        report.busy.append(f"{path}: the journal of its parent run ({parent}) is not sent yet; it is sent in the "
                           "sync that sends its parent, so that it is nested under the parent's new run")
    return report


def _sync_locked(path: Path, report: SyncReport, new_ids: dict[str, str]) -> str | None:
    """`_sync_journal` under the journal's lock; a journal another sync holds is left to it (`busy`)."""
    from specbench.tracking.journal import replay_lock

    with replay_lock(path) as held:
        if not held:
            report.busy.append(f"{path}: another `specbench sync` is sending it now")
            return None
        if not path.exists():  # another sync sent it since this one listed the journals
            return None
        return _sync_journal(path, report, new_ids)


def _parent_unsent(parent: str, new_ids: dict[str, str]) -> bool:
    """Whether the offline parent run `parent` (offline-<journal name>) still has a journal to send."""
    from specbench.tracking.journal import journal_dir

    name = parent.removeprefix(OFFLINE_PREFIX)
    return parent not in new_ids and (journal_dir() / f"{name}.jsonl").is_file()


def _sync_journal(path: Path, report: SyncReport, new_ids: dict[str, str]) -> str | None:
    """Send one journal (its lock held) as `sync_journals` says, recording what happened in `report` and the
    run id it got in `new_ids`. A child whose offline parent's journal is not sent yet is not sent: returns
    the parent's offline id (else None)."""
    from mlflow.exceptions import MlflowException

    from specbench.tracking.journal import DamagedJournal, owner_alive, read_entries, replay

    def create(client: MlflowClient, op: dict[str, Any]) -> str:
        exp = experiment_id(client, op["experiment"])
        tags = {**op["tags"], OFFLINE_ID_TAG: f"{OFFLINE_PREFIX}{path.stem}"}  # a later sync finds it by this
        return client.create_run(exp, run_name=op["run_name"], tags=tags, start_time=op["start_ms"]).info.run_id

    problems = report.problems
    try:
        entries, torn = read_entries(path)
    except DamagedJournal as err:
        problems.append(str(err))
        return None
    first = entries[0]
    ended = any(e.get("op") == "end" for e in entries)
    alive = None if ended else owner_alive(first)
    if not ended and alive is not False:
        where = first.get("host")
        report.busy.append(f"{path}: its run has not ended and " + (
            "the process that writes it still runs" if alive else
            f"it was written on host {where}: sync there, or once its job has ended" if where else
            "it does not name the process that writes it: sync once its job has ended"))
        return None
    parent = first.get("tags", {}).get(PARENT_TAG, "")
    if parent.startswith(OFFLINE_PREFIX) and _parent_unsent(parent, new_ids):
        return parent
    uri = first["tracking_uri"]
    if uri in report.down:  # tried for an earlier journal of this sync
        report.kept.append(_kept(path, uri, report.down[uri]))
        return None
    kept = path.with_suffix(".torn")
    try:
        client = MlflowClient(tracking_uri=check_sqlite_store(uri, "its tracking_uri"))
        run_id, count = replay(path, lambda uri, client=client: client, create, entries, remove=False,
                               torn=torn)
        if not ended:  # its process is gone without ending the run
            problems.append(_end_abandoned(client, path, run_id, kept if torn else None))
        if parent.startswith(OFFLINE_PREFIX) and parent not in new_ids:  # its parent went in an earlier sync
            sent = _run_of_offline_id(client, first["experiment"], parent)
            if sent is not None:
                new_ids[parent] = sent
        if parent in new_ids:  # its parent was offline too: nest it under the parent's new run
            client.set_tag(run_id, PARENT_TAG, new_ids[parent])
    except SpecbenchError as err:  # a deleted experiment (nothing of it was sent), a store that is no SQLite
        problems.append(f"journal {path}: {err} Then sync again: the journal is kept.")
        return None
    except Exception as err:  # noqa: BLE001 - each journal's server on its own
        if is_unreachable(err):
            report.down[uri] = " ".join(str(err).split())[:200] or type(err).__name__
            report.kept.append(_kept(path, uri, report.down[uri]))
            return None
        if not isinstance(err, MlflowException):
            raise
        status = foreign_status(err)
        if status is not None and (host := refused_host(uri, status, err.message)):
            problems.append(f"journal {path}: {uri} refuses the host name {host!r} (HTTP 403); the journal is "
                            f"kept. Fix: start it with `specbench server --allowed-hosts {host}`, then sync.")
            return None
        if status is not None:
            problems.append(f"journal {path}: its tracking_uri {not_mlflow(uri, status)}; the journal is "
                            f"kept. Fix: {_RETARGET.format(path=path)}")
            return None
        problems.append(f"journal {path}: the server refused it ({' '.join(str(err).split())[:300]}); "
                        f"what arrived is marked sent in it. Fix: if its run was deleted on purpose, move "
                        f"the journal aside (`mv {path} {path}.refused`); else look at the run and sync again.")
        return None
    if torn:
        kept.write_text(torn, encoding="utf-8")
        problems.append(f"journal {path} had a half-written last line (its process died while writing "
                        f"it): the {len(entries)} complete operations before it were sent to run {run_id}; "
                        f"the half line cannot be read back and is kept in {kept}. Fix: check run {run_id} "
                        f"(`specbench runs`), then delete {kept}.")
    new_ids[f"{OFFLINE_PREFIX}{path.stem}"] = run_id
    Journal(path).remove()  # only once everything, the run's end included, is on the server
    report.sent.append((path.name, run_id, count))
    return None


_RETARGET = ("if its tracking_uri (in its first line) is a mistake, write there the address of the right "
             "server (the one `specbench server` prints) and run `specbench sync` again, or move the journal "
             "aside (`mv {path} {path}.unsent`) so that `specbench sync` passes it by; the run is in it and "
             "nowhere else.")


def _kept(path: Path, uri: str, why: str) -> str:
    return (f"journal {path}: its MLflow server {uri} is still unreachable ({why}); the journal is kept. "
            "Fix: start that server and run `specbench sync` again (it sends every journal still there); "
            + _RETARGET.format(path=path))


def _run_of_offline_id(client: MlflowClient, experiment: str, offline_id: str) -> str | None:
    """The run an earlier sync created from the journal of `offline_id` (its `offline.id` tag), or None (a
    parent that was never sent, or one sent before the tag existed)."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return None
    found = client.search_runs([exp.experiment_id], filter_string=f"tags.`{OFFLINE_ID_TAG}` = '{offline_id}'",
                               max_results=1)
    return found[0].info.run_id if found else None


def _end_abandoned(client: MlflowClient, path: Path, run_id: str, kept: Path | None) -> str:
    """After the operations of a journal whose process died before ending its run were sent: end the run
    FAILED unless the server has it ended; the message that says so."""
    status = client.get_run(run_id).info.status
    if status == "RUNNING":
        client.set_tag(run_id, "error", TORN_ERROR if kept else ABANDONED_ERROR)
        client.set_terminated(run_id, "FAILED")
    how = "it is now ended FAILED" if status == "RUNNING" else f"the server has it ended ({status})"
    return (f"journal {path} records no end of its run and the process that wrote it is gone (the job stopped "
            f"without ending it): its operations were sent to run {run_id}, and {how}. Fix: check run {run_id} "
            "(`specbench runs`) and rerun the job.")
