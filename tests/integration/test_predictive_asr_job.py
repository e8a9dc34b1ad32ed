"""Predictive ASR end to end on real components: simulated SLURP users, synthesized held-out-voice audio,
the shipped acoustic model and our streaming decoder (partials every 120 ms), the shipped word LM, the
history index as Ray tasks, confidence models trained here, and an MLflow run with sweeps and figures."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import mlflow
import polars as pl
import pytest

from specbench.cli import main
from specbench.config import PredictiveAsrConfig
from specbench.prediction.confidence import load_confidence

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
GRAPH_JOB = ROOT / "jobs" / "graph_slurp.toml"

CONFIDENCE_JOB = """kind = "train_confidence"
name = "confidence_test"
output = "{out}"
train_users = 3
devel_users = 3
calibrate_routine_share = true
[habit]
routine_shares = [0.0, 1.0]
target_oracle = 0.57
[asr]
graph_job = "{graph}"
adaptation_job = "{adaptation}"
[model]
members = 2
hidden = [32, 32]
epochs = 3
[usage]
weeks = 2
requests_per_day = 1.5
[tracking]
experiment = "prediction_test"
"""

EVAL_JOB = """kind = "predictive_asr"
name = "predictive_test"
confidence = "{conf}"
confidence_no_personal = "{conf_np}"
confidence_context = "{conf_ctx}"
users = {users}
tune_users = 3
thresholds = [0.1, 0.3, 0.5, 0.7, 0.9]
lm_thresholds = [-12.0, -8.0, -4.0, -2.0, -1.0]
max_attempts = [1, 2]
cache_weights = [0.2, 0.6]
run_habit_sweep = {sweep}
[asr]
mode = "{mode}"
graph_job = "{graph}"
adaptation_job = "{adaptation}"
[habit]
routine_shares = [0.0, 1.0]
target_oracle = 0.57
rate_ranges = []
snr_db_ranges = []
pitch_cents = [0.0]
knob_users = 2
[usage]
weeks = 2
requests_per_day = 1.5
[tracking]
experiment = "prediction_test"
"""

# the ASR headline's adaptation (per-voice VTLN and speaker transform, on the voices' devel audio), made small
ADAPTATION_JOB = """kind = "eval_am"
name = "adaptation_test"
speech_job = "{speech}"
graph_job = "{graph}"
[vtln]
enabled = true
low = 0.95
high = 1.05
step = 0.05
utterances = 3
[speaker_transform]
enabled = true
utterances = 3
epochs = 1
"""


def _adaptation_job(folder: Path) -> Path:
    path = folder / "adaptation.toml"
    path.write_text(ADAPTATION_JOB.format(speech=ROOT / "jobs" / "speech_slurp.toml", graph=GRAPH_JOB))
    return path


@pytest.fixture(scope="module")
def confidence_models(tmp_path_factory: pytest.TempPathFactory, ray_cluster: object, slurp_graph: object) -> tuple:
    """Trained as jobs/confidence.toml trains them: on requests scored with the evaluation's adaptation, so the
    evaluations below find the devel users' renditions in the transcript cache, as the real job does."""
    tmp = tmp_path_factory.mktemp("confidence")
    job = tmp / "confidence.toml"
    job.write_text(CONFIDENCE_JOB.format(out=tmp / "conf.pt", graph=GRAPH_JOB, adaptation=_adaptation_job(tmp)))
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    assert main(["--tracking-uri", uri, "train", "confidence", str(job)]) == 0
    return tmp / "conf.pt", tmp / "conf_nopersonal.pt", tmp / "conf_context.pt", uri


def _run(tmp_path: Path, models: tuple, mode: str, users: int, sweep: bool) -> mlflow.entities.Run:
    conf, conf_np, conf_ctx, _ = models
    job = tmp_path / "predictive.toml"
    job.write_text(EVAL_JOB.format(conf=conf, conf_np=conf_np, conf_ctx=conf_ctx, users=users, mode=mode, graph=GRAPH_JOB,
                                   sweep=str(sweep).lower(), adaptation=_adaptation_job(tmp_path)))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["--tracking-uri", uri, "run", str(job)]) == 0
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("prediction_test")
    (run,) = client.search_runs([exp.experiment_id])
    return client, run


