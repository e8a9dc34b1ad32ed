"""A local journal of a run's logging, so that an MLflow server that is down during a job loses nothing.

Every logging call of a `TrackedRun` becomes an operation (create, params, tags, metrics, artifact, end)
appended to `.specbench/journal/<id>.jsonl` with whether it reached the server. When the server is
unreachable the run goes on offline (artifacts are copied beside the journal); `specbench sync` later sends
every operation that did not reach it, in order, to the same run (created then if it never was). A journal
whose operations all arrived is deleted when its run ends. A journal that cannot be read back is named and
passed by; one whose last line a crash left half-written has its complete lines sent (`read_entries`,
`runs.sync_journals`).
"""

from __future__ import annotations

import errno
import fcntl
import functools
import inspect
import json
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import requests
import urllib3
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException, RestException
from mlflow.tracking import MlflowClient

from specbench.errors import SpecbenchError
from specbench.paths import work_dir, work_dir_location
from specbench.text_files import json_number, json_text
from specbench.tracking.store import ENV_URI, OPTION, resolve_tracking_uri, uri_source

T = TypeVar("T")

# HTTP statuses that say the server (or the proxy before it) cannot serve now, not that it refused the request
UNREACHABLE_STATUS = frozenset({502, 503, 504})
# transport failures: no HTTP answer at all (refused, reset, timed out), or only transient failures until
# MLflow's retries ran out (requests' RetryError: 408, 429, 500, 502, 503, 504 each time)
_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionError, TimeoutError, requests.exceptions.ConnectionError, requests.exceptions.Timeout,
    requests.exceptions.RetryError, requests.exceptions.ChunkedEncodingError, urllib3.exceptions.HTTPError)


def journal_dir() -> Path:
    return work_dir() / "journal"


# a local store's write errors that waiting does not cure (a file where a folder should be, no permission)
LASTING_LOCAL_FAULTS = (errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM, errno.EROFS)


def is_unreachable(err: BaseException) -> bool:
    """Whether an error means the tracking server could not be reached (not a refused request). Decided by the
    HTTP status (502, 503, 504: unreachable; any other answer: refused) and by the type of a transport error,
    never by the message, which quotes run ids and values. MLflow wraps a transport error in a generic
    MlflowException (INTERNAL_ERROR, its message quoting the original), so such a wrapper is judged by the
    error it was raised from."""
    seen: set[int] = set()
    link: BaseException | None = err
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        status = _http_status(link)
        if status is not None:
            return status in UNREACHABLE_STATUS
        if isinstance(link, _TRANSPORT_ERRORS):
            return True
        if not isinstance(link, MlflowException):  # a local store's I/O failure counts, unless it will last
            if isinstance(link, OSError):
                return link.errno not in LASTING_LOCAL_FAULTS
            return type(link).__module__.startswith(("requests", "urllib3"))
        link = link.__cause__ or (link.__context__ if _is_http_library_error(link.__context__) else None)
    return False


# how MLflow's REST client words an answer that is not MLflow's JSON (its message's start, before the body)
_FOREIGN_ANSWER = re.compile(r"API request to endpoint (?:\S+ failed with error code (\d+) |"
                             r"was successful but the response body was not in a valid JSON format)")


class NotMlflowServer(SpecbenchError):
    """A tracking URI whose server answers HTTP, but not as an MLflow tracking server: a configuration error
    (a wrong address), not an outage, so nothing is journaled for it."""


def foreign_status(err: BaseException) -> int | None:
    """The HTTP status of an answer no MLflow server gives (its body is not a JSON object: every answer of
    MLflow's API, errors included, is one), e.g. a web server's or a dashboard's page; None for any other
    error, and for 502, 503, 504 (a proxy whose server is down: `is_unreachable`). Judged by the fixed start
    of the message of MLflow's REST client, which quotes the body only after it."""
    if not isinstance(err, MlflowException) or isinstance(err, RestException):
        return None
    found = _FOREIGN_ANSWER.match(err.message)
    status = None if found is None else int(found.group(1) or 200)
    return None if status in UNREACHABLE_STATUS else status


