"""A suite is one run to compare: a real suite (the SLURP graph, the quick corpus, the shipped acoustic model's
evaluation of a few of its utterances, and a decoder benchmark over those scores) run twice against a real
MLflow SQLite store makes one parent run per invocation with each job as a nested child run, the parent
carrying the children's headline metrics and every run describing itself with the summary the command line
printed; `specbench compare PARENT1 PARENT2` puts the headline metrics side by side, one row each. Also: a job
run on its own stays one run, a failing job ends its suite's parent FAILED, and a suite logged while the
server is down is nested correctly once `specbench sync` sends it."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from specbench.cli import main
from specbench.reports.numbers import figure
from specbench.tracking.runs import DESCRIPTION_TAG, PARENT_TAG, TrackedRun
from specbench.tracking.ui import free_port

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "jobs"

EVAL_JOB = f"""kind = "eval_am"
name = "suite_test"
speech_job = "{JOBS / 'speech_quick.toml'}"
graph_job = "{JOBS / 'graph_slurp.toml'}"
devel_utterances = 2
test_utterances = 6
real_recordings = false
[decode]
acoustic_scales = [1.0]
[vtln]
enabled = false
[speaker_transform]
enabled = false
[tracking]
experiment = "acoustic_test"
"""
BENCH_JOB = f"""kind = "bench_decoder"
name = "decoder_suite_test"
graph_job = "{JOBS / 'graph_slurp.toml'}"
scores_job = "{{scores_job}}"
utterances = 6
gpu_decoders = [1]
ratio_rounds = 1
backends = ["kaldi", "cpu", "twin"]
[tracking]
experiment = "bench_test"
"""
SUITE = """kind = "suite"
name = "{name}"
jobs = [{jobs}]
"""
JOB_EXPERIMENTS = {"graph": "graph", "speech": "speech", "eval_am": "acoustic_test", "bench_decoder": "bench_test"}
# the parent's headline metrics and the child run kind that logs each
HEADLINES = {"graph.states": "graph", "graph.ppl_test": "graph", "speech.utterances": "speech",
             "asr.wer": "eval_am", "decoder.cpu_vs_kaldi": "bench_decoder",
             "decoder.onebest_identical": "bench_decoder"}


def _suite(tmp: Path, name: str, jobs: list[str | Path]) -> Path:
    path = tmp / f"{name}.toml"
    path.write_text(SUITE.format(name=name, jobs=", ".join(f'"{j}"' for j in jobs)))
    return path


def _runs(uri: str, experiment: str, where: str = "") -> list[mlflow.entities.Run]:
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], filter_string=where, order_by=["attributes.start_time ASC"])


@pytest.fixture(scope="module")
def two_suites(tmp_path_factory: pytest.TempPathFactory, slurp_graph: object) -> tuple[str, list[str], list[str]]:
    """The suite run twice: (tracking URI, [parent run ids], [what the command line printed, per run])."""
    tmp = tmp_path_factory.mktemp("suite")
    (tmp / "eval.toml").write_text(EVAL_JOB)
    (tmp / "bench.toml").write_text(BENCH_JOB.format(scores_job="eval.toml"))
    suite = _suite(tmp, "suite_test", [JOBS / "graph_slurp.toml", JOBS / "speech_quick.toml", "eval.toml",
                                       "bench.toml"])
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    printed = []
    for _ in range(2):  # in a subprocess: the benchmark pins its process to one core and sets thread variables
        proc = subprocess.run([sys.executable, "-m", "specbench", "--tracking-uri", uri, "run", str(suite)],
                              cwd=ROOT, capture_output=True, text=True, encoding="utf-8", timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        printed.append(proc.stdout)
    parents = [r.info.run_id for r in _runs(uri, "suite_test", "tags.kind = 'suite'")]
    assert len(parents) == 2
    return uri, parents, printed


def test_a_suite_is_a_parent_run_with_nested_job_runs(two_suites: tuple[str, list[str], list[str]]) -> None:
    uri, parents, printed = two_suites
    client = mlflow.MlflowClient(uri)
    for parent_id, stdout in zip(parents, printed):
        parent = client.get_run(parent_id)
        assert parent.info.status == "FINISHED" and PARENT_TAG not in parent.data.tags
        assert parent.data.tags["suite"] == "suite_test" and parent.info.run_name == "suite-suite_test"
        children = _runs(uri, "suite_test", f"tags.`{PARENT_TAG}` = '{parent_id}'")
        assert [c.data.tags["kind"] for c in children] == ["graph", "speech", "eval_am", "bench_decoder"]
        by_kind = {c.data.tags["kind"]: c for c in children}
        for child in children:  # in the suite's experiment, so the MLflow UI lists them under their parent
            assert child.info.experiment_id == parent.info.experiment_id and child.info.status == "FINISHED"
            assert child.data.tags["suite"] == "suite_test"
            assert child.data.tags["job_experiment"] == JOB_EXPERIMENTS[child.data.tags["kind"]]
            note = child.data.tags[DESCRIPTION_TAG]  # the job's summary as printed, line for line
            body = note.removeprefix("```text\n").removesuffix("\n```").splitlines()
            assert body and all(line in stdout.splitlines() for line in body), note
        for metric, kind in HEADLINES.items():
            assert parent.data.metrics[metric] == by_kind[kind].data.metrics[metric], metric
        assert 0 < parent.data.metrics["decoder.cpu_vs_kaldi"] and parent.data.metrics["suite.jobs_finished"] == 4
        note = parent.data.tags[DESCRIPTION_TAG]
        assert "suite suite_test: 4 jobs in" in note and "decoder.cpu_vs_kaldi" in note
        assert note.removeprefix("```text\n").splitlines()[0] in stdout  # the suite's own summary
        assert f"MLflow parent run {parent_id}" in stdout


def test_compare_puts_two_suites_side_by_side(two_suites: tuple[str, list[str], list[str]],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    uri, (first, second), _ = two_suites
    assert main(["--tracking-uri", uri, "compare", first, second, "--no-artifact"]) == 0
    out = capsys.readouterr().out
    direction = re.compile(r" \((higher|lower) is better\)")  # a headline metric's label says which way is better
    rows = {direction.sub("", line).split()[1]: direction.sub("", line).split()[2:]
            for line in out.splitlines() if line.startswith("metric ")}
    client = mlflow.MlflowClient(uri)
    values = [client.get_run(r).data.metrics for r in (first, second)]
    for metric in HEADLINES:  # each headline metric in one row, both suites' values in it (equal or not)
        assert metric in rows, (metric, out)
        assert rows[metric][0] == figure(values[0][metric]) and rows[metric][1] == figure(values[1][metric])
    header = out.splitlines()[0]
    assert f"[{first[:8]}]" in header and f"[{second[:8]}]" in header


def test_a_job_alone_is_one_run_and_a_failing_job_fails_its_suite(tmp_path: Path, slurp_graph: object) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["--tracking-uri", uri, "run", str(JOBS / "graph_slurp.toml")]) == 0
    (alone,) = _runs(uri, "graph")
    assert PARENT_TAG not in alone.data.tags and "suite" not in alone.data.tags
    assert "TLG:" in alone.data.tags[DESCRIPTION_TAG]
    (tmp_path / "eval.toml").write_text(EVAL_JOB.replace('name = "suite_test"', 'name = "never_ran"'))
    (tmp_path / "bench.toml").write_text(BENCH_JOB.format(scores_job="eval.toml"))
    suite = _suite(tmp_path, "failing", [JOBS / "graph_slurp.toml", "bench.toml"])
    assert main(["--tracking-uri", uri, "run", str(suite)]) == 2  # the benchmark finds no scores
    (parent,) = _runs(uri, "failing", "tags.kind = 'suite'")
    graph, bench = _runs(uri, "failing", f"tags.`{PARENT_TAG}` = '{parent.info.run_id}'")
    assert parent.info.status == "FAILED" and "never_ran" in parent.data.tags["error"]
    assert (graph.info.status, bench.info.status) == ("FINISHED", "FAILED")
    assert parent.data.metrics["graph.states"] == graph.data.metrics["graph.states"]  # what finished is kept
    assert "FAILED at bench.toml" in parent.data.tags[DESCRIPTION_TAG]
    assert "FAILED" in bench.data.tags[DESCRIPTION_TAG] and "never_ran" in bench.data.tags[DESCRIPTION_TAG]


def test_a_suite_logged_offline_is_nested_after_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))  # the journal folder of this test
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    with TrackedRun("offline_suite", "suite-offline", uri, {"kind": "suite"}) as parent:
        with TrackedRun("offline_suite", "graph-slurp", uri, {"kind": "graph"}, parent=parent) as child:
            child.log_metrics({"graph.states": 3.0})
            child.set_description(["graph: 3 states"])
        parent.log_metrics({"graph.states": 3.0})
    assert parent.run_id.startswith("offline-") and child.run_id.startswith("offline-")
    assert "unreachable" in capsys.readouterr().err
    server = subprocess.Popen([sys.executable, "-m", "specbench", "server", "--store", str(tmp_path / "m.db"),
                               "--artifacts", str(tmp_path / "art"), "--port", str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, encoding="utf-8", start_new_session=True)
    try:
        assert "http://127.0.0.1" in server.stdout.readline()
        assert main(["sync"]) == 0
        client = mlflow.MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name("offline_suite")
        runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
        assert runs["graph-slurp"].data.tags[PARENT_TAG] == runs["suite-offline"].info.run_id
        assert runs["graph-slurp"].data.tags[DESCRIPTION_TAG] == "```text\ngraph: 3 states\n```"
        assert runs["suite-offline"].data.metrics == {"graph.states": 3.0}
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
