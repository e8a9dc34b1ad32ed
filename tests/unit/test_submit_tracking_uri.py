"""The tracking URI a submitted job gets: a relative SQLite file (`sqlite:///runs.db`) is the caller's, made
absolute before submitting (`tracking.store.absolute_sqlite_uri`); a job whose SQLite database would still lie
inside the working_dir Ray unpacked for it (and deletes with it) is refused before any run opens."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.errors import SpecbenchError
from specbench.experiments.registry import RunOptions
from specbench.experiments.runner import check_artifacts_outlive_job
from specbench.tracking.store import absolute_sqlite_uri


def test_a_relative_sqlite_path_is_made_absolute_against_the_callers_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute_sqlite_uri("sqlite:///runs.db") == f"sqlite:///{tmp_path.resolve() / 'runs.db'}"
    assert absolute_sqlite_uri("sqlite:///a/../store/runs.db?mode=rwc", base=tmp_path / "x") == \
        f"sqlite:///{(tmp_path / 'x' / 'store' / 'runs.db').resolve()}?mode=rwc"


@pytest.mark.parametrize("uri", ["sqlite:////abs/runs.db", "sqlite:///:memory:", "http://127.0.0.1:5000",
                                 "postgresql://u@127.0.0.1/mlflow", "databricks"])
def test_other_uris_are_unchanged(uri: str) -> None:
    assert absolute_sqlite_uri(uri) == uri


def test_a_relative_database_inside_rays_working_dir_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job started in Ray's unpacked working_dir with a relative SQLite store (not through `specbench
    submit`): the work directory outlives the job, the database file would not."""
    package = tmp_path / "runtime_resources" / "working_dir_files" / "_ray_pkg_0123abcd"
    package.mkdir(parents=True)
    monkeypatch.chdir(package)
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    with pytest.raises(SpecbenchError) as caught:
        check_artifacts_outlive_job(RunOptions(tracking_uri="sqlite:///runs.db"))
    said = str(caught.value)
    assert f"is the file {package.resolve() / 'runs.db'}" in said and f"({package.resolve()})" in said
    assert "Fix:" in said and "absolute" in said
    assert not (package / "runs.db").exists()
    check_artifacts_outlive_job(RunOptions(tracking_uri=f"sqlite:///{tmp_path / 'runs.db'}"))  # outside: fine
