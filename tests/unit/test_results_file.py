"""The results writers' shared rules (`scripts/results_file.py`), against a real MLflow store (SQLite in
tmp_path): only a FINISHED run of the writer's kind is written from, NaN becomes null and inf "inf", small
figures keep 4 significant digits (the word-confidence file's too, with its metrics version), and a failed
write leaves the committed file as it was."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from mlflow_store import new_store

from specbench.errors import ConfigError
from specbench.tracking.queries import text_artifact
from specbench.tracking.runs import TrackedRun

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from results_file import dump, finished_run, rounded, write_results  # noqa: E402


def test_only_a_finished_run_of_the_writers_kind_is_written_from(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    with TrackedRun("results", "simultrans", uri, {"kind": "simultrans"}) as done:
        done.log_metrics({"simul.bleu": 31.2})
    running = TrackedRun("results", "predictive", uri, {"kind": "predictive_asr"})
    try:
        assert finished_run(done.run_id, "simultrans", uri).metrics == {"simul.bleu": 31.2}
        with pytest.raises(ConfigError, match=r"is a 'simultrans' run \(simultrans\), not 'predictive_asr'.*Fix:"):
            finished_run(done.run_id, "predictive_asr", uri)
        with pytest.raises(ConfigError, match=r"is RUNNING, not FINISHED.*Fix: give a run that finished"):
            finished_run(running.run_id, "predictive_asr", uri)
    finally:
        running.finish()


def test_nan_is_null_and_never_written_as_nan(tmp_path: Path) -> None:
    data = rounded({"wer": math.nan, "rows": [[1.23456, math.inf, -math.inf]], "name": "x"}, 3)
    assert data == {"wer": None, "rows": [[1.235, "inf", "-inf"]], "name": "x"}
    assert json.loads(dump(data), parse_constant=int) == data  # strict JSON
    with pytest.raises(ValueError):
        dump({"wer": math.nan})
    target = tmp_path / "result.json"
    target.write_text('{"good": true}\n')
    with pytest.raises(ValueError):
        write_results(target, {"wer": math.nan})
    assert target.read_text() == '{"good": true}\n' and list(tmp_path.iterdir()) == [target]  # untouched
    write_results(target, data)
    assert json.loads(target.read_text()) == data
    from specbench.text_files import json_text

    assert json_text({"a": np.float32("nan"), "b": np.float32(0.5), "c": (3, True)}) == \
        '{"a": null, "b": 0.5, "c": [3, true]}'  # numpy floats are floats, not default=str's strings


def test_objects_of_scalars_and_lists_of_scalars_stay_on_one_line() -> None:
    data = {"run": {"sets": {"a": {"bleu": 30.1, "laal": 3.2}}, "k": [1, 3, 5]}, "name": "x"}
    text = dump(data)
    assert json.loads(text) == data
    assert '"a": {"bleu": 30.1, "laal": 3.2}' in text and '"k": [1, 3, 5]' in text
    assert text.count("\n") == 8  # a line per key, and one per closing brace of an object of objects


def test_the_simultrans_file_keeps_a_scalar_its_tables_hold_once() -> None:
    from write_simultrans_results import kept_scalars

    headline = {"simul.speculation_gain_bleu": 1.44, "simul.testtime_speculation_gain_bleu_low": 0.5,
                "simul.test_2016_flickr.speculation_gain_bleu": 0.77,
                "simul.test_2016_flickr.testtime_sbs_vs_greedy_laal_increase": -0.1,
                "simul.val.tail_vs_greedy_gain_bleu": 0.0, "simul.val.testtime_speculation_gain_bleu": 1.2,
                "simul.test_2016_flickr.sbs_gain_bleu_sum_ranking": 0.3, "simul.best_beam": 7.0,
                "simul.other_set.speculation_gain_bleu": 2.0}
    kept = kept_scalars(headline, ["test_2016_flickr"])
    # the pooled scalars, the ranking ablation's and the settings stay; a set's and val's decomposition is
    # the k = grid_k row of its table; a split the report does not name is not dropped
    assert kept == {"simul.speculation_gain_bleu": 1.44, "simul.testtime_speculation_gain_bleu_low": 0.5,
                    "simul.test_2016_flickr.sbs_gain_bleu_sum_ranking": 0.3, "simul.best_beam": 7.0,
                    "simul.other_set.speculation_gain_bleu": 2.0}


def test_small_figures_keep_their_significant_digits() -> None:
    got = rounded({"max_difference": 3.2145e-5, "rtf": [0.0033841033, -0.000123456], "wer": 0.37012,
                   "seconds": 12.345678, "zero": 0.0, "n": 7})
    assert got == {"max_difference": 3.214e-5, "rtf": [0.003384, -0.0001235], "wer": 0.3701,
                   "seconds": 12.3457, "zero": 0.0, "n": 7}  # 3.2e-5 is not written as 0


def test_the_word_confidence_file_keeps_a_small_difference_and_the_metrics_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from write_job_results import results

    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    uri = new_store(tmp_path)
    tags = {"kind": "word_confidence", "metrics.version": "2"}
    with TrackedRun("results", "confidence", uri, tags) as run:
        run.log_dict({"backends": {"twin": {"max_posterior_difference": 3.2143e-7}}, "snr_db": [math.inf, math.nan]},
                     "word_confidence.json")
    json.loads(text_artifact(run.run_id, "word_confidence.json", uri), parse_constant=int)  # NaN, Infinity: ValueError
    got = results(run.run_id, uri, "", "jobs/word_confidence.toml", "word_confidence")
    assert got["report"]["snr_db"] == ["inf", None]
    assert got["report"]["backends"]["twin"]["max_posterior_difference"] == 3.214e-7
    assert got["metrics_version"] == "2" and got["hardware"] and got["git_commit"]
