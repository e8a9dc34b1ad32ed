"""The data resolver with the data present, absent, and partly broken; and `specbench data check`."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from specbench.cli import main
from specbench.data import resolver
from specbench.errors import DataError

pytestmark = pytest.mark.unit


def test_present_data_passes(capsys: pytest.CaptureFixture[str]) -> None:
    root, _, checks = resolver.check_all()
    assert root.is_dir()
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert main(["data", "check"]) == 0
    assert f"{len(checks)} of {len(checks)} files ok" in capsys.readouterr().out


def test_env_var_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBENCH_DATA", str(tmp_path))
    assert resolver.data_dir() == tmp_path.resolve()


def test_absent_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere"
    monkeypatch.setenv("SPECBENCH_DATA", str(missing))
    with pytest.raises(DataError) as err:
        resolver.data_file("slurp/lm.txt.gz")
    assert str(missing) in str(err.value) and "SPECBENCH_DATA" in str(err.value)
    assert main(["data", "check"]) == 1
    out = capsys.readouterr().out
    assert "does not exist" in out and "SPECBENCH_DATA" in out
    missing.write_text("")  # a file where the folder should be
    assert main(["data", "check"]) == 1
    assert "MISSING: it is a file, not a folder. Fix: set SPECBENCH_DATA" in capsys.readouterr().out


def test_missing_and_corrupt_files_are_named_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    real = resolver.data_dir()
    copy = tmp_path / "data"
    shutil.copytree(real, copy)
    for path in copy.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    (copy / "slurp/test.jsonl.gz").unlink()
    (copy / "slurp/devel.jsonl.gz").write_bytes(gzip.compress(bytes(range(256)) * 64)[:60])  # truncated gzip
    monkeypatch.setenv("SPECBENCH_DATA", str(copy))
    assert main(["data", "check"]) == 1
    out = capsys.readouterr().out
    assert "PROBLEM slurp/test.jsonl.gz: missing" in out
    assert "PROBLEM slurp/devel.jsonl.gz: unreadable" in out
    assert "fix slurp/test.jsonl.gz" in out and "SLURP" in out
    with pytest.raises(DataError, match="test.jsonl.gz.*SLURP test set"):
        resolver.data_file("slurp/test.jsonl.gz")
