"""The work directory `specbench submit` gives a job (`runtime.jobs.submission_home`): the client's
SPECBENCH_HOME when set; else, with a SQLite store, the checkout's work directory (its artifacts must outlive
the working_dir Ray deletes); else none, so the nodes keep their own (the KubeRay manifests' shared /work)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.paths import project_root
from specbench.runtime.jobs import submission_home


def test_the_clients_work_directory_when_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "shared" / "work"))
    for uri in ("sqlite:///x.db", "http://mlflow:5000"):
        assert submission_home(uri) == (tmp_path / "shared" / "work").resolve()
    assert not (tmp_path / "shared").exists()  # it may be a mount only the nodes have: not created here


def test_a_sqlite_store_gets_the_checkouts_work_directory_a_server_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECBENCH_HOME", raising=False)
    assert submission_home("sqlite:////tmp/store/mlflow.db") == (project_root() / ".specbench").resolve()
    assert submission_home("http://10.0.0.1:5000") is None
