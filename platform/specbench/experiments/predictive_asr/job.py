"""The `predictive_asr` job: simulate four weeks of requests for the devel and test users, transcribe them
(partials every 120 ms from our streaming decoder, or `oracle-asr` for ablations), predict the full
utterance from every partial (LM n-best, the user's history, both), and sweep the prefetch threshold for
every configuration of the paper's figures: candidates from the LM only, the history only, or both; decided
by the LM score, by the confidence model without the personal feature, or with it. Beyond the paper: up to K
prefetch attempts per request. The habit sweep (`habit.py`) re-simulates the devel and test users at other
routine shares (success against habit), calibrates the headline population's routine share to the seed's
oracle on devel, and varies the rendering knobs at that share.

Protocol: each configuration's operating threshold is the most permissive one whose failed rate is at most
10% **on the devel users**; the test users are then measured at that threshold (`..._at_fail10`). The test
curve itself is also read at 8%, 10% and 20% failed (`..._curve_at_failNN`), as the paper reads its
figures. Every evaluated request (weeks after the history weeks) lands in exactly one outcome; a request
whose audio could not be transcribed counts as "no prefetch" and is reported in `prefetch.asr_failed`.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from specbench.config import PredictiveAsrConfig
from specbench.data.usage import UsageSettings, usage_summary
from specbench.errors import DataError
from specbench.experiments.predictive_asr.checks import (
    Models,
    load_models,
    scale_warning,
    simulate_population,
    usage_checks,
)
from specbench.experiments.predictive_asr.habit import (
    calibrate,
    confidence_share,
    knob_users,
    knob_variants,
    point_row,
    sweep_knobs,
    sweep_routine_shares,
)
from specbench.experiments.predictive_asr.lm_cache import LmCache
from specbench.experiments.predictive_asr.partials import (
    adaptation_metrics,
    rendering_summary,
    require_decoder_resources,
    transcribe_ahead,
    transcribe_requests,
)
from specbench.experiments.predictive_asr.plots import plot_figures
from specbench.experiments.predictive_asr.table import build_predictions
from specbench.experiments.registry import RunOptions
from specbench.metrics.cluster_bootstrap import paired_cluster_bootstrap
from specbench.metrics.wer import wer
from specbench.paths import from_root
from specbench.prediction.by_source import choose_offset, offset_scores
from specbench.prediction.cache_lm import cache_log_prob, choose_weight
from specbench.prediction.cost_aware import ms_per_added_word, net_benefit_sweep
from specbench.prediction.prefetch import first_prefetch, operating_point, oracle_gain_ms, oracle_rate, sweep
from specbench.runtime import connect
from specbench.runtime.metrics import record
from specbench.stage import STATUS_OK

if TYPE_CHECKING:
    from specbench.tracking.runs import TrackedRun

CANDIDATES = {"lm": pl.col("in_lm"), "personal": pl.col("in_personal"),
              "lm_personal": pl.col("in_lm") | pl.col("in_personal")}
DECIDERS = ("lm_score", "conf", "conf_personal")
MAIN = "lm_personal.conf_personal"
# beyond the seed, on the LM + personal candidates: the personal cache model's interpolated probability as
# the decision score (prediction/cache_lm.py), the confidence model with the context features, and MAIN's
# confidence with a lower threshold for the candidates only the LM proposed (prediction/by_source.py)
BY_SOURCE = "lm_personal.conf_by_source"
# with a posterior model (`confidence_posterior`): the personal features plus the partial's lattice posteriors
POSTERIOR = "lm_personal.conf_posterior"
BEYOND = {"lm_personal.cache_lm": "cache_lm", "lm_personal.conf_context": "conf_context", BY_SOURCE: "conf_by_source",
          POSTERIOR: "conf_posterior"}
NET_BENEFIT = "lm_personal.net_benefit"  # prefetch when P * E[gain] - (1 - P) * lambda >= 0 (ms)
BASELINE = "lm.conf"  # the personalization gain is MAIN minus this, both at the devel-chosen threshold
FAILED_BUDGET = 0.10
# the paper's operating points (23% at 8% failed, 28% at 20%), each read at the most permissive threshold within
# the budget (`operating_point`), which need not be the curve's highest success there, as the paper's 28% is
CURVE_RATES = (0.08, 0.10, 0.20)
OP_KEYS = ("success_rate", "failed_rate", "gain_ms_all", "gain_ms_success", "gain_words_success")


@dataclass(frozen=True)
class Population:
    """A transcribed, predicted population: evaluated requests and their predictions."""

    requests: pl.DataFrame  # evaluated requests only, every one of them
    predictions: pl.DataFrame
    asr_wer: float
    asr_failed: int
    end_from_energy: int
    repeat_rate: float  # evaluated requests whose sentence the same user said before (the simulation's repetition)
    simulation: dict[str, float] = dataclasses.field(default_factory=dict)  # usage_summary + rendering_summary
    timings: dict[str, float] = dataclasses.field(default_factory=dict)  # seconds per stage, utterances rendered


def render_ahead(config: PredictiveAsrConfig, job_path: Path, points: list[tuple[UsageSettings, Any, int, int]],
                 spent: list[dict[str, float]]) -> None:
    """Transcribe, in one pass, the devel and test populations of every (usage, `[asr]`, devel users, test
    users) point that the job evaluates next (`partials.transcribe_ahead`); the timings go to `spent`."""
    start = time.perf_counter()
    logs = [(simulate_population(split, n, usage), asr, f"{split}/{usage.seed}")
            for usage, asr, tune_users, users in points
            for split, n in (("devel", tune_users), (config.split, users))]
    timings = {"simulate": time.perf_counter() - start}
    transcribe_ahead(logs, job_path, timings)
    spent.append(timings)


def predict_population(split: str, users: int, usage: UsageSettings, config: Any, job_path: Path,
                       cache: LmCache) -> Population:
    """Simulate, transcribe and predict one population (the job's and `train_confidence`'s front half)."""
    start = time.perf_counter()
    requests = simulate_population(split, users, usage)
    simulation = usage_summary(requests)
    timings = {"simulate": time.perf_counter() - start}
    transcripts = transcribe_requests(requests, config.asr, job_path, rendering_key=f"{split}/{usage.seed}",
                                      timings=timings)
    if config.asr.mode == "decoder":
        simulation |= rendering_summary(requests, transcripts)
    start = time.perf_counter()
    preds, frame = build_predictions(requests, transcripts, cache)
    timings["predict"] = time.perf_counter() - start
    evaluated = frame.filter(pl.col("evaluated"))
    ok = pl.col("status") == STATUS_OK
    finals = evaluated.select(pl.when(ok).then(pl.col("final_words")).otherwise(pl.lit([], pl.List(pl.String))))
    # a request that was not transcribed has no predictions ("none"); its gain is never used
    evaluated = evaluated.with_columns(pl.when(ok).then(pl.col("end_of_speech_ms")).otherwise(0.0)
                                       .alias("end_of_speech_ms"))
    return Population(requests=evaluated, predictions=preds,
                      asr_wer=wer(evaluated["ref_words"].to_list(), finals.to_series().to_list()),
                      asr_failed=int(evaluated.filter(~ok).height),
                      end_from_energy=int(evaluated.filter(pl.col("end_source") == "energy").height),
                      repeat_rate=simulation["usage.repeat_rate"], simulation=simulation, timings=timings)


def stage_metrics(timings: list[dict[str, float]], prefix: str = "prefetch.") -> dict[str, float]:
    """Where the populations' time went: `<prefix>stage_seconds.<stage>` (simulate, synthesize, score, align,
    decode, predict) summed over the populations' `timings`, and `<prefix>rendered_utterances` (renditions
    synthesized and decoded anew, not found in the transcript cache)."""
    total: dict[str, float] = {}
    for timing in timings:
        for key, value in timing.items():
            total[key] = total.get(key, 0.0) + value
    rendered = total.pop("rendered", 0.0)
    return {f"{prefix}rendered_utterances": rendered, **{f"{prefix}stage_seconds.{k}": v for k, v in total.items()}}


def score_columns(predictions: pl.DataFrame, models: Models, cache_weight: float,
                  source_offset: float = 0.0) -> dict[str, np.ndarray]:
    """The decision score of every prediction under each decider (under the confidence deciders, added_words
    == 0 rows get -inf: the models were not trained on them; no decider prefetches them, `prefetch`'s
    candidates add a word); `cache_lm` with the personal
    cache model at `cache_weight`; `conf_by_source`, `conf_personal` with the LM-only candidates raised by
    `source_offset`; `conf_posterior` only with a posterior model."""
    cand = (predictions["added_words"] >= 1).to_numpy()
    out = {"lm_score": predictions["lm_log_prob"].to_numpy().astype(np.float64),
           "cache_lm": cache_log_prob(predictions, cache_weight)}
    for name, model in (("conf", models.no_personal), ("conf_personal", models.personal),
                        ("conf_context", models.context), ("conf_posterior", models.posterior)):
        if model is None:  # the posterior model is optional
            continue
        scores = np.full(predictions.height, -np.inf)
        if cand.any():
            scores[cand] = model.predict(predictions.filter(pl.Series(cand)))
        out[name] = scores
    out["conf_by_source"] = offset_scores(out["conf_personal"], predictions, source_offset)
    return out


def _subset(pop: Population, cand: str) -> tuple[pl.DataFrame, np.ndarray]:
    mask = pop.predictions.select(CANDIDATES[cand].alias("m")).to_series().to_numpy()
    return pop.predictions.filter(pl.Series(mask)), mask


def evaluate(pop: Population, scores: dict[str, np.ndarray], config: PredictiveAsrConfig,
             attempts: tuple[int, ...] = (1,)) -> dict[str, pl.DataFrame]:
    """Threshold sweeps, `"{candidates}.{decider}"` -> sweep table (plus `".k{K}"` for K > 1 on MAIN)."""
    out: dict[str, pl.DataFrame] = {}
    for cand in CANDIDATES:
        preds, mask = _subset(pop, cand)
        for decider in DECIDERS:
            thresholds = config.lm_thresholds if decider == "lm_score" else config.thresholds
            for k in attempts if f"{cand}.{decider}" == MAIN else (1,):
                name = f"{cand}.{decider}" + (f".k{k}" if k > 1 else "")
                out[name] = sweep(scores[decider][mask], preds, pop.requests, thresholds, max_attempts=k)
    preds, mask = _subset(pop, "lm_personal")
    for name, decider in BEYOND.items():
        if decider not in scores:  # the posterior model is optional
            continue
        thresholds = config.cache_thresholds if decider == "cache_lm" else config.thresholds
        out[name] = sweep(scores[decider][mask], preds, pop.requests, thresholds)
    return out


def choose_cache_weight(tune: Population, config: PredictiveAsrConfig) -> tuple[float, dict[str, float]]:
    """The personal cache model's weight (`config.cache_weights`) with the highest devel success at its devel
    threshold for at most 10% failed; and each weight's devel success as metrics."""
    preds, _ = _subset(tune, "lm_personal")

    def devel_success(scores: np.ndarray) -> float:
        op = operating_point(sweep(scores, preds, tune.requests, config.cache_thresholds), FAILED_BUDGET)
        return float(op["success_rate"])  # NaN when no threshold reaches the budget

    weight, rows = choose_weight(config.cache_weights, devel_success, preds)
    reached = any(np.isfinite(r["devel_success"]) for r in rows)
    return weight, {"prefetch.cache_weight": weight if reached else float("nan"),
                    **{f"prefetch.devel.cache_lm.success_at_weight_{r['weight']:g}": r["devel_success"] for r in rows}}


