"""Bad input to the service verbs and the global options is refused with one message that names the option
(or file), says what is wrong and how to fix it, before any server, store or Ray is started: ports, hosts,
store and artifact paths of `server`/`ui`; `--tracking-uri` and `--ray-address` forms; a tracking server or
Ray cluster that does not answer, or a server that answers but is not MLflow's; an explicit SQLite store that
does not exist, is empty or is no database; a `jobs --address` that is
malformed; journals that cannot be read back. No network traffic leaves 127.0.0.0/8."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from pathlib import Path

import pytest
from mlflow_store import http_server_answering

from specbench.cli import main
from specbench.errors import SpecbenchError
from specbench.runtime.address import address_problem, check_ray_address, check_reachable
from specbench.tracking import ui
from specbench.tracking.journal import DamagedJournal, read_entries
from specbench.tracking.store import (
    check_artifact_root,
    check_readable_store,
    check_store_file,
    check_tracking_uri,
)

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


@pytest.fixture
def no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a server process is started."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a server was started: {args}")

    monkeypatch.setattr(ui.subprocess, "Popen", refuse)


def closed_port() -> int:
    """A port of 127.0.0.1 that nothing listens on (as far as a bind-and-close can tell)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err


# ---- server / ui options ---------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["server", "--port", "99999"], ["ui", "--port", "-5"], ["ui", "--port", "0"],
                                  ["server", "--port", "abc"]])
