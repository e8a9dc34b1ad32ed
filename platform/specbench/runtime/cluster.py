"""Start, join and describe the Ray cluster that a job runs on.

The embedded default is a local Ray on this machine, bound to 127.0.0.1 only: Ray 2.60 binds every port to
loopback when `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` is in its environment, and reads that variable once,
when `ray` is first imported. This module therefore puts it in `os.environ` before its own `import ray`
(unless the caller already set it), refuses to start a local cluster when Ray was imported earlier without
it, and checks after the start that the node address is a loopback one.

Token authentication: Ray 2.60 turns token auth on by default for a local `ray.init()` and for `ray start`
clusters (token in `~/.ray/auth_token`, generated on first use, or `RAY_AUTH_TOKEN` / `RAY_AUTH_TOKEN_PATH`);
the driver caches the mode (`RAY_AUTH_MODE`) when `ray` is imported. A `RAY_AUTH_MODE` that the caller set
is always respected. Otherwise (`auth_mode_for`): a local Ray that this module starts runs with `token` (so
Ray's start-up warning about the default stays silent), and a client joining a cluster uses `token` when
this machine has a token (a cluster without auth ignores it; one with auth needs it) and no auth when it
has none (a fresh machine joining a cluster started without auth). The choice is put in `os.environ` before
`import ray` and again, with Ray's cached copy refreshed, just before `ray.init`. A cluster that refuses
the client's authentication (no token, or not its token) is a SpecbenchError naming `RAY_AUTH_MODE`,
`RAY_AUTH_TOKEN` and `ray get-auth-token` (`_auth_refusal`), not a Ray traceback.

Noise: Ray's own loggers run at WARNING on the driver, Ray Data's console handler too (its DEBUG log file in
the session directory is kept), and Ray Data's progress bars are off unless stderr is a terminal: progress
for long work is drawn by tqdm at the driver.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
AUTH_MODE_ENV = "RAY_AUTH_MODE"
TEMP_DIR_ENV = "SPECBENCH_RAY_TMPDIR"
ADDRESS_ENV = "RAY_ADDRESS"
LOCAL = "local"

TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"


def token_available(environ: Mapping[str, str] | None = None, home: Path | None = None) -> bool:
    """Whether Ray would find an auth token on this machine, by its own loader's rules: `$RAY_AUTH_TOKEN` when
    set (blanks are no token, and nothing else is read); else, when `$RAY_AUTH_TOKEN_PATH` is set, the file it
    names and no other (the path taken as written: Ray expands no `~`); else `~/.ray/auth_token`. A file's token
    is its first line, trimmed."""
    env = os.environ if environ is None else environ
    given = env.get(TOKEN_ENV, "")
    if given:
        return bool(given.strip())
    named = env.get(TOKEN_PATH_ENV, "")
    path = Path(named) if named else (home if home is not None else Path.home()) / ".ray" / "auth_token"
    try:
        with open(path, encoding="utf-8", errors="replace") as token_file:
            return bool(token_file.readline().strip())
    except OSError:  # missing, a folder, unreadable
        return False


def auth_mode_for(start_local: bool, given: str | None, token_here: bool) -> str | None:
    """The `RAY_AUTH_MODE` a connection uses (None: leave it unset, Ray's default of no auth for a client).

    `given`: the caller's own `RAY_AUTH_MODE`, always respected. Else `token` for a local Ray that this
    process starts (Ray generates the token when there is none), and, when joining a cluster, `token` if
    this machine has a token (`token_here`; sent, and ignored by a cluster without auth) or None if it has
    none (token mode without a token would refuse to join even a cluster without auth)."""
    if given:
        return given
    if start_local or token_here:
        return "token"
    return None


# Both must precede `import ray`, which reads them once (ray_constants, and the cached RayConfig).
os.environ.setdefault(LOOPBACK_ENV, "0")
_AUTH_MODE_OURS: str | None = None  # the RAY_AUTH_MODE this module put in the environment (None: none)
if not os.environ.get(AUTH_MODE_ENV):  # a local start's choice, the common case: Ray then needs no re-read
    _AUTH_MODE_OURS = auth_mode_for(True, None, token_available())
    os.environ[AUTH_MODE_ENV] = _AUTH_MODE_OURS or "token"
_AUTH_MODE_RAY_READ = os.environ.get(AUTH_MODE_ENV)  # the value Ray caches at import

import ray  # noqa: E402

from specbench.errors import SpecbenchError  # noqa: E402
from specbench.runtime.address import (  # noqa: E402
    OPTION,
    check_ray_address,
    check_reachable,
    host_port,
    unreachable,
)

log = logging.getLogger(__name__)

_RESOURCE_WAIT_S = 15.0
_STARTED_LOCAL = False  # whether the Ray this process is connected to is a local one that it started
# Ray Data console warnings that only restate a choice made here: progress bars are off on purpose, and
# the "no available CPUs, the Dataset job will hang" check is a snapshot that fires while Ray Data's own
# helper actors are being placed at the first run (require_resources() does the real feasibility check).
_HIDDEN_RAY_DATA_MESSAGES = ("Progress bars disabled", "Warning: The Ray cluster currently does not have any")


@dataclass(frozen=True)
class ClusterInfo:
    """What `connect()` joined or started.

    `initialized_here` is True when this call ran `ray.init()` (so `ray_session` undoes it); `local` is True
    when the cluster is a local one that this process started.
    """

    address: str
    node_ip_address: str
    initialized_here: bool
    local: bool
    session_dir: str | None
    num_cpus: float
    num_gpus: float


def connect(
    address: str | None = None,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    *,
    python_path: Sequence[str | os.PathLike[str]] = (),
    temp_dir: str | os.PathLike[str] | None = None,
    log_to_driver: bool = True,
    runtime_env: Mapping[str, Any] | None = None,
) -> ClusterInfo:
    """Start a local Ray, or join the cluster at `address`; reuse Ray if this process already initialized it.

    When Ray is already initialized, the arguments are ignored and `initialized_here` is False.

    Args:
        address: `ray://HOST:PORT` (needs the `ray[client]` extra), `auto` or `HOST:PORT` to join a cluster;
            "local" for a new local Ray; None: `$RAY_ADDRESS` if set (as in a job submitted to a cluster),
            else "local".
        num_cpus: CPUs of the local Ray (default `os.cpu_count()`); ignored when joining a cluster.
        num_gpus: GPUs of the local Ray (default: what Ray detects); ignored when joining a cluster.
        python_path: extra directories that local workers put on `sys.path` (the directory that holds the
            `specbench` package is always added, so stages unpickle in the workers).
        temp_dir: Ray's temp/session root for a local start (default `$SPECBENCH_RAY_TMPDIR`, else Ray's
            own, `/tmp/ray`); keep it short, Unix socket paths are limited to 107 bytes.
        log_to_driver: forward workers' stdout/stderr to this process (prefixed with the worker pid).
        runtime_env: passed to `ray.init` unchanged (e.g. `py_modules` or `working_dir` for a remote cluster).

    Raises:
        SpecbenchError: the address is malformed, or the cluster's port accepts no connection, or no gRPC
            channel, within a few seconds (checked before `ray.init`, which would retry it for ever).
    """
    global _STARTED_LOCAL
    if ray.is_initialized():
        _configure_ray_data()
        return _current_info(initialized_here=False, local=_STARTED_LOCAL)
    source = OPTION if address else f"${ADDRESS_ENV}"
    address = address or os.environ.get(ADDRESS_ENV) or LOCAL
    local = address == LOCAL
    if not local:
        _check_cluster(address, source)
    kwargs: dict[str, Any] = {
        "configure_logging": True,
        "logging_level": logging.WARNING,
        "log_to_driver": log_to_driver,
        "runtime_env": dict(runtime_env) if runtime_env is not None else None,
    }
    _choose_auth_mode(local)
    try:
        if local:
            _prepare_local_start(python_path)
            _check_socket_room(temp := _resolve_temp_dir(temp_dir))
            ray.init(
                address=LOCAL,  # a new local Ray, whatever $RAY_ADDRESS says
                num_cpus=num_cpus if num_cpus is not None else os.cpu_count() or 1,
                num_gpus=num_gpus,
                include_dashboard=False,
                _temp_dir=temp,
                **kwargs,
            )
        else:
            ray.init(address=address, **kwargs)
    except Exception as err:  # noqa: BLE001 - only an authentication refusal is turned into a user error
        refusal = _auth_refusal(err)
        if refusal is None:
            raise
        where = "a local Ray" if local else f"{source} {address}"
        raise SpecbenchError(_auth_message(where, refusal)) from err
    _python_handles_sigterm()
    if local:
        _STARTED_LOCAL = True
        _verify_loopback()
        _wait_for_resources()
    _configure_ray_data()
    info = _current_info(initialized_here=True, local=local)
    log.info("ray: %s", cluster_summary())
    return info


def _python_handles_sigterm() -> None:
    """Give SIGTERM back to Python's handler (Ray's, which raises SystemExit, or the command line's). Ray's core
    worker installs Abseil's failure-signal handler for SIGTERM in C, over Python's: it dumps a stack and sends
    the signal on, and a second SIGTERM while it runs (a process group stopped twice, say) kills the process at
    once, so the job's MLflow runs were left RUNNING instead of ended FAILED."""
    handler = signal.getsignal(signal.SIGTERM)  # None: not set from Python, so nothing to give back
    if handler is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)


