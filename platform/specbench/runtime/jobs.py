"""Submitting jobs to a Ray cluster through Ray's Jobs API (`specbench submit`, `jobs`, `logs`).

A submission ships the project as the job's `working_dir` (without `.venv`, `.specbench`, `.git`, and what
`.gitignore` leaves out: `submit` refuses a job file the upload would not carry, `upload_exclusion`), and runs
`python -m specbench --tracking-uri URI run JOB.toml` there with `PYTHONPATH=platform`; the cluster's nodes
need specbench's dependencies installed (see cluster/). The data folder is passed as `SPECBENCH_DATA`
(it must be readable at that path on the nodes), the MLflow tracking URI as `MLFLOW_TRACKING_URI`: for a
cluster of several machines an `http://` MLflow server (`specbench server`), so that workers log over HTTP.
The job's work directory (`submission_home`) is passed as `SPECBENCH_HOME`: the client's `SPECBENCH_HOME` when
it is set (as an absolute path; not created on the client, it may be a mount only the nodes have), else the
checkout's `.specbench/`. So the job's graphs, caches, offline journals and, with a local store, its MLflow
artifacts go there, not into the unpacked working_dir that Ray deletes with the job (`.specbench` is not
uploaded). The nodes must see it at that path: on one machine it is the same folder; on a cluster whose nodes
share another (the KubeRay manifests' `/work`), submit with `SPECBENCH_HOME` set to it.
Token authentication: the client sends the token of `~/.ray/auth_token` (or `RAY_AUTH_TOKEN`), like the
rest of the runtime (see cluster.py).
"""

from __future__ import annotations

import asyncio
import os
import queue
import shlex
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

# first, and kept first (an import sorter would move it): sets Ray's auth mode before `import ray`
from specbench.runtime import cluster as _cluster  # noqa: F401

from ray.job_submission import JobStatus, JobSubmissionClient  # noqa: E402

from specbench.errors import SpecbenchError  # noqa: E402

AGENT_WAIT_S = 90.0  # how long a submission waits for a freshly started cluster's job agent
ANSWER_WAIT_S = 10.0  # how long the dashboard has to answer at first contact (Ray's client waits for ever on
# a silent host); each later call (`_ask`: a status, a log read while following) has POLL_WAIT_S, which leaves
# room for a whole log's download and a loaded head
POLL_WAIT_S = 30.0
STATUS_EVERY_S = 5.0  # how long a followed log may stay silent before the job's status is asked for
T = TypeVar("T")
EXCLUDES = [".venv", ".specbench", ".git", "__pycache__", "*.pyc", ".pytest_cache", ".hypothesis"]


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    status: str
    entrypoint: str
    start_time: float | None
    message: str


def check_dashboard_address(address: str) -> str:
    """`address` unchanged if it is of the form http(s)://HOST[:PORT] with PORT a whole number from 1 to
    65535, else a SpecbenchError naming --address."""
    parts = urlsplit(address)
    problem = None
    if parts.scheme not in ("http", "https"):
        problem = "the Jobs API needs the dashboard's web address"
    elif not parts.hostname:
        problem = "no host in it"
    else:
        try:
            port = parts.port
        except ValueError:
            port = 0
        if port == 0 or (port is None and parts.netloc.endswith(":")):
            problem = f"the port {parts.netloc.rsplit(':', 1)[-1]!r} is not a whole number from 1 to 65535"
    if problem:
        raise SpecbenchError(f"--address {address!r}: {problem}. Fix: give the dashboard address as "
                             "http://HOST:PORT, e.g. http://127.0.0.1:8265")
    return address


def client(address: str) -> JobSubmissionClient:
    """A Jobs API client; a malformed address, and an unreachable one, is one clear error."""
    check_dashboard_address(address)
    check_answers(address)
    try:
        return JobSubmissionClient(address)
    except Exception as err:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ... for this
        refusal = _cluster._auth_refusal(err)  # the dashboard is up but refuses this client's token
        if refusal is not None:
            where = f"--address {address}"
            raise SpecbenchError(_cluster._auth_message(where, " ".join(refusal.split()))) from err
        raise SpecbenchError(f"cannot reach the Ray Jobs API at {address}: {str(err).rstrip('. ')}. Fix: start the cluster "
                             "(`ray start --head`, or cluster/local_cluster.sh) or give its dashboard address "
                             "(http://HEAD:8265); a dashboard kept on the head's 127.0.0.1 is reached from "
                             "another machine through an SSH tunnel (`ssh -N -L 8265:127.0.0.1:8265 HEAD`, then "
                             "--address http://127.0.0.1:8265)") from err


