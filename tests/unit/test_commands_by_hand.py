"""What the `specbench` verbs print and return, run through `specbench.cli.main` on tiny inputs: `validate`
lists each job of a suite or nightly and counts its jobs (and a nightly's tolerances); `runs` prints a table
of the newest runs (ids cut to 12 characters, headline metrics only, sorted, as reports print them, columns
as wide as their widest cell) and refuses an experiment the store does not hold; `compare` prints only what
differs unless --all, and keeps its HTML table as a run named after the runs' ids; `baseline set` passes the
reason and the current metrics versions; `sync` reports what it sent, what it left alone and a damaged
journal (exit 2); `train lm`/`train confidence` take their own job kinds; `submit` refuses a job file outside
the project; `decode` exits 1 only when every utterance failed and passes --workers on; `data check` says
how much content it read; a stopped MLflow server's exit code becomes the verb's, with its last output, and
Ctrl-C while it serves stops it. Stores are real MLflow SQLite stores in a temporary folder; processes,
graphs and scores are real and tiny."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
from mlflow_store import new_store

from specbench.cli import main
from specbench.cli.commands import _serve_until_stopped
from specbench.experiments.registry import JOBS
from specbench.tracking import ui
from specbench.tracking.journal import journal_dir
from specbench.tracking.runs import PARENT_TAG
from specbench.wfst.fst_binary import write_vector_fst
from specbench.wfst.graph import from_arrays

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "jobs" / "simultrans_tiny.toml"  # kind = "simultrans"
GRAPH_JOB = ROOT / "jobs" / "graph_slurp.toml"  # kind = "graph"
SPEECH_JOB = ROOT / "jobs" / "speech_quick.toml"  # kind = "speech"
LM_JOB = ROOT / "jobs" / "lm.toml"  # kind = "train_lm"
T0 = 1_700_000_000_000  # ms: 2023-11-14 22:13:20 UTC


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def _run(client: MlflowClient, exp: str, name: str, minute: int, metrics: dict[str, float],
         params: dict[str, str] | None = None, tags: dict[str, str] | None = None,
         status: str = "FINISHED") -> str:
    start = T0 + minute * 60_000
    run_id = client.create_run(exp, run_name=name, start_time=start, tags=tags or {}).info.run_id
    client.log_batch(run_id, metrics=[Metric(k, v, start, 0) for k, v in metrics.items()],
                     params=[Param(k, v) for k, v in (params or {}).items()])
    if status != "RUNNING":
        client.set_terminated(run_id, status)
    return run_id


# ---------------------------------------------------------------------------------------------- validate


def test_validate_lists_each_job_of_a_suite_then_counts_them(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "suite.toml"
    suite.write_text(f'kind = "suite"\nname = "pair"\njobs = ["{SPEECH_JOB}", "{GRAPH_JOB}"]\n')
    assert main(["validate", str(suite)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{SPEECH_JOB}: ok (speech)", f"{GRAPH_JOB}: ok (graph)", f"{suite}: ok (suite 'pair', 2 jobs)"]


def test_validate_of_a_nightly_counts_its_jobs_and_its_tolerances(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    rules = "".join(f'[[tolerance]]\nmetric = "graph.{m}"\nmax_rise = 0\n'
                    for m in ("states", "arcs", "ppl_test", "test_unseen_rate"))
    nightly = tmp_path / "nightly.toml"
    nightly.write_text(f'kind = "nightly"\nname = "nt"\njobs = ["{GRAPH_JOB}"]\n{rules}')
    assert main(["validate", str(nightly)]) == 0
    # one job, four [[tolerance]] tables
    assert capsys.readouterr().out.splitlines() == [
        f"{GRAPH_JOB}: ok (graph)", f"{nightly}: ok (nightly 'nt', 1 jobs, 4 tolerances)"]


def test_validate_of_one_job_names_its_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(LM_JOB)]) == 0
    assert capsys.readouterr().out == f"{LM_JOB}: ok (train_lm)\n"


# ---------------------------------------------------------------------------------------------- runs


@pytest.fixture
def runs_store(tmp_path: Path) -> tuple[str, dict[str, str]]:
    """(uri, name -> run id): experiment asr holds `r1` (minute 0, FINISHED), experiment mt holds
    `second-run` (minute 1, RUNNING), experiment `empty` holds no run."""
    uri = new_store(tmp_path)
    client = MlflowClient(tracking_uri=uri)
    asr = client.create_experiment("asr", artifact_location=(tmp_path / "a").as_uri())
    mt = client.create_experiment("mt", artifact_location=(tmp_path / "b").as_uri())
    client.create_experiment("empty", artifact_location=(tmp_path / "c").as_uri())
    ids = {"r1": _run(client, asr, "r1", 0, {"graph.states": 16514210.0, "graph.arcs": 2.5, "loss": 7.0}),
           "second-run": _run(client, mt, "second-run", 1, {"graph.ppl_test": 123.456789}, status="RUNNING")}
    return uri, ids


def _table(rows: list[list[str]]) -> list[str]:
    """The runs table by hand: widths run 12, experiment 10, name 10 (second-run), status 8 (FINISHED),
    started 16 (2023-11-14 22:13), then the metrics; trailing blanks cut."""
    header = ["run", "experiment", "name", "status", "started (UTC)", "headline metrics"]
    widths = (12, 10, 10, 8, 16, 0)
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]


def test_runs_prints_the_newest_first_with_sorted_headline_metrics(runs_store: tuple[str, dict[str, str]],
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    uri, ids = runs_store
    assert main(["--tracking-uri", uri, "runs"]) == 0
    # a count in full (16514210 and 16514211 must differ), else 6 digits; loss is no headline metric
    assert capsys.readouterr().out.splitlines() == _table([
        [ids["second-run"][:12], "mt", "second-run", "RUNNING", "2023-11-14 22:14", "graph.ppl_test=123.457"],
        [ids["r1"][:12], "asr", "r1", "FINISHED", "2023-11-14 22:13",
         "graph.arcs=2.5; graph.states=16,514,210"]])


def test_runs_flags_a_running_run_whose_process_is_gone(runs_store: tuple[str, dict[str, str]],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    uri, ids = runs_store
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    for name, pid in (("second-run", gone.pid), ("r1", gone.pid), ("live", os.getpid())):
        journal_dir().mkdir(parents=True, exist_ok=True)  # r1 ended: never flagged; live: its process runs
        create = {"op": "create", "run_id": ids.get(name, "0" * 32), "host": socket.gethostname(), "pid": pid}
        (journal_dir() / f"{name}.jsonl").write_text(json.dumps(create) + "\n")
    assert main(["--tracking-uri", uri, "runs"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "  RUNNING (process gone)  " in out[1] and out[1].startswith(ids["second-run"][:12])
    assert "  FINISHED  " in out[2] and out[3].startswith("1 run(s) RUNNING whose process is gone")
    assert "Fix: `specbench sync`" in out[3]


def test_runs_takes_the_limit_and_the_experiment(runs_store: tuple[str, dict[str, str]],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    uri, ids = runs_store
    assert main(["--tracking-uri", uri, "runs", "--limit", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[1].startswith(ids["second-run"][:12] + "  mt ")  # the newest only
    assert main(["--tracking-uri", uri, "runs", "--experiment", "asr"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[1].startswith(ids["r1"][:12] + "  asr ")


def test_runs_of_an_experiment_the_store_lacks_is_refused_with_the_ones_it_has(
        runs_store: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    uri, _ = runs_store
    assert main(["--tracking-uri", uri, "runs", "--experiment", "nope"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert ("--experiment nope: no such experiment in the store. Fix: pick one of: Default, asr, empty, mt."
            in captured.err)


def test_runs_of_an_unknown_experiment_names_the_closest_few(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    uri = new_store(tmp_path)
    for name in [f"exp{i:02}" for i in range(12)] + ["Speech-ASR"]:
        MlflowClient(uri).create_experiment(name, artifact_location=(tmp_path / name).as_uri())
    assert main(["--tracking-uri", uri, "runs", "--experiment", "speech-asr2"]) == 2
    shown = "Speech-ASR, Default, exp00, exp01, exp02, exp03, exp04, exp05, exp06, exp07"
    assert (f"Fix: pick one of (closest first): {shown} and 4 more (`MLFLOW_TRACKING_URI={uri} mlflow "
            "experiments search` lists them all)." in capsys.readouterr().err)


def test_runs_of_an_empty_experiment_or_store_is_no_runs_yet(tmp_path: Path, runs_store: tuple[str, dict[str, str]],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    uri, _ = runs_store
    assert main(["--tracking-uri", uri, "runs", "--experiment", "empty"]) == 0
    assert capsys.readouterr().out == "no runs yet: try `specbench run jobs/quick.toml`\n"
    (tmp_path / "fresh").mkdir()
    assert main(["--tracking-uri", new_store(tmp_path / "fresh"), "runs"]) == 0
    assert capsys.readouterr().out == "no runs yet: try `specbench run jobs/quick.toml`\n"


# ---------------------------------------------------------------------------------------------- compare


@pytest.fixture
def pair(tmp_path: Path) -> tuple[str, MlflowClient, str, str]:
    """(uri, client, run a, run b): beam 5 vs 7 and wer 0.25 vs 0.5 differ, seed 1 and bleu 30 do not."""
    uri = new_store(tmp_path)
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("cmp", artifact_location=(tmp_path / "art").as_uri())
    a = _run(client, exp, "job", 0, {"wer": 0.25, "bleu": 30.0}, {"beam": "5", "seed": "1"})
    b = _run(client, exp, "job", 1, {"wer": 0.5, "bleu": 30.0}, {"beam": "7", "seed": "1"})
    return uri, client, a, b


def test_compare_prints_what_differs_unless_all_and_logs_nothing_without_artifact(
        pair: tuple[str, MlflowClient, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    uri, client, a, b = pair
    assert main(["--tracking-uri", uri, "compare", a[:10], b[:10], "--no-artifact"]) == 0
    out = capsys.readouterr().out
    assert f"job [{a[:8]}]" in out and f"job [{b[:8]}]" in out
    assert "beam" in out and "wer" in out and "seed" not in out and "bleu" not in out
    assert client.get_experiment_by_name("compare") is None  # no run logged
    assert main(["--tracking-uri", uri, "compare", a, b, "--no-artifact", "--all"]) == 0
    out = capsys.readouterr().out
    assert "seed" in out and "bleu" in out and "HTML table" not in out


def test_compare_keeps_its_table_as_a_run_named_after_the_full_ids(tmp_path: Path,
                                                                   pair: tuple[str, MlflowClient, str, str],
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    uri, client, a, b = pair
    assert main(["--tracking-uri", uri, "compare", a[:10], b[:10]]) == 0  # prefixes given: full ids kept
    exp = client.get_experiment_by_name("compare")
    assert exp is not None
    [run] = client.search_runs([exp.experiment_id])
    assert run.info.run_name == f"compare-{a[:8]}-{b[:8]}"
    assert run.data.tags["kind"] == "compare" and run.data.tags["compare.runs"] == f"{a},{b}"
    assert [f.path for f in client.list_artifacts(run.info.run_id)] == ["compare.html"]
    page = Path(client.download_artifacts(run.info.run_id, "compare.html", str(tmp_path))).read_text()
    assert "<td>beam" in page and "<td>wer" in page and "seed" not in page  # the differences, as printed
    assert (f"HTML table: artifact compare.html of run {run.info.run_id} (experiment 'compare')"
            in capsys.readouterr().out)


# ---------------------------------------------------------------------------------------------- baseline


def test_baseline_set_records_the_reason_and_refuses_an_old_metrics_version(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = new_store(tmp_path)
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("nightly", artifact_location=(tmp_path / "art").as_uri())
    parent = _run(client, exp, "nightly", 0, {}, tags={"kind": "nightly"})
    current = str(JOBS["graph"].metrics_version)
    tags = {"suite": "nightly", "kind": "graph", PARENT_TAG: parent}
    run = _run(client, exp, "graph", 0, {"graph.states": 1.0}, tags={**tags, "metrics.version": current})
    assert main(["--tracking-uri", uri, "baseline", "set", run[:12], "--reason", "states changed"]) == 0
    assert capsys.readouterr().out == f"run {run} (graph) is now the baseline of its job\n"
    got = client.get_run(run).data.tags
    assert got["baseline"] == "true" and got["baseline.reason"] == "states changed"
    old = _run(client, exp, "graph", 1, {"graph.states": 1.0}, tags={**tags, "metrics.version": current + "0"})
    assert main(["--tracking-uri", uri, "baseline", "set", old]) == 2
    assert f"logged metrics version {current}0 of graph, but the current version is {current}" in \
        capsys.readouterr().err
    assert client.get_run(old).data.tags.get("baseline") is None


# ---------------------------------------------------------------------------------------------- sync


def _journal(name: str, uri: str, ops: list[dict], host: str | None = None) -> Path:
    create = {"op": "create", "tracking_uri": uri, "experiment": "synced", "run_name": name, "tags": {},
              "start_ms": T0, "host": host or socket.gethostname(), "pid": None, "run_id": None, "sent": False}
    path = journal_dir() / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(op) + "\n" for op in [create, *ops]))
    return path


def test_sync_with_no_journal_says_nothing_to_send(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sync"]) == 0
    assert capsys.readouterr().out == "nothing to send: every run reached its server\n"


def test_sync_reports_each_run_sent_with_its_operation_count(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    uri = new_store(tmp_path)
    _journal("done", uri, [{"op": "metrics", "metrics": [["wer", 0.5, T0, 0]], "sent": False},
                           {"op": "end", "status": "FINISHED", "end_ms": T0 + 1000, "sent": False}])
    assert main(["sync"]) == 0
    client = MlflowClient(tracking_uri=uri)
    [run] = client.search_runs([client.get_experiment_by_name("synced").experiment_id])
    # create, metrics and end: three operations
    assert capsys.readouterr().out == f"done.jsonl: 3 operations sent to run {run.info.run_id}\n"
    assert run.info.status == "FINISHED" and run.data.metrics == {"wer": 0.5}


def test_sync_leaves_a_run_of_another_host_alone_and_says_why(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    other = socket.gethostname() + "-other"
    path = _journal("elsewhere", new_store(tmp_path), [], host=other)
    assert main(["sync"]) == 0
    out = capsys.readouterr().out
    assert out == (f"{path}: its run has not ended and it was written on host {other}: sync there, or once "
                   "its job has ended (left alone for now)\n")  # and not "nothing to send"
    assert path.is_file()


def test_sync_reports_a_damaged_journal_on_stderr_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    path = journal_dir() / "empty.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    assert main(["sync"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"specbench: error: journal {path} is damaged: it is empty")
    assert path.is_file()


# ---------------------------------------------------------------------------------------------- train, submit


@pytest.mark.parametrize(("argv", "kind"), [(["train", "lm"], "train_lm"),
                                            (["train", "confidence"], "train_confidence")])
def test_train_verbs_take_their_own_kind(argv: list[str], kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, str(TINY)]) == 2
    assert f'this command needs a job with kind = "{kind}", not "simultrans"' in capsys.readouterr().err


def test_submit_refuses_a_job_file_outside_the_project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job.toml"
    shutil.copyfile(TINY, job)
    assert main(["submit", str(job), "--address", "http://127.0.0.1:9"]) == 2  # refused before contacting it
    err = capsys.readouterr().err
    assert f"{job}: a submitted job file must be inside the project ({ROOT})" in err
    assert f"Fix: copy it into {ROOT / 'jobs'}/" in err and "Traceback" not in err


def test_submit_loads_the_file_before_asking_where_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job.toml"
    job.write_text(TINY.read_text() + "no_such_key = 1\n")
    assert main(["submit", str(job), "--address", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert "no_such_key" in err and "inside the project" not in err


# ---------------------------------------------------------------------------------------------- decode


def test_decode_exits_1_only_when_every_utterance_failed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 0 --1:7--> 1 --1:0--> 2 (final, with a 1:0 self-loop): one frame ends in state 1, which is not final
    graph = tmp_path / "g.fst"
    write_vector_fst(graph, from_arrays(0, np.array([np.inf, np.inf, 0.0], np.float32),
                                        src=np.array([0, 1, 2]), dest=np.array([1, 2, 2]),
                                        ilabel=np.array([1, 1, 1]), olabel=np.array([7, 0, 0]),
                                        weight=np.array([0.0, 0.0, 0.0])))

    def decode(scores: dict[str, int]) -> tuple[int, dict]:
        path = tmp_path / "s.npz"
        np.savez(path, **{u: np.zeros((n, 1), np.float32) for u, n in scores.items()})
        code = main(["decode", "--graph", str(graph), "--scores", str(path), "--frame-shift-ms", "40",
                     "--backend", "cpu_numpy", "--workers", "1", "--out", str(tmp_path / "o.jsonl")])
        return code, json.loads(capsys.readouterr().out)

    code, summary = decode({"short": 1, "long": 3})
    assert code == 0 and (summary["utterances"], summary["failed"], summary["frames"]) == (2, 1, 4)
    code, summary = decode({"short": 1, "short2": 1})
    assert code == 1 and (summary["utterances"], summary["failed"]) == (2, 2)
    assert main(["decode", "--graph", str(graph), "--scores", str(tmp_path / "s.npz"), "--frame-shift-ms", "40",
                 "--workers", "0", "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "--workers 0: must be a whole number >= 1" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- server exit


def _server(code: int) -> subprocess.Popen:
    """A real process that prints two lines and exits with `code`, its output kept as start_ui keeps it."""
    proc = subprocess.Popen([sys.executable, "-c", (f"print('starting'); print('the store is locked'); "
                                                     f"raise SystemExit({code})")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    ui._keep_tail(proc, None)
    return proc


def test_a_server_that_exits_with_an_error_fails_the_verb_with_its_last_output(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _serve_until_stopped(_server(3)) == 1
    assert capsys.readouterr().err == ("specbench: error: the MLflow server exited with code 3; its last output:\n"
                                       "  starting\n  the store is locked\n")
    assert _serve_until_stopped(_server(0)) == 0
    assert capsys.readouterr().err == ""


def test_ctrl_c_while_serving_stops_the_server_and_exits_0() -> None:
    """In a process of its own (as `specbench server` runs), with a second thread as the server's output
    reader has: a SIGINT while it waits for the server. The kernel may hand the signal to any thread that does
    not block it; the main thread blocks it here, so that it lands on the other one every time. The process
    takes SIGINT as Python does in a terminal's foreground (a shell that starts a command in the background
    makes it ignore SIGINT)."""
    code = ("import signal, subprocess, sys, threading, time\n"
            "from specbench.cli.commands import _serve_until_stopped\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
            "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})\n"
            "server = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True,\n"
            "                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "print(server.pid, flush=True)\nprint('returned', _serve_until_stopped(server), flush=True)\n")
    cli = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT / "platform")})
    assert cli.stdout is not None
    server = int(cli.stdout.readline())
    try:
        time.sleep(1.0)  # into the wait
        cli.send_signal(signal.SIGINT)
        out, err = cli.communicate(timeout=30)
        assert (cli.returncode, out, err) == (0, "returned 0\n", "")
        time.sleep(0.2)
        with pytest.raises(ProcessLookupError):  # stopped, not left running
            os.kill(server, 0)
    finally:
        cli.kill()
        try:
            os.kill(server, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ---------------------------------------------------------------------------------------------- data check


def test_data_check_says_how_much_of_the_content_it_read(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "check"]) == 0
    out = capsys.readouterr().out
    assert "the content of changed files read" in out and "every file's content read" not in out