def check_cluster(address: str) -> None:
    """That the cluster at `address` (`--ray-address`) is there, without joining it (`connect` checks the same
    before it joins); "local" needs no check. A SpecbenchError names the address and the fix."""
    if address != LOCAL:
        _check_cluster(address, OPTION)


def _check_cluster(address: str, source: str) -> None:
    """Before `ray.init(address)`: the address is of a form Ray joins, and the cluster's port (for `auto`,
    that of the cluster Ray finds as `ray.init` would) accepts a connection within seconds; else a
    SpecbenchError. Ray would otherwise retry an absent GCS for ever, deaf to Ctrl-C."""
    check_ray_address(address, source)
    target = address
    if address == "auto":
        from ray._private import services

        try:
            target = services.canonicalize_bootstrap_address_or_die("auto")
        except (ConnectionError, ValueError) as err:
            why = str(err).rstrip(".")
            raise unreachable(address, f"no running Ray cluster found on this machine: {why}") from err
    check_reachable(target, address)


def ensure_connected() -> ClusterInfo:
    """Return the current Ray connection, starting the local default when there is none.

    Runtime entry points call this instead of letting Ray auto-initialise, which would skip the loopback
    and logging settings above.
    """
    return connect()


def shutdown() -> None:
    """Disconnect from Ray (and stop the local cluster, if this process started one)."""
    global _STARTED_LOCAL
    if ray.is_initialized():
        ray.shutdown()
    _STARTED_LOCAL = False


