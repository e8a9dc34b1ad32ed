"""The form of a Ray cluster address (`--ray-address`, `$RAY_ADDRESS`), checked without importing ray, so
that the command line can refuse a malformed one before anything starts; and whether a cluster's port
accepts a connection and speaks gRPC, as a Ray GCS or Ray Client server does, so that joining a cluster that
is not there, or a port that is some other server's (the dashboard's, MLflow's), fails in seconds: Ray itself
retries such a GCS for ever, and does not let Ctrl-C through while it does.

Forms: `HOST:PORT` (a cluster's GCS, e.g. 127.0.0.1:6379), `auto` (the cluster `ray start` last started on
this machine), `ray://HOST:PORT` (Ray Client, usually port 10001), and `local` (a new local Ray).
"""

from __future__ import annotations

import os
import socket
import time

from specbench.errors import SpecbenchError

OPTION = "--ray-address"
FORMS = ("HOST:PORT (the head's GCS, e.g. 127.0.0.1:6379), auto, or ray://HOST:PORT (Ray Client, e.g. port "
         "10001)")
CONNECT_TIMEOUT_S = 5.0
TLS_ENV = "RAY_USE_TLS"  # a cluster with TLS on: its gRPC needs certificates, so only the TCP check is made
PROXY_ENV = "RAY_grpc_enable_http_proxy"  # Ray's gRPC ignores $http_proxy and the like unless this is on


def address_problem(address: str) -> str | None:
    """What is wrong with the form of a Ray address (None: nothing)."""
    if address in ("auto", "local"):
        return None
    if any(c.isspace() for c in address) or not address:
        return "a Ray address holds no spaces"
    rest = address
    if "://" in address:
        scheme, rest = address.split("://", 1)
        if scheme in ("http", "https"):
            return ("this is a web address (the dashboard's, which `specbench submit --address` takes); "
                    "a job joins a cluster at its GCS port")
        if scheme != "ray":
            return f"the scheme {scheme + '://'!r} is not one Ray joins"
    host, sep, port = rest.rpartition(":")
    if not sep or not host.strip("[]"):
        return "no HOST:PORT in it"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        return f"the port {port!r} is not a whole number from 1 to 65535"
    return None


def check_ray_address(address: str, source: str = OPTION) -> str:
    """`address` unchanged if its form is one Ray joins, else a SpecbenchError naming `source`."""
    problem = address_problem(address)
    if problem:
        raise SpecbenchError(f"{source} {address!r}: {problem}. Fix: {FORMS}; or leave {OPTION} out to run on a "
                             "local Ray.")
    return address


def host_port(address: str) -> tuple[str, int]:
    """(host, port) of a `HOST:PORT` or `ray://HOST:PORT` address of a checked form."""
    rest = address.split("://", 1)[-1]
    host, _, port = rest.rpartition(":")
    return host.strip("[]"), int(port)


def check_reachable(address: str, shown: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Raise a SpecbenchError unless `address` (HOST:PORT or ray://HOST:PORT) accepts a TCP connection and
    then a gRPC (HTTP/2) channel, within `timeout` seconds in all; `shown` is the address as the user gave
    it."""
    host, port = host_port(address)
    start = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        if isinstance(err, TimeoutError):
            reason = f"no answer within {timeout:.0f} s"
        raise unreachable(shown, f"{host}:{port}: {reason}") from err
    if _ray_flag(TLS_ENV):
        return
    if not speaks_grpc(host, port, max(timeout - (time.monotonic() - start), 1.0)):
        raise SpecbenchError(
            f"{shown} is not a Ray cluster: {host}:{port} accepts a connection but does not speak gRPC, as a "
            f"Ray GCS or Ray Client server does (a web server, such as the Ray dashboard or MLflow, answers "
            f"this way). Fix: give the head's GCS port (`ray start --head` prints it; 6379 unless set), or "
            f"ray://HOST:10001 for Ray Client; the dashboard's address (port 8265) is for `specbench submit "
            f"--address`.")


def speaks_grpc(host: str, port: int, timeout: float) -> bool:
    """Whether a gRPC channel to host:port becomes ready within `timeout` seconds (an HTTP/1 or other
    non-gRPC server never lets it)."""
    import grpc  # a dependency of ray; imported here so that checking an address's form stays light

    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    # as Ray's own channels: through an HTTP proxy only when Ray is told to use one
    channel = grpc.insecure_channel(target, options=[("grpc.enable_http_proxy", int(_ray_flag(PROXY_ENV)))])
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
        return True
    except grpc.FutureTimeoutError:
        return False
    finally:
        channel.close()


def _ray_flag(name: str) -> bool:
    """An on/off environment setting read as Ray reads it: on only for 1 or true."""
    return os.environ.get(name, "0").strip().lower() in ("1", "true")


def unreachable(shown: str, why: str) -> SpecbenchError:
    return SpecbenchError(f"cannot reach the Ray cluster at {shown} ({why}). Fix: start it (`ray start --head`) "
                          f"or drop {OPTION} to run on a local Ray.")
