"""The `predictive_asr` job: simulate four weeks of requests for the devel or test users, transcribe them
(partials every 120 ms from our streaming decoder, or `oracle-asr` for ablations), predict the full
utterance from every partial (LM n-best, the user's history, both), and sweep the prefetch threshold for
every configuration of the paper's figures: candidates from the LM only, the history only, or both; decided
by the LM score, by the confidence model without the personal feature, or with it. Beyond the paper: up to K
prefetch attempts per request. A sensitivity sweep re-simulates the usage with other repetition settings.

Every evaluated request (weeks after the history weeks) lands in exactly one outcome; a request whose audio
could not be transcribed counts as "no prefetch" and is reported in `prefetch.asr_failed`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from specbench.config import PredictiveAsrConfig
from specbench.data.usage import UsageSettings, population, simulate_usage
from specbench.metrics.wer import wer
from specbench.paths import project_root
from specbench.pipelines.asr_partials import transcribe_requests
from specbench.pipelines.prediction_plots import plot_figures
from specbench.pipelines.prediction_table import LmCache, build_predictions
from specbench.prediction.confidence import load_confidence
from specbench.prediction.prefetch import operating_point, oracle_gain_ms, oracle_rate, sweep
from specbench.runtime import connect
from specbench.stage import STATUS_OK
from specbench.tracking.runs import TrackedRun

CANDIDATES = {"lm": pl.col("in_lm"), "personal": pl.col("in_personal"), "lm_personal": pl.lit(True)}
DECIDERS = ("lm_score", "conf", "conf_personal")
MAIN = ("lm_personal", "conf_personal")
PAPER_FAILED_RATES = (0.08, 0.20)  # the paper's operating points (23% at 8%, 28% at 20% failed)


@dataclass(frozen=True)
class Population:
    """A transcribed, predicted population: evaluated requests and their predictions."""

    requests: pl.DataFrame  # evaluated requests only
    predictions: pl.DataFrame
    asr_wer: float
    asr_failed: int
    all_requests: int


def resolve(path: Path) -> Path:
    return path if path.is_absolute() else project_root() / path


def predict_population(split: str, users: int, usage: UsageSettings, config: Any, job_path: Path,
                       cache: LmCache) -> Population:
    """Simulate, transcribe and predict one population (the job's and `train_confidence`'s front half)."""
    pop = population(split, max_users=users or None, seed=usage.seed)
    requests = simulate_usage(pop, usage)
    transcripts = transcribe_requests(requests, config.asr, job_path)
    preds, frame = build_predictions(requests, transcripts, cache)
    evaluated = frame.filter(pl.col("evaluated"))
    ok = evaluated.filter(pl.col("status") == STATUS_OK)
    return Population(requests=evaluated, predictions=preds,
                      asr_wer=wer(ok["ref_words"].to_list(), ok["final_words"].to_list()) if ok.height else np.nan,
                      asr_failed=evaluated.height - ok.height, all_requests=frame.height)


def score_columns(predictions: pl.DataFrame, conf: Any, conf_np: Any) -> dict[str, np.ndarray]:
    """The decision score of every prediction under each decider (added_words == 0 rows get -inf: never
    candidates anyway, and the confidence models were not trained on them)."""
    cand = (predictions["added_words"] >= 1).to_numpy()
    out = {"lm_score": predictions["lm_log_prob"].to_numpy().astype(np.float64)}
    for name, model in (("conf", conf_np), ("conf_personal", conf)):
        scores = np.full(predictions.height, -np.inf)
        if cand.any():
            scores[cand] = model.predict(predictions.filter(pl.Series(cand)))
        out[name] = scores
    return out


def evaluate(pop: Population, scores: dict[str, np.ndarray], config: PredictiveAsrConfig,
             attempts: tuple[int, ...] = (1,)) -> dict[str, pl.DataFrame]:
    """Threshold sweeps, `"{candidates}.{decider}"` -> sweep table (plus `".k{K}"` for K > 1 on MAIN)."""
    out: dict[str, pl.DataFrame] = {}
    for cand, mask_expr in CANDIDATES.items():
        mask = pop.predictions.select(mask_expr.alias("m"))["m"].to_numpy()
        preds = pop.predictions.filter(pl.Series(mask))
        for decider in DECIDERS:
            thresholds = config.lm_thresholds if decider == "lm_score" else config.thresholds
            for k in attempts if (cand, decider) == MAIN else (1,):
                name = f"{cand}.{decider}" + (f".k{k}" if k > 1 else "")
                out[name] = sweep(scores[decider][mask], preds, pop.requests, thresholds, max_attempts=k)
    return out


def headline(pop: Population, sweeps: dict[str, pl.DataFrame], max_failed: float) -> dict[str, float]:
    """Operating points of every configuration and the job's headline scalars."""
    m: dict[str, float] = {"prefetch.requests": float(pop.requests.height), "prefetch.asr_failed": float(pop.asr_failed),
                           "prefetch.asr_wer": float(pop.asr_wer)}
    for cand, mask_expr in CANDIDATES.items():
        preds = pop.predictions.filter(mask_expr)
        m[f"prefetch.{cand}.oracle_rate"] = oracle_rate(preds, pop.requests)
        m[f"prefetch.{cand}.oracle_gain_ms"] = oracle_gain_ms(preds, pop.requests)
    for name, table in sweeps.items():
        for rate in (max_failed, *PAPER_FAILED_RATES):
            op = operating_point(table, rate)
            tag = f"fail{round(rate * 100):02d}"
            for key in ("success_rate", "gain_ms_all", "gain_ms_success", "gain_words_success"):
                m[f"prefetch.{name}.{key}_at_{tag}"] = float(op[key]) if op[key] is not None else np.nan
    main = ".".join(MAIN)
    tag = f"fail{round(max_failed * 100):02d}"
    m["prefetch.success_at_fail10"] = m[f"prefetch.{main}.success_rate_at_{tag}"]
    m["prefetch.gain_ms_all_at_fail10"] = m[f"prefetch.{main}.gain_ms_all_at_{tag}"]
    m["prefetch.oracle_rate"] = m["prefetch.lm_personal.oracle_rate"]
    m["prefetch.personalization_gain"] = (m["prefetch.success_at_fail10"]
                                          - m[f"prefetch.lm.conf.success_rate_at_{tag}"])
    return m


