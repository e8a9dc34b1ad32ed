"""How much the per-source thresholds' choice rule moves `lm_personal.conf_by_source`.

With per-source thresholds (`prediction/by_source.py`) a candidate passes when its confidence reaches its own
threshold: `t` for a candidate in the user's history, `t - offset` for one only the LM proposed. When several
pass at the first passing partial, the job sends the one furthest above its own threshold (the highest offset
score). The other natural rule sends the most probable of them (the highest confidence). This script
measures both on the headline population of a committed predictive-ASR run, at that run's settings (the
calibrated routine share from its results file; the cache weight and the offset chosen on devel again, as
the job chooses them), each rule at its own devel-chosen threshold for at most 10% failed and both at the
job's threshold, with a paired bootstrap over users. It changes no headline: the job's rule stays.

The outcomes are computed here request by request (first passing partial, then the rule), and the job's rule
is checked equal to the job's vectorized `first_prefetch` at every threshold before anything is reported.

    python scripts/by_source_choice_rule.py [--job jobs/predictive_asr.toml]
        [--results benchmarks/results/predictive_asr_cpu.json]
        [--out benchmarks/results/predictive_asr_by_source_choice_cpu.json]

Needs the run's transcripts and LM completions cached (it renders what is missing otherwise).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from specbench.config import PredictiveAsrConfig
from specbench.config.loader import load_job_file
from specbench.data.usage import UsageSettings
from specbench.experiments.predictive_asr.checks import load_models
from specbench.experiments.predictive_asr.job import (
    FAILED_BUDGET,
    Population,
    _subset,
    choose_cache_weight,
    choose_source_offset,
    predict_population,
    score_columns,
)
from specbench.experiments.predictive_asr.lm_cache import LmCache
from specbench.hardware import describe
from specbench.metrics.cluster_bootstrap import paired_cluster_bootstrap
from specbench.paths import from_root
from specbench.prediction.by_source import offset_scores
from specbench.prediction.prefetch import first_prefetch, operating_point, summarize
from specbench.runtime import connect
from specbench.text_files import json_text

RULES = {"furthest_above_threshold": "pass", "most_probable": "confidence"}  # rule -> the column that chooses


def candidates(predictions: pl.DataFrame, confidence: np.ndarray, passing: np.ndarray) -> pl.DataFrame:
    """The prefetch candidates (added_words >= 1) with both scores and the policy's tie-break keys."""
    return predictions.select(
        "request_id", "partial_index", "partial_time_ms", "added_words", "correct", "lm_log_prob",
        (pl.col("source") == "personal").alias("personal"), pl.col("prediction_words").list.join(" ").alias("words"),
    ).with_columns(pl.Series("confidence", confidence), pl.Series("pass", passing)).with_row_index("row").filter(
        pl.col("added_words") >= 1)


def outcomes(cands: pl.DataFrame, requests: pl.DataFrame, threshold: float, rule: str) -> pl.DataFrame:
    """One row per request, as `first_prefetch` writes them: at the request's first partial with a candidate
    whose pass score reaches `threshold`, the passing candidate that `rule` picks (ties as the policy breaks
    them: higher LM log-probability, the personal source, the smaller word sequence, the earlier row)."""
    passing = cands.filter(pl.col("pass") >= threshold)
    first = passing.group_by("request_id").agg(pl.col("partial_index").min().alias("first_partial"))
    chosen = (passing.join(first, on="request_id").filter(pl.col("partial_index") == pl.col("first_partial"))
              .sort(["request_id", RULES[rule], "lm_log_prob", "personal", "words", "row"],
                    descending=[False, True, True, True, False, False])
              .unique(subset="request_id", keep="first"))
    out = requests.select("request_id", "end_of_speech_ms").join(chosen, on="request_id", how="left",
                                                                 maintain_order="left")
    sent = pl.col("correct").is_not_null()
    success = sent & pl.col("correct")
    return out.select(
        pl.lit(threshold).alias("threshold"), "request_id",
        pl.when(success).then(pl.lit("success")).when(sent).then(pl.lit("failure")).otherwise(pl.lit("none"))
        .alias("outcome"),
        sent.cast(pl.Int32).alias("attempts"), (sent & ~pl.col("correct")).cast(pl.Int32).alias("failed_attempts"),
        pl.col("partial_index").cast(pl.Int32), pl.col("partial_time_ms"),
        pl.when(success).then(pl.col("end_of_speech_ms") - pl.col("partial_time_ms")).alias("gain_ms"),
        pl.when(success).then(pl.col("added_words")).cast(pl.Int32).alias("gain_words"))


def check_against_job(cands: pl.DataFrame, passing: np.ndarray, preds: pl.DataFrame, requests: pl.DataFrame,
                      thresholds: tuple[float, ...]) -> None:
    """The job's rule computed here equals the job's `first_prefetch` at every threshold, request by request."""
    job = first_prefetch(passing, preds, requests, thresholds)
    for t in thresholds:
        mine = outcomes(cands, requests, t, "furthest_above_threshold")
        theirs = job.filter(pl.col("threshold") == t)
        for column in ("request_id", "outcome", "partial_index"):
            if mine[column].to_list() != theirs[column].to_list():
                sys.exit(f"the request-by-request rule differs from first_prefetch at threshold {t} in '{column}'")


