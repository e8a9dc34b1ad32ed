"""`tracking.compare`: which rows differ (NaN equals NaN), the deltas against the first run (None where a run
lacks the metric), which runs the metrics-version warning names (per job kind, a suite's parent per child
kind), and what `compare_runs` reads from a real MLflow store (SQLite in a temporary folder): an untagged run
is metrics version 1, a metric logged at several steps is marked swept (also when it does not differ, with
`show_all`), a param that shares a swept metric's name is not, and fewer than two runs are refused."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
from mlflow_store import new_store, store_home

from specbench.errors import ConfigError
from specbench.tracking.compare import Comparison, Row, compare_runs

pytestmark = pytest.mark.unit
NAN = math.nan


def test_nan_equals_nan_but_not_a_number() -> None:
    assert not Row("metric", "m", (NAN, NAN, NAN)).differs
    assert Row("metric", "m", (NAN, 1.0)).differs and Row("metric", "m", (1.0, NAN)).differs
    assert Row("metric", "m", (1.0, 1.0, 2.0)).differs  # one of three differs: the row differs
    assert not Row("param", "p", ("5", "5")).differs
    assert Row("param", "p", ("5", None)).differs


def test_deltas_are_each_value_minus_the_first() -> None:
    # (2.5, None, 4.0, 1.0) - 2.5 = (0.0, -, 1.5, -1.5)
    assert Row("metric", "m", (2.5, None, 4.0, 1.0)).deltas() == (0.0, None, 1.5, -1.5)
    assert Row("metric", "m", (None, 4.0)).deltas() == (None, None)  # no first value: no deltas
    assert Row("param", "p", ("2.5", "4.0")).deltas() == (None, None)


def _comparison(kinds: tuple[str, ...], versions: tuple[str, ...]) -> Comparison:
    ids = tuple(f"{i:032x}" for i in range(len(kinds)))
    return Comparison(ids, tuple(f"r{i}" for i in range(len(kinds))), (), kinds, versions, ("",) * len(kinds))


def test_the_version_warning_counts_versions_per_job_kind() -> None:
    # asr runs at 1 and 1, mt runs at 2: each kind has one version, so nothing to warn about
    assert _comparison(("asr", "mt", "asr"), ("1", "2", "1")).version_warning() is None
    warning = _comparison(("asr", "mt", "asr"), ("1", "2", "2")).version_warning()
    assert warning is not None and warning.count("\n") == 0  # one kind (asr) warned about
    assert "these asr runs" in warning and "r0 [00000000]: metrics.version 1" in warning
    assert "r2 [00000000]: metrics.version 2" in warning and "r1 " not in warning  # the mt run is not named
    untyped = _comparison(("", ""), ("1", "3")).version_warning()
    assert untyped is not None and "these untyped runs" in untyped


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, MlflowClient, str]]:
    """(uri, client, experiment id) of a new SQLite store."""
    with store_home(tmp_path_factory, "compare_store") as folder:
        uri = new_store(folder)
        client = MlflowClient(tracking_uri=uri)
        yield uri, client, client.create_experiment("cmp", artifact_location=(folder / "art").as_uri())


def _run(store: tuple[str, MlflowClient, str], name: str, tags: dict[str, str], params: dict[str, str],
         metrics: list[tuple[str, float, int]]) -> str:
    _, client, exp = store
    run_id = client.create_run(exp, run_name=name, tags=tags).info.run_id
    client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()],
                     metrics=[Metric(k, v, 1000 + step, step) for k, v, step in metrics])
    client.set_terminated(run_id, "FINISHED")
    return run_id


def test_an_untagged_run_is_metrics_version_1(store: tuple[str, MlflowClient, str]) -> None:
    untagged = _run(store, "untagged", {"kind": "asr"}, {}, [("wer", 0.2, 0)])
    tagged = _run(store, "tagged", {"kind": "asr", "metrics.version": "1"}, {}, [("wer", 0.3, 0)])
    comparison = compare_runs([untagged, tagged], store[0])
    assert comparison.versions == ("1", "1") and comparison.version_warning() is None
    assert comparison.kinds == ("asr", "asr") and comparison.run_names == ("untagged", "tagged")


def test_suite_parents_are_warned_of_per_child_kind(store: tuple[str, MlflowClient, str]) -> None:
    a, b = (_run(store, f"suite-{v}", {"kind": "suite", "metrics.versions": f"asr={v},graph=1"}, {}, [])
            for v in (1, 2))
    warning = compare_runs([a, b], store[0]).version_warning()
    assert warning is not None and warning.count("\n") == 0 and "these asr runs" in warning
    assert f"suite-1 [{a[:8]}]: metrics.version 1" in warning and "metrics.version 2" in warning


def test_swept_metrics_values_and_hardware(store: tuple[str, MlflowClient, str]) -> None:
    # "curve" is logged at steps 0, 1, 2 in both runs with the same last value (0.1): it does not differ;
    # "wer" is logged once (step 0) and differs; "loss" is a param in one run and a swept metric in the other
    a = _run(store, "a", {"hardware": "cpu-a"}, {"beam": "5", "loss": "ce"},
             [("curve", 0.9, 0), ("curve", 0.5, 1), ("curve", 0.1, 2), ("wer", 0.25, 0), ("loss", 2.0, 0)])
    b = _run(store, "b", {"hardware": "cpu-b"}, {"beam": "7"},
             [("curve", 0.8, 0), ("curve", 0.4, 1), ("curve", 0.1, 2), ("wer", 0.5, 0), ("loss", 1.0, 0),
              ("loss", 0.5, 1)])
    full = compare_runs([a, b], store[0], show_all=True)
    rows = {(r.kind, r.name): r for r in full.rows}
    assert rows[("metric", "curve")].values == (0.1, 0.1) and rows[("metric", "curve")].swept
    assert not rows[("metric", "curve")].differs
    assert rows[("metric", "wer")].values == (0.25, 0.5) and not rows[("metric", "wer")].swept
    assert rows[("metric", "wer")].deltas() == (0.0, 0.25)  # 0.5 - 0.25
    assert rows[("metric", "loss")].swept and not rows[("param", "loss")].swept
    assert rows[("param", "loss")].values == ("ce", None) and rows[("param", "beam")].values == ("5", "7")
    assert full.hardware == ("cpu-a", "cpu-b")
    assert {(r.kind, r.name) for r in full.shown(False)} == {("metric", "wer"), ("metric", "loss"),
                                                             ("param", "beam"), ("param", "loss")}
    assert len(full.shown(True)) == len(full.rows) == 5
    differing = compare_runs([a, b], store[0], show_all=False)  # a metric that does not differ is not looked up
    assert not {r.name: r for r in differing.rows if r.kind == "metric"}["curve"].swept


def test_fewer_than_two_runs_are_refused(store: tuple[str, MlflowClient, str]) -> None:
    one = _run(store, "one", {}, {}, [])
    with pytest.raises(ConfigError, match="at least two run ids, got 1"):
        compare_runs([one], store[0])


def test_a_run_given_twice_deleted_or_not_finished_is_warned_of(store: tuple[str, MlflowClient, str]) -> None:
    from specbench.reports.compare import warnings

    done = _run(store, "done", {}, {}, [("wer", 0.2, 0)])
    failed = _run(store, "broke", {}, {}, [("wer", 0.3, 0)])
    store[1].set_terminated(failed, "FAILED")
    assert warnings(compare_runs([done, failed[:12]], store[0])) == (
        f"warning: run broke [{failed[:8]}] is FAILED, not FINISHED: its metrics are what it logged before it "
        "stopped, and some may be missing.")
    gone = _run(store, "gone", {}, {}, [("wer", 0.4, 0)])
    store[1].delete_run(gone)
    assert warnings(compare_runs([done, gone], store[0])) == (
        f"warning: run gone [{gone[:8]}] is deleted: it is compared as it was logged. Fix: restore it "
        f"(`mlflow runs restore --run-id {gone}`) if it is still meant to count, or leave it out.")
    assert warnings(compare_runs([done, done], store[0])) == (
        f"warning: run {done[:8]} is given more than once, so its deltas against itself are 0. Fix: give the runs "
        "to compare once each.")


def test_an_infinity_the_store_keeps_as_the_largest_float_reads_and_prints_as_one(
        store: tuple[str, MlflowClient, str]) -> None:
    from specbench.reports.compare import render_text

    a = _run(store, "inf_a", {}, {}, [("ratio", math.inf, 0), ("gain", NAN, 0)])
    b = _run(store, "inf_b", {}, {}, [("ratio", -math.inf, 0), ("gain", 1.0, 0)])
    comparison = compare_runs([a, b], store[0])
    assert {r.name: r for r in comparison.rows}["ratio"].values == (math.inf, -math.inf)
    lines = {line.split()[1]: line.split()[2:] for line in render_text(comparison).splitlines()[2:4]}
    assert lines == {"gain": ["nan", "1"], "ratio": ["inf", "-inf"]}
