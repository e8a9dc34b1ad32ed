"""`specbench compare`: a real MLflow store, runs that differ in some params and metrics."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest

from specbench.cli import main
from specbench.reports.compare import _fmt, render_html, render_text
from specbench.tracking.compare import compare_runs
from specbench.tracking.runs import TrackedRun

pytestmark = [pytest.mark.integration, pytest.mark.isolated]


def _runs(uri: str) -> list[str]:
    ids = []
    for i, (beam, bleu) in enumerate(((5, 30.0), (5, 31.5), (7, 31.5))):
        with TrackedRun("cmp", f"run{i}", uri, {"kind": "test"}) as run:
            run.log_params({"beam": beam, "k": 3})
            run.log_metrics({"bleu": bleu, "al": 3.25, "asr.wer": 0.25 + i, "graph.states": 7.0})
            ids.append(run.run_id)
    return ids


def test_only_differences_with_deltas_and_an_html_artifact(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    a, b, c = _runs(uri)
    comparison = compare_runs([a, b, c], uri)
    shown = {(r.kind, r.name) for r in comparison.shown(False)}
    assert ("metric", "bleu") in shown and ("param", "beam") in shown
    assert ("param", "k") not in shown and ("metric", "al") not in shown
    assert {(r.kind, r.name) for r in comparison.shown(True)} >= {("param", "k"), ("metric", "al")}
    text = render_text(comparison)
    assert "31.5 (+1.5)" in text and "param k" not in text
    assert "each run's value minus the first run's" in text  # which way the deltas go
    assert "note: these runs are of different jobs (run0, run1, run2)" in text
    assert "metric asr.wer (lower is better)" in text  # headline metrics say which way they improve
    assert "metric graph.states " in text and "graph.states (" not in text  # a size grades nothing
    assert "metric bleu " in text and "bleu (" not in text  # not a headline metric: no direction claimed
    assert "asr.wer <span class=d>(lower is better)</span>" in render_html(comparison)
    assert "<tr class=diff>" in render_html(comparison)
    assert main(["--tracking-uri", uri, "compare", a, b]) == 0
    out = capsys.readouterr().out
    assert "(+1.5)" in out and "compare.html" in out
    mlflow.set_tracking_uri(uri)
    run = mlflow.search_runs(experiment_names=["compare"], output_format="list")[0]
    assert run.data.tags["compare.runs"] == f"{a},{b}"
    assert [f.path for f in mlflow.MlflowClient().list_artifacts(run.info.run_id)] == ["compare.html"]


def test_a_missing_run_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    a, _, _ = _runs(uri)
    assert main(["--tracking-uri", uri, "compare", a, "0" * 32]) == 2
    err = capsys.readouterr().err
    assert "0" * 32 in err and "specbench runs" in err and "Traceback" not in err


def test_a_swept_metric_says_its_value_is_the_last_step_and_counts_print_whole(tmp_path: Path) -> None:
    """A metric logged once per sweep point shows its last step, and its row says so; a large count prints
    in full, so two that differ by one do not look equal."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ids = []
    for arcs, curve in ((2345678.0, (0.9, 0.5, 0.1)), (2345679.0, (0.9, 0.5, 1.1))):
        with TrackedRun("cmp", "sweep", uri, {"kind": "test"}) as run:
            for step, value in enumerate(curve):
                run.log_metrics({"success": value}, step=step)
            run.log_metrics({"graph.arcs": arcs})
            ids.append(run.run_id)
    comparison = compare_runs(ids, uri)
    rows = {r.name: r for r in comparison.rows}
    assert rows["success"].swept and not rows["graph.arcs"].swept
    text = render_text(comparison)
    assert "metric success (last step of a sweep)" in text and "1.1 (+1)" in text
    assert "<td>success <span class=d>(last step of a sweep)</span></td>" in render_html(comparison)
    assert "2,345,678" in text and "2,345,679 (+1)" in text
    assert (_fmt(None), _fmt(float("nan"))) == ("-", "nan")  # not logged, logged as NaN
    assert "success <span class=d>(last step of a sweep)</span>" in render_html(comparison)


def test_runs_of_different_metrics_versions_are_warned_about(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs of one job kind whose metrics versions differ: the deltas compare metrics whose meaning
    changed, and the comparison says so, naming the runs and their versions; runs of one version do not."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ids = []
    for name, version, bleu in (("old", "4", 30.0), ("new", "5", 31.0), ("newer", "5", 32.0)):
        with TrackedRun("cmp", name, uri, {"kind": "simultrans", "metrics.version": version}) as run:
            run.log_metrics({"simul.bleu_full": bleu})
            ids.append(run.run_id)
    old, new, newer = ids
    assert main(["--tracking-uri", uri, "compare", old, new, "--no-artifact"]) == 0
    out = capsys.readouterr().out
    warning = next(line for line in out.splitlines() if line.startswith("warning:"))
    assert "different metrics versions" in warning and "Fix:" in warning
    assert f"old [{old[:8]}]: metrics.version 4" in warning
    assert f"new [{new[:8]}]: metrics.version 5" in warning
    assert "metrics.version 4" in render_html(compare_runs([old, new], uri))
    assert main(["--tracking-uri", uri, "compare", new, newer, "--no-artifact"]) == 0
    assert "warning" not in capsys.readouterr().out


def test_timed_metrics_of_runs_on_different_hardware_are_warned_about(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Two decoder benchmarks on different machines: their speed ratios depend on the machine, and the
    comparison says so, naming each run's hardware; runs of one machine, or without a timed metric, do not."""
    from specbench.tracking import runs

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ids = {}
    for name, hardware, metrics in (
            ("xeon", "2 x Intel(R) Xeon(R), no GPU", {"decoder.cpu_vs_kaldi": 1.4, "decoder.onebest_identical": 1.0}),
            ("epyc", "16 x AMD EPYC, NVIDIA H200", {"decoder.cpu_vs_kaldi": 2.1, "decoder.onebest_identical": 1.0}),
            ("xeon2", "2 x Intel(R) Xeon(R), no GPU", {"decoder.cpu_vs_kaldi": 1.5, "decoder.onebest_identical": 1.0}),
            ("epyc_wer", "16 x AMD EPYC, NVIDIA H200", {"decoder.onebest_identical": 0.99})):
        monkeypatch.setattr(runs, "describe", lambda hardware=hardware: hardware)
        with TrackedRun("cmp", name, uri, {"kind": "bench_decoder"}) as run:
            run.log_metrics(metrics)
            ids[name] = run.run_id
    assert main(["--tracking-uri", uri, "compare", ids["xeon"], ids["epyc"], "--no-artifact"]) == 0
    warning = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:"))
    assert "measured on different hardware" in warning and "(decoder.cpu_vs_kaldi)" in warning
    assert f"xeon [{ids['xeon'][:8]}]: 2 x Intel(R) Xeon(R), no GPU" in warning and "NVIDIA H200" in warning
    assert "Fix:" in warning and "onebest" not in warning
    assert "different hardware" in render_html(compare_runs([ids["xeon"], ids["epyc"]], uri))
    for pair in (("xeon", "xeon2"), ("xeon2", "epyc_wer")):  # one machine; no timed metric in the second
        assert main(["--tracking-uri", uri, "compare", ids[pair[0]], ids[pair[1]], "--no-artifact"]) == 0
        out = capsys.readouterr().out
        assert "different hardware" not in out, pair
