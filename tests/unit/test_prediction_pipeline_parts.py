"""Pure parts of the predictive-ASR pipeline: the union of LM and personal predictions, oracle partials, the
user's voice, and the job config's checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.config import AsrSection
from specbench.errors import ConfigError
from specbench.experiments.predictive_asr.partials import (
    check_partial_interval,
    oracle_partials,
    plan_requests,
    request_rendition,
    user_voice,
)
from specbench.experiments.predictive_asr.table import _candidates
from specbench.experiments.registry import load_config
from specbench.prediction.history import FALLBACK_LOG_FREQ

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def test_candidates_union_lm_and_personal() -> None:
    prefix = ("set", "an")
    lm = [(("alarm",), -1.0, 0), (("alarm", "for", "six"), -3.0, 1)]
    personal = [(("set", "an", "alarm", "for", "six"), (-0.5, 7200, 8.5)),
                (("set", "an", "appointment"), (-1.2, 3600, 9.0))]
    scores = {(prefix, ("appointment",)): -7.5}
    rows = {tuple(r["prediction_words"]): r for r in _candidates(prefix, lm, personal, scores)}
    assert set(rows) == {("set", "an", "alarm"), ("set", "an", "alarm", "for", "six"), ("set", "an", "appointment")}
    only_lm, both, only_personal = (rows[("set", "an", "alarm")], rows[("set", "an", "alarm", "for", "six")],
                                    rows[("set", "an", "appointment")])
    assert (only_lm["source"], only_lm["personal_log_freq"], only_lm["lm_rank"]) == ("lm", FALLBACK_LOG_FREQ, 0)
    assert (both["source"], both["personal_log_freq"], both["lm_rank"], both["lm_log_prob"]) == ("both", -0.5, 1, -3.0)
    assert (only_personal["source"], only_personal["lm_rank"], only_personal["lm_log_prob"]) == ("personal", -1, -7.5)
    assert only_personal["in_personal"] and not only_personal["in_lm"]
    # when and at which hour the user said a candidate: none for one never said
    assert (both["last_said_s"], both["said_mean_hour"]) == (7200, 8.5)
    assert (only_personal["last_said_s"], only_lm["last_said_s"], only_lm["said_mean_hour"]) == (3600, None, None)


def test_candidates_of_a_user_without_history_are_the_lm_nbest() -> None:
    rows = _candidates((), [(("hello",), -2.0, 0)], [], {})
    assert [r["prediction_words"] for r in rows] == [["hello"]]
    assert rows[0]["personal_log_freq"] == FALLBACK_LOG_FREQ


def test_oracle_partials_never_hold_a_word_still_being_spoken() -> None:
    times = [{"word": "turn", "start_s": 0.1, "end_s": 0.3}, {"word": "off", "start_s": 0.3, "end_s": 0.55}]
    parts = oracle_partials(times, duration_ms=700.0, every_ms=120.0)
    assert [p["time_ms"] for p in parts] == [120.0, 240.0, 360.0, 480.0, 600.0]
    assert [p["words"] for p in parts] == [[], [], ["turn"], ["turn"], ["turn", "off"]]


def test_a_user_keeps_one_voice_and_every_request_is_rendered_anew() -> None:
    import pyarrow as pa

    asr = AsrSection()
    assert user_voice("FE-128", asr) == user_voice("FE-128", asr) and user_voice("FE-128", asr) in asr.voices
    requests = pa.table({"request_id": [f"u1-{i:05d}" for i in range(12)] + ["u2-00000"],
                         "slot": list(range(12)) + [0],
                         "user_id": ["u1"] * 12 + ["u2"], "normalized_text": ["lights off"] * 13,
                         "sentence": ["lights off"] * 13, "slurp_id": [1] * 13})
    ids, plan = plan_requests(requests, asr, "test/0")
    assert len(plan) == len(set(ids)) == 13  # the same text thirteen times: thirteen renditions
    assert {p["voice"] for p in plan if p["utt_id"] in ids[:12]} == {user_voice("u1", asr)}
    for p in plan:
        assert asr.rate_range[0] <= p["rate"] <= asr.rate_range[1]
        assert asr.snr_db_range[0] <= p["snr_db"] <= asr.snr_db_range[1]
        assert abs(p["pitch_cents"]) <= asr.pitch_cents
    assert len({p["noise_seed"] for p in plan}) == 13
    assert plan_requests(requests, asr, "test/0") == (ids, plan)  # seeded per request
    again, _ = plan_requests(requests.slice(3, 2), asr, "test/0")
    assert again == ids[3:5]  # a request that a sweep keeps reuses its rendition
    other, _ = plan_requests(requests, asr, "devel/0")
    assert not set(other) & set(ids)  # another split (or usage seed): other renditions


def test_a_rendition_follows_the_settings() -> None:
    fixed = AsrSection(rate_range=(1.0, 1.0), snr_db_range=(20.0, 20.0), pitch_cents=0.0)
    r = request_rendition("test/0/u1-00000", fixed)
    assert (r.rate, r.snr_db, r.pitch_cents) == (1.0, 20.0, 0.0)
    with pytest.raises(ValueError, match="rate_range"):
        AsrSection(rate_range=(1.2, 0.9))


def test_rendering_summary_by_hand() -> None:
    import pyarrow as pa

    from specbench.experiments.predictive_asr.partials import rendering_summary

    requests = pa.table({"user_id": ["a", "a", "a", "a", "b", "a"],
                         "normalized_text": ["x", "x", "y", "x", "x", "y"],
                         "evaluated": [False, True, True, True, True, True]})
    transcripts = pa.table({"audio_sha256": ["h1", "h2", "h3", "h2", "h1", "h4"],
                            "status": ["ok", "ok", "ok", "ok", "ok", "failed"],
                            "final_words": [["x"], ["x"], ["y"], ["z"], ["x"], []]})
    summary = rendering_summary(requests, transcripts)
    # evaluated: a/x h2 (new), a/y h3, a/x h2 (same bytes as a's 2nd), b/x h1 (other user), a/y (no audio twin)
    assert summary["asr.audio_identical_share"] == pytest.approx(1 / 5)
    # repeats with both transcribed: a's 2nd x (same as 1st: "x"), a's 3rd x ("z" after "x"); a's 2nd y failed
    assert summary["asr.repeat_final_differs_share"] == pytest.approx(1 / 2)


def test_requests_must_be_spoken_by_held_out_voices(tmp_path: Path) -> None:
    job = tmp_path / "job.toml"
    job.write_text('kind = "predictive_asr"\n[asr]\nvoices = ["flite:rms", "flite:slt"]\n')
    with pytest.raises(ConfigError, match="flite:slt"):
        load_config(job)


@pytest.mark.parametrize("line, field", [("thresholds = [0.5, 0.3]", "thresholds"),
                                         ("max_attempts = [2, 3]", "max_attempts"),
                                         ("split = \"train\"", "split")])
def test_predictive_job_rejects_bad_settings(tmp_path: Path, line: str, field: str) -> None:
    job = tmp_path / "job.toml"
    job.write_text(f'kind = "predictive_asr"\n{line}\n')
    with pytest.raises(ConfigError, match=field):
        load_config(job)


def test_usage_settings_errors_name_the_file(tmp_path: Path) -> None:
    job = tmp_path / "job.toml"
    job.write_text('kind = "predictive_asr"\n[usage]\nzipf_exponent = -1.0\n')
    with pytest.raises(ConfigError, match=r"job\.toml.*zipf_exponent"):
        load_config(job)


def test_shipped_prediction_jobs_validate() -> None:
    for name in ("lm.toml", "confidence.toml", "predictive_asr.toml", "predictive_asr_quick.toml"):
        load_config(ROOT / "jobs" / name)


def _population():
    import numpy as np
    import polars as pl

    from specbench.experiments.predictive_asr.job import Population

    rng = np.random.default_rng(0)
    rows = []
    for r in range(40):
        for p in range(4):
            for k, (src, in_lm, in_personal) in enumerate([("lm", True, False), ("personal", False, True),
                                                           ("both", True, True)]):
                rows.append({"request_id": f"r{r:02d}", "partial_index": p, "partial_time_ms": 120.0 * (p + 1),
                             "partial_words": ["a"] * p, "prediction_words": ["a"] * (p + 1 + k),
                             "added_words": 1 + k, "source": src, "in_lm": in_lm, "in_personal": in_personal,
                             "lm_log_prob": float(-rng.uniform(0, 10)), "personal_log_freq": -10.0,
                             "lm_rank": 0, "correct": bool(rng.uniform() < 0.3)})
    preds = pl.DataFrame(rows)
    requests = pl.DataFrame({"request_id": [f"r{r:02d}" for r in range(40)] + ["no-asr"],
                             "end_of_speech_ms": [900.0] * 40 + [0.0]})
    return Population(requests=requests, predictions=preds, asr_wer=0.1, asr_failed=1, end_from_energy=0,
                      repeat_rate=0.5), rng


def test_every_configuration_counts_each_request_once_and_headline_uses_devel_thresholds() -> None:
    import numpy as np

    from specbench.config import PredictiveAsrConfig
    from specbench.experiments.predictive_asr.job import BEYOND, COMPARISONS, MAIN, evaluate, headline

    pop, rng = _population()
    n = pop.predictions.height
    scores = {"lm_score": pop.predictions["lm_log_prob"].to_numpy(), "conf": rng.uniform(size=n),
              "conf_personal": rng.uniform(size=n), "conf_context": rng.uniform(size=n),
              "conf_by_source": rng.uniform(size=n), "conf_posterior": rng.uniform(size=n),
              "cache_lm": pop.predictions["lm_log_prob"].to_numpy() + rng.uniform(size=n)}
    config = PredictiveAsrConfig(thresholds=(0.2, 0.5, 0.8, 0.95), lm_thresholds=(-8.0, -4.0, -1.0),
                                 max_attempts=(1, 2))
    sweeps = evaluate(pop, scores, config, config.max_attempts)
    assert set(sweeps) == {f"{c}.{d}" for c in ("lm", "personal", "lm_personal")
                           for d in ("lm_score", "conf", "conf_personal")} | {f"{MAIN}.k2", *BEYOND}
    for table in sweeps.values():
        assert (table["success"] + table["failure"] + table["none"] == table["requests"]).all()
        assert (table["requests"] == 41).all()
    # tuning on a sweep whose only threshold under 10% failed is 0.95 fixes the test threshold there
    tuning = {k: v.with_columns(failed_rate=np.where(v["threshold"] >= 0.95, 0.0, 1.0)) for k, v in sweeps.items()}
    m = headline(pop, sweeps, tuning)
    assert m[f"prefetch.{MAIN}.threshold_at_fail10"] == 0.95
    main = sweeps[MAIN].filter(sweeps[MAIN]["threshold"] == 0.95)
    assert m["prefetch.success_at_fail10"] == main["success_rate"][0]
    assert m["prefetch.failed_at_fail10"] == main["failed_rate"][0]
    assert m["prefetch.personalization_gain"] == m["prefetch.success_at_fail10"] - m["prefetch.lm.conf.success_rate_at_fail10"]
    for metric, (name, other) in COMPARISONS.items():
        np.testing.assert_equal(m[f"prefetch.{metric}"], m[f"prefetch.{name}.success_rate_at_fail10"]
                                - m[f"prefetch.{other}.success_rate_at_fail10"])
    assert 0.0 <= m["prefetch.success_at_fail10"] <= m["prefetch.oracle_rate"] <= 1.0


def test_main_outcomes_count_every_request_and_the_empty_partial_share() -> None:
    import numpy as np

    from specbench.experiments.predictive_asr.job import main_outcomes, outcome_metrics

    pop, rng = _population()
    n = pop.predictions.height
    scores = {"lm_score": pop.predictions["lm_log_prob"].to_numpy(), "conf": rng.uniform(size=n),
              "conf_personal": rng.uniform(size=n)}
    out = main_outcomes(pop, scores, 0.5)
    m = outcome_metrics(out)
    assert m["prefetch.outcome.none"] + m["prefetch.outcome.success"] + m["prefetch.outcome.failure"] == 41
    hits = out.filter(out["outcome"] == "success")
    expected = float((hits["partial_index"] == 0).mean())  # partial p of the synthetic table holds p words
    assert m["prefetch.success_from_empty_partial"] == expected
    assert np.isnan(outcome_metrics(out.filter(out["outcome"] == "none"))["prefetch.success_from_empty_partial"])


def test_partial_interval_must_be_whole_output_frames() -> None:
    for ok in (40.0, 120.0, 480.0):
        check_partial_interval(AsrSection(partial_every_ms=ok), Path("job.toml"))
    for bad, nearest in ((100.0, "e.g. 80"), (130.0, "e.g. 120"), (10.0, "e.g. 40")):
        with pytest.raises(ConfigError, match=rf"job\.toml: asr\.partial_every_ms = {bad:g} .*40 ms.*{nearest}"):
            check_partial_interval(AsrSection(partial_every_ms=bad), Path("job.toml"))


def test_partial_posteriors_settings_are_checked_before_anything_runs() -> None:
    """The posterior features need transcripts with posteriors, and those need a backend with partial
    lattices: each mismatch is refused with the key and the fix."""
    import dataclasses
    from pathlib import Path

    import pytest

    from specbench.config import AsrSection, PredictiveAsrConfig, TrainConfidenceConfig
    from specbench.errors import ConfigError
    from specbench.experiments.predictive_asr.checks import load_models

    with pytest.raises(ValueError, match='asr.backend = "cpu"'):
        AsrSection(partial_posteriors=True, backend="twin")
    assert AsrSection(partial_posteriors=True, backend="cpu_numpy").partial_posteriors
    with pytest.raises(ValueError, match="asr.partial_posteriors = true"):
        TrainConfidenceConfig(models=("posterior",))
    TrainConfidenceConfig(models=("posterior",), asr=AsrSection(partial_posteriors=True))
    config = dataclasses.replace(PredictiveAsrConfig(), confidence_posterior=Path("models/x_posterior.pt"))
    with pytest.raises(ConfigError, match="job.toml: key 'confidence_posterior'.*set asr.partial_posteriors = true"):
        load_models(config, Path("job.toml"))