@contextmanager
def ray_session(address: str | None = None, **kwargs: Any) -> Iterator[ClusterInfo]:
    """`connect(address, **kwargs)` for the duration of a `with` block.

    Shuts Ray down on exit only when this block initialized it: a session that found Ray already running
    leaves it running.
    """
    info = connect(address, **kwargs)
    try:
        yield info
    finally:
        if info.initialized_here:
            shutdown()


def cluster_summary() -> dict[str, Any]:
    """Nodes and resources of the connected cluster, for logging: plain ints, floats and strings.

    Keys: `address`, `ray_version`, `nodes` (alive), `cpus`, `gpus`, `memory_gib`, `object_store_gib`.
    """
    if not ray.is_initialized():
        raise SpecbenchError("Ray is not initialized: call specbench.runtime.connect() first")
    alive = [n for n in ray.nodes() if n.get("Alive")]
    totals = ray.cluster_resources()
    return {
        "address": _gcs_address(),
        "ray_version": ray.__version__,
        "nodes": len(alive),
        "cpus": float(totals.get("CPU", 0.0)),
        "gpus": float(totals.get("GPU", 0.0)),
        "memory_gib": round(float(totals.get("memory", 0.0)) / 2**30, 2),
        "object_store_gib": round(float(totals.get("object_store_memory", 0.0)) / 2**30, 2),
    }