def choose_source_offset(tune: Population, tune_scores: dict[str, np.ndarray],
                         config: PredictiveAsrConfig) -> tuple[float, dict[str, float]]:
    """The offset of the LM-only candidates' threshold (`config.source_offsets`, `prediction.by_source`) with
    the highest devel success at its devel threshold for at most 10% failed; each offset's devel success as
    metrics."""
    preds, mask = _subset(tune, "lm_personal")
    base = tune_scores["conf_personal"][mask]

    def devel_success(offset: float) -> float:
        table = sweep(offset_scores(base, preds, offset), preds, tune.requests, config.thresholds)
        op = operating_point(table, FAILED_BUDGET)
        return float(op["success_rate"])  # NaN when no threshold reaches the budget

    offset, rows = choose_offset(config.source_offsets, devel_success)
    return offset, {"prefetch.source_offset": offset,
                    **{f"prefetch.devel.by_source.success_at_offset_{r['offset']:g}": r["devel_success"] for r in rows}}


def with_source_offset(scores: dict[str, np.ndarray], predictions: pl.DataFrame, offset: float) -> dict[str, np.ndarray]:
    """`scores` (`score_columns`) with `conf_by_source` at `offset`."""
    return scores | {"conf_by_source": offset_scores(scores["conf_personal"], predictions, offset)}


