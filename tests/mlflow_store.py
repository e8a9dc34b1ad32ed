"""A new, empty MLflow SQLite store for a test in a few milliseconds: creating one runs MLflow's schema
migrations (seconds), so they run once into a template database, which each store is a copy of. The template is
kept in the temporary folder, one per MLflow version and user, so that later test processes skip the
migrations too; it is written under another name and renamed into place once complete."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


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