def test_confidence_training_writes_both_models_with_cards(confidence_models: tuple) -> None:
    conf, conf_np, conf_ctx, _ = confidence_models
    for path in (conf, conf_np, conf_ctx):
        assert path.is_file() and path.with_suffix(".md").is_file()
        assert "ASR" in path.with_suffix(".md").read_text() or "asr" in path.with_suffix(".json").read_text()
    # the users were simulated at the calibrated share: a devel oracle per swept share, logged with steps
    client = mlflow.MlflowClient(confidence_models[3])
    (run,) = client.search_runs([client.get_experiment_by_name("prediction_test").experiment_id])
    history = client.get_metric_history(run.info.run_id, "confidence.calibration.devel_oracle_rate")
    assert sorted(h.step for h in history) == [0, 1]
    low, high = sorted(history, key=lambda h: h.step)
    assert low.value <= 0.57 <= high.value  # share 0 (no repeats) and share 1 (all routine) bracket the target
    assert 0.0 < run.data.metrics["confidence.routine_share"] < 1.0


def test_predictive_job_counts_every_request_once_and_logs_the_figures(tmp_path: Path,
                                                                       confidence_models: tuple) -> None:
    client, run = _run(tmp_path, confidence_models, "decoder", users=3, sweep=True)
    m = run.data.metrics
    assert run.data.tags["asr"] == "decoder"
    assert 0.0 <= m["prefetch.success_at_fail10"] <= m["prefetch.oracle_rate"] <= 1.0
    assert m["prefetch.requests"] > 20 and m["prefetch.asr_failed"] == 0
    # the requests were scored with each voice's VTLN warp (on the eval job's grid) and speaker transform
    assert m["prefetch.asr.adapted"] == 1.0
    for voice in ("flite_rms", "espeak_en-us_f4"):
        assert m[f"prefetch.asr.vtln_warp.{voice}"] in (0.95, 1.0, 1.05)
        assert m[f"prefetch.asr.vtln_utterances.{voice}"] == 3.0
        assert m[f"prefetch.asr.speaker_transform_utterances.{voice}"] >= 1.0
    # every request rendered anew; one-offs new to the user, so only the routine repeats
    assert m["prefetch.asr.audio_identical_share"] == 0.0
    assert 0.0 <= m["prefetch.asr.repeat_final_differs_share"] <= 1.0
    assert 0.0 < m["prefetch.usage.repeat_rate"] <= m["prefetch.usage.routine_request_share"] + 1e-9
    assert m["prefetch.repeat_rate"] == m["prefetch.usage.repeat_rate"]
    # user-level bootstrap intervals (both thresholds are defined on these users)
    assert m["prefetch.bootstrap_users"] == 3
    assert m["prefetch.success_at_fail10_low"] <= m["prefetch.success_at_fail10_high"]
    assert m["prefetch.personalization_gain_low"] <= m["prefetch.personalization_gain_high"]
    assert m["prefetch.gain_over_personal_only"] == (m["prefetch.success_at_fail10"]
                                                     - m["prefetch.personal.conf_personal.success_rate_at_fail10"])
    if "prefetch.gain_over_personal_only_low" in m:  # both thresholds defined on these few users
        assert m["prefetch.gain_over_personal_only_low"] <= m["prefetch.gain_over_personal_only_high"]
    table = client.download_artifacts(run.info.run_id, "tables/prefetch_sweeps.csv", str(tmp_path))
    rows = list(csv.DictReader(io.StringIO(Path(table).read_text())))
    assert {r["configuration"] for r in rows} >= {"lm_personal.conf_personal", "lm.lm_score", "personal.conf",
                                                 "lm_personal.conf_personal.k2", "lm_personal.net_benefit"}
    for r in rows:
        assert int(r["success"]) + int(r["failure"]) + int(r["none"]) == int(r["requests"]) == m["prefetch.requests"]
    figures = {f.path for f in client.list_artifacts(run.info.run_id, "figures")}
    assert {"figures/fig2_success_vs_failed.png", "figures/multi_attempt.png", "figures/habit_curve.png",
            "figures/cost_aware.png"} <= figures
    # beyond the seed: the personal cache model (weight chosen on devel) and the context features, each
    # compared with LM + personal by the same paired bootstrap
    assert m["prefetch.cache_weight"] in (0.2, 0.6) and "prefetch.devel.cache_lm.success_at_weight_0.6" in m
    for name, metric in (("lm_personal.cache_lm", "cache_lm_gain"), ("lm_personal.conf_context", "context_gain")):
        assert name in {r["configuration"] for r in rows}
        assert m[f"prefetch.{metric}"] == (m[f"prefetch.{name}.success_rate_at_fail10"]
                                           - m["prefetch.success_at_fail10"]) or math.isnan(m[f"prefetch.{metric}"])
    # per-source thresholds: MAIN's confidence with the LM-only candidates' threshold lowered by an offset
    # chosen on devel, compared with personal only and with LM only
    assert "lm_personal.conf_by_source" in {r["configuration"] for r in rows}
    assert m["prefetch.source_offset"] in PredictiveAsrConfig().source_offsets
    assert "prefetch.devel.by_source.success_at_offset_0" in m
    for metric, other in (("by_source_gain_over_personal_only", "personal.conf_personal"),
                          ("by_source_gain_over_lm_only", "lm.conf")):
        assert m[f"prefetch.{metric}"] == (m["prefetch.lm_personal.conf_by_source.success_rate_at_fail10"]
                                           - m[f"prefetch.{other}.success_rate_at_fail10"]) or math.isnan(m[f"prefetch.{metric}"])
    assert {"cache_lm.success_rate", "by_source.success_rate"} <= set(pl.read_csv(client.download_artifacts(
        run.info.run_id, "tables/habit_sweep.csv", str(tmp_path))).columns)
    # the net-benefit policy: swept like the others, its lambda chosen on devel
    assert m["prefetch.ms_per_added_word"] > 0 and "prefetch.lm_personal.net_benefit.success_rate_at_fail10" in m
    per_request = pl.read_parquet(client.download_artifacts(run.info.run_id, "tables/requests_main.parquet",
                                                             str(tmp_path)))
    assert per_request.height == m["prefetch.requests"] and per_request["request_id"].is_unique().all()
    assert set(per_request["outcome"]) <= {"none", "success", "failure"}
    # the habit sweep: a point per routine share (metrics with steps), the calibrated headline share between
    habit = pl.read_csv(client.download_artifacts(run.info.run_id, "tables/habit_sweep.csv", str(tmp_path)))
    assert habit["routine_share"].to_list() == [0.0, 1.0] and habit["repeat_rate"][0] == 0.0
    steps = client.get_metric_history(run.info.run_id, "habit.both.success_rate")
    assert sorted(h.step for h in steps) == [0, 1]
    assert 0.0 <= m["prefetch.calibrated_routine_share"] <= 1.0
    # the confidence job ran the same devel sweep and trained at the same share; the job checks it
    assert m["prefetch.confidence_routine_share"] == m["prefetch.calibrated_routine_share"]
    assert abs(m["prefetch.calibration_devel_oracle"] - 0.57) < 0.25  # a 3-user population: interpolation only
    knobs = pl.read_csv(client.download_artifacts(run.info.run_id, "tables/habit_knobs.csv", str(tmp_path)))
    # the knob variants run on the first knob_users users, beside the headline settings on the same users
    assert knobs["knob"].to_list() == ["reference", "pitch_cents"] and "habit.knob.pitch_cents.0.both.success_rate" in m
    assert (knobs["requests"] < m["prefetch.requests"]).all() and knobs["requests"].n_unique() == 1


