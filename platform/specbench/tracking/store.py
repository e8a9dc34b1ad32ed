"""The tracking URI: `--tracking-uri`, else `MLFLOW_TRACKING_URI`, else the embedded local store.

The embedded store is `sqlite:///<repo>/.specbench/mlflow.db` with artifacts under
`<repo>/.specbench/mlartifacts/`: no server needed.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from specbench.paths import work_dir

ENV_URI = "MLFLOW_TRACKING_URI"


def local_store_uri() -> str:
    """`sqlite:////abs/path/.specbench/mlflow.db`."""
    return f"sqlite:///{work_dir() / 'mlflow.db'}"


def local_artifact_root() -> Path:
    path = work_dir() / "mlartifacts"
    path.mkdir(parents=True, exist_ok=True)
    return path


def resolve_tracking_uri(explicit: str | None = None) -> str:
    """The URI every verb uses: explicit, else the environment, else the embedded local store."""
    return explicit or os.environ.get(ENV_URI) or local_store_uri()


def quiet_mlflow() -> None:
    """Keep MLflow's and alembic's start-up chatter (schema migrations of a new store) off the terminal."""
    for name in ("mlflow", "alembic", "alembic.runtime.migration"):
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    # an unreachable server is noticed in seconds (the run then continues offline, see journal.py), not
    # after MLflow's default minutes of retries
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
