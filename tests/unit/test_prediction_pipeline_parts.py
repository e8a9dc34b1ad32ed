"""Pure parts of the predictive-ASR pipeline: the union of LM and personal predictions, oracle partials, the
user's voice, and the job config's checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.config import AsrSection, load_config
from specbench.errors import ConfigError
from specbench.pipelines.asr_partials import oracle_partials, plan_requests, user_voice
from specbench.pipelines.prediction_table import _candidates
from specbench.prediction.history import FALLBACK_LOG_FREQ

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def test_candidates_union_lm_and_personal() -> None:
    prefix = ("set", "an")
    lm = [(("alarm",), -1.0, 0), (("alarm", "for", "six"), -3.0, 1)]
    personal = [(("set", "an", "alarm", "for", "six"), -0.5), (("set", "an", "appointment"), -1.2)]
    scores = {(prefix, ("appointment",)): -7.5}
    rows = {tuple(r["prediction_words"]): r for r in _candidates(prefix, lm, personal, scores)}
    assert set(rows) == {("set", "an", "alarm"), ("set", "an", "alarm", "for", "six"), ("set", "an", "appointment")}
    only_lm, both, only_personal = (rows[("set", "an", "alarm")], rows[("set", "an", "alarm", "for", "six")],
                                    rows[("set", "an", "appointment")])
    assert (only_lm["source"], only_lm["personal_log_freq"], only_lm["lm_rank"]) == ("lm", FALLBACK_LOG_FREQ, 0)
    assert (both["source"], both["personal_log_freq"], both["lm_rank"], both["lm_log_prob"]) == ("both", -0.5, 1, -3.0)
    assert (only_personal["source"], only_personal["lm_rank"], only_personal["lm_log_prob"]) == ("personal", -1, -7.5)
    assert only_personal["in_personal"] and not only_personal["in_lm"]


def test_candidates_of_a_user_without_history_are_the_lm_nbest() -> None:
    rows = _candidates((), [(("hello",), -2.0, 0)], [], {})
    assert [r["prediction_words"] for r in rows] == [["hello"]]
    assert rows[0]["personal_log_freq"] == FALLBACK_LOG_FREQ


def test_oracle_partials_never_hold_a_word_still_being_spoken() -> None:
    times = [{"word": "turn", "start_s": 0.1, "end_s": 0.3}, {"word": "off", "start_s": 0.3, "end_s": 0.55}]
    parts = oracle_partials(times, duration_ms=700.0, every_ms=120.0)
    assert [p["time_ms"] for p in parts] == [120.0, 240.0, 360.0, 480.0, 600.0]
    assert [p["words"] for p in parts] == [[], [], ["turn"], ["turn"], ["turn", "off"]]


def test_a_user_keeps_one_voice_and_requests_share_utterances() -> None:
    import pyarrow as pa

    asr = AsrSection()
    assert user_voice("FE-128", asr) == user_voice("FE-128", asr) and user_voice("FE-128", asr) in asr.voices
    requests = pa.table({"request_id": [f"u1-{i:05d}" for i in range(12)] + ["u2-00000"],
                         "user_id": ["u1"] * 12 + ["u2"], "normalized_text": ["lights off"] * 13,
                         "sentence": ["lights off"] * 13, "slurp_id": [1] * 13})
    ids, plan = plan_requests(requests, asr)
    assert len(plan) == len(set(ids))
    assert 1 < len(set(ids[:12])) <= len(asr.rates)  # one voice, a few renditions at the configured rates
    assert {p["voice"] for p in plan if p["utt_id"] in ids[:12]} == {user_voice("u1", asr)}


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
