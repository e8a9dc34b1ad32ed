"""Damaged graph files and a missing data folder reach the user as one message naming the file and the fix,
a non-zero exit code, and a FAILED (never FINISHED) MLflow run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specbench.cli import main
from specbench.experiments.graph_recipe import GraphArtifacts
from specbench.tracking.queries import recent_runs

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurp_graph: GraphArtifacts) -> Path:
    """A work directory holding a copy of the built graph (same input hash), with its own MLflow store."""
    home = tmp_path / "home"
    shutil.copytree(slurp_graph.directory, home / "graphs" / slurp_graph.directory.name)
    monkeypatch.setenv("SPECBENCH_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return home / "graphs" / slurp_graph.directory.name


def _run_and_expect_failure(capsys: pytest.CaptureFixture[str], *fragments: str) -> None:
    assert main(["run", str(ROOT / "jobs/graph_slurp.toml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specbench: error:") and "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err
    assert [r.status for r in recent_runs(experiment="graph")] == ["FAILED"]


def test_intact_copy_is_reused(private_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["graph", "build", str(ROOT / "jobs/graph_slurp.toml")]) == 0
    assert "reused" in capsys.readouterr().out
    assert [r.status for r in recent_runs(experiment="graph")] == ["FINISHED"]


def test_truncated_tlg(private_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tlg = private_home / "TLG.fst"
    tlg.write_bytes(tlg.read_bytes()[: tlg.stat().st_size // 2])
    _run_and_expect_failure(capsys, str(tlg), "truncated", "specbench graph build")


def test_corrupt_tlg_magic(private_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tlg = private_home / "TLG.fst"
    tlg.write_bytes(b"\0\0\0\0" + tlg.read_bytes()[4:])
    _run_and_expect_failure(capsys, str(tlg), "magic", "Fix:", "specbench graph build")


def test_arpa_with_bad_header(private_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arpa = private_home / "lm.arpa"
    arpa.write_text(arpa.read_text().replace("\\data\\", "\\dta\\", 1))
    _run_and_expect_failure(capsys, str(arpa), "ARPA header", "Fix:")


def test_missing_data_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, private_home: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SPECBENCH_DATA", str(tmp_path / "gone"))
    _run_and_expect_failure(capsys, str(tmp_path / "gone"), "Fix: point SPECBENCH_DATA", "specbench data check")


def test_unknown_config_key_starts_no_run(private_home: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job.toml"
    job.write_text('kind = "graph"\n[lm]\nodrer = 3\n')
    assert main(["run", str(job)]) == 2
    err = capsys.readouterr().err
    assert str(job) in err and "'lm.odrer'" in err and "allowed keys here" in err
    assert recent_runs(experiment="graph") == []