def require_resources(num_cpus: float, num_gpus: float, what: str) -> int:
    """How many workers of (`num_cpus`, `num_gpus`) the cluster holds at once; raise if not even one.

    Ray would queue such work forever on a cluster without the resources (a GPU stage on a CPU machine),
    so the runtime asks first. An autoscaling cluster that adds GPU nodes on demand must have one up.

    Counts total (not currently free) resources of the alive nodes: work that fits waits its turn.

    Raises:
        SpecbenchError: no alive node has at least `num_cpus` CPUs and `num_gpus` GPUs in total.
    """
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    fits = sum(_fit_count(res, num_cpus, num_gpus) for res in nodes)
    if fits > 0:
        return fits
    total_gpus = sum(float(res.get("GPU", 0.0)) for res in nodes)
    largest_cpu = max((float(res.get("CPU", 0.0)) for res in nodes), default=0.0)
    where = f"the Ray cluster at {_gcs_address()} ({len(nodes)} node(s), {total_gpus:g} GPU in all)"
    if num_gpus > 0 and total_gpus == 0:
        raise SpecbenchError(
            f"{what} needs {num_gpus:g} GPU per worker, but {where} has no GPU, so it would wait for one "
            "forever. Fix: run it where Ray sees an NVIDIA GPU (`specbench --ray-address HOST:PORT ...`, or "
            "`specbench submit` to a cluster with GPU workers), or choose a CPU backend in the job file "
            "(e.g. backend = \"cpu\")."
        )
    raise SpecbenchError(
        f"{what} needs {num_cpus:g} CPU and {num_gpus:g} GPU per worker, but no node of {where} has that "
        f"much (largest node: {largest_cpu:g} CPU). Lower the stage's Resources or use a larger node."
    )


def _fit_count(resources: Mapping[str, float], num_cpus: float, num_gpus: float) -> int:
    """Workers of (`num_cpus`, `num_gpus`) that one node with `resources` holds (CPUs bound 0-CPU work). Ray
    puts a fraction of a GPU on one GPU, never across two, so a GPU holds floor(1 / fraction) such workers
    (0.4 each: two a GPU, not five on two GPUs)."""
    counts = []
    if num_cpus > 0:
        counts.append(math.floor(float(resources.get("CPU", 0.0)) / num_cpus + 1e-9))
    if num_gpus > 0:
        gpus = float(resources.get("GPU", 0.0))
        counts.append(math.floor(gpus + 1e-9) * math.floor(1 / num_gpus + 1e-9) if num_gpus < 1
                      else math.floor(gpus / num_gpus + 1e-9))
    if not counts:
        return max(1, int(resources.get("CPU", 1.0)))
    return min(counts)


def _choose_auth_mode(start_local: bool) -> None:
    """Before `ray.init`: put the auth mode of `auth_mode_for` in the environment, unless the caller set
    `RAY_AUTH_MODE` (then theirs stays), and have Ray read it again if it changed since Ray cached it."""
    global _AUTH_MODE_OURS, _AUTH_MODE_RAY_READ
    current = os.environ.get(AUTH_MODE_ENV) or None
    given = None if current == _AUTH_MODE_OURS else current
    if given is None:
        _AUTH_MODE_OURS = auth_mode_for(start_local, None, token_available())
        if _AUTH_MODE_OURS is None:
            os.environ.pop(AUTH_MODE_ENV, None)
        else:
            os.environ[AUTH_MODE_ENV] = _AUTH_MODE_OURS or "token"
    if os.environ.get(AUTH_MODE_ENV) != _AUTH_MODE_RAY_READ:
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")  # what Ray itself does when it turns token auth on for a local start
        AuthenticationTokenLoader.instance().reset_cache()
        _AUTH_MODE_RAY_READ = os.environ.get(AUTH_MODE_ENV)