def net_benefit_table(pop: Population, scores: dict[str, np.ndarray], ms_per_word: float,
                      config: PredictiveAsrConfig) -> pl.DataFrame:
    """The net-benefit policy (`prediction.cost_aware`) on LM + personal candidates, P(success) from the
    confidence model with the personal feature, swept over the costs `config.cost_lambdas_ms`."""
    preds, mask = _subset(pop, "lm_personal")
    return net_benefit_sweep(scores["conf_personal"][mask], preds, pop.requests, ms_per_word,
                             config.cost_lambdas_ms)


def _at(table: pl.DataFrame, threshold: float | None) -> dict[str, float]:
    row = table.filter(pl.col("threshold") == threshold) if threshold is not None else table.clear()
    return {k: float(row[k][0]) if row.height and row[k][0] is not None else np.nan for k in OP_KEYS}


def headline(pop: Population, sweeps: dict[str, pl.DataFrame], tuning: dict[str, pl.DataFrame]) -> dict[str, float]:
    """Operating points of every configuration and the job's headline scalars. Each configuration's threshold
    comes from `tuning`, the devel sweeps of the same configurations (never from the measured curve itself);
    `..._curve_at_failNN` read the measured curves."""
    m: dict[str, float] = {"prefetch.requests": float(pop.requests.height), "prefetch.asr_failed": float(pop.asr_failed),
                           "prefetch.asr_wer": float(pop.asr_wer),
                           "prefetch.end_of_speech_from_energy": float(pop.end_from_energy),
                           "prefetch.repeat_rate": pop.repeat_rate,
                           **{f"prefetch.{k}": v for k, v in pop.simulation.items()}}
    for cand in CANDIDATES:
        preds = pop.predictions.filter(CANDIDATES[cand])
        m[f"prefetch.{cand}.oracle_rate"] = oracle_rate(preds, pop.requests)
        m[f"prefetch.{cand}.oracle_gain_ms"] = oracle_gain_ms(preds, pop.requests)
    for name, table in sweeps.items():
        for rate in CURVE_RATES:
            op = operating_point(table, rate)
            m |= {f"prefetch.{name}.{k}_curve_at_fail{round(rate * 100):02d}": float(op[k]) for k in OP_KEYS}
        threshold = operating_point(tuning[name], FAILED_BUDGET)["threshold"]
        m[f"prefetch.{name}.threshold_at_fail10"] = np.nan if threshold is None else float(threshold)
        m |= {f"prefetch.{name}.{k}_at_fail10": v for k, v in _at(table, threshold).items()}
    m["prefetch.success_at_fail10"] = m[f"prefetch.{MAIN}.success_rate_at_fail10"]
    m["prefetch.failed_at_fail10"] = m[f"prefetch.{MAIN}.failed_rate_at_fail10"]
    m["prefetch.gain_ms_all_at_fail10"] = m[f"prefetch.{MAIN}.gain_ms_all_at_fail10"]
    m["prefetch.oracle_rate"] = m["prefetch.lm_personal.oracle_rate"]
    for metric, (name, other) in COMPARISONS.items():
        if name in sweeps and other in sweeps:
            m[f"prefetch.{metric}"] = (m[f"prefetch.{name}.success_rate_at_fail10"]
                                       - m[f"prefetch.{other}.success_rate_at_fail10"])
    return m


