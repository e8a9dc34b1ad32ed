"""What every benchmark shares, by hand (`benchmarks/harness.py`): `timed` is the median of its repeats and
the last call's value; `one_core` pins to the lowest core and restores; the MLflow names of a result's numbers
(DESIGN.md names kept, booleans and text left out); the JSON printed and written whole, with the hardware,
commit, settings and metrics version it was measured with; the failed-backends
message (names, reasons cut at 300 characters, where to leave them out); and the runner and `log_bench`, which
log everything measured to a real MLflow store and end FAILED, naming the backends, where some failed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from mlflow_store import new_store

from specbench.benchmarks.harness import (
    BackendsFailed,
    emit,
    failed_backends_message,
    log_bench,
    metric_names,
    one_core,
    provenance,
    runner,
    timed,
)
from specbench.config import BenchCompletionConfig
from specbench.experiments.registry import JOBS
from specbench.hardware import describe, git_commit

pytestmark = pytest.mark.unit
RESULT = {"bench": "decoder", "decoder.rtfx": 12.5, "frames": 300, "ratio": 0.25, "agree": True, "device": "cpu",
          "backends": {"cpu": {"seconds": 2.0}}}
FAILED = {**RESULT, "errors": ["gpu", "twin"], "backends": {"gpu": {"reason": "no CUDA " + "x" * 400}, "twin": {}}}


def test_timed_is_the_median_of_the_repeats_and_the_last_value() -> None:
    pauses = iter([0.0, 0.75, 0.05])  # median 0.05 s; mean 0.27 s, most 0.75 s, least 0 s
    calls = []

    def step() -> int:
        time.sleep(next(pauses))
        calls.append(1)
        return len(calls)

    seconds, value = timed(step, repeats=3)
    assert value == 3 and len(calls) == 3
    assert 0.05 <= seconds < 0.2
    seconds, value = timed(lambda: "once")
    assert value == "once" and 0.0 <= seconds < 0.1


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity here")
def test_one_core_pins_to_the_lowest_core_and_restores() -> None:
    before = os.sched_getaffinity(0)
    with one_core() as core:
        assert core == min(before) and os.sched_getaffinity(0) == {min(before)}
    assert os.sched_getaffinity(0) == before


def test_metric_names_keep_design_names_and_prefix_the_rest() -> None:
    result = {**RESULT, "decoderish": 1, "gpu.rtfx": 2}  # only `decoder.` (with its dot) is the bench's own name
    assert metric_names(result) == {"decoder.rtfx": 12.5, "bench.decoder.frames": 300.0, "bench.decoder.ratio": 0.25,
                                    "bench.decoder.decoderish": 1.0, "bench.decoder.gpu.rtfx": 2.0}
    assert all(type(v) is float for v in metric_names(result).values())


def test_emit_prints_the_json_and_writes_it_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "new" / "folder" / "bench.json"
    emit(RESULT, output)
    printed = capsys.readouterr().out
    assert json.loads(printed) == RESULT and printed == json.dumps(RESULT, indent=2) + "\n"
    assert output.read_text() == json.dumps(RESULT, indent=2) + "\n"
    assert sorted(p.name for p in output.parent.iterdir()) == ["bench.json"]  # no temporary file left
    emit({"bench": "b"}, output)  # replaced, not appended
    assert json.loads(output.read_text()) == {"bench": "b"}
    capsys.readouterr()
    emit(RESULT, None)
    assert json.loads(capsys.readouterr().out) == RESULT


def test_provenance_records_the_hardware_the_commit_and_the_settings() -> None:
    config = BenchCompletionConfig(prefixes=7)
    with open("/proc/self/status") as status:  # the peak is at least what this process held before
        before = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))
    got = provenance({"bench": "completion", "speedup": 4.5}, config)
    assert got["git_commit"] == git_commit()  # this checkout's
    assert got["hardware"] == describe() and got["speedup"] == 4.5
    assert got["settings"]["prefixes"] == 7 and got["settings"]["lm"] == str(config.lm)
    assert got["settings"]["tracking"]["experiment"] == "bench" and json.loads(json.dumps(got)) == got
    assert got["metrics_version"] == str(JOBS["bench_completion"].metrics_version) == "2"
    assert got["peak_rss_bytes"] >= before > 0 and got["children_peak_rss_bytes"] >= 0
    h200 = "16 x Xeon, NVIDIA H200"
    assert provenance({"bench": "b", "hardware": h200}, None)["hardware"] == h200  # the benchmark's own kept


def test_the_failed_backends_message_names_them_their_reasons_and_the_fix() -> None:
    assert failed_backends_message(RESULT) is None and failed_backends_message({**RESULT, "errors": []}) is None
    message = failed_backends_message(FAILED)
    reason = ("no CUDA " + "x" * 400)[:300]  # cut at 300 characters
    assert message.startswith(f"bench decoder: these backends failed: gpu ({reason}); twin (no reason recorded); ")
    assert "x" * 293 not in message  # 8 characters of "no CUDA " and 292 x's: nothing beyond the cut
    assert "bench_decoder.json" in message and message.endswith("leave those backends out of --backends.")
    job = Path("jobs/bench_decoder.toml")
    assert failed_backends_message(FAILED, job).endswith(f"leave those backends out of `backends` in {job}.")


def _run(uri: str, run_id: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    logged = json.loads(Path(client.download_artifacts(run_id, "bench_decoder.json")).read_text())
    return run, logged


def test_log_bench_logs_the_metrics_and_the_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    uri = new_store(tmp_path)
    run, logged = _run(uri, log_bench(RESULT, uri))
    assert run.info.status == "FINISHED" and run.info.run_name == "bench-decoder"
    assert run.data.metrics == metric_names(RESULT) and logged == RESULT
    assert (run.data.tags["kind"], run.data.tags["metrics.version"]) == ("bench_decoder", "1")
    run, logged = _run(uri, log_bench(FAILED, uri))
    assert run.info.status == "FAILED" and logged == FAILED  # everything measured is logged, then FAILED
    assert run.data.metrics == metric_names(FAILED) and "these backends failed: gpu" in run.data.tags["error"]


def test_the_runner_logs_summarizes_and_fails_naming_the_backends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from specbench.tracking.runs import TrackedRun

    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    uri = new_store(tmp_path)
    seen = []

    def measure(config, job_path):
        seen.append((config, job_path))
        return dict(config)

    execute = runner(measure, lambda result: [f"frames {result['frames']}"])
    assert execute(RESULT, "jobs/bench.toml", None, None) == ["frames 300"]
    assert seen == [(RESULT, Path("jobs/bench.toml"))]  # the job path as a Path
    run = TrackedRun("bench", "job", uri)
    with pytest.raises(BackendsFailed, match=r"gpu \(no CUDA x+\); twin .*out of `backends` in jobs/bench\.toml"):
        execute(FAILED, Path("jobs/bench.toml"), run, None)
    assert capsys.readouterr().err.splitlines()[-1] == "frames 300"  # the summary still reaches the console
    run.finish()
    logged, data = _run(uri, run.run_id)
    assert {k: v for k, v in data.items() if "rss" not in k} == {
        k: v for k, v in provenance(FAILED, FAILED).items() if "rss" not in k}
    assert {k: v for k, v in logged.data.metrics.items() if "rss" not in k} == metric_names(FAILED)
    description = logged.data.tags["mlflow.note.content"]
    assert "frames 300" in description and "FAILED: bench decoder: these backends failed" in description