def check_answers(address: str) -> None:
    """A SpecbenchError naming `address` when its host takes the connection but sends no HTTP answer within
    `ANSWER_WAIT_S` seconds; other failures (refused, TLS) are left to the client, which names them."""
    import requests  # a dependency of Ray's Jobs API client

    try:
        requests.get(address.rstrip("/") + "/api/version", timeout=ANSWER_WAIT_S).close()
    except requests.exceptions.Timeout as err:
        raise SpecbenchError(f"--address {address}: no answer from the Ray Jobs API there within "
                             f"{ANSWER_WAIT_S:g} s (something holds the port but does not answer HTTP). Fix: "
                             "give the dashboard address of a running cluster (http://HEAD:8265; `ray "
                             "status` on the head shows whether it is up), or restart the cluster "
                             "(`ray stop`, then `ray start --head`)") from err
    except requests.exceptions.RequestException:
        pass


def submit(address: str, project_root: Path, job_file: Path, tracking_uri: str, data_dir: Path,
           job_id: str | None = None, home: Path | None = None) -> str:
    """Submit `specbench run JOB` with the project as working_dir; returns the job id. `home`: the job's
    work directory, passed as `SPECBENCH_HOME` (`submission_home`; None passes none: the nodes' own, else the
    working_dir's, which Ray deletes with the job)."""
    relative = job_file.resolve().relative_to(project_root.resolve())
    entrypoint = f"python -m specbench --tracking-uri {shlex.quote(tracking_uri)} run {shlex.quote(str(relative))}"
    env = {"PYTHONPATH": "platform", "MLFLOW_TRACKING_URI": tracking_uri, "SPECBENCH_DATA": str(data_dir),
           "PYTHONUTF8": "1"}
    if home is not None:
        env["SPECBENCH_HOME"] = str(Path(home).expanduser().resolve())
    runtime_env = {"working_dir": str(project_root), "excludes": EXCLUDES, "env_vars": env}
    jobs = client(address)
    deadline = time.monotonic() + AGENT_WAIT_S
    while True:
        try:
            return jobs.submit_job(entrypoint=entrypoint, runtime_env=runtime_env, submission_id=job_id)
        except Exception as err:  # noqa: BLE001
            if "No available agent" in str(err) and time.monotonic() < deadline:
                time.sleep(2.0)  # a cluster that just started: its job agent is not up yet
                continue
            raise SpecbenchError(f"submitting {job_file} to {address} failed: {err}") from err


def upload_exclusion(project_root: Path, job_file: Path) -> str | None:
    """Why the upload of `project_root` as a job's working_dir leaves `job_file` (a file inside it) out, or
    None when it is uploaded; decided as Ray decides it: the submission's `EXCLUDES` and Ray's default excludes,
    then the `.gitignore` (unless RAY_RUNTIME_ENV_IGNORE_GITIGNORE=1) and `.rayignore` of each folder on the way
    down to the file."""
    from ray._private import ray_constants
    from ray._private.runtime_env.packaging import _get_excludes, _get_ignore_file

    root = project_root.resolve()
    patterns = [*ray_constants.get_runtime_env_default_excludes(), *EXCLUDES]
    rules = [(f"the upload's excludes ({', '.join(dict.fromkeys(patterns))})", _get_excludes(root, patterns))]
    names = [".rayignore"]
    if os.environ.get(ray_constants.RAY_RUNTIME_ENV_IGNORE_GITIGNORE, "0") != "1":
        names.insert(0, ".gitignore")
    folder = root
    for part in job_file.resolve().relative_to(root).parts:
        rules += [(str(folder / name), match) for name in names
                  if (match := _get_ignore_file(folder, name)) is not None]
        path = folder / part
        source = next((source for source, match in rules if match(path)), None)
        if source is not None:
            return f"{path.relative_to(root)} is left out by {source}"
        folder = path
    return None


def submission_home() -> Path:
    """The work directory a submitted job gets as SPECBENCH_HOME (see the module docstring): this process's
    `SPECBENCH_HOME` when set, else the checkout's work directory."""
    from specbench.paths import work_dir, work_dir_location

    return work_dir_location().resolve() if os.environ.get("SPECBENCH_HOME") else work_dir()


def list_jobs(address: str) -> list[JobInfo]:
    out = [JobInfo(j.submission_id or j.job_id or "", str(j.status), j.entrypoint or "",
                   j.start_time / 1000 if j.start_time else None, j.message or "")
           for j in client(address).list_jobs()]
    return sorted(out, key=lambda j: j.start_time or 0.0)


def status(address: str, job_id: str, jobs: JobSubmissionClient | None = None) -> str:
    return str(_ask(address, job_id, (jobs or client(address)).get_job_status))