def test_oracle_asr_mode_is_tagged_and_uses_reference_partials(tmp_path: Path, confidence_models: tuple) -> None:
    _, run = _run(tmp_path, confidence_models, "oracle-asr", users=2, sweep=False)
    assert run.data.tags["asr"] == "oracle-asr"
    assert run.data.metrics["prefetch.asr_wer"] == 0.0


def test_partial_posteriors_train_and_decide_a_configuration_of_their_own(tmp_path: Path,
                                                                          confidence_models: tuple) -> None:
    """The lattice-posterior confidence model end to end: the users' partials carry their words' posteriors
    (decoded once, lattices built in the same pass), a model with the posterior features trains on them, and
    the job evaluates it as `lm_personal.conf_posterior` beside MAIN, with its paired comparison."""
    job = tmp_path / "confidence_posterior.toml"  # two users of each kind: lattices at every partial cost time
    job.write_text(CONFIDENCE_JOB.format(out=tmp_path / "conf.pt", graph=GRAPH_JOB, adaptation=_adaptation_job(tmp_path))
                   .replace("calibrate_routine_share = true", 'calibrate_routine_share = false\nmodels = ["posterior"]\n'
                            "half_precision_file = true")
                   .replace("train_users = 3\ndevel_users = 3", "train_users = 2\ndevel_users = 2")
                   .replace("[asr]\n", "[asr]\npartial_posteriors = true\n"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["--tracking-uri", uri, "train", "confidence", str(job)]) == 0
    posterior = tmp_path / "conf_posterior.pt"
    assert posterior.is_file() and not (tmp_path / "conf.pt").exists()
    conf, conf_np, conf_ctx, _ = confidence_models
    evaluation = tmp_path / "predictive.toml"
    evaluation.write_text(EVAL_JOB.format(conf=conf, conf_np=conf_np, conf_ctx=conf_ctx, users=2, mode="decoder",
                                          graph=GRAPH_JOB, sweep="false", adaptation=tmp_path / "adaptation.toml")
                          .replace("tune_users = 3", "tune_users = 2")
                          .replace(f'confidence_context = "{conf_ctx}"\n',
                                   f'confidence_context = "{conf_ctx}"\nconfidence_posterior = "{posterior}"\n')
                          .replace("[asr]\n", "[asr]\npartial_posteriors = true\n"))
    assert main(["--tracking-uri", uri, "run", str(evaluation)]) == 0
    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("prediction_test").experiment_id])
    (m,) = [r.data.metrics for r in runs if "prefetch.requests" in r.data.metrics]
    assert "prefetch.lm_personal.conf_posterior.success_rate_at_fail10" in m
    assert m["prefetch.posterior_gain"] == (m["prefetch.lm_personal.conf_posterior.success_rate_at_fail10"]
                                            - m["prefetch.success_at_fail10"]) or math.isnan(m["prefetch.posterior_gain"])
    # the transcripts carried each partial's posteriors, or training would have refused the all-null column
    card = json.loads(posterior.with_suffix(".json").read_text())
    assert card["use_posterior"] is True and card["model"]["use_posterior"] is True
    assert "partial_min_posterior" in load_confidence(posterior).features


def test_a_gpu_backend_on_a_cluster_without_one_is_refused_before_anything_is_synthesized(
        tmp_path: Path, confidence_models: tuple, capsys: pytest.CaptureFixture) -> None:
    from specbench.runtime import cluster_summary

    if cluster_summary()["gpus"] > 0:
        pytest.skip("this cluster has a GPU")
    conf, conf_np, conf_ctx, _ = confidence_models
    job = tmp_path / "predictive.toml"
    job.write_text(EVAL_JOB.format(conf=conf, conf_np=conf_np, conf_ctx=conf_ctx, users=2, mode="decoder",
                                   graph=GRAPH_JOB, sweep="false", adaptation=_adaptation_job(tmp_path))
                   .replace("[asr]\n", '[asr]\nbackend = "gpu"\n'))
    assert main(["--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "run", str(job)]) != 0
    said = capsys.readouterr()
    assert f'{job}: asr.backend = "gpu" (set it to "cpu"' in said.err and "has no GPU" in said.err
    assert "synthesizing" not in said.out + said.err and "Traceback" not in said.err
