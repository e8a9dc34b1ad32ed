"""Which earlier run is a nightly's baseline, against a real MLflow store (SQLite in tmp_path) and the real
`run_nightly`, with the graph job's runner replaced by one that logs given metrics: a nightly that regressed
never becomes the next night's baseline (no ratchet), untagged (legacy) runs count only when their nightly's
parent run FINISHED, and a baseline value that is NaN is taken from an older passing run or reported."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import mlflow
import pytest

from specbench.experiments import graph as graph_job
from specbench.experiments.nightly import RegressionError, run_nightly
from specbench.experiments.registry import RunOptions, load_config
from specbench.tracking.baseline import find_baseline, set_baseline

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
JOB = "graph-slurp"
NIGHTLY = f"""kind = "nightly"
name = "nightly_test"
jobs = ["{ROOT / 'jobs' / 'graph_slurp.toml'}"]
[[tolerance]]
metric = "graph.states"
max_drop = 0
max_rise = 0
[[tolerance]]
metric = "graph.arcs"
max_drop = 0
[[tolerance]]
metric = "graph.ppl_test"
max_rise = 0.5
[[tolerance]]
metric = "graph.test_unseen_rate"
max_rise = 0.001
[tracking]
experiment = "nightly_test"
"""


@pytest.fixture
def nightly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`nightly(ppl)`: one real nightly whose graph job logs perplexity `ppl` (other metrics fixed); returns
    its printed lines, or raises RegressionError."""
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))  # journals and artifacts stay in tmp_path
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    path = tmp_path / "nightly.toml"
    path.write_text(NIGHTLY)
    ppl = [math.nan]

    def fake_graph(config: Any, job_path: Path, run: Any, opts: RunOptions) -> list[str]:
        run.log_metrics({"graph.states": 10.0, "graph.arcs": 20.0, "graph.ppl_test": ppl[0],
                         "graph.test_unseen_rate": 0.01})
        return [f"fake graph: ppl {ppl[0]}"]

    monkeypatch.setattr(graph_job, "execute", fake_graph)

    def run(value: float) -> list[str]:
        ppl[0] = value
        return run_nightly(path, load_config(path), RunOptions(tracking_uri=uri))

    run.uri = uri  # type: ignore[attr-defined]
    return run


def _children(uri: str, kind: str = "graph") -> list[Any]:
    """The nightly's job runs, newest first."""
    mlflow.set_tracking_uri(uri)
    return mlflow.search_runs(experiment_names=["nightly_test"], filter_string=f"tags.kind = '{kind}'",
                              output_format="list", order_by=["attributes.start_time DESC"])


def test_a_regressed_nightly_is_not_the_next_baseline(nightly: Any) -> None:
    """The reviewer's ratchet: 100 passes; 103 fails; 103.4 must still be compared with 100 (and fail), not
    with 103 (and pass); 100.3 then passes against 100 and is the next baseline."""
    out = nightly(100.0)
    assert any("ok (no baseline)" in line and "graph.ppl_test" in line for line in out)
    with pytest.raises(RegressionError, match=r"rose by 3 from 100 to 103 \(allowed rise 0.5\)"):
        nightly(103.0)
    first, regressed = _children(nightly.uri)[::-1]
    assert first.data.tags["nightly.verdict"] == "passed"
    assert regressed.data.tags["nightly.verdict"] == "regressed"
    assert regressed.info.status == "FINISHED"  # the child finished: only the verdict keeps it out
    with pytest.raises(RegressionError, match=r"graph.ppl_test .*baseline 100, new 103.4: rose by 3.4 from "
                                              r"100 to 103.4"):
        nightly(103.4)
    out = nightly(100.3)
    assert any("graph.ppl_test: 100.3 (baseline 100)" in line for line in out)
    passed = _children(nightly.uri)[0]
    base = find_baseline(passed.info.experiment_id, JOB, "none", nightly.uri, 1, ["graph.ppl_test"])
    assert base is not None and base.run_id == passed.info.run_id and base.why == "previous nightly"
    parents = mlflow.search_runs(experiment_names=["nightly_test"], filter_string="tags.kind = 'nightly'",
                                 output_format="list", order_by=["attributes.start_time ASC"])
    assert [p.data.tags["nightly.verdict"] for p in parents] == ["passed", "regressed", "regressed", "passed"]


def test_untagged_legacy_runs_count_only_when_their_nightly_finished(nightly: Any) -> None:
    nightly(100.0)
    with pytest.raises(RegressionError):
        nightly(103.0)
    client = mlflow.MlflowClient(nightly.uri)
    regressed, passed = _children(nightly.uri)
    for child in (regressed, passed):  # as logged before the verdict tag existed
        client.delete_tag(child.info.run_id, "nightly.verdict")
    base = find_baseline(passed.info.experiment_id, JOB, "none", nightly.uri, 1)
    assert base is not None and base.run_id == passed.info.run_id  # the regressed one's parent ended FAILED
    client.delete_tag(client.get_run(passed.info.run_id).data.tags["mlflow.parentRunId"], "nightly.verdict")
    client.set_terminated(passed.data.tags["mlflow.parentRunId"], "FAILED")
    assert find_baseline(passed.info.experiment_id, JOB, "none", nightly.uri, 1) is None