def _ask(address: str, job_id: str, call: Callable[[str], T]) -> T:
    """`call(job_id)`; a job the cluster does not know is an error naming it, any other failure a lost one, and
    so is no answer within `POLL_WAIT_S` seconds (a frozen dashboard, a network that drops the traffic but
    not the connection: Ray's client would wait for ever there, so the call runs in a daemon thread)."""
    answer: list[T] = []
    failure: list[Exception] = []

    def ask() -> None:
        try:
            answer.append(call(job_id))
        except Exception as err:  # noqa: BLE001 - requests' and Ray's errors alike: the dashboard went away
            failure.append(err)

    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    worker.join(POLL_WAIT_S)
    if answer:
        return answer[0]
    if not failure:
        raise _lost(address, job_id, silent=True) from TimeoutError(f"no answer within {POLL_WAIT_S:g} s")
    err = failure[0]
    if "status code 404" in str(err):
        raise SpecbenchError(f"no job {job_id!r} at {address}. Fix: list its jobs with `specbench jobs "
                             f"--address {address}`") from err
    raise _lost(address, job_id) from err


def follow_logs(address: str, job_id: str, follow: bool, poll_s: float = 1.0,
                jobs: JobSubmissionClient | None = None) -> Iterator[str]:
    """The job's log text; with `follow`, new text as it comes until the job ends. Following streams the
    log (Ray's tail websocket: each byte crosses once), asks for the job's status after every
    `STATUS_EVERY_S` seconds of silence, and reads the whole log once at the end for anything the stream
    had not brought; where the websocket fails or closes before the job ends but the dashboard answers (a
    proxy without websockets, or one that closes idle streams), it polls the whole log every `poll_s`
    seconds instead. A dashboard that stops answering (the cluster
    stopped, or no answer within `POLL_WAIT_S`) is a SpecbenchError, not a traceback or a silent wait.
    `jobs`: the client to use (else a new one)."""
    jobs = jobs or client(address)
    if not follow:
        yield _ask(address, job_id, jobs.get_job_logs)
        return
    _ask(address, job_id, jobs.get_job_status)  # a job the cluster does not know: the error naming it
    chunks: queue.Queue[tuple[str, object]] = queue.Queue()
    threading.Thread(target=_tail, args=(jobs, job_id, chunks), daemon=True).start()
    shown, kind = 0, "ended"
    while True:
        try:
            kind, item = chunks.get(timeout=STATUS_EVERY_S)
        except queue.Empty:  # silence: a quiet job, or a head that went away
            if JobStatus(_ask(address, job_id, jobs.get_job_status)).is_terminal():
                break
            continue
        if kind != "text":
            break
        shown += len(str(item))
        yield str(item)
    if kind != "text":  # the stream broke, or closed with the job still running (a proxy's idle timeout):
        # poll while the job runs and the head answers (`_ask` raises where it does not)
        while not JobStatus(_ask(address, job_id, jobs.get_job_status)).is_terminal():
            text = _ask(address, job_id, jobs.get_job_logs)
            if len(text) > shown:
                yield text[shown:]
                shown = len(text)
            time.sleep(poll_s)
    text = _ask(address, job_id, jobs.get_job_logs)
    if len(text) > shown:
        yield text[shown:]


def _tail(jobs: JobSubmissionClient, job_id: str, chunks: queue.Queue[tuple[str, object]]) -> None:
    """Put the job's log, as Ray's tail websocket brings it, into `chunks` as ("text", str) items, then
    ("ended", None) when the server closes the stream (the job ended) or ("failed", error)."""
    async def stream() -> None:
        async for text in jobs.tail_job_logs(job_id):
            chunks.put(("text", text))

    try:
        asyncio.run(stream())
    except Exception as err:  # noqa: BLE001 - aiohttp's and Ray's errors alike: the follower decides
        chunks.put(("failed", err))
    else:
        chunks.put(("ended", None))


def _lost(address: str, job_id: str, silent: bool = False) -> SpecbenchError:
    why = (f"it gave no answer within {POLL_WAIT_S:g} s: its head is frozen or cut off (the job may still "
           "run), or the job's whole log took longer than that to download over a slow link" if silent else
           "the cluster (or its head node) has probably stopped, and the job with it")
    return SpecbenchError(
        f"the Ray Jobs API at {address} stopped answering while following job {job_id}, so how the job "
        f"ended is unknown: {why}. Fix: "
        "check the cluster (`ray status` on the head); once it answers, `specbench jobs --address ADDRESS` "
        f"and `specbench logs {job_id} --address ADDRESS` show the job; where its MLflow run was left "
        "RUNNING, `specbench sync`, run where the job's work directory is, ends it FAILED.")