def refused_host(uri: str, status: int, message: str) -> str | None:
    """The host name of `uri` when an MLflow server refused it (its Host-header check: HTTP 403), else None."""
    return urllib3.util.parse_url(uri).host if status == 403 and "Invalid Host header" in message else None


def not_mlflow(uri: str, status: int) -> str:
    """What is wrong with a server whose answer has `foreign_status`."""
    return (f"{uri} answers HTTP but is not an MLflow tracking server (it answered MLflow's API with HTTP "
            f"{status} and a body that is not MLflow's JSON: the page of another service on that port, say)")


@contextmanager
def mlflow_server(explicit: str | None) -> Iterator[None]:
    """Within: an MLflow error with a `foreign_status` raises NotMlflowServer naming the tracking URI
    (`explicit`, else the environment's), where it came from, the status and the fix."""
    try:
        yield
    except MlflowException as err:
        status = foreign_status(err)
        if status is None:
            raise
        uri, source = resolve_tracking_uri(explicit), uri_source(explicit) or OPTION
        if host := refused_host(uri, status, err.message):
            raise NotMlflowServer(f"{source} {uri!r}: MLflow refuses the host name {host!r} (HTTP 403). Fix: "
                                  f"start it with `specbench server --allowed-hosts {host}`.") from err
        raise NotMlflowServer(f"{source} {uri!r}: {not_mlflow(uri, status)}. Fix: point {OPTION} (or "
                              f"{ENV_URI}) at the address `specbench server` prints (http://HOST:PORT, port "
                              "5000 by default).") from err


