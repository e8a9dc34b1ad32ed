"""The work directory `specbench submit` gives a job (`runtime.jobs.submission_home`): the client's
SPECBENCH_HOME when set (not created here: it may be a mount only the nodes have), else the checkout's work
directory; never the working_dir Ray unpacks and deletes with the job."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.paths import project_root
from specbench.runtime.jobs import submission_home


def test_the_clients_work_directory_when_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "shared" / "work"))
    assert submission_home() == (tmp_path / "shared" / "work").resolve()
    assert not (tmp_path / "shared").exists()


def test_else_the_checkouts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECBENCH_HOME", raising=False)
    assert submission_home() == (project_root() / ".specbench").resolve()