def _log_sweeps(run: TrackedRun, sweeps: dict[str, pl.DataFrame]) -> None:
    for name, table in sweeps.items():
        for step, row in enumerate(table.iter_rows(named=True)):
            run.log_metrics({f"prefetch.{name}.{k}": float(row[k]) for k in
                             ("threshold", "success_rate", "failed_rate", "gain_ms_success", "gain_ms_all",
                              "gain_words_success") if row[k] is not None}, step=step)
    tables = pl.concat([t.with_columns(pl.lit(n).alias("configuration")) for n, t in sweeps.items()],
                       how="diagonal_relaxed")
    run.log_text(tables.write_csv(), "tables/prefetch_sweeps.csv")


def _sensitivity(config: PredictiveAsrConfig, job_path: Path, cache: LmCache, conf: Any,
                 conf_np: Any) -> list[dict[str, float]]:
    """Personalization gain (LM + personal with the personal confidence, minus LM only with the
    non-personal confidence, at the failed-rate budget) under other repetition settings."""
    rows = []
    variants = [("zipf_exponent", v) for v in config.sensitivity.zipf_exponents]
    variants += [("routine_share", v) for v in config.sensitivity.routine_shares]
    for field_name, value in variants:
        usage = dataclasses.replace(config.usage, **{field_name: value})
        pop = predict_population(config.split, config.users, usage, config, job_path, cache)
        sweeps = evaluate(pop, score_columns(pop.predictions, conf, conf_np), config)
        m = headline(pop, sweeps, config.max_failed_rate)
        rows.append({"parameter": field_name, "value": value, "success_at_fail10": m["prefetch.success_at_fail10"],
                     "lm_only_success_at_fail10": m["prefetch.success_at_fail10"] - m["prefetch.personalization_gain"],
                     "personalization_gain": m["prefetch.personalization_gain"],
                     "oracle_rate": m["prefetch.oracle_rate"], "lm_oracle_rate": m["prefetch.lm.oracle_rate"]})
    return rows


def run_predictive_asr(config: PredictiveAsrConfig, job_path: Path, run: TrackedRun | None,
                       ray_address: str | None = None) -> dict[str, Any]:
    """Run the evaluation; returns the headline metrics, the sweeps and the sensitivity rows."""
    start = time.perf_counter()
    connect(ray_address)
    conf, conf_np = load_confidence(resolve(config.confidence)), load_confidence(resolve(config.confidence_no_personal))
    cache = LmCache(resolve(config.lm), config.completion, device="auto")
    pop = predict_population(config.split, config.users, config.usage, config, job_path, cache)
    sweeps = evaluate(pop, score_columns(pop.predictions, conf, conf_np), config, config.max_attempts)
    metrics = headline(pop, sweeps, config.max_failed_rate)
    metrics["prefetch.predictions"] = float(pop.predictions.height)
    metrics["prefetch.evaluate_seconds"] = time.perf_counter() - start
    sensitivity = _sensitivity(config, job_path, cache, conf, conf_np) if config.run_sensitivity else []
    metrics["prefetch.seconds"] = time.perf_counter() - start
    if run is not None:
        run.set_tags({"asr": config.asr.mode, "split": config.split, "users_simulated": "true"})
        run.log_params({f"usage.{k}": v for k, v in dataclasses.asdict(config.usage).items()})
        run.log_metrics(metrics)
        _log_sweeps(run, sweeps)
        if sensitivity:
            run.log_text(pl.DataFrame(sensitivity).write_csv(), "tables/sensitivity.csv")
        for path in plot_figures(sweeps, metrics, sensitivity):
            run.log_artifact(path, "figures")
    return {"metrics": metrics, "sweeps": sweeps, "sensitivity": sensitivity, "config": config}


def summary(result: dict[str, Any]) -> list[str]:
    m, cfg = result["metrics"], result["config"]
    lines = [f"predictive ASR on {int(m['prefetch.requests']):,} evaluated {cfg.split} requests ({cfg.asr.mode} "
             f"partials, ASR WER {m['prefetch.asr_wer']:.3f}, {int(m['prefetch.asr_failed'])} untranscribed) in "
             f"{m['prefetch.seconds']:.0f} s",
             f"  oracle {m['prefetch.oracle_rate']:.3f}; at <= {cfg.max_failed_rate:.0%} failed: success "
             f"{m['prefetch.success_at_fail10']:.3f}, mean gain over all {m['prefetch.gain_ms_all_at_fail10']:.0f} ms; "
             f"personalization gain {m['prefetch.personalization_gain']:+.3f}"]
    for name in result["sweeps"]:
        key = f"prefetch.{name}.success_rate_at_fail{round(cfg.max_failed_rate * 100):02d}"
        lines.append(f"  {name:28s} success at fail10 {m[key]:.3f}")
    for row in result["sensitivity"]:
        lines.append(f"  sensitivity {row['parameter']}={row['value']}: personalization gain "
                     f"{row['personalization_gain']:+.3f} (oracle {row['oracle_rate']:.3f})")
    return lines