def server_checked(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn`, whose argument `tracking_uri` names the store, within `mlflow_server`."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> T:
        with mlflow_server(signature.bind(*args, **kwargs).arguments.get("tracking_uri")):
            return fn(*args, **kwargs)

    return checked


def _http_status(err: BaseException) -> int | None:
    """The HTTP status an error carries: requests' `response.status_code`, or that of an MlflowException
    that names a specific error code (a server's answer, e.g. RESOURCE_DOES_NOT_EXIST: 404,
    TEMPORARILY_UNAVAILABLE: 503); None for a generic INTERNAL_ERROR, which may wrap a transport error."""
    response = getattr(err, "response", None)
    code = getattr(response, "status_code", None)
    if isinstance(code, int):
        return code
    specific = isinstance(err, RestException) or getattr(err, "error_code", None) != "INTERNAL_ERROR"
    if isinstance(err, MlflowException) and specific:
        return int(err.get_http_status_code())
    return None


def _is_http_library_error(err: BaseException | None) -> bool:
    return err is not None and type(err).__module__.startswith(("requests", "urllib3"))


class Journal:
    """The operations of one run, one JSON line each: {"op", "sent", ...}. Its first line, the run's `create`,
    names the host and the process id that write it, so that `specbench sync` can tell a journal whose job is
    still going (`owner_alive`) from one whose job died."""

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
            fh.write(json_text({**op, "sent": sent}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def entries(self) -> list[dict[str, Any]]:
        """The operations this process wrote, in order (the live run's own view; `read_entries` is the strict
        reading `specbench sync` makes of a journal whose process is gone)."""
        lines = self.path.read_text(encoding="utf-8").splitlines() if self.path.is_file() else []
        return [json.loads(line) for line in lines if line.strip()]

    @property
    def complete(self) -> bool:
        return all(e["sent"] for e in self.entries())

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        shutil.rmtree(self.path.with_suffix(""), ignore_errors=True)
        lock_path(self.path).unlink(missing_ok=True)


def lock_path(path: Path) -> Path:
    """The lock file of the journal `path` (`<id>.lock` beside it): a sync holds the lock on it, not on the
    journal, which a replay replaces (atomically, by a new file) each time it saves its progress."""
    return path.with_suffix(".lock")


@contextmanager
def replay_lock(path: Path) -> Iterator[bool]:
    """Within: True when this process holds the journal's lock (an exclusive, non-blocking `flock` on its
    lock file), so that no other `specbench sync` sends it meanwhile; False, at once, when another process
    holds it. A lock file removed meanwhile (with its journal, by the sync that sent it) is made anew; the
    lock file is removed on the way out once its journal is gone."""
    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            yield False
            return
        try:
            held = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            held = False
        if held:
            break
        os.close(fd)  # the lock file this process locked is no longer the journal's: lock the one there now
    try:
        yield True
    finally:
        if not path.exists():
            lock.unlink(missing_ok=True)  # still held: no other sync is inside
        os.close(fd)


def writer() -> dict[str, Any]:
    """The host, pid and process start a run's `create` operation records (see `owner_alive`)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": process_start(os.getpid())}


def process_start(pid: int) -> str | None:
    """When process `pid` started (boot id and clock ticks since boot); None where /proc does not say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="utf-8").strip()
        return f"{boot}:{stat.rpartition(')')[2].split()[19]}"  # field 22
    except (OSError, IndexError):
        return None


def started_at(start: str) -> float | None:
    """The epoch time of a `process_start` (/proc/stat btime plus its ticks); None if unknown."""
    try:
        lines = Path("/proc/stat").read_text(encoding="utf-8").splitlines()
        boot = next(int(line.split()[1]) for line in lines if line.startswith("btime "))
        return boot + int(start.rpartition(":")[2]) / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, IndexError, ValueError):
        return None


CLOCK_SLACK_S = 5.0  # btime is in whole seconds


def owner_alive(create: dict[str, Any]) -> bool | None:
    """Whether the process that writes a journal (its `create` operation's host and pid) still runs: True or
    False on the host it ran on; None where that cannot be told here (another host, or a journal that does not
    name its writer). A pid another process holds now reads as gone where the journal records its writer's
    start (`writer`) and that differs, or, without it, started after the run (`start_ms`); else as alive."""
    pid = create.get("pid")
    if create.get("host") != socket.gethostname() or not isinstance(pid, int):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user holds that pid (never raised for root)
        pass
    now = process_start(pid)
    if create.get("started") or not now:
        return not (now and now != create["started"])
    began, created = started_at(now), create.get("start_ms")
    return not (began and isinstance(created, (int, float)) and began > created / 1000 + CLOCK_SLACK_S)


def orphaned_runs() -> set[str]:
    """The ids of the runs whose journal here names a writer that is gone (`owner_alive` False)."""
    found = set()
    for path in (work_dir_location() / "journal").glob("*.jsonl"):
        try:
            with path.open(encoding="utf-8") as fh:
                first = json.loads(fh.readline())
        except (OSError, ValueError):
            continue
        if isinstance(first, dict) and isinstance(first.get("run_id"), str) and owner_alive(first) is False:
            found.add(first["run_id"])
    return found


class DamagedJournal(SpecbenchError):
    """A journal file that cannot be read back: empty, or with a line that is not an operation."""


def read_entries(path: Path) -> tuple[list[dict[str, Any]], str]:
    """(the complete operations of a journal, its half-written last line or ''). Every operation is written as
    one whole line ending in a newline and fsynced, so a line without its newline at the end of the file is
    what a process that died while writing leaves (a torn tail). Raises DamagedJournal (naming the file and
    the line) when the file is empty, holds no complete operation, or has a line elsewhere that is not one."""
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    last = lines.pop()  # '' when the file ends with a newline
    entries: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            entries.append(_operation(path, number, line))
    torn = ""
    if last.strip():
        try:
            entries.append(_operation(path, len(lines) + 1, last))
        except DamagedJournal:
            torn = last
    if not entries:
        what = "it is empty" if not text.strip() else "it holds only a half-written line"
        raise DamagedJournal(_damaged(path, what))
    first = entries[0]
    if first.get("op") != "create" or not isinstance(first.get("tracking_uri"), str):
        raise DamagedJournal(_damaged(path, "line 1 is not the run's `create` operation with its "
                                            "tracking_uri"))
    return entries, torn


def _operation(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        entry = json.loads(line)
    except json.JSONDecodeError as err:
        raise DamagedJournal(_damaged(path, f"line {number} is not valid JSON ({err.msg})")) from err
    if not isinstance(entry, dict) or "op" not in entry or "sent" not in entry:
        raise DamagedJournal(_damaged(path, f"line {number} is not an operation (an object with op and "
                                            "sent)"))
    wrong = [f"{key} (a {getattr(kind, '__name__', 'number')})" for key, kind in _FIELDS.get(entry["op"], {}).items()
             if not isinstance(entry.get(key), kind) or isinstance(entry.get(key), bool)]
    if wrong:
        raise DamagedJournal(_damaged(path, f"line {number}, a {entry['op']!r} operation, has no valid "
                                            f"{', '.join(wrong)}"))
    return entry


# the fields each operation needs when it is sent, with their types
_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "create": {"tracking_uri": str, "experiment": str, "run_name": str, "tags": dict, "start_ms": (int, float)},
    "params": {"params": dict}, "tags": {"tags": dict}, "metrics": {"metrics": list},
    "artifact": {"path": str}, "end": {"status": str}}


def _damaged(path: Path, what: str) -> str:
    return (f"journal {path} is damaged: {what}; nothing of it was sent. Fix: move it aside (`mv {path} "
            f"{path}.damaged`, with its folder {path.with_suffix('')} if there is one) so that `specbench sync` "
            "passes it by, and look at what it holds; the other journals are sent all the same.")


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
        items = [Metric(k, json_number(v), ts, step) for k, v, ts, step in op["metrics"]]
        for i in range(0, len(items), 900):
            client.log_batch(run_id, metrics=items[i:i + 900])
    elif kind == "artifact":
        client.log_artifact(run_id, op["path"], op.get("artifact_path"))
    elif kind == "end":
        client.set_terminated(run_id, op["status"], end_time=op.get("end_ms"))
    else:
        raise ValueError(f"unknown journal operation {kind!r}")


