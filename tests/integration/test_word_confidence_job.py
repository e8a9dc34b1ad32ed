"""The confidence-measure task end to end (`jobs/word_confidence_quick.toml` over the quick evaluation's
scores): lattices from the CPU backend and the twin, word posteriors, NCE/AUC/calibration in MLflow, the
settings chosen on devel; and a missing evaluation named with its fix."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest

from specbench.cli import main
from specbench.errors import DataError
from specbench.experiments import scores_record
from specbench.experiments.registry import load_config
from specbench.paths import from_root, work_dir

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_word_posteriors_of_the_quick_test_set_are_measured_per_backend(tmp_path: Path, ray_cluster: object) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    eval_path = ROOT / "jobs" / "am_eval_quick.toml"
    evaluation = load_config(eval_path)
    try:  # scores that the eval job as it is now would not write (or none) are written anew first
        scores_record.check(work_dir() / "scores" / "quick", evaluation, from_root(evaluation.checkpoint), eval_path)
    except DataError:
        assert main(["--tracking-uri", uri, "run", str(eval_path)]) == 0
    assert main(["--tracking-uri", uri, "run", str(ROOT / "jobs" / "word_confidence_quick.toml")]) == 0
    mlflow.set_tracking_uri(uri)
    run = mlflow.search_runs(experiment_names=["confidence"], output_format="list")[0]
    metrics = run.data.metrics
    assert metrics["confidence.test_utterances"] == 24
    # the choice is the devel argmax, recomputed here from the devel metrics alone (ties: the smaller beam,
    # then the smaller scale), over every point of the job's grid: test data cannot have moved it
    config = load_config(ROOT / "jobs" / "word_confidence_quick.toml")
    devel = {(beam, scale): metrics.get(f"confidence.devel_nce.beam{beam:g}.scale{scale:g}")
             for beam in config.lattice_beams for scale in config.posterior_scales}
    assert {k for k in metrics if k.startswith("confidence.devel_nce.")} <= {  # no point beyond the grid
        f"confidence.devel_nce.beam{b:g}.scale{s:g}" for b, s in devel}
    defined = {point: nce for point, nce in devel.items() if nce is not None}
    assert defined, devel
    argmax = max(defined, key=lambda p: (defined[p], -p[0], -p[1]))
    assert (metrics["confidence.lattice_beam"], metrics["confidence.posterior_scale"]) == argmax
    on_edge = argmax[0] in (min(config.lattice_beams), max(config.lattice_beams)) or \
        argmax[1] in (min(config.posterior_scales), max(config.posterior_scales))
    assert metrics["confidence.choice_on_grid_edge"] == float(on_edge)
    assert metrics["confidence.nce"] == metrics["confidence.nce.cpu"]
    assert metrics["confidence.words.cpu"] > 50
    # posteriors that separate right words from wrong ones (make run's quick suite: AUC 0.93, NCE 0.42)
    assert metrics["confidence.auc"] > 0.7 and metrics["confidence.nce"] > 0.1
    assert metrics["confidence.undefined_utterances.cpu"] == 0
    # the twin keeps the same lattices as the CPU backend, so the same 1-best and the same posteriors
    assert metrics["confidence.onebest_identical.twin"] == 1.0
    assert metrics["confidence.max_posterior_difference.twin"] < 1e-4
    # the lattices' reach: some path is at least as good as the 1-best, the twin's lattices are the CPU's,
    # and a wider lattice beam keeps every path of a narrower one
    assert 0.0 <= metrics["confidence.lattice_oracle_wer"] <= metrics["confidence.wer"] < 0.5
    assert metrics["confidence.lattice_oracle_wer"] == metrics["confidence.lattice_oracle_wer.cpu"]
    for key in ("wer", "lattice_oracle_wer"):
        assert metrics[f"confidence.{key}.twin"] == metrics[f"confidence.{key}.cpu"]
    oracle = [metrics[f"confidence.devel_lattice_oracle_wer.beam{b:g}"] for b in sorted(config.lattice_beams)]
    assert oracle == sorted(oracle, reverse=True), oracle
    artifacts = Path(run.info.artifact_uri.removeprefix("file://"))
    report = json.loads((artifacts / "word_confidence.json").read_text())
    assert set(report["devel_nce"]) == {f"beam{b:g}.scale{s:g}" for b, s in devel}
    assert bool(report["choice_on_grid_edge"]) == on_edge and len(report["choice_warnings"]) == len(
        report["choice_on_grid_edge"])
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


def test_scores_that_another_evaluation_wrote_are_refused_before_decoding(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The quick scores (written by the test above, or `make run`) against an eval job of the same name whose
    settings differ: their record says another config wrote them, so the job stops with the fix."""
    scores = work_dir() / "scores" / "quick"
    assert (scores / "scores.json").is_file()
    evaluation = (ROOT / "jobs" / "am_eval_quick.toml").read_text()
    for key in ("speech_job", "graph_job"):  # the copy's references, made absolute
        evaluation = evaluation.replace(f'{key} = "', f'{key} = "{ROOT / "jobs"}/')
    (tmp_path / "am_eval_quick.toml").write_text(evaluation.replace("devel_utterances = 8", "devel_utterances = 6"))
    job = tmp_path / "confidence.toml"
    job.write_text('kind = "word_confidence"\nscores_job = "am_eval_quick.toml"\n')
    assert main(["--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "run", str(job)]) == 2
    err = capsys.readouterr().err
    assert "written by another version of" in err and "specbench run" in err and "Traceback" not in err
    assert "devel: lattice beam" not in err  # nothing was decoded
