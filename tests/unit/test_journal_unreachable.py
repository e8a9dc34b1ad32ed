"""`is_unreachable` decides from the HTTP status and the transport error, never from the message: a refusal
whose message quotes a run id with "503" in it is a refusal; a closed port, or a server answering 503, is an
unreachable server."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import (
    INVALID_PARAMETER_VALUE,
    RESOURCE_DOES_NOT_EXIST,
    TEMPORARILY_UNAVAILABLE,
)
from mlflow.tracking import MlflowClient

from specbench.tracking.journal import is_unreachable

RUN_ID = "9c1f5030a7d84e02b6e1c4d3f2a10b5e"  # hex, with "503" and "502" inside, as ~1.5% of run ids have


@pytest.fixture(autouse=True)
def _fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends: nothing listens there


def _server(status: int, body: str) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _error_of(uri: str) -> BaseException:
    with pytest.raises(Exception) as info:
        MlflowClient(tracking_uri=uri).get_run(RUN_ID)
    return info.value


def test_a_refusal_quoting_a_run_id_with_503_in_it_is_not_unreachable() -> None:
    for code in (INVALID_PARAMETER_VALUE, RESOURCE_DOES_NOT_EXIST):
        err = MlflowException(f"Run '{RUN_ID}' not found (status 502 upstream said 503)", error_code=code)
        assert 400 <= err.get_http_status_code() < 500
        assert not is_unreachable(err)


def test_a_server_status_of_503_is_unreachable_whatever_the_message() -> None:
    assert is_unreachable(MlflowException("try again later", error_code=TEMPORARILY_UNAVAILABLE))


def test_a_closed_port_is_unreachable() -> None:
    err = _error_of(f"http://127.0.0.1:{_closed_port()}")
    assert isinstance(err, MlflowException) and is_unreachable(err)


def test_a_real_server_refusing_a_request_that_names_a_503_run_is_not_unreachable() -> None:
    body = json.dumps({"error_code": "RESOURCE_DOES_NOT_EXIST", "message": f"Run '{RUN_ID}' not found"})
    for uri in _server(404, body):
        err = _error_of(uri)
        assert RUN_ID in str(err) and not is_unreachable(err)
    body = json.dumps({"error_code": "INVALID_PARAMETER_VALUE", "message": f"Run '{RUN_ID}' 503 502"})
    for uri in _server(400, body):
        err = _error_of(uri)
        assert "503" in str(err) and not is_unreachable(err)


def test_a_real_server_answering_503_is_unreachable_one_answering_its_own_error_is_not() -> None:
    for uri in _server(503, "<html>Service Unavailable</html>"):
        assert is_unreachable(_error_of(uri))  # MLflow retries 503 until it gives up: the server cannot serve
    body = json.dumps({"error_code": "INTERNAL_ERROR", "message": f"Run '{RUN_ID}': 503 bad row"})
    for uri in _server(400, body):  # the server answers, with an error of its own: refused, not down
        assert not is_unreachable(_error_of(uri))