def replay(path: Path, client_for: Callable[[str], MlflowClient],
           create: Callable[[MlflowClient, dict[str, Any]], str],
           entries: list[dict[str, Any]] | None = None, remove: bool = True,
           torn: str = "") -> tuple[str, int]:
    """Send the unsent operations of one journal (`entries`: its complete operations, read here when not
    given; `torn`: its half-written last line, kept at its end); returns (run id, operations sent). The
    journal is removed once everything arrived (with `remove`; else the caller removes it).

    Progress is written back to the journal as it goes, each time in one atomic step (a new file renamed over
    it): at once after the run is created (with its id, so that a retry never creates a second run), then at
    most `SAVE_EVERY_S` after an operation arrived, and whatever stops the replay (the server gone, Ctrl-C).
    A retry therefore resumes the same run and sends only what did not arrive; only a replay killed outright
    (SIGKILL, power loss) may send again the operations of its last `SAVE_EVERY_S`, which MLflow takes as they
    are (a param of the same value, a metric of the same key, value, time and step are not stored twice)."""
    journal = Journal(path)
    entries = [dict(e) for e in (journal.entries() if entries is None else entries)]
    first = entries[0]
    client = client_for(first["tracking_uri"])
    run_id = first.get("run_id")
    sent = 0
    saved = sent
    last_save = time.monotonic()
    try:
        if not first["sent"]:
            run_id = create(client, first)
            first.update(sent=True, run_id=run_id)
            sent += 1
            _save(path, entries, torn)
            saved, last_save = sent, time.monotonic()
        for entry in entries[1:]:
            if not entry["sent"]:
                apply(client, run_id, entry)
                entry["sent"] = True
                sent += 1
                if time.monotonic() - last_save >= SAVE_EVERY_S:
                    _save(path, entries, torn)
                    saved, last_save = sent, time.monotonic()
    finally:
        if sent > saved and not (remove and all(e["sent"] for e in entries)):
            _save(path, entries, torn)  # what arrived before the stop (or all of it, for the caller)
    if remove:
        journal.remove()
    return run_id, sent


SAVE_EVERY_S = 0.5  # how often a replay writes its progress back to the journal (and whenever it stops)


def _save(path: Path, entries: list[dict[str, Any]], torn: str) -> None:
    """Replace the journal by `entries` (and its torn last line, still without its newline) in one atomic
    step: a new file, fsynced, renamed over it."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write("".join(json_text(e) + "\n" for e in entries) + torn)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
