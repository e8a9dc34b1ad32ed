"""The confidence-measure task end to end (`jobs/word_confidence_quick.toml` over the quick evaluation's
scores): lattices from the CPU backend and the twin, word posteriors, NCE/AUC/calibration in MLflow, the
settings chosen on devel; and a missing evaluation named with its fix."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest

from specbench.cli import main
from specbench.paths import work_dir

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_word_posteriors_of_the_quick_test_set_are_measured_per_backend(tmp_path: Path, ray_cluster: object) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    if not (work_dir() / "scores" / "quick" / "test.parquet").is_file():
        assert main(["--tracking-uri", uri, "run", str(ROOT / "jobs" / "am_eval_quick.toml")]) == 0
    assert main(["--tracking-uri", uri, "run", str(ROOT / "jobs" / "word_confidence_quick.toml")]) == 0
    mlflow.set_tracking_uri(uri)
    run = mlflow.search_runs(experiment_names=["confidence"], output_format="list")[0]
    metrics = run.data.metrics
    assert metrics["confidence.test_utterances"] == 24
    assert metrics["confidence.lattice_beam"] in (4.0, 8.0) and metrics["confidence.posterior_scale"] in (0.2, 0.5, 1.0)
    chosen = f"beam{metrics['confidence.lattice_beam']:g}.scale{metrics['confidence.posterior_scale']:g}"
    assert metrics[f"confidence.devel_nce.{chosen}"] == max(v for k, v in metrics.items()
                                                            if k.startswith("confidence.devel_nce."))
    assert metrics["confidence.nce"] == metrics["confidence.nce.cpu"]
    assert metrics["confidence.words.cpu"] > 50
    # posteriors that separate right words from wrong ones (make run's quick suite: AUC 0.93, NCE 0.42)
    assert metrics["confidence.auc"] > 0.7 and metrics["confidence.nce"] > 0.1
    assert metrics["confidence.undefined_utterances.cpu"] == 0
    # the twin keeps the same lattices as the CPU backend, so the same 1-best and the same posteriors
    assert metrics["confidence.onebest_identical.twin"] == 1.0
    assert metrics["confidence.max_posterior_difference.twin"] < 1e-4
    artifacts = Path(run.info.artifact_uri.removeprefix("file://"))
    report = json.loads((artifacts / "word_confidence.json").read_text())
    assert report["backends"]["gpu"]["status"].startswith("unavailable") or report["backends"]["gpu"]["status"] == "ok"
    assert sum(row["words"] for row in report["backends"]["cpu"]["calibration"]) == metrics["confidence.words.cpu"]
    assert (artifacts / "calibration.png").is_file()


def test_an_evaluation_that_has_not_run_is_named_with_its_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    job = tmp_path / "confidence.toml"
    job.write_text(f'kind = "word_confidence"\nscores_job = "{ROOT / "jobs" / "am_eval_quick.toml"}"\n')
    assert main(["--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "run", str(job)]) != 0
    err = capsys.readouterr().err
    assert "does not exist" in err and "specbench run" in err and "am_eval_quick.toml" in err