def _single_attempt(pop: Population, scores: dict[str, np.ndarray], name: str, threshold: float) -> pl.DataFrame:
    """Configuration `name` (``"{candidates}.{decider}"``): its outcome per request at `threshold`."""
    cand, decider = name.split(".")
    preds, mask = _subset(pop, cand)
    return first_prefetch(scores[decider][mask], preds, pop.requests, [threshold])


def main_outcomes(pop: Population, scores: dict[str, np.ndarray], threshold: float) -> pl.DataFrame:
    """MAIN's outcome per request at `threshold` (`prefetch.first_prefetch`), with `partial_words_count`: the
    words of the partial each prefetch was made from."""
    out = _single_attempt(pop, scores, MAIN, threshold)
    # a partial's words do not depend on which candidates are kept, so all predictions give them
    lengths = pop.predictions.select(["request_id", "partial_index",
                                      pl.col("partial_words").list.len().alias("partial_words_count")]).unique()
    return out.join(lengths, on=["request_id", "partial_index"], how="left", maintain_order="left")


# paired comparisons at the devel-chosen thresholds, bootstrapped over users: metric -> (configuration, the
# configuration it is compared with); `prefetch.<metric>` is the difference of their success at 10% failed
COMPARISONS = {"personalization_gain": (MAIN, BASELINE), "gain_over_personal_only": (MAIN, "personal.conf_personal"),
               "cache_lm_gain": ("lm_personal.cache_lm", MAIN), "context_gain": ("lm_personal.conf_context", MAIN),
               "by_source_gain_over_personal_only": (BY_SOURCE, "personal.conf_personal"),
               "by_source_gain_over_lm_only": (BY_SOURCE, BASELINE), "posterior_gain": (POSTERIOR, MAIN)}