def test_a_crash_while_ending_the_nightly_leaves_no_passed_run(nightly: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks pass, then ending the parent run fails: the parent ends FAILED and no run says `passed`,
    so the next nightly has no baseline (its 200 passes as a first run rather than failing against 100)."""
    from specbench.experiments import runner

    def crash(self: Any, lines: Any = ()) -> list[str]:
        raise RuntimeError("the store refused the parent's end")

    with monkeypatch.context() as patched:
        patched.setattr(runner.SuiteRun, "finish", crash)
        with pytest.raises(RuntimeError, match="refused the parent's end"):
            nightly(100.0)
    (child,) = _children(nightly.uri)
    assert child.info.status == "FINISHED" and "nightly.verdict" not in child.data.tags
    (parent,) = _children(nightly.uri, "nightly")
    assert parent.info.status == "FAILED" and "nightly.verdict" not in parent.data.tags
    assert any("ok (no baseline)" in line and "graph.ppl_test" in line for line in nightly(200.0))
    assert _children(nightly.uri)[0].data.tags["nightly.verdict"] == "passed"


def test_a_nan_baseline_value_falls_back_to_an_older_passing_run_or_is_reported(nightly: Any) -> None:
    """A run made the baseline by hand that logged NaN does not switch the check off: the value comes from
    the newest passing nightly older than it (never a newer one, which would move a pinned baseline night by
    night); with none, the nightly says there is no baseline value."""
    nightly(100.0)  # the older passing nightly
    with pytest.raises(RegressionError, match="not finite"):
        nightly(math.nan)
    older, nan_run = _children(nightly.uri)[1], _children(nightly.uri)[0]
    set_baseline(nan_run.info.run_id, nightly.uri)
    out = nightly(100.2)  # ppl against 100 (older than the pin), the other metrics against nan_run
    assert any("graph.ppl_test: 100.2 (baseline 100)" in line for line in out)
    assert any("graph.arcs: 20 (baseline 20)" in line for line in out)
    with pytest.raises(RegressionError, match=r"rose by 6 from 100 to 106"):
        nightly(106.0)  # still 100: the passing 100.2 nightly is newer than the pinned run
    base = find_baseline(nan_run.info.experiment_id, JOB, "none", nightly.uri, 1, ["graph.ppl_test"])
    assert base is not None and base.run_id == nan_run.info.run_id and base.why == "baseline=true"
    assert base.metrics["graph.ppl_test"] == 100.0 and not base.missing
    assert base.sources["graph.ppl_test"] == older.info.run_id
    assert base.sources["graph.arcs"] == nan_run.info.run_id


def test_a_nan_baseline_value_without_an_older_passing_run_is_reported(nightly: Any) -> None:
    with pytest.raises(RegressionError, match="not finite"):
        nightly(math.nan)
    (nan_run,) = _children(nightly.uri)
    set_baseline(nan_run.info.run_id, nightly.uri)
    for ppl in (104.0, 106.0):  # nothing finite to compare with, night after night: said so, bounds only
        out = nightly(ppl)
        assert any(f"no baseline value for graph.ppl_test of {JOB}: baseline run {nan_run.info.run_id} logged nan"
                   in line for line in out)
        assert any("ok (no baseline)" in line and "graph.ppl_test" in line for line in out)
        assert any("graph.arcs: 20 (baseline 20)" in line for line in out)  # the other metrics: from nan_run


def test_a_failed_job_is_reported_and_the_nightly_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first of two jobs fails: its run ends FAILED, the second still runs and is checked, the report
    and the error name the failure, and the nightly's runs are tagged regressed."""
    from specbench.errors import DataError

    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    graph_text = (ROOT / "jobs" / "graph_slurp.toml").read_text()
    for name in ("first", "second"):
        (tmp_path / f"{name}.toml").write_text(graph_text.replace('name = "slurp"', f'name = "{name}"'))
    path = tmp_path / "nightly.toml"
    path.write_text(NIGHTLY.replace(f'jobs = ["{ROOT / "jobs" / "graph_slurp.toml"}"]',
                                    'jobs = ["first.toml", "second.toml"]'))

    def fake_graph(config: Any, job_path: Path, run: Any, opts: RunOptions) -> list[str]:
        if config.name == "first":
            raise DataError("first.toml: the LM text is damaged. Fix: fetch it again")
        run.log_metrics({"graph.states": 10.0, "graph.arcs": 20.0, "graph.ppl_test": 100.0,
                         "graph.test_unseen_rate": 0.01})
        return ["fake graph"]

    monkeypatch.setattr(graph_job, "execute", fake_graph)
    with pytest.raises(RegressionError, match=r"graph-first: the job failed \(first.toml\): DataError: first.toml"):
        run_nightly(path, load_config(path), RunOptions(tracking_uri=uri))
    runs = {r.info.run_name: r for r in _children(uri)}
    assert runs["graph-first"].info.status == "FAILED" and runs["graph-second"].info.status == "FINISHED"
    assert runs["graph-second"].data.tags["nightly.verdict"] == "regressed"
    mlflow.set_tracking_uri(uri)
    (parent,) = mlflow.search_runs(experiment_names=["nightly_test"], filter_string="tags.kind = 'nightly'",
                                   output_format="list")
    assert parent.info.status == "FAILED" and parent.data.metrics["nightly.regressions"] == 1.0
    assert parent.data.tags["metrics.versions"] == "graph=1"  # the finished child's kind and version
    assert parent.data.metrics["nightly.checks"] == 5.0  # the failure, and the second job's four metrics
    report = Path(mlflow.artifacts.download_artifacts(run_id=parent.info.run_id,
                                                      artifact_path="regression_report.md", dst_path=str(tmp_path)))
    assert "| JOB FAILED | graph-first | (the job) |" in report.read_text()


def test_baseline_set_refuses_runs_the_nightly_would_never_use(nightly: Any) -> None:
    """`baseline set` on a run outside the nightly, of another metrics version, or deleted: refused with the
    fix, and no run is tagged."""
    from specbench.errors import ConfigError

    nightly(100.0)
    (child,) = _children(nightly.uri)
    client = mlflow.MlflowClient(nightly.uri)
    mlflow.set_tracking_uri(nightly.uri)
    mlflow.set_experiment("graph")
    with mlflow.start_run(run_name=JOB, tags={"kind": "graph", "metrics.version": "1"}) as plain:
        pass  # `specbench run jobs/graph_slurp.toml`: its own experiment, no suite
    with pytest.raises(ConfigError, match=r"is not a job run of a nightly .*suite = 'none'.*Fix: pick"):
        set_baseline(plain.info.run_id, nightly.uri, current_versions={"graph": 1})
    with pytest.raises(ConfigError, match=r"logged metrics version 1 of graph, but the current version is 2"):
        set_baseline(child.info.run_id, nightly.uri, current_versions={"graph": 2})
    client.delete_run(child.info.run_id)
    with pytest.raises(ConfigError, match=r"is deleted.*mlflow runs restore"):
        set_baseline(child.info.run_id, nightly.uri)
    client.restore_run(child.info.run_id)
    assert all("baseline" not in client.get_run(r).data.tags for r in (plain.info.run_id, child.info.run_id))
    assert set_baseline(child.info.run_id, nightly.uri, current_versions={"graph": 1}) == (child.info.run_id, JOB)


def test_a_job_name_with_a_quote_finds_its_baseline(tmp_path: Path) -> None:
    """Run names are searched quoted as they are (a simultrans job may be named `bob's`), not with the quote
    stripped, which matched nothing and left the job without a baseline night after night."""
    from specbench.errors import ConfigError
    from specbench.tracking.baseline import quoted

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.set_experiment("nightly_test").experiment_id
    for name in ("simultrans-bobs", "simultrans-bob's"):
        with mlflow.start_run(run_name=name, tags={"suite": "nightly", "nightly.verdict": "passed",
                                                   "nightly.id": "earlier"}) as run:
            mlflow.log_metric("simul.bleu_full_pooled", 30.0 if name.endswith("bobs") else 31.0)
        if name.endswith("'s"):
            quoted_run = run.info.run_id
    base = find_baseline(experiment, "simultrans-bob's", "tonight", uri, None, ["simul.bleu_full_pooled"])
    assert base is not None and base.run_id == quoted_run and base.metrics["simul.bleu_full_pooled"] == 31.0
    with pytest.raises(ConfigError, match="both kinds of quote"):
        quoted("bob's \"run\"")


def test_an_unreachable_server_is_reported_not_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the tracking server down, the job runs offline; its baseline cannot be looked up: every metric is
    reported as not compared (the absolute bounds still judged), the nightly fails with that reason, and the
    offline journals keep the runs for `specbench sync`."""
    from specbench.tracking.ui import free_port

    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # nothing listens: fail at once
    uri = f"http://127.0.0.1:{free_port()}"
    path = tmp_path / "nightly.toml"
    path.write_text(NIGHTLY)

    def fake_graph(config: Any, job_path: Path, run: Any, opts: RunOptions) -> list[str]:
        run.log_metrics({"graph.states": 10.0, "graph.arcs": 20.0, "graph.ppl_test": 100.0,
                         "graph.test_unseen_rate": 0.01})
        return ["fake graph"]

    monkeypatch.setattr(graph_job, "execute", fake_graph)
    with pytest.raises(RegressionError) as error:
        run_nightly(path, load_config(path), RunOptions(tracking_uri=uri))
    message = str(error.value)
    assert message.count("not compared with a baseline") == 4 and "logged offline" in message
    assert "graph.ppl_test (graph-slurp): baseline -, new 100: not compared" in message
    kept = {p.name for p in (tmp_path / "home" / "journal").rglob("*") if p.is_file()}
    assert len([k for k in kept if k.endswith(".jsonl")]) == 2  # the nightly's run and the job's, for sync
    assert {"regression_report.md", "regression_report.html", "graph_slurp.toml"} <= kept


def test_a_speed_ratio_is_compared_only_with_a_run_on_the_same_hardware(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two machines log nightlies to one store. The decoder benchmark's speed ratio (`decoder.cpu_vs_kaldi_median`)
    measured on the second machine is not judged against the first machine's (it would read as a regression),
    and each machine's later nightly is judged against its own earlier one, even when the other machine's
    nightly is newer; the benchmark's other metrics are compared across machines. A pinned baseline from the
    first machine pins that machine's speed, not the second's."""
    from specbench.benchmarks.decoder import bench as decoder_bench
    from specbench.tracking import runs

    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    path = tmp_path / "nightly.toml"
    path.write_text(f"""kind = "nightly"
name = "nightly_test"
jobs = ["{ROOT / 'jobs' / 'bench_decoder_quick.toml'}"]
[[tolerance]]
metric = "decoder.onebest_identical"
min = 1.0
[[tolerance]]
metric = "decoder.cpu_vs_kaldi_median"
max_drop = 0.25
[[tolerance]]
metric = "decoder.lattice_density"
max_rise = 2.0
max_drop = 2.0
[tracking]
experiment = "nightly_test"
""")
    logged = {}

    def fake_bench(config: Any, job_path: Path, run: Any, opts: RunOptions) -> list[str]:
        run.log_metrics({"decoder.onebest_identical": 1.0, **logged})
        return ["fake decoder benchmark"]

    monkeypatch.setattr(decoder_bench, "execute", fake_bench)
    xeon, epyc = "2 x Intel(R) Xeon(R), no GPU", "16 x AMD EPYC, NVIDIA H200"

    def night(hardware: str, ratio: float, density: float = 10.0) -> list[str]:
        monkeypatch.setattr(runs, "describe", lambda: hardware)
        logged.update({"decoder.cpu_vs_kaldi_median": ratio, "decoder.lattice_density": density})
        return run_nightly(path, load_config(path), RunOptions(tracking_uri=uri))

    night(xeon, 2.0)
    out = night(epyc, 1.0, 11.0)  # 1.0 against the Xeon's 2.0 would have been a regression
    assert any("no baseline value for decoder.cpu_vs_kaldi_median of bench_decoder-decoder_quick: baseline run" in line
               and "measured it on other hardware (2 x Intel(R) Xeon(R), no GPU)" in line
               and f"on this hardware ({epyc})" in line and "is the baseline on this hardware" in line
               for line in out)
    assert any("ok (no baseline)" in line and "decoder.cpu_vs_kaldi_median" in line for line in out)
    assert any("decoder.lattice_density: 11 (baseline 10)" in line for line in out)  # across machines
    out = night(xeon, 1.9)  # against the Xeon's 2.0, not the newer EPYC nightly's 1.0
    assert any("decoder.cpu_vs_kaldi_median: 1.9 (baseline 2)" in line for line in out)
    assert any("decoder.lattice_density: 10 (baseline 11)" in line for line in out)
    with pytest.raises(RegressionError, match=r"cpu_vs_kaldi_median .*1.9, new 1.5: fell by 0.4 from 1.9"):
        night(xeon, 1.5)
    out = night(epyc, 0.9)  # against the EPYC's own 1.0
    assert any("decoder.cpu_vs_kaldi_median: 0.9 (baseline 1)" in line for line in out)
    first_xeon = _children(uri, "bench_decoder")[-1]
    set_baseline(first_xeon.info.run_id, uri)  # a pin measured on the Xeon, older than every EPYC run
    out = night(xeon, 1.8)  # the pin's own hardware: against the pin
    assert any("decoder.cpu_vs_kaldi_median: 1.8 (baseline 2)" in line for line in out)
    out = night(epyc, 0.8)  # the pin cannot pin the EPYC's speed: its newest passing nightly does
    assert any("decoder.cpu_vs_kaldi_median: 0.8 (baseline 0.9)" in line for line in out)
    assert any("decoder.lattice_density: 10 (baseline 10)" in line for line in out)  # the pin's, as before