# what the GCS answers a client without the cluster's token (quoted in the RuntimeError that ray.init chains)
_REFUSED_MARKERS = ("InvalidAuthToken", "Unauthenticated")


def _auth_refusal(err: BaseException) -> str | None:
    """What an error of `ray.init` says about authentication, or None if it is about something else: Ray's
    AuthenticationError (token mode without a token), or the GCS refusing the client's token (or its lack
    of one), which Ray reports as a ConnectionError from a RuntimeError quoting the GCS's answer."""
    from ray.exceptions import AuthenticationError

    seen: set[int] = set()
    link: BaseException | None = err
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, AuthenticationError):
            return str(link.message)
        refused = any(m in str(link) for m in _REFUSED_MARKERS)
        if isinstance(link, (ConnectionError, RuntimeError)) and refused:
            return "the cluster's GCS answered: Authentication token is missing or incorrect"
        link = link.__cause__ or link.__context__
    return None


def _auth_message(where: str, refusal: str) -> str:
    """The SpecbenchError message for an authentication refusal when joining or starting `where`."""
    mode = os.environ.get(AUTH_MODE_ENV) or "unset (no auth)"
    token = "a token" if token_available() else "no token"
    return (f"{where}: Ray refused the connection for its token authentication ({refusal.rstrip('.')}). "
            f"This process has {AUTH_MODE_ENV}={mode} and {token} ({TOKEN_ENV}, {TOKEN_PATH_ENV} or "
            "~/.ray/auth_token). Fix: for a cluster with token auth (Ray's default for `ray start`, and "
            "cluster/local_cluster.sh), print its token on the head with `ray get-auth-token` and give it "
            f"here: `export {AUTH_MODE_ENV}=token {TOKEN_ENV}=<that token>` (or put it in "
            f"~/.ray/auth_token); for a cluster started without auth, `export {AUTH_MODE_ENV}=disabled`. See "
            "docs/operations.md (Ray token auth).")


def _prepare_local_start(python_path: Sequence[str | os.PathLike[str]]) -> None:
    """Before a local start: refuse if Ray would not bind to loopback; set the workers' `PYTHONPATH`."""
    from ray._private import ray_constants  # the value Ray computed from LOOPBACK_ENV at import

    if getattr(ray_constants, "ENABLE_RAY_CLUSTER", False):
        raise SpecbenchError(
            f"ray was imported before {LOOPBACK_ENV}=0 was in the environment (it reads it once, at "
            "import), so a local Ray would listen on every network interface. Import specbench.runtime "
            f"before ray, or export {LOOPBACK_ENV}=0 before starting Python."
        )
    os.environ[LOOPBACK_ENV] = "0"
    source_root = str(Path(__file__).resolve().parents[2])
    entries = [str(Path(p).resolve()) for p in python_path] + [source_root]
    current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    merged = list(dict.fromkeys([*entries, *current]))
    os.environ["PYTHONPATH"] = os.pathsep.join(merged)  # raylet and workers inherit the driver's env


def _resolve_temp_dir(temp_dir: str | os.PathLike[str] | None) -> str | None:
    """The temp root for a local start: the argument, else `$SPECBENCH_RAY_TMPDIR`, else Ray's default."""
    chosen = temp_dir if temp_dir is not None else os.environ.get(TEMP_DIR_ENV)
    if chosen is None:
        return None
    path = Path(chosen).resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _temp_dir_error(f"{path} cannot be made a folder ({err.strerror or err})") from err
    return str(path)


def _check_socket_room(temp: str | None) -> None:
    """Refuse a temp root where Ray's longest socket path (<temp>/session_<date>_<pid>/sockets/plasma_store)
    would exceed 107 bytes."""
    tail = f"/session_{'0' * 26}_{os.getpid()}/sockets/plasma_store"  # date: %Y-%m-%d_%H-%M-%S_%f
    if temp is not None and len(os.fsencode(temp + tail)) > 107:
        raise _temp_dir_error(f"Ray's socket paths under {temp} would exceed 107 bytes")