def user_intervals(pop: Population, scores: dict[str, np.ndarray], metrics: dict[str, float],
                   samples: int) -> dict[str, float]:
    """95% intervals of `prefetch.success_at_fail10` and of every `COMPARISONS` difference from a paired
    bootstrap over users (`metrics.cluster_bootstrap`): a user's requests share a voice, a history and
    routines, so users, not requests, are the independent units. A comparison whose thresholds are not both
    defined is left out; empty when the main configuration's is not."""
    names = {name for pair in COMPARISONS.values() for name in pair}
    thresholds = {name: metrics.get(f"prefetch.{name}.threshold_at_fail10", np.nan) for name in names}
    if not np.isfinite(thresholds[MAIN]):
        return {}
    users = pop.requests.select(["request_id", "user_id"])
    clusters = users["user_id"].to_numpy()

    def hits(name: str) -> np.ndarray:
        out = _single_attempt(pop, scores, name, thresholds[name])
        hit = out.select(["request_id", (pl.col("outcome") == "success").alias("hit")])
        joined = users.join(hit, on="request_id", how="left", maintain_order="left")
        return joined["hit"].fill_null(False).to_numpy()

    cached = {MAIN: hits(MAIN)}
    whole = paired_cluster_bootstrap(cached[MAIN], cached[MAIN], clusters, samples)
    out = {"prefetch.success_at_fail10_low": whole.low_a, "prefetch.success_at_fail10_high": whole.high_a,
           "prefetch.bootstrap_users": float(whole.clusters)}
    for metric, (name, other) in COMPARISONS.items():
        if not (np.isfinite(thresholds[name]) and np.isfinite(thresholds[other])):
            continue  # a configuration without a devel threshold: no interval (its difference is NaN)
        for key in (name, other):
            if key not in cached:
                cached[key] = hits(key)
        r = paired_cluster_bootstrap(cached[name], cached[other], clusters, samples)
        out |= {f"prefetch.{metric}_low": r.low, f"prefetch.{metric}_high": r.high}
    return out


def outcome_metrics(outcomes: pl.DataFrame) -> dict[str, float]:
    """Counts per outcome and the share of successes made from an empty partial (before any word was
    recognized: the history or the LM alone)."""
    counts = {o: float(outcomes.filter(pl.col("outcome") == o).height) for o in ("none", "success", "failure")}
    hits = outcomes.filter(pl.col("outcome") == "success")
    share = float(hits["partial_words_count"].eq(0).mean()) if hits.height else np.nan
    return {**{f"prefetch.outcome.{o}": n for o, n in counts.items()}, "prefetch.success_from_empty_partial": share}


def _log_sweeps(run: TrackedRun, sweeps: dict[str, pl.DataFrame], prefix: str, name: str) -> None:
    for conf_name, table in sweeps.items():
        for step, row in enumerate(table.iter_rows(named=True)):
            run.log_metrics({f"{prefix}.{conf_name}.{k}": float(row[k]) for k in
                             ("threshold", "success_rate", "failed_rate", "gain_ms_success", "gain_ms_all",
                              "gain_words_success") if row[k] is not None}, step=step)
    tables = pl.concat([t.with_columns(pl.lit(n).alias("configuration")) for n, t in sweeps.items()],
                       how="diagonal_relaxed")
    run.log_text(tables.write_csv(), f"tables/{name}.csv")


def _log_requests(run: TrackedRun, pop: Population, outcomes: pl.DataFrame) -> None:
    """One row per evaluated request (MAIN at its operating threshold) as `tables/requests_main.parquet`."""
    info = pop.requests.select(["request_id", "user_id", "timestamp_s", "status", "final_words", "ref_words",
                                "end_of_speech_ms"])
    table = info.join(outcomes.drop("threshold"), on="request_id", how="left", maintain_order="left")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "requests_main.parquet"
        table.write_parquet(path)
        run.log_artifact(path, "tables")


def evaluate_point(config: PredictiveAsrConfig, job_path: Path, cache: LmCache, models: Models,
                   spent: list[dict[str, float]], usage: UsageSettings, asr: Any) -> dict[str, float]:
    """Simulate, transcribe and evaluate the devel and test users at one setting of the habit sweep
    (thresholds chosen on that point's devel users): `habit.point_row`. Each population's stage timings are
    appended to `spent`."""
    point = dataclasses.replace(config, usage=usage, asr=asr)
    tune = predict_population("devel", config.tune_users, usage, point, job_path, cache)
    pop = predict_population(config.split, config.users, usage, point, job_path, cache)
    spent += [tune.timings, pop.timings]
    weight, _ = choose_cache_weight(tune, config)
    tune_scores = score_columns(tune.predictions, models, weight)
    offset, _ = choose_source_offset(tune, tune_scores, config)
    tuning = evaluate(tune, with_source_offset(tune_scores, tune.predictions, offset), config)
    sweeps = evaluate(pop, score_columns(pop.predictions, models, weight, offset), config)
    return point_row(headline(pop, sweeps, tuning), lm_personal_oracle(tune))