def evaluate(name: str, pop, scores: dict[str, np.ndarray], offset: float, thresholds: tuple[float, ...],
             devel_thresholds: dict[str, float] | None, samples: int) -> tuple[dict, dict[str, float]]:
    preds, mask = _subset(pop, "lm_personal")
    confidence = scores["conf_personal"][mask]
    passing = offset_scores(confidence, preds, offset)
    cands = candidates(preds, confidence, passing)
    check_against_job(cands, passing, preds, pop.requests, thresholds)
    tables = {rule: summarize(pl.concat([outcomes(cands, pop.requests, t, rule) for t in thresholds]))
              for rule in RULES}
    chosen = devel_thresholds or {rule: operating_point(tables[rule], FAILED_BUDGET)["threshold"] for rule in RULES}
    report: dict = {"requests": pop.requests.height, "by_rule": {}}
    hits = {}
    for rule in RULES:
        row = tables[rule].filter(pl.col("threshold") == chosen[rule]).row(0, named=True)
        report["by_rule"][rule] = {"threshold": chosen[rule], **{k: row[k] for k in (
            "success_rate", "failed_rate", "gain_ms_all", "gain_ms_success")}}
        at = outcomes(cands, pop.requests, chosen[rule], rule)
        hits[rule] = (at["outcome"] == "success").to_numpy()
    job_t = chosen["furthest_above_threshold"]
    same_t = {rule: outcomes(cands, pop.requests, job_t, rule) for rule in RULES}
    a, b = (same_t[r]["outcome"] for r in RULES)
    report["at_job_threshold"] = {
        "threshold": job_t, "requests_whose_outcome_differs": int((a != b).sum()),
        **{f"{rule}.success_rate": float((same_t[rule]["outcome"] == "success").mean()) for rule in RULES},
        **{f"{rule}.failed_rate": float((same_t[rule]["outcome"] == "failure").mean()) for rule in RULES}}
    clusters = pop.requests["user_id"].to_numpy()
    boot = paired_cluster_bootstrap(hits["most_probable"], hits["furthest_above_threshold"], clusters, samples)
    report["most_probable_minus_job_rule"] = {"success_difference": float(hits["most_probable"].mean()
                                                                          - hits["furthest_above_threshold"].mean()),
                                              "low": boot.low, "high": boot.high, "users": boot.clusters}
    print(f"{name}: {json_text(report, indent=1)}", flush=True)
    return report, chosen


@dataclasses.dataclass
class Headline:
    """A committed predictive-ASR run's headline population, devel and test, rebuilt at its settings."""
    committed: dict
    config: PredictiveAsrConfig
    usage: UsageSettings
    tune: Population
    pop: Population
    cache_weight: float
    tune_scores: dict[str, np.ndarray]
    scores: dict[str, np.ndarray]


def headline_populations(job: Path, results: Path) -> Headline:
    """The devel and test users of `results`' run at its calibrated routine share, their predictions scored by
    the job's confidence models with the cache weight chosen on devel again, as the job chooses it."""
    committed = json.loads(results.read_text())
    config = load_job_file(job, {"predictive_asr": PredictiveAsrConfig})
    usage = dataclasses.replace(config.usage, routine_share=float(committed["headline_usage"]["routine_share"]))
    models = load_models(config, job)
    cache = LmCache(from_root(config.lm), config.completion, device="auto")
    connect(None)
    tune = predict_population("devel", config.tune_users, usage, config, job, cache)
    pop = predict_population(config.split, config.users, usage, config, job, cache)
    weight, _ = choose_cache_weight(tune, config)
    return Headline(committed, config, usage, tune, pop, weight, score_columns(tune.predictions, models, weight),
                    score_columns(pop.predictions, models, weight))


def headline_arguments(doc: str, out: str) -> argparse.Namespace:
    """The command line of a measurement on a committed run's headline population: --job, --results, --out
    (default `out`), --samples (bootstrap resamples)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--job", type=Path, default=Path("jobs/predictive_asr.toml"))
    parser.add_argument("--results", type=Path, default=Path("benchmarks/results/predictive_asr_cpu.json"))
    parser.add_argument("--out", type=Path, default=Path(out))
    parser.add_argument("--samples", type=int, default=1000)
    return parser.parse_args()


def main() -> None:
    args = headline_arguments(__doc__, "benchmarks/results/predictive_asr_by_source_choice_cpu.json")
    start = time.perf_counter()
    h = headline_populations(args.job, args.results)
    committed, config, usage, tune, pop = h.committed, h.config, h.usage, h.tune, h.pop
    weight, tune_scores, scores = h.cache_weight, h.tune_scores, h.scores
    offset, _ = choose_source_offset(tune, tune_scores, config)
    devel, chosen = evaluate("devel", tune, tune_scores, offset, config.thresholds, None, args.samples)
    test, _ = evaluate(config.split, pop, scores, offset, config.thresholds, chosen, args.samples)
    metrics = committed["metrics"]
    job_figure = metrics["prefetch.lm_personal.conf_by_source.success_rate_at_fail10"]
    mine = test["by_rule"]["furthest_above_threshold"]["success_rate"]
    if abs(job_figure - mine) > 1e-4:
        sys.exit(f"the job's rule gives {mine:.4f} here against the run's {job_figure:.4f}: not the same population")
    out = {"job": str(args.job), "of_run": committed["mlflow_run_id"], "of_commit": committed["git_commit"],
           "hardware": describe(), "routine_share": usage.routine_share, "cache_weight": weight,
           "source_offset": offset, "run_source_offset": metrics["prefetch.source_offset"],
           "failed_budget": FAILED_BUDGET, "bootstrap_samples": args.samples, "devel": devel, "test": test,
           "wall_minutes": round((time.perf_counter() - start) / 60, 1)}
    args.out.write_text(json_text(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