def _temp_dir_error(why: str) -> SpecbenchError:
    return SpecbenchError(f"the temp directory of a local Ray (temp_dir, else ${TEMP_DIR_ENV}): {why}. Fix: "
                          f"set {TEMP_DIR_ENV} to a short, writable folder (e.g. /tmp/ray), or unset it.")


def _verify_loopback() -> None:
    """Stop the just-started local Ray unless its node address is a loopback one."""
    node_ip = _node_ip()
    if not _is_loopback(node_ip):
        shutdown()
        raise SpecbenchError(
            f"local Ray started on {node_ip}, not on 127.0.0.1; it has been stopped. Set {LOOPBACK_ENV}=0 "
            "in the environment before Python starts."
        )


def _wait_for_resources(timeout_s: float = _RESOURCE_WAIT_S) -> None:
    """Wait until the new local node reports its CPUs, so that the first job does not see 0 CPU."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU", 0.0) >= ray.cluster_resources().get("CPU", 0.0) > 0:
            return
        time.sleep(0.05)
    log.warning("ray: the local node did not report its CPUs within %.0f s", timeout_s)


class _HideMessages(logging.Filter):
    """Drop the Ray Data console records listed in `_HIDDEN_RAY_DATA_MESSAGES` (the log file keeps them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_HIDDEN_RAY_DATA_MESSAGES)


def _configure_ray_data() -> None:
    """Quiet Ray Data's console (WARNING and up; its log file keeps everything) and its progress bars."""
    import ray.data

    for handler in logging.getLogger("ray.data").handlers:
        if handler.name == "console":
            handler.setLevel(logging.WARNING)
            if not any(isinstance(f, _HideMessages) for f in handler.filters):
                handler.addFilter(_HideMessages())
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = sys.stderr.isatty()


def _node_ip() -> str:
    """This process's Ray node address (client mode: the address the client connected through)."""
    try:
        return str(ray.util.get_node_ip_address())
    except Exception:  # noqa: BLE001 - Ray Client has no local node
        return _gcs_address().rsplit(":", 1)[0]


def gcs_address() -> str:
    """The GCS address of the joined cluster ('' when unknown, e.g. over Ray Client)."""
    return _gcs_address()


def gcs_accepts(address: str, timeout: float = 1.0) -> bool:
    """Whether the GCS at `address` (HOST:PORT) accepts a TCP connection within `timeout` seconds."""
    try:
        with socket.create_connection(host_port(address), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def cluster_lost(what: str, address: str, seconds: float, unfinished: int) -> SpecbenchError:
    return SpecbenchError(
        f"{what}: lost the Ray cluster at {address} with {unfinished} item(s) unfinished: its GCS has "
        f"accepted no connection for {seconds:g} s (the cluster was stopped, or its head node died). Fix: "
        "start the cluster again (`ray start --head`, or cluster/local_cluster.sh; `ray status` on the head "
        "shows whether it is up) and rerun the job.")


def _gcs_address() -> str:
    """The cluster's GCS address as the runtime context reports it ('' when unknown)."""
    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # noqa: BLE001 - Ray Client may not expose it
        return ""


def _is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost'."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _current_info(*, initialized_here: bool, local: bool) -> ClusterInfo:
    """Describe the connection Ray holds now."""
    totals = ray.cluster_resources()
    try:  # Ray has no public accessor for the session directory (where the logs are)
        session_dir = str(ray._private.worker._global_node.get_session_dir_path())
    except Exception:  # noqa: BLE001 - Ray Client, or a Ray whose internals moved
        session_dir = None
    return ClusterInfo(
        address=_gcs_address(),
        node_ip_address=_node_ip(),
        initialized_here=initialized_here,
        local=local,
        session_dir=session_dir,
        num_cpus=float(totals.get("CPU", 0.0)),
        num_gpus=float(totals.get("GPU", 0.0)),
    )