def lm_personal_oracle(pop: Population) -> float:
    """The population's LM + personal oracle rate (what the habit calibration matches to its target)."""
    return oracle_rate(pop.predictions.filter(CANDIDATES["lm_personal"]), pop.requests)


def _log_habit(run: TrackedRun, habit: list[dict[str, float]], knobs: list[dict[str, Any]]) -> None:
    """The habit sweep as metrics with steps (`habit.<figure>`, one step per routine share, in increasing
    order) and both tables as CSV; the knob variants as `habit.knob.<knob>.<setting>.<figure>`."""
    for step, row in enumerate(habit):
        run.log_metrics({f"habit.{k}": float(v) for k, v in row.items()}, step=step)
    run.log_text(pl.DataFrame(habit).write_csv(), "tables/habit_sweep.csv")
    if knobs:
        for row in knobs:
            run.log_metrics({f"habit.knob.{row['knob']}.{row['setting']}.{k}": float(v) for k, v in row.items()
                             if k not in ("knob", "setting")})
        run.log_text(pl.DataFrame(knobs).write_csv(), "tables/habit_knobs.csv")


def _calibrated_usage(config: PredictiveAsrConfig, job_path: Path, cache: LmCache, models: Models,
                      spent: list[dict[str, float]], run: TrackedRun | None) -> tuple[UsageSettings, list[dict[str, float]], dict[str, float]]:
    """The headline population's usage settings: `[usage]` as written, or with the routine share calibrated
    on the habit sweep's devel oracle (`habit.py`); the sweep's rows; calibration metrics. An unreachable
    target is raised after the sweep has been logged to `run`, so the sweep is not lost."""
    if not config.run_habit_sweep:
        return config.usage, [], {}
    render_ahead(config, job_path, [(dataclasses.replace(config.usage, routine_share=share), config.asr,
                                     config.tune_users, config.users) for share in config.habit.routine_shares], spent)
    rows = sweep_routine_shares(config, partial(evaluate_point, config, job_path, cache, models, spent))
    try:
        share = calibrate(rows, config.habit.target_oracle)
    except DataError:
        if run is not None:
            _log_habit(run, rows, [])
        raise
    shares = {key: confidence_share(getattr(models, key)) for key in ("personal", "no_personal", "context")}
    trained = shares["personal"] if len(set(shares.values())) == 1 else None  # the models disagree: unknown
    metrics = {"prefetch.calibrated_routine_share": share, "prefetch.calibration_target_oracle": config.habit.target_oracle,
               "prefetch.confidence_routine_share": np.nan if trained is None else trained}
    return dataclasses.replace(config.usage, routine_share=share), rows, metrics


