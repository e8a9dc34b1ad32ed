"""The convenience verbs (`graph build`, `data speech`, `train ...`, `nightly`) take a job file of their own kind
only: another kind is refused before anything runs, naming the file, both kinds and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.cli import main

JOB = Path(__file__).resolve().parents[1] / "jobs" / "simultrans_tiny.toml"  # kind = "simultrans"


@pytest.mark.parametrize(("argv", "kind"), [
    (["graph", "build"], "graph"), (["data", "speech"], "speech"), (["train", "am"], "train_am"),
    (["train", "mt", "--no-mlflow"], "train_mt"), (["nightly"], "nightly")])
def test_a_job_of_another_kind_is_refused(argv: list[str], kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, str(JOB)]) == 2
    err = capsys.readouterr().err
    assert f'{JOB}: this command needs a job with kind = "{kind}", not "simultrans"' in err
    assert f"`specbench run {JOB}`" in err and "Traceback" not in err
