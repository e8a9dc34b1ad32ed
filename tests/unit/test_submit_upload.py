"""`specbench submit` refuses a job file inside the project that the upload to the cluster leaves out (under
`.specbench/`, or git-ignored such as build/), or a file it reads that is, before anything is submitted: the
job would fail on the cluster with no such file (`runtime.jobs.upload_exclusion`, decided as Ray decides)."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from specbench.cli import main
from specbench.paths import project_root
from specbench.runtime.jobs import upload_exclusion

JOB = Path(__file__).resolve().parents[1] / "jobs" / "simultrans_tiny.toml"


def test_files_the_upload_leaves_out_are_named_with_why(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", raising=False)
    (tmp_path / ".gitignore").write_text("/build/\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".gitignore").write_text("*.local.toml\n")
    files = {name: tmp_path / name for name in ("jobs/a.toml", "build/a.toml", ".specbench/a.toml",
                                                "sub/a.local.toml", "sub/a.toml")}
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('kind = "simultrans"\n')
    root = tmp_path.resolve()
    assert upload_exclusion(tmp_path, files["jobs/a.toml"]) is None
    assert upload_exclusion(tmp_path, files["sub/a.toml"]) is None
    assert upload_exclusion(tmp_path, files["build/a.toml"]) == f"build/a.toml is left out by {root / '.gitignore'}"
    assert upload_exclusion(tmp_path, files["sub/a.local.toml"]) == \
        f"sub/a.local.toml is left out by {root / 'sub' / '.gitignore'}"
    said = upload_exclusion(tmp_path, files[".specbench/a.toml"])
    assert said is not None and said.startswith(".specbench is left out by the upload's excludes (")
    monkeypatch.setenv("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "1")  # Ray then uploads git-ignored files
    assert upload_exclusion(tmp_path, files["build/a.toml"]) is None


def test_submit_refuses_job_files_under_the_work_directory(capsys: pytest.CaptureFixture[str]) -> None:
    folder = project_root() / ".specbench" / f"test-submit-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    suite = project_root() / "jobs" / f"_{folder.name}.toml"  # uploaded, but not the job it lists
    try:
        job = folder / "job.toml"
        shutil.copyfile(JOB, job)
        assert main(["submit", str(job), "--address", "http://127.0.0.1:9"]) == 2  # refused before contacting it
        err = capsys.readouterr().err
        assert f"{job}: the cluster would not receive this job file" in err and ".specbench is left out" in err
        assert f"Fix: put the job file in {project_root() / 'jobs'}/ or another tracked folder" in err
        assert "cannot reach" not in err and "Traceback" not in err
        suite.write_text(f'kind = "suite"\njobs = ["../.specbench/{folder.name}/job.toml"]\n')
        assert main(["submit", str(suite), "--address", "http://127.0.0.1:9"]) == 2
        assert f"{suite}: key 'jobs': the cluster would not receive {job} (.specbench is left out by the " \
            "upload's" in capsys.readouterr().err
    finally:
        shutil.rmtree(folder)
        suite.unlink(missing_ok=True)
