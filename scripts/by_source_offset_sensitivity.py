"""How much the per-source thresholds' gain over personal only turns on the offset that devel chooses.

With per-source thresholds (`prediction/by_source.py`) a candidate only the LM proposed passes at the threshold
minus an offset; the job chooses the offset with the highest devel success at 10% failed
(`choose_source_offset`) and reports `prefetch.by_source_gain_over_personal_only` at that one offset. This
script evaluates every offset of the job's grid the same way (its threshold chosen on devel for at most 10%
failed, then applied to the test users) and reports, per offset, devel success, test success and failed rate,
and the test gain over personal only with the job's paired bootstrap over users. A sensitivity analysis of a
committed run: it changes no headline and chooses nothing.

Before anything is reported the script checks that it rebuilt the run's population: at the offset the job
chose, its test success and gain over personal only must equal the committed file's.

    python scripts/by_source_offset_sensitivity.py [--job jobs/predictive_asr.toml]
        [--results benchmarks/results/predictive_asr_cpu.json]
        [--out benchmarks/results/predictive_asr_by_source_offsets_cpu.json]

Needs the run's transcripts and LM completions cached (it renders what is missing otherwise).
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import polars as pl
from by_source_choice_rule import headline_arguments, headline_populations
from results_file import dump, rounded

from specbench.experiments.predictive_asr.job import FAILED_BUDGET, _subset, choose_source_offset
from specbench.hardware import describe
from specbench.metrics.cluster_bootstrap import paired_cluster_bootstrap
from specbench.prediction.by_source import offset_scores
from specbench.prediction.prefetch import first_prefetch, operating_point, sweep


def devel_threshold(pop, confidence: np.ndarray, candidates: str, thresholds: tuple[float, ...]) -> dict:
    """The devel operating point (threshold, success, failed) for at most 10% failed."""
    preds, _ = _subset(pop, candidates)
    return operating_point(sweep(confidence, preds, pop.requests, thresholds), FAILED_BUDGET)


def success_hits(pop, confidence: np.ndarray, preds: pl.DataFrame, threshold: float) -> tuple[np.ndarray, float]:
    """Per request (in `pop.requests` order) whether the first prefetch at `threshold` succeeded, as the job's
    bootstrap reads it; and the failed rate."""
    out = first_prefetch(confidence, preds, pop.requests, [threshold])
    failed = float((out["outcome"] == "failure").sum() / pop.requests.height)
    hit = out.select(["request_id", (pl.col("outcome") == "success").alias("hit")])
    joined = pop.requests.select("request_id").join(hit, on="request_id", how="left", maintain_order="left")
    return joined["hit"].fill_null(False).to_numpy(), failed


def main() -> None:
    args = headline_arguments(__doc__, "benchmarks/results/predictive_asr_by_source_offsets_cpu.json")
    start = time.perf_counter()
    h = headline_populations(args.job, args.results)
    config, tune, pop = h.config, h.tune, h.pop
    metrics = h.committed["metrics"]
    chosen_offset, _ = choose_source_offset(tune, h.tune_scores, config)
    clusters = pop.requests["user_id"].to_numpy()

    personal_op = devel_threshold(tune, h.tune_scores["conf_personal"][_subset(tune, "personal")[1]], "personal",
                                  config.thresholds)
    personal_preds, personal_mask = _subset(pop, "personal")
    personal_hits, _ = success_hits(pop, h.scores["conf_personal"][personal_mask], personal_preds,
                                    personal_op["threshold"])

    tune_preds, tune_mask = _subset(tune, "lm_personal")
    test_preds, test_mask = _subset(pop, "lm_personal")
    base_tune, base_test = h.tune_scores["conf_personal"][tune_mask], h.scores["conf_personal"][test_mask]
    rows = []
    for offset in config.source_offsets:
        op = devel_threshold(tune, offset_scores(base_tune, tune_preds, offset), "lm_personal", config.thresholds)
        row = {"offset": offset, "devel_threshold": op["threshold"], "devel_success": op["success_rate"],
               "devel_failed": op["failed_rate"]}
        if op["threshold"] is not None:
            hits, failed = success_hits(pop, offset_scores(base_test, test_preds, offset), test_preds,
                                        op["threshold"])
            boot = paired_cluster_bootstrap(hits, personal_hits, clusters, args.samples)
            row |= {"test_success": float(hits.mean()), "test_failed": failed,
                    "gain_over_personal_only": boot.difference, "low": boot.low, "high": boot.high}
        rows.append(row)
        print(json.dumps(row), flush=True)

    at_chosen = next(r for r in rows if r["offset"] == chosen_offset)
    expected = {"test_success": metrics["prefetch.lm_personal.conf_by_source.success_rate_at_fail10"],
                "gain_over_personal_only": metrics["prefetch.by_source_gain_over_personal_only"],
                "low": metrics["prefetch.by_source_gain_over_personal_only_low"],
                "high": metrics["prefetch.by_source_gain_over_personal_only_high"]}
    for key, value in expected.items():
        if abs(at_chosen[key] - value) > 1e-4:
            sys.exit(f"at the chosen offset {chosen_offset:g} '{key}' is {at_chosen[key]:.4f} here against the "
                     f"run's {value:.4f}: not the run's population")
    gains = [r["gain_over_personal_only"] for r in rows if "gain_over_personal_only" in r]
    out = {"job": str(args.job), "of_run": h.committed["mlflow_run_id"], "of_commit": h.committed["git_commit"],
           "hardware": describe(), "routine_share": h.usage.routine_share, "cache_weight": h.cache_weight,
           "chosen_offset": chosen_offset, "failed_budget": FAILED_BUDGET, "bootstrap_samples": args.samples,
           "personal_only": {"devel_threshold": personal_op["threshold"], "test_success": float(personal_hits.mean())},
           "offsets": rows,
           "gain_over_personal_only_range": [min(gains), max(gains)],
           "offsets_with_interval_clear_of_zero": [r["offset"] for r in rows if r.get("low", 0.0) > 0.0],
           "wall_minutes": round((time.perf_counter() - start) / 60, 1)}
    args.out.write_text(dump(rounded(out)) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
