"""`tracking.queries` against a real MLflow store (SQLite in a temporary folder) holding runs with known start
times, steps and ids: `recent_runs` is newest first, limited, filtered by experiment and by metric name (none
named: all); `stepped_metrics` names only metrics logged at two or more distinct steps; `run_minutes` is the
wall-clock time between start and end; `resolve_run_id` takes a prefix in either case, never a substring from
the middle of an id, and lists the runs an ambiguous prefix matches; both read every experiment."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
from mlflow_store import new_store, store_home

from specbench.cli import main
from specbench.errors import ConfigError
from specbench.tracking.queries import recent_runs, resolve_run_id, run_minutes, stepped_metrics

pytestmark = pytest.mark.unit
T0 = 1_700_000_000_000  # ms


class Store:
    def __init__(self, folder: Path) -> None:
        self.uri = new_store(folder)
        self.client = MlflowClient(tracking_uri=self.uri)
        self.asr = self.client.create_experiment("asr", artifact_location=(folder / "a").as_uri())
        self.mt = self.client.create_experiment("mt", artifact_location=(folder / "b").as_uri())
        self.ids: dict[str, str] = {}
        # start times in minutes after T0: asr runs a0 (0), a1 (10), a2 (20); mt run m0 (5)
        for name, exp, minute in (("a0", self.asr, 0), ("m0", self.mt, 5), ("a1", self.asr, 10),
                                  ("a2", self.asr, 20)):
            run = self.client.create_run(exp, run_name=name, start_time=T0 + minute * 60_000)
            self.ids[name] = run.info.run_id
        # a1: wer at step 0 only; bleu at step 0 twice (same step: not a sweep); curve at steps 0, 3
        self.client.log_batch(self.ids["a1"], metrics=[
            Metric("wer", 0.3, 1, 0), Metric("bleu", 20.0, 1, 0), Metric("bleu", 21.0, 2, 0),
            Metric("curve", 0.5, 1, 0), Metric("curve", 0.7, 2, 3)])
        self.client.set_terminated(self.ids["a1"], "FINISHED", end_time=T0 + 10 * 60_000 + 90_000)  # 1.5 min


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with store_home(tmp_path_factory, "queries_store") as folder:
        yield Store(folder)


def test_recent_runs_are_newest_first_limited_and_of_the_experiment_asked(store: Store) -> None:
    assert [r.name for r in recent_runs(store.uri)] == ["a2", "a1", "m0", "a0"]
    assert [r.name for r in recent_runs(store.uri, limit=2)] == ["a2", "a1"]
    assert [r.name for r in recent_runs(store.uri, experiment="asr")] == ["a2", "a1", "a0"]
    assert [(r.name, r.experiment) for r in recent_runs(store.uri, experiment="mt")] == [("m0", "mt")]
    assert recent_runs(store.uri, experiment="nope") == []
    row = recent_runs(store.uri, experiment="asr")[1]
    assert row.started == "2023-11-14 22:23"  # T0 = 2023-11-14 22:13:20 UTC, plus 10 minutes
    assert row.status == "FINISHED"


def test_recent_runs_keep_all_metrics_unless_some_are_named(store: Store) -> None:
    a1 = recent_runs(store.uri, experiment="asr")[1]
    assert a1.metrics == {"wer": 0.3, "bleu": 21.0, "curve": 0.7}  # each metric's latest value
    named = recent_runs(store.uri, experiment="asr", metric_names=["wer", "absent"])[1]
    assert named.metrics == {"wer": 0.3}


def test_only_metrics_logged_at_two_or_more_steps_are_stepped(store: Store) -> None:
    assert stepped_metrics(store.ids["a1"], store.uri) == {"curve"}
    assert stepped_metrics(store.ids["a1"], store.uri, ["wer", "bleu"]) == set()
    assert stepped_metrics(store.ids["a1"], store.uri, ["curve", "absent"]) == {"curve"}


def test_run_minutes_is_end_minus_start(store: Store) -> None:
    assert run_minutes(store.ids["a1"], store.uri) == pytest.approx(1.5)  # 90 000 ms
    assert run_minutes(store.ids["a2"], store.uri) is None  # still running


def test_a_prefix_resolves_in_either_case_and_a_middle_substring_does_not(store: Store) -> None:
    full = store.ids["a2"]
    assert resolve_run_id(full[:12].upper(), store.uri) == full
    assert resolve_run_id(f"  {full[:10]} ", store.uri) == full
    assert resolve_run_id(full.upper(), store.uri) == full  # a whole id, looked up directly
    middle = full[5:17]  # 12 characters from inside the id: no run id starts with them
    assert not any(i.startswith(middle) for i in store.ids.values())
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_run_id(middle, store.uri)


def test_an_ambiguous_prefix_lists_every_run_it_matches(store: Store) -> None:
    # 17 runs more in all: by pigeonhole, two of the 21 runs' ids begin with the same hex digit
    extra = [store.client.create_run(store.mt, run_name=f"x{i}").info.run_id for i in range(17)]
    ids = list(store.ids.values()) + extra
    digit, count = collections.Counter(i[0] for i in ids).most_common(1)[0]
    assert count >= 2
    with pytest.raises(ConfigError) as caught:
        resolve_run_id(digit, store.uri)
    said = str(caught.value)
    assert "is ambiguous" in said and "give more characters" in said
    assert sorted(i for i in ids if i in said) == sorted(i for i in ids if i.startswith(digit))


def test_an_ambiguous_prefix_lists_the_newest_shown_runs_then_says_there_are_more(store: Store) -> None:
    for i in range(17):
        store.client.create_run(store.mt, run_name=f"y{i}")
    ids = [r.info.run_id for r in store.client.search_runs([store.asr, store.mt], max_results=1000)]
    digit, count = collections.Counter(i[0] for i in ids).most_common(1)[0]  # count >= 2
    for shown, more in ((count, False), (count - 1, True)):
        with pytest.raises(ConfigError) as caught:
            resolve_run_id(digit, store.uri, shown=shown)
        said = str(caught.value)
        assert len([line for line in said.splitlines() if line.startswith(f"  {digit}")]) == shown
        assert ("\n  ... and more\n" in said) is more


def test_a_metric_logged_at_step_0_alone_costs_no_history_query(store: Store) -> None:
    run = store.client.create_run(store.mt, run_name="many").info.run_id
    store.client.log_batch(run, metrics=[Metric(f"m{i}", i, 1, 0) for i in range(40)] + [
        Metric("sweep", 1.0, 1, 0), Metric("sweep", 2.0, 1, 2), Metric("late", 1.0, 1, 5)])
    queries = []
    count = lambda conn, cursor, sql, *args: queries.append(sql)  # noqa: E731
    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", count)
    try:
        assert stepped_metrics(run, store.uri) == {"sweep"}  # "late": one step, not 0
    finally:
        sqlalchemy.event.remove(sqlalchemy.engine.Engine, "before_cursor_execute", count)
    assert len(queries) < 40  # 18 with MLflow 3.17; a history query for each of the 40 took 178


def test_a_prefix_of_a_deleted_run_says_it_is_deleted(store: Store) -> None:
    run = store.client.create_run(store.mt, run_name="gone").info.run_id
    store.client.delete_run(run)
    with pytest.raises(ConfigError, match=f"matches only run {run} \\(gone\\) .* which is deleted"):
        resolve_run_id(run[:12], store.uri)
    assert resolve_run_id(run, store.uri) == run  # the full id still reads it


def test_runs_past_1000_experiments_or_deleted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    client = MlflowClient(uri := new_store(tmp_path))
    run = client.create_run("0", run_name="old").info.run_id  # Default: the oldest
    with sqlalchemy.create_engine(uri).begin() as db:  # 1,000 newer ones
        db.execute(sqlalchemy.text("INSERT INTO experiments (name, lifecycle_stage, creation_time) VALUES "
                                   "(:n, 'active', 9999999999999)"), [{"n": f"e{i}"} for i in range(1000)])
    assert [r.name for r in recent_runs(uri) + recent_runs(uri, experiment="Default")] == ["old", "old"]
    assert resolve_run_id(run[:12], uri) == run
    client.delete_experiment("0")
    assert main(["--tracking-uri", uri, "runs", "--experiment", "Default"]) == 2
    err = capsys.readouterr().err
    assert "is deleted, so its runs are hidden. Fix: restore it" in err and f"={uri} mlflow" in err