def test_ports_outside_1_to_65535_are_refused_by_the_parser(argv: list[str], no_server: None,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = _err(capsys)
    assert "argument --port" in err and "1 to 65535" in err and "Traceback" not in err


def test_server_store_that_is_a_folder_or_cannot_be_made_or_is_not_sqlite(tmp_path: Path, no_server: None,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    cases = {str(tmp_path): "is a folder", str(blocker / "sub" / "m.db"): "cannot be created",
             str(blocker): "not a SQLite database"}
    for store, said in cases.items():
        assert main(["server", "--store", store, "--port", str(closed_port())]) == 2
        err = _err(capsys)
        assert f"--store {store}" in err and said in err and ".db file path" in err, err
    assert not (tmp_path / "mlflow.db").exists()


def test_server_store_from_tracking_uri_is_checked_too(tmp_path: Path, no_server: None,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--tracking-uri", f"sqlite:///{tmp_path}", "server", "--port", str(closed_port())]) == 2
    assert "--tracking-uri" in (err := _err(capsys)) and "is a folder" in err


def test_server_artifacts_that_cannot_be_created(tmp_path: Path, no_server: None,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for artifacts in (blocker, blocker / "art"):
        argv = ["server", "--store", str(tmp_path / "m.db"), "--artifacts", str(artifacts), "--port",
                str(closed_port())]
        assert main(argv) == 2
        err = _err(capsys)
        assert f"--artifacts {artifacts}" in err and "cannot be created" in err and "Fix:" in err
    assert check_artifact_root(tmp_path / "new" / "art").is_dir()


def test_a_host_that_does_not_resolve(monkeypatch: pytest.MonkeyPatch, no_server: None,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    def unknown(host: str, *args: object, **kwargs: object) -> None:  # no DNS query leaves the machine
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(ui.socket, "getaddrinfo", unknown)
    assert main(["server", "--host", "no.such.host.invalid", "--port", str(closed_port())]) == 2
    err = _err(capsys)
    assert "--host 'no.such.host.invalid'" in err and "does not resolve" in err and "127.0.0.1" in err


def test_a_port_in_use_is_named_before_the_server_starts(no_server: None) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        with pytest.raises(SpecbenchError, match="already in use"):
            ui.check_bind_address("127.0.0.1", busy.getsockname()[1])


def test_check_store_file_makes_the_folder_of_a_new_store(tmp_path: Path) -> None:
    path = check_store_file(tmp_path / "new" / "dir" / "m.db", "--store")
    assert path.parent.is_dir() and not path.exists()


def test_output_tail_keeps_what_the_server_said_without_traceback_frames(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = "import sys\nprint('starting')\ndef f():\n    raise ValueError('the store is broken')\nf()\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    ui._keep_tail(proc, None)
    proc.wait(timeout=30)
    tail = ui.output_tail(proc)
    assert "ValueError: the store is broken" in tail and "starting" in tail and 'File "' not in tail


# ---- --tracking-uri --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("uri", "said"), [
    ("bogus://x", "scheme 'bogus:'"),
    ("not a uri", "no spaces"),
    ("http://my host:5000", "no spaces"),
    (" sqlite:////x.db", "begins or ends with a space"),
    ("relative/mlruns", "file store"),
    ("http://127.0.0.1:abc", "port 'abc'"),
    ("http://:5000", "no host"),
    ("sqlite:/x.db", "sqlite:///"),
])
def test_malformed_tracking_uris_are_refused_with_the_supported_forms(uri: str, said: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--tracking-uri", uri, "runs"]) == 2
    err = _err(capsys)
    assert f"--tracking-uri {uri!r}" in err and said in err, err
    assert "sqlite:////abs/path.db" in err and "http://HOST:PORT" in err and "Traceback" not in err


def test_the_environment_uri_is_named_as_such(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "bogus://x")
    assert main(["runs"]) == 2
    assert "$MLFLOW_TRACKING_URI 'bogus://x'" in _err(capsys)


@pytest.mark.parametrize("uri", ["sqlite:////abs/m.db", "sqlite:///rel.db", "http://127.0.0.1:5000",
                                 "https://mlflow.example.org",
                                 "sqlite:////a folder/with spaces/m.db", "databricks", "databricks://profile"])
def test_supported_tracking_uris_pass(uri: str) -> None:
    assert check_tracking_uri(uri) == uri


@pytest.mark.parametrize(("uri", "package"), [("postgresql://u@h/db", "'psycopg[binary]'"),
                                              ("mysql+pymysql://x/y", "mysqlclient"), ("mssql://a/b", "pyodbc")])
def test_a_database_uri_without_its_driver_is_refused_before_any_run(uri: str, package: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["runs"], ["run", "jobs/quick.toml"]):  # no driver of these is in specbench's dependencies
        assert main(["--tracking-uri", uri, *argv]) == 2
        err = " ".join(_err(capsys).split())  # the database's own driver named
        assert "driver is not installed (No module named" in err and f"pip install {package}`" in err, err
        assert "Traceback" not in err


def test_an_unreachable_tracking_server_is_one_quick_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"http://127.0.0.1:{closed_port()}"
    start = time.monotonic()
    for argv in (["runs"], ["compare", "abc", "def"], ["baseline", "set", "abc"]):
        assert main(["--tracking-uri", uri, *argv]) == 2
        err = _err(capsys)
        assert f"cannot reach the tracking server at {uri}" in err and "specbench server" in err, err
    assert time.monotonic() - start < 15


def test_read_verbs_refuse_an_explicit_sqlite_store_that_does_not_exist(tmp_path: Path, no_server: None,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "nonexistent" / "dir" / "x.db"
    for argv in (["runs"], ["compare", "abc", "def"], ["baseline", "set", "abc"],
                 ["ui", "--port", str(closed_port())]):
        assert main(["--tracking-uri", f"sqlite:///{db}", *argv]) == 2
        err = _err(capsys)
        assert f"no MLflow store at {db}" in err and "Fix:" in err, err
    assert not (tmp_path / "nonexistent").exists()


def test_read_verbs_refuse_a_store_file_that_is_empty_or_no_database(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text, empty = tmp_path / "text.db", tmp_path / "empty.db"
    text.write_text("hello")
    empty.write_bytes(b"")
    for argv in (["runs"], ["compare", "abc", "def"]):
        assert main(["--tracking-uri", f"sqlite:///{text}", *argv]) == 2
        assert f"{text} is not an MLflow store" in (err := _err(capsys)) and "Fix:" in err, err
        assert main(["--tracking-uri", f"sqlite:///{empty}", *argv]) == 2
        err = _err(capsys)
        assert f"no MLflow store at {empty} (the file is empty" in err and "Fix:" in err, err
    assert empty.stat().st_size == 0 and text.read_text() == "hello"  # no store was made of either


def test_read_verbs_refuse_a_server_that_is_not_mlflow(capsys: pytest.CaptureFixture[str]) -> None:
    with http_server_answering(404) as uri:  # and 501 to MLflow's POST requests, as `python -m http.server`
        for argv in (["runs"], ["compare", "abc", "def"]):
            assert main(["--tracking-uri", uri, *argv]) == 2
            err = _err(capsys)
            assert f"{uri} answers HTTP but is not an MLflow tracking server" in err, err
            assert "HTTP 501" in err
            assert "Fix: point --tracking-uri" in err and "Traceback" not in err


def test_the_default_store_may_not_exist_yet_and_a_read_verb_does_not_create_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = check_readable_store(None)  # the embedded default: the verb then says "no runs yet"
    store = tmp_path / "home" / "mlflow.db"
    assert uri == f"sqlite:///{store}"
    assert main(["runs"]) == 0
    assert capsys.readouterr().out == (f"no runs yet (no local store at {uri}): try `specbench run "
                                       "jobs/quick.toml`\n")
    for argv in (["compare", "abc", "def"], ["baseline", "set", "abc", "--reason", "first"]):
        assert main(argv) == 2
        err = _err(capsys)
        assert f"no runs yet, the local store {uri} does not exist. Fix: run a job first" in err, err
        assert "Traceback" not in err
    assert not store.exists()


# ---- --ray-address ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("address", "said"), [
    ("garbage", "no HOST:PORT"),
    ("127.0.0.1:abc", "port 'abc'"),
    ("127.0.0.1:70000", "port '70000'"),
    ("http://127.0.0.1:8265", "dashboard"),
    ("tcp://127.0.0.1:6379", "scheme 'tcp://'"),
])
def test_malformed_ray_addresses_are_refused_before_anything_runs(address: str, said: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--ray-address", address, "run", "jobs/simultrans_quick.toml"]) == 2
    err = _err(capsys)
    assert "--ray-address" in err and said in err and "ray://HOST:PORT" in err and "auto" in err, err
    with pytest.raises(SpecbenchError, match=r"--ray-address .*Fix: HOST:PORT"):
        check_ray_address(address)


@pytest.mark.parametrize("argv", [["--tracking-uri", "", "runs"], ["submit", "jobs/graph_slurp.toml", "--address",
                                   "http://127.0.0.1:8265", "--tracking-uri", " "]])
def test_an_empty_tracking_uri_is_refused_not_taken_for_the_default(argv: list[str],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "argument --tracking-uri: an empty URI. Fix: give the store's URI" in _err(capsys)


@pytest.mark.parametrize("address", ["127.0.0.1:6379", "auto", "local", "ray://127.0.0.1:10001",
                                     "[::1]:6379", "head.example.org:6379"])
def test_ray_address_forms_that_pass(address: str) -> None:
    assert address_problem(address) is None


def test_an_unreachable_ray_cluster_is_refused_in_seconds() -> None:
    port = closed_port()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        start = time.monotonic()
        with pytest.raises(SpecbenchError, match=rf"cannot reach the Ray cluster at {address} .*ray start --head"):
            check_reachable(address, address)
        assert time.monotonic() - start < 6


def test_a_port_that_answers_but_is_no_ray_cluster_is_refused_in_seconds() -> None:
    """A web server (the dashboard's port, MLflow's) accepts the connection, so only the gRPC check tells it
    from a GCS; before it, `ray.init` retried such a port for ever."""
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler) as web:
        threading.Thread(target=web.serve_forever, daemon=True).start()
        try:
            address = f"127.0.0.1:{web.server_address[1]}"
            start = time.monotonic()
            with pytest.raises(SpecbenchError, match=rf"{address} is not a Ray cluster: .*speak gRPC.*Fix: give "
                                                     r"the head's GCS port"):
                check_reachable(address, address)
            assert time.monotonic() - start < 7
        finally:
            web.shutdown()


def test_a_grpc_server_passes_the_check_even_with_a_proxy_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GCS speaks gRPC: a real gRPC server passes, also when $http_proxy is set (Ray's channels ignore
    proxies unless RAY_grpc_enable_http_proxy is on, and so does the check)."""
    from concurrent import futures

    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        address = f"127.0.0.1:{port}"
        check_reachable(address, address)
        for proxy in ("http_proxy", "https_proxy", "grpc_proxy"):
            monkeypatch.setenv(proxy, f"http://127.0.0.1:{closed_port()}")
        start = time.monotonic()
        check_reachable(address, address)
        assert time.monotonic() - start < 3
    finally:
        server.stop(None)


def test_connect_checks_the_cluster_before_ray_init(monkeypatch: pytest.MonkeyPatch) -> None:
    from specbench.runtime import cluster

    def init(*args: object, **kwargs: object) -> None:
        raise AssertionError("ray.init was called for a cluster that is not there")

    monkeypatch.setattr(cluster.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(cluster.ray, "init", init)
    with pytest.raises(SpecbenchError, match="drop --ray-address"):
        cluster.connect(f"127.0.0.1:{closed_port()}")
    monkeypatch.setenv("RAY_ADDRESS", "garbage")
    with pytest.raises(SpecbenchError, match=r"\$RAY_ADDRESS 'garbage'"):
        cluster.connect()


# ---- jobs --address --------------------------------------------------------------------------------------

def test_jobs_address_form_is_checked_before_reaching_the_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    for address, said in (("http://127.0.0.1:abc", "port 'abc'"), ("127.0.0.1:8265", "web address"),
                          ("http://:8265", "no host")):
        assert main(["jobs", "--address", address]) == 2
        err = _err(capsys)
        assert f"--address {address!r}" in err and said in err and "cannot reach" not in err, err


def test_an_unreachable_dashboard_suggests_a_tunnel_not_an_open_dashboard(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "--address", f"http://127.0.0.1:{closed_port()}"]) == 2
    err = _err(capsys)
    assert "cannot reach the Ray Jobs API" in err and "ssh -N -L 8265:127.0.0.1:8265" in err
    assert "0.0.0.0" not in err


def test_a_dashboard_port_that_never_answers_is_refused_in_bounded_time(
        capsys: pytest.CaptureFixture[str]) -> None:
    from specbench.runtime.jobs import ANSWER_WAIT_S

    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"http://127.0.0.1:{silent.getsockname()[1]}"
        start = time.monotonic()
        assert main(["jobs", "--address", address]) == 2
        assert time.monotonic() - start < ANSWER_WAIT_S + 5
    err = _err(capsys)
    assert f"--address {address}: no answer from the Ray Jobs API" in err and "http://HEAD:8265" in err, err


# ---- journals --------------------------------------------------------------------------------------------

CREATE = ('{"op": "create", "tracking_uri": "sqlite:///x.db", "experiment": "e", "run_name": "r", "tags": {}, '
          '"start_ms": 1, "sent": false, "run_id": null}\n')
METRICS = '{"op": "metrics", "metrics": [["m", 1.0, 1, 0]], "sent": false}\n'


def test_read_entries_names_a_damaged_journal(tmp_path: Path) -> None:
    cases = {"": "it is empty", '{"op": "cre': "only a half-written line",
             CREATE + "garbage\n" + METRICS: "line 2 is not valid JSON",
             METRICS: "line 1 is not the run's `create`", CREATE + "[1, 2]\n": "line 2 is not an operation"}
    for text, said in cases.items():
        path = tmp_path / "j.jsonl"
        path.write_text(text)
        with pytest.raises(DamagedJournal) as caught:
            read_entries(path)
        message = str(caught.value)
        assert str(path) in message and said in message and "move it aside" in message, message


def test_read_entries_keeps_the_complete_lines_of_a_torn_journal(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_text(CREATE + METRICS + '{"op": "par')
    entries, torn = read_entries(path)
    assert [e["op"] for e in entries] == ["create", "metrics"] and torn == '{"op": "par'
    path.write_text(CREATE + METRICS.rstrip("\n"))  # a whole last line that only lacks its newline
    entries, torn = read_entries(path)
    assert len(entries) == 2 and torn == ""
