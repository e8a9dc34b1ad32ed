"""`tracking.baseline` against a real MLflow store (SQLite in a temporary folder) holding nightly job runs built
by hand (start times, verdicts, parent statuses, hardware tags, metrics), so that the baseline each case must
give is known: which earlier run is chosen (an untagged run counts only under a FINISHED parent, never a run of
the same nightly or of another metrics version), which run each metric's value comes from (a hardware-bound one
only from the same hardware, a pinned baseline's gaps only from strictly older runs), why a metric has no
value, and what `set_baseline`, `quoted` and `record_nightly_verdict` do."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
from mlflow_store import new_store, store_home

from specbench.errors import ConfigError
from specbench.tracking.baseline import find_baseline, quoted, record_nightly_verdict, set_baseline
from specbench.tracking.runs import PARENT_TAG

pytestmark = pytest.mark.unit
T0 = 1_700_000_000_000  # ms
NAN = math.nan


class Store:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.uri = new_store(folder)
        self.client = MlflowClient(tracking_uri=self.uri)
        self._names = itertools.count()

    def experiment(self) -> str:
        n = next(self._names)
        return self.client.create_experiment(f"nightly{n}", artifact_location=(self.folder / f"a{n}").as_uri())

    def job_run(self, exp: str, minute: int, metrics: dict[str, float], *, name: str = "job",
                verdict: str | None = "passed", parent: str | None = "FINISHED", nightly_id: str | None = None,
                hardware: str = "X", tags: dict[str, str] | None = None, status: str = "FINISHED") -> str:
        """A nightly's job run started `minute` minutes after T0, under a parent run that ended `parent`
        (RUNNING: not ended; None: no parent at all), tagged `nightly.verdict` = `verdict` unless None."""
        start = T0 + minute * 60_000
        all_tags = {"suite": "nightly", "kind": "graph", "hardware": hardware,
                    "nightly.id": nightly_id or f"n{minute}", **(tags or {})}
        if verdict is not None:
            all_tags["nightly.verdict"] = verdict
        if parent is not None:
            parent_id = self.client.create_run(exp, run_name="nightly", start_time=start,
                                               tags={"kind": "nightly"}).info.run_id
            if parent != "RUNNING":
                self.client.set_terminated(parent_id, parent)
            all_tags[PARENT_TAG] = parent_id
        run_id = self.client.create_run(exp, run_name=name, start_time=start, tags=all_tags).info.run_id
        self.client.log_batch(run_id, metrics=[Metric(k, v, start, 0) for k, v in metrics.items()])
        if status != "RUNNING":
            self.client.set_terminated(run_id, status)
        return run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with store_home(tmp_path_factory, "baseline_store") as folder:
        yield Store(folder)


def test_the_previous_nightly_is_the_newest_run_of_a_passing_nightly(store: Store) -> None:
    exp = store.experiment()
    old = store.job_run(exp, 0, {"m": 1.0}, verdict=None)  # untagged, its nightly FINISHED: passed
    store.job_run(exp, 10, {"m": 2.0}, verdict=None, parent=None)  # untagged and no parent: no verdict
    store.job_run(exp, 20, {"m": 3.0}, verdict=None, parent="RUNNING")  # its nightly never ended
    store.job_run(exp, 30, {"m": 4.0}, verdict=None, parent="FAILED")
    store.job_run(exp, 40, {"m": 5.0}, verdict="regressed")
    store.job_run(exp, 50, {"m": 6.0}, nightly_id="tonight")  # the nightly asking: not its own baseline
    v2 = store.job_run(exp, 60, {"m": 7.0}, tags={"metrics.version": "2"})
    store.job_run(exp, 70, {"m": 8.0}, name="other job")
    base = find_baseline(exp, "job", "tonight", store.uri, metrics_version=1, metrics=["m"])
    assert base is not None and (base.run_id, base.why) == (old, "previous nightly")
    assert (base.metrics, base.sources, base.missing) == ({"m": 1.0}, {"m": old}, {})
    newer = find_baseline(exp, "job", "tonight", store.uri, metrics_version=2, metrics=["m"])
    assert newer is not None and newer.run_id == v2 and newer.metrics == {"m": 7.0}
    assert find_baseline(exp, "job", "tonight", store.uri, metrics_version=3) is None


def test_a_hardware_bound_metric_comes_only_from_a_run_on_this_hardware(store: Store) -> None:
    exp = store.experiment()
    older = store.job_run(exp, 0, {"speed": 2.0, "wer": 0.1}, hardware="Y")
    newest = store.job_run(exp, 10, {"speed": 3.0, "wer": 0.2}, hardware="X")
    base = find_baseline(exp, "job", "tonight", store.uri, metrics=["speed", "wer"], hardware="Y",
                         hardware_bound=["speed"])
    assert base is not None and base.run_id == newest
    # wer is not hardware-bound: the chosen run's 0.2; speed from the newest run on Y: 2.0
    assert base.metrics == {"wer": 0.2, "speed": 2.0}
    assert base.sources == {"wer": newest, "speed": older} and base.missing == {}


def test_a_pinned_baseline_takes_gaps_from_strictly_older_runs_and_speed_from_the_newest_on_this_hardware(
        store: Store) -> None:
    exp = store.experiment()
    older = store.job_run(exp, 0, {"wer": 0.1})
    pinned = store.job_run(exp, 10, {"wer": NAN, "speed": 3.0, "bleu": NAN}, tags={"baseline": "true"})
    store.job_run(exp, 10, {"wer": 0.2})  # started in the same millisecond as the pin: not older than it
    newer = store.job_run(exp, 20, {"wer": 0.3, "speed": 5.0, "bleu": 30.0}, hardware="Y")
    base = find_baseline(exp, "job", "tonight", store.uri, metrics=["wer", "speed", "bleu"], hardware="Y",
                         hardware_bound=["speed"])
    assert base is not None and (base.run_id, base.why) == (pinned, "baseline=true")
    assert base.metrics == {"wer": 0.1, "speed": 5.0}  # wer from the older run, speed from the newer one on Y
    assert base.sources == {"wer": older, "speed": newer}
    # bleu: the pin logged NaN; the runs searched after it were `older` (first fill) and `newer` (speed fill)
    assert base.missing == {"bleu": f"baseline run {pinned} logged nan, nor did any of the 2 older passing "
                                    "nightly runs of the job log a finite value"}


def test_why_a_metric_has_no_baseline_value(store: Store) -> None:
    exp = store.experiment()
    chosen = store.job_run(exp, 0, {"speed": 3.0, "rtf": NAN}, hardware="X")
    base = find_baseline(exp, "job", "tonight", store.uri, metrics=["speed", "rtf", "wer"], hardware="Y",
                         hardware_bound=["speed", "rtf"])
    assert base is not None and base.metrics == {}
    assert base.missing == {
        "speed": f"baseline run {chosen} measured it on other hardware (X), and no older passing nightly run of "
                 "the job exists on this hardware (Y)",
        "rtf": f"baseline run {chosen} logged nan, and no older passing nightly run of the job exists on this "
               "hardware (Y)",
        "wer": f"baseline run {chosen} did not log it, and no older passing nightly run of the job exists"}


def test_a_pinned_run_on_other_hardware_counts_each_older_run_searched_once(store: Store) -> None:
    exp = store.experiment()
    store.job_run(exp, 0, {"speed": 2.0}, hardware="X")  # older, but measured on X too
    pinned = store.job_run(exp, 10, {"speed": 3.0}, hardware="X", tags={"baseline": "true"})
    base = find_baseline(exp, "job", "tonight", store.uri, metrics=["speed"], hardware="Y",
                         hardware_bound=["speed"])
    # the older run is searched twice (as older than the pin, then as a passing nightly on Y): one run
    assert base is not None and base.metrics == {}
    assert base.missing == {"speed": f"baseline run {pinned} measured it on other hardware (X), nor did any of the "
                                     "1 older passing nightly runs of the job log a finite value on this hardware (Y)"}


def test_set_baseline_moves_the_tag_within_one_job_and_records_why(store: Store) -> None:
    exp = store.experiment()
    was = store.job_run(exp, 0, {"m": 1.0}, tags={"baseline": "true", "metrics.version": "2"})
    other_job = store.job_run(exp, 5, {"m": 1.0}, name="other", tags={"baseline": "true"})
    new = store.job_run(exp, 10, {"m": 2.0}, tags={"metrics.version": "2"})
    assert set_baseline(new[:12], store.uri, reason="wer changed", current_versions={"graph": 2}) == (new, "job")
    tags = {r: store.client.get_run(r).data.tags for r in (was, other_job, new)}
    assert (tags[new]["baseline"], tags[new]["baseline.reason"]) == ("true", "wer changed")
    assert tags[was]["baseline"] == "false" and tags[other_job]["baseline"] == "true"
    with pytest.raises(ConfigError, match="logged metrics version 2 of graph, but the current version is 3"):
        set_baseline(new, store.uri, current_versions={"graph": 3})
    assert set_baseline(new, store.uri, current_versions={"asr": 3}) == (new, "job")  # another kind's version


def test_set_baseline_refuses_runs_the_nightly_would_not_use(store: Store) -> None:
    exp = store.experiment()
    unparented = store.job_run(exp, 0, {"m": 1.0}, parent=None)  # tagged suite=nightly, but no nightly above it
    with pytest.raises(ConfigError, match="is not a job run of a nightly"):
        set_baseline(unparented, store.uri)
    running = store.job_run(exp, 10, {"m": 1.0}, status="RUNNING")
    with pytest.raises(ConfigError, match="has status RUNNING"):
        set_baseline(running, store.uri)
    killed = store.job_run(exp, 20, {"m": 1.0}, status="KILLED")
    with pytest.raises(ConfigError, match="has status KILLED"):
        set_baseline(killed, store.uri)


def test_quoted_picks_the_quote_the_name_does_not_hold() -> None:
    assert quoted("job") == "'job'"
    assert quoted("bob's") == '"bob\'s"'
    assert quoted('say "hi"') == "'say \"hi\"'"
    with pytest.raises(ConfigError, match="both kinds of quote"):
        quoted("bob's \"x\"")


def test_record_nightly_verdict_tags_online_runs_and_returns_offline_ones(store: Store) -> None:
    exp = store.experiment()
    run = store.job_run(exp, 0, {}, verdict=None)
    assert record_nightly_verdict(["offline-0123abcd", run], "regressed", store.uri) == ["offline-0123abcd"]
    assert store.client.get_run(run).data.tags["nightly.verdict"] == "regressed"
    with pytest.raises(ValueError, match="nightly verdict 'failed'"):
        record_nightly_verdict([run], "failed", store.uri)


def test_an_infinite_baseline_value_is_no_baseline_value(store: Store) -> None:
    """MLflow's SQL store gives an infinity back as the largest float: still not a finite baseline."""
    exp = store.experiment()
    older = store.job_run(exp, 0, {"ppl": 90.0})
    chosen = store.job_run(exp, 1, {"ppl": math.inf, "wer": -math.inf})
    base = find_baseline(exp, "job", "tonight", store.uri, metrics=["ppl", "wer"])
    assert base is not None and base.run_id == chosen
    assert base.metrics == {"ppl": 90.0} and base.sources == {"ppl": older}
    assert base.missing == {"wer": f"baseline run {chosen} logged -inf, nor did any of the 1 older passing "
                                   "nightly runs of the job log a finite value"}


