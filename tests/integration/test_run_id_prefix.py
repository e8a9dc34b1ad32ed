"""Run ids as `specbench runs` prints them (12 characters), or any unique prefix, are accepted by every verb
that takes a run id; an ambiguous prefix lists the runs it matches; an unknown id points at `specbench runs`.
A real MLflow SQLite store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mlflow.tracking import MlflowClient

from specbench.cli import main
from specbench.errors import ConfigError
from specbench.tracking.queries import resolve_run_id
from specbench.tracking.runs import TrackedRun

pytestmark = [pytest.mark.integration, pytest.mark.isolated]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    """One store for the module, with three runs in two experiments: (uri, their ids). Tests add runs to
    it (compare runs, extra runs) and tags, so they look at every run of the store (`_all_ids`)."""
    tmp = tmp_path_factory.mktemp("run-id-prefix")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECBENCH_HOME", str(tmp / "home"))
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        uri = f"sqlite:///{tmp / 'mlflow.db'}"
        ids = []
        for experiment, name, bleu in (("mt", "wait3", 30.0), ("mt", "wait3", 31.5), ("asr", "quick", 12.0)):
            with TrackedRun(experiment, name, uri, {"kind": "test"}) as run:
                run.log_params({"k": 3})
                run.log_metrics({"bleu": bleu})
                ids.append(run.run_id)
        yield uri, ids


def _all_ids(uri: str) -> list[str]:
    client = MlflowClient(uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    return [r.info.run_id for r in client.search_runs(experiments, max_results=1000)]


def test_printed_ids_and_prefixes_resolve_to_the_full_id(store: tuple[str, list[str]]) -> None:
    uri, ids = store
    for run_id in ids:
        assert resolve_run_id(run_id[:12], uri) == run_id
        assert resolve_run_id(run_id.upper()[:12], uri) == run_id
        assert resolve_run_id(run_id, uri) == run_id
        every = _all_ids(uri)
        shortest = next(n for n in range(1, 33) if sum(i.startswith(run_id[:n]) for i in every) == 1)
        assert resolve_run_id(run_id[:shortest], uri) == run_id


def test_compare_takes_printed_ids(store: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    uri, (a, b, _) = store
    assert main(["--tracking-uri", uri, "runs"]) == 0
    printed = capsys.readouterr().out
    assert a[:12] in printed and a not in printed  # `runs` prints 12 characters
    assert main(["--tracking-uri", uri, "compare", a[:12], b[:12]]) == 0
    out = capsys.readouterr().out
    assert "31.5 (+1.5)" in out
    compare_run = MlflowClient(uri).search_runs(
        [MlflowClient(uri).get_experiment_by_name("compare").experiment_id])[0]
    assert compare_run.data.tags["compare.runs"] == f"{a},{b}"  # the full ids are kept


def test_baseline_set_takes_a_printed_id(store: tuple[str, list[str]],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    uri, (a, b, parent) = store
    client = MlflowClient(uri)
    for run_id in (a, b):  # as a nightly writes its job runs (baseline set refuses any other run)
        client.set_tag(run_id, "suite", "nightly")
        client.set_tag(run_id, "mlflow.parentRunId", parent)
    assert main(["--tracking-uri", uri, "baseline", "set", a[:12]]) == 0
    assert f"run {a} (wait3) is now the baseline" in capsys.readouterr().out
    assert main(["--tracking-uri", uri, "baseline", "set", b[:12], "--reason", "newer"]) == 0
    assert client.get_run(a).data.tags["baseline"] == "false"
    assert client.get_run(b).data.tags["baseline"] == "true"
    assert client.get_run(b).data.tags["baseline.reason"] == "newer"


def test_an_ambiguous_prefix_lists_the_runs_it_matches(store: tuple[str, list[str]],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    uri, first_ids = store
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("asr").experiment_id
    ids = _all_ids(uri)
    while len({i[0] for i in ids}) == len(ids):  # run ids are random hex: within 17 runs two share a first
        ids.append(client.create_run(experiment, run_name="extra").info.run_id)  # character
    prefix = next(i[0] for i in ids if sum(j.startswith(i[0]) for j in ids) > 1)
    tags_before = {i: client.get_run(i).data.tags for i in ids}
    matching = [i for i in ids if i.startswith(prefix)]
    with pytest.raises(ConfigError) as err:
        resolve_run_id(prefix, uri)
    message = str(err.value)
    assert "ambiguous" in message and "Fix:" in message
    assert all(i in message for i in matching)
    assert not any(i in message for i in ids if i not in matching)
    for run_id in matching:  # id, experiment and name on one line
        run = client.get_run(run_id)
        shown = (run_id, client.get_experiment(run.info.experiment_id).name, run.info.run_name)
        assert any(all(part in line for part in shown) for line in message.splitlines()), (shown, message)
    for argv in (["compare", prefix, first_ids[0]], ["baseline", "set", prefix]):
        assert main(["--tracking-uri", uri, *argv]) == 2
        stderr = capsys.readouterr().err
        assert "ambiguous" in stderr and all(i in stderr for i in matching) and "Traceback" not in stderr
    assert {i: client.get_run(i).data.tags for i in ids} == tags_before  # nothing was changed


def test_an_unknown_id_says_so_and_points_at_runs(store: tuple[str, list[str]],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    uri, ids = store
    for unknown in ("0" * 12, "f" * 32, "not-an-id"):
        if any(i.startswith(unknown) for i in _all_ids(uri)):
            continue  # a random run id starts with it
        for argv in (["compare", ids[0], unknown], ["baseline", "set", unknown]):
            assert main(["--tracking-uri", uri, *argv]) == 2
            err = capsys.readouterr().err
            assert unknown in err and "specbench runs" in err and "Fix:" in err and "Traceback" not in err


def test_baseline_set_refuses_a_run_that_did_not_finish(store: tuple[str, list[str]],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    uri, _ = store
    with pytest.raises(RuntimeError, match="stopped"):
        with TrackedRun("failed_runs", "wait3", uri, {"kind": "test"}) as run:
            failed = run.run_id
            raise RuntimeError("stopped")
    assert MlflowClient(uri).get_run(failed).info.status == "FAILED"
    assert main(["--tracking-uri", uri, "baseline", "set", failed]) == 2
    err = capsys.readouterr().err
    assert f"run {failed} has status FAILED" in err and "Fix: pick a FINISHED run" in err
    assert "baseline" not in MlflowClient(uri).get_run(failed).data.tags


def test_runs_names_the_experiments_when_asked_for_an_unknown_one(store: tuple[str, list[str]],
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    uri, _ = store
    assert main(["--tracking-uri", uri, "runs", "--experiment", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "--experiment nosuch: no such experiment" in err and "asr" in err and "mt" in err
    assert main(["--tracking-uri", uri, "runs", "--limit", "0"]) == 2
    assert "--limit: '0' is not a whole number >= 1" in capsys.readouterr().err
