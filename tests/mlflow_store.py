"""What the tests of the MLflow layer share: a new, empty MLflow SQLite store in a few milliseconds (creating one
runs MLflow's schema migrations, seconds, so they run once into a template database, which each store is a copy
of; the template is kept in the temporary folder, one per MLflow version and user, so that later test processes
skip the migrations too; it is written under another name and renamed into place once complete), a folder that
is SPECBENCH_HOME while a module's store lives, and an HTTP server that answers every request with one status."""

from __future__ import annotations

import http.server
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _template() -> Path:
    import mlflow
    from mlflow.tracking import MlflowClient

    path = Path(tempfile.gettempdir()) / f"specbench-tests-mlflow-{mlflow.__version__}-{os.getuid()}.db"
    if not path.is_file():
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.unlink(missing_ok=True)
        MlflowClient(tracking_uri=f"sqlite:///{partial}").search_experiments()  # creates the tables
        os.replace(partial, path)
    return path


def new_store(folder: Path) -> str:
    """The URI of a new, empty store `folder/mlflow.db` (its default experiment only)."""
    target = folder / "mlflow.db"
    shutil.copyfile(_template(), target)
    return f"sqlite:///{target}"


@contextmanager
def store_home(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Path]:
    """A new folder `name`; while the context lasts, its `home` is SPECBENCH_HOME and MLFLOW_TRACKING_URI is
    unset (for a module-scoped store, which the function-scoped `monkeypatch` cannot serve)."""
    folder = tmp_path_factory.mktemp(name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECBENCH_HOME", str(folder / "home"))
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        yield folder


@contextmanager
def http_server_answering(status: int) -> Iterator[str]:
    """The URL of an HTTP server on 127.0.0.1 that answers every GET with `status` while the context lasts."""

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_error(status)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