def test_a_baseline_beyond_the_lookback_is_out_of_reach_not_missing(store: Store,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """With more regressed nightlies in a row than the search looks back over, the nightly is told the
    baseline is out of reach (so it does not pass), not that there is none (so it would)."""
    from specbench.tracking import baseline

    monkeypatch.setattr(baseline, "_MAX_LOOKBACK", 3)
    monkeypatch.setattr(baseline, "_PAGE", 2)
    exp = store.experiment()
    passed = store.job_run(exp, 0, {"ppl": 100.0})
    for minute in (1, 2):
        store.job_run(exp, minute, {"ppl": 150.0}, verdict="regressed")
    assert find_baseline(exp, "job", "tonight", store.uri).run_id == passed  # the third run searched
    for minute in (3, 4):  # the search stops after the page that reaches the lookback: [4, 3], [2, 1]
        store.job_run(exp, minute, {"ppl": 150.0}, verdict="regressed")
    with pytest.raises(baseline.BaselineOutOfReach, match="newest 3 nightly runs .* Fix: pin one with"):
        find_baseline(exp, "job", "tonight", store.uri)
    assert find_baseline(store.experiment(), "job", "tonight", store.uri) is None  # no run at all: none


def test_runs_of_another_metrics_version_do_not_use_up_the_lookback(store: Store,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The version is part of the search: after a version change, more runs of the old version than the
    lookback leave the new version with no baseline (a reset), not one out of reach; and a run of the new
    version behind them is found."""
    from specbench.tracking import baseline

    monkeypatch.setattr(baseline, "_MAX_LOOKBACK", 3)
    monkeypatch.setattr(baseline, "_PAGE", 2)
    exp = store.experiment()
    v2 = store.job_run(exp, 0, {"ppl": 90.0}, tags={"metrics.version": "2"})
    for minute in range(1, 6):
        store.job_run(exp, minute, {"ppl": 100.0}, tags={"metrics.version": "3"})
    assert find_baseline(exp, "job", "tonight", store.uri, metrics_version=2).run_id == v2
    assert find_baseline(exp, "job", "tonight", store.uri, metrics_version=4) is None
    with pytest.raises(baseline.BaselineOutOfReach, match="newest 3 nightly runs of metrics version 1 "):
        find_baseline(exp, "job", "tonight", store.uri, metrics_version=1)  # version 1: untagged runs too


def test_exactly_the_lookback_of_regressed_runs_and_nothing_older_is_no_baseline(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from specbench.tracking import baseline

    monkeypatch.setattr(baseline, "_MAX_LOOKBACK", 4)
    monkeypatch.setattr(baseline, "_PAGE", 2)
    exp = store.experiment()
    for minute in range(4):  # two full pages, every run searched
        store.job_run(exp, minute, {"ppl": 150.0}, verdict="regressed")
    assert find_baseline(exp, "job", "tonight", store.uri) is None


def test_an_untagged_run_whose_nightly_was_deleted_is_no_baseline(store: Store) -> None:
    """MLflow keeps a deleted run's FINISHED status; its verdict is not one to trust."""
    exp = store.experiment()
    old = store.job_run(exp, 0, {"m": 1.0}, verdict=None)
    newer = store.job_run(exp, 10, {"m": 2.0}, verdict=None)
    parent = store.client.get_run(newer).data.tags[PARENT_TAG]
    assert find_baseline(exp, "job", "tonight", store.uri).run_id == newer
    store.client.delete_run(parent)
    assert find_baseline(exp, "job", "tonight", store.uri).run_id == old