def run_predictive_asr(config: PredictiveAsrConfig, job_path: Path, run: TrackedRun | None,
                       ray_address: str | None = None) -> dict[str, Any]:
    """Run the evaluation; returns the headline metrics, the sweeps and the habit sweep's rows."""
    start = time.perf_counter()
    usage_checks(config, job_path)
    if config.asr.mode == "decoder" and config.asr.adaptation_job is not None and (
            warning := scale_warning(config.asr, from_root(config.asr.checkpoint))):
        print(f"predictive_asr: warning: {warning}", file=sys.stderr, flush=True)
    models = load_models(config, job_path)
    cache = LmCache(from_root(config.lm), config.completion, device="auto")
    connect(ray_address)
    require_decoder_resources(config.asr, job_path)
    spent: list[dict[str, float]] = []  # every population's stage timings: the whole job's profile
    sweep_start = time.perf_counter()  # the habit sweep's own time: its rendering pass, populations, calibration
    usage, habit, calibration = _calibrated_usage(config, job_path, cache, models, spent, run)
    habit_seconds = time.perf_counter() - sweep_start if config.run_habit_sweep else 0.0
    points = [(usage, config.asr, config.tune_users, config.users)]
    if config.run_habit_sweep:
        on_knob_users = dataclasses.replace(config, users=knob_users(config.users, config.habit.knob_users),
                                            tune_users=knob_users(config.tune_users, config.habit.knob_users))
        points += [(usage, asr, on_knob_users.tune_users, on_knob_users.users) for _, _, asr in knob_variants(config)]
    render_ahead(config, job_path, points, spent)
    tune = predict_population("devel", config.tune_users, usage, config, job_path, cache)
    pop = predict_population(config.split, config.users, usage, config, job_path, cache)
    weight, weight_metrics = choose_cache_weight(tune, config)
    tune_scores = score_columns(tune.predictions, models, weight)
    offset, offset_metrics = choose_source_offset(tune, tune_scores, config)
    tune_scores = with_source_offset(tune_scores, tune.predictions, offset)
    scores = score_columns(pop.predictions, models, weight, offset)
    sweeps = evaluate(pop, scores, config, config.max_attempts)
    tuning = evaluate(tune, tune_scores, config, config.max_attempts)
    try:
        ms_per_word = ms_per_added_word(_subset(tune, "lm_personal")[0], tune.requests)
    except ValueError:  # no correct devel prediction to fit on: the net-benefit policy is left out, said so
        ms_per_word = float("nan")
    if np.isfinite(ms_per_word):
        sweeps[NET_BENEFIT] = net_benefit_table(pop, scores, ms_per_word, config)
        tuning[NET_BENEFIT] = net_benefit_table(tune, tune_scores, ms_per_word, config)
    metrics = (headline(pop, sweeps, tuning) | calibration | weight_metrics | offset_metrics
               | {"prefetch.ms_per_added_word": ms_per_word})
    if calibration:
        metrics["prefetch.calibration_devel_oracle"] = lm_personal_oracle(tune)
    threshold = metrics[f"prefetch.{MAIN}.threshold_at_fail10"]
    per_request = None
    if np.isfinite(threshold):
        per_request = main_outcomes(pop, scores, threshold)
        counts = outcome_metrics(per_request)
        metrics |= counts
        for outcome in ("none", "success", "failure"):
            record({"prefetch_outcomes": counts[f"prefetch.outcome.{outcome}"]}, job=config.name, outcome=outcome)
    metrics |= user_intervals(pop, scores, metrics, config.bootstrap_samples)
    metrics |= {"prefetch.predictions": float(pop.predictions.height), "prefetch.devel_asr_wer": tune.asr_wer,
                "prefetch.devel_requests": float(tune.requests.height),
                "prefetch.evaluate_seconds": time.perf_counter() - start,
                "prefetch.habit_sweep_own_seconds": habit_seconds, **stage_metrics([tune.timings, pop.timings]),
                **adaptation_metrics(config.asr, job_path)}
    spent += [tune.timings, pop.timings]
    knob_start = time.perf_counter()
    knobs = []
    if config.run_habit_sweep:
        knobs = sweep_knobs(config, partial(evaluate_point, on_knob_users, job_path, cache, models, spent), usage)
    metrics["prefetch.knob_seconds"] = time.perf_counter() - knob_start
    metrics["prefetch.seconds"] = time.perf_counter() - start
    metrics |= stage_metrics(spent, "prefetch.job.")  # every population of the job: where its time went
    if run is not None:
        run.set_tags({"asr": config.asr.mode, "split": config.split, "users_simulated": "true",
                      "lm_device": cache.device})
        # the job file's [usage] is logged as usage.*; the headline population's (calibrated) settings here
        run.log_params({f"headline_usage.{k}": v for k, v in usage.as_params().items()})
        run.log_metrics(metrics)
        _log_sweeps(run, sweeps, "prefetch", "prefetch_sweeps")
        _log_sweeps(run, tuning, "prefetch.devel", "prefetch_sweeps_devel")
        if habit:
            _log_habit(run, habit, knobs)
        if per_request is not None:
            _log_requests(run, pop, per_request)
        paths = plot_figures(sweeps, metrics, habit)
        for path in paths:
            run.log_artifact(path, "figures")
        shutil.rmtree(paths[0].parent, ignore_errors=True)
    return {"metrics": metrics, "sweeps": sweeps, "habit": habit, "knobs": knobs, "config": config}


