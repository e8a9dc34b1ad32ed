"""`specbench bench completion` on the shipped LM: JSON out, an MLflow run, and the batched n-best equal to
the one-prefix-at-a-time reference."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest

from specbench.cli import main

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_bench_completion_reports_speedup_and_agreement(tmp_path: Path) -> None:
    out, uri = tmp_path / "completion.json", f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = main(["--tracking-uri", uri, "bench", "completion", "--lm", str(ROOT / "models" / "lm_slurp.pt"),
                 "--prefixes", "120", "--single", "12", "--device", "cpu", "--output", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    assert result["nbest_identical"] == 1.0
    assert result["speedup_batched_vs_single"] > 0 and result["prefixes"] == 120
    for way in result["profile_seconds"].values():  # where the time goes: the LM's calls and the search's rest
        assert way["lm_step"] > 0 and way["search_bookkeeping"] > 0 and way["total"] == pytest.approx(
            way["lm_prefix_encoding"] + way["lm_step"] + way["search_bookkeeping"])
    assert result["profile_seconds"]["batched_same_prefixes"]["lm_prefix_encoding"] > 0
    assert result["peak_rss_bytes"] > 0
    run = mlflow.MlflowClient(uri).get_run(result["mlflow_run_id"])
    assert run.data.metrics["bench.completion.speedup_batched_vs_single"] == pytest.approx(
        result["speedup_batched_vs_single"])


def test_a_result_the_store_refuses_is_still_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "afile").write_text("")  # the store's folder is a file: the store fails after the measurement
    out, uri = tmp_path / "completion.json", f"sqlite:///{tmp_path / 'afile' / 'mlflow.db'}"
    with pytest.raises(Exception):
        main(["--tracking-uri", uri, "bench", "completion", "--lm", str(ROOT / "models" / "lm_slurp.pt"),
              "--prefixes", "8", "--single", "2", "--device", "cpu", "--output", str(out)])
    assert json.loads(out.read_text())["prefixes"] == 8 and json.loads(out.read_text())["mlflow_run_id"] is None
    assert "was measured but not logged to MLflow" in capsys.readouterr().err
