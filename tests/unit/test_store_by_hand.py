"""The tracking URI forms `tracking.store` accepts and refuses, on inputs whose answer is known by reading the
form: port 0 of a server address, the spellings of MLFLOW_ALLOW_FILE_STORE, a Windows path, a SQLite URI with
a query or with no path; the store file a server may create (an empty file is a new store); and a server that
answers with an HTTP error status counts as reachable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow_store import http_server_answering

from specbench.errors import SpecbenchError
from specbench.tracking.store import (
    check_server_reachable,
    check_store_file,
    check_tracking_uri,
    resolve_tracking_uri,
    sqlite_path,
)

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)


def test_port_zero_of_a_server_address_is_refused() -> None:
    with pytest.raises(SpecbenchError, match="the port 0 is not a whole number from 1 to 65535"):
        check_tracking_uri("http://127.0.0.1:0")
    assert check_tracking_uri("http://127.0.0.1:1") == "http://127.0.0.1:1"  # the lowest port there is


@pytest.mark.parametrize("value", ["1", "true", "TRUE", " yes "])
def test_every_documented_spelling_of_allow_file_store_admits_a_plain_path(value: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", value)
    assert check_tracking_uri("relative/mlruns") == "relative/mlruns"
    assert check_tracking_uri("file:///abs/mlruns") == "file:///abs/mlruns"


@pytest.mark.parametrize("value", ["", "0", "false", "no", "on"])
def test_other_values_of_allow_file_store_keep_the_file_store_refused(value: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", value)
    with pytest.raises(SpecbenchError, match="file store"):
        check_tracking_uri("relative/mlruns")


def test_a_windows_path_is_a_plain_path_not_a_one_letter_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SpecbenchError) as caught:
        check_tracking_uri("C:\\runs\\mlruns")
    assert "file store" in str(caught.value) and "scheme" not in str(caught.value).split("Fix:")[0]
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert check_tracking_uri("C:\\runs\\mlruns") == "C:\\runs\\mlruns"


def test_a_sqlite_uri_without_a_path_is_refused() -> None:
    with pytest.raises(SpecbenchError, match="sqlite:/// followed by the file's path"):
        check_tracking_uri("sqlite:///")


def test_the_file_of_a_sqlite_uri_leaves_out_its_query() -> None:
    assert sqlite_path("sqlite:////srv/runs/m.db?mode=ro&cache=shared") == Path("/srv/runs/m.db")
    assert sqlite_path("sqlite:///rel/m.db") == Path("rel/m.db")
    assert sqlite_path("http://127.0.0.1:5000") is None


def test_a_malformed_environment_uri_names_the_environment_not_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:0")
    with pytest.raises(SpecbenchError, match=r"^\$MLFLOW_TRACKING_URI 'http://127.0.0.1:0': the port 0"):
        resolve_tracking_uri(None)
    with pytest.raises(SpecbenchError, match=r"^--tracking-uri 'bogus://x'"):  # the option wins over the environment
        resolve_tracking_uri("bogus://x")


def test_an_empty_file_is_a_new_store_a_non_sqlite_one_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "new.db"
    empty.touch()  # what `touch` or a crashed first start leaves: SQLite makes a database of it
    assert check_store_file(empty, "--store") == empty.resolve()
    other = tmp_path / "notes.db"
    other.write_bytes(b"SQLite format 2\x00")  # one byte off SQLite's 16-byte header
    with pytest.raises(SpecbenchError, match="not a SQLite database"):
        check_store_file(other, "--store")
    real = tmp_path / "real.db"
    real.write_bytes(b"SQLite format 3\x00" + b"\x00" * 84)
    assert check_store_file(real, "--store") == real.resolve()


@pytest.fixture
def answering_404() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 that answers every request 404."""
    with http_server_answering(404) as url:
        yield url


def test_a_server_answering_an_http_error_is_reachable(answering_404: str) -> None:
    check_server_reachable(answering_404, timeout=5.0)  # it answered: a server is there