def summary(result: dict[str, Any]) -> list[str]:
    m, cfg = result["metrics"], result["config"]
    lines = [f"predictive ASR on {int(m['prefetch.requests']):,} evaluated {cfg.split} requests ({cfg.asr.mode} "
             f"partials, ASR WER {m['prefetch.asr_wer']:.3f}, {int(m['prefetch.asr_failed'])} untranscribed) in "
             f"{m['prefetch.seconds']:.0f} s; thresholds chosen on {int(m['prefetch.devel_requests']):,} devel "
             f"requests; {m['prefetch.repeat_rate']:.1%} of the requests repeat a sentence the user said before",
             f"  oracle {m['prefetch.oracle_rate']:.3f}; at the devel threshold for <= 10% failed: success "
             f"{m['prefetch.success_at_fail10']:.3f}, failed {m['prefetch.failed_at_fail10']:.3f}, mean gain over "
             f"all {m['prefetch.gain_ms_all_at_fail10']:.0f} ms; personalization gain "
             f"{m['prefetch.personalization_gain']:+.3f}"]
    if "prefetch.success_at_fail10_low" in m:
        lines.append(f"  95% intervals over {int(m['prefetch.bootstrap_users'])} users: success "
                     f"[{m['prefetch.success_at_fail10_low']:.3f}, {m['prefetch.success_at_fail10_high']:.3f}]")
    for metric, (name, other) in COMPARISONS.items():
        if f"prefetch.{metric}_low" in m:
            lines.append(f"  {metric} ({name} - {other}): {m[f'prefetch.{metric}']:+.3f}, 95% interval over users "
                         f"[{m[f'prefetch.{metric}_low']:+.3f}, {m[f'prefetch.{metric}_high']:+.3f}]")
    for name in result["sweeps"]:
        lines.append(f"  {name:28s} success {m[f'prefetch.{name}.success_rate_at_fail10']:.3f} failed "
                     f"{m[f'prefetch.{name}.failed_rate_at_fail10']:.3f} (test curve at 10%: "
                     f"{m[f'prefetch.{name}.success_rate_curve_at_fail10']:.3f})")
    stages = {k.removeprefix("prefetch.job.stage_seconds."): v for k, v in m.items()
              if k.startswith("prefetch.job.stage_seconds.")}
    if stages:
        lines.append(f"  time {m['prefetch.seconds']:.0f} s (habit sweep {m.get('prefetch.habit_sweep_own_seconds', 0):.0f} s, "
                     f"knobs {m.get('prefetch.knob_seconds', 0):.0f} s); all populations, "
                     f"{m['prefetch.job.rendered_utterances']:.0f} renditions new: "
                     + ", ".join(f"{k} {v:.0f} s" for k, v in sorted(stages.items(), key=lambda kv: -kv[1])))
    if "prefetch.cache_weight" in m:
        lines.append(f"  personal cache model (lm_personal.cache_lm): weight {m['prefetch.cache_weight']:g} chosen "
                     "on devel" if np.isfinite(m["prefetch.cache_weight"]) else "  personal cache model: no weight "
                     "reaches 10% failed on devel (its threshold, and so its figures, are undefined)")
    if "prefetch.source_offset" in m:
        lines.append(f"  per-source thresholds ({BY_SOURCE}): LM-only candidates at the threshold minus "
                     f"{m['prefetch.source_offset']:g}, chosen on devel")
    if not np.isfinite(m.get("prefetch.ms_per_added_word", np.nan)):
        lines.append("  net-benefit policy left out: no correct devel prediction to fit the ms per added word on")
    return lines + habit_lines(result)


def habit_lines(result: dict[str, Any]) -> list[str]:
    """The habit sweep, the calibration and the knob variants, as summary lines."""
    m, lines = result["metrics"], []
    for row in result["habit"]:
        lines.append(f"  habit: routine share {row['routine_share']:.2f}, repeats {row['repeat_rate']:.3f}: devel "
                     f"oracle {row['devel_oracle_rate']:.3f}; test oracle {row['both.oracle_rate']:.3f}; success at "
                     f"devel thresholds: both {row['both.success_rate']:.3f} (failed {row['both.failed_rate']:.3f}), "
                     f"LM only {row['lm.success_rate']:.3f}, personal only {row['personal.success_rate']:.3f}")
    if "prefetch.calibrated_routine_share" in m:
        share, target = m["prefetch.calibrated_routine_share"], m["prefetch.calibration_target_oracle"]
        lines.append(f"  calibrated routine share {share:.2f} (devel oracle {m['prefetch.calibration_devel_oracle']:.3f}, "
                     f"target {target:.2f}); the sweep reuses the job's confidence models")
        trained = m["prefetch.confidence_routine_share"]
        if not np.isfinite(trained) or abs(trained - share) > 0.005:
            at = (f"at routine share {trained:g}" if np.isfinite(trained) else
                  "at no single recorded routine share (the three disagree, or one predates the record)")
            lines.append(f"  NOTE: the confidence models were trained {at}, not at the calibrated {share:.2f}. Fix: "
                         "retrain them with `specbench train confidence jobs/confidence.toml` (with "
                         "calibrate_routine_share = true it lands on the same share) and rerun this job")
    for row in result["knobs"]:
        lines.append(f"  knob {row['knob']} = {row['setting']}: success {row['both.success_rate']:.3f}, failed "
                     f"{row['both.failed_rate']:.3f}, ASR WER {row['asr_wer']:.3f}, repeats recognized differently "
                     f"{row['repeat_final_differs_share']:.3f} ({row['requests']:.0f} test requests)")
    return lines


def execute(config: Any, path: Path, run: TrackedRun | None, opts: RunOptions) -> list[str]:
    """The job's runner (see `experiments.registry`): run it, return the summary lines."""
    return summary(run_predictive_asr(config, path, run, opts.ray_address))

