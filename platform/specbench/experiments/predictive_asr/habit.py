"""Success against habit: the predictive-ASR job's sweep of how often users repeat themselves, the
calibration of the headline population to the seed's oracle, and the rendering knobs at that setting.

- **Sweep** (`sweep_routine_shares`): for each `[habit] routine_shares` value the devel and the test users are
  simulated anew (the other `[usage]` settings unchanged; requests that keep their text keep their rendition
  and transcript), every configuration's threshold is chosen on that point's devel users, and the test users
  are measured there. Each point gives the realized repeat rate, the oracle rates (devel and test), and
  success, failed rate and mean gain over all requests for LM only (`lm.conf`), personal only
  (`personal.conf_personal`) and both (`lm_personal.conf_personal`), and on both's candidates the personal
  cache model (`lm_personal.cache_lm`, its weight chosen on the point's devel users) and the confidence
  model with the context features (`lm_personal.conf_context`). The confidence models are the job's own,
  trained once at the calibrated setting: the sweep reuses them.
- **Calibration** (`calibrate`): the routine share at which the devel users' LM + personal oracle equals
  `target_oracle` (the seed's 57% on real users), by linear interpolation between the sweep's points, rounded
  to 0.01. A target outside the sweep's range of devel oracles is a `DataError` naming the nearest reachable
  value. The job's headline population is simulated at that share; the confidence models should have been
  trained at it too (the job says when they were not).
- **Rendering knobs** (`knob_variants`): at the calibrated share, each of the speaking-rate range, the noise
  (SNR range) and the pitch variation at one lower and one higher setting, the others unchanged. A variant
  renders every request anew, so the variants run on the first `knob_users` devel and test users (0: all),
  each with thresholds chosen on its own devel users, beside a `reference` row: the headline settings on the
  same users (its audio is the headline's, already transcribed), which is what each variant is compared to.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from specbench.errors import DataError

if TYPE_CHECKING:
    from specbench.config import PredictiveAsrConfig

EvaluateAt = Callable[[Any, Any], dict[str, float]]  # (usage settings, [asr] section) -> a point's figures

# configuration name -> label in the sweep's rows (the paper's three candidate sources, best decider each)
CURVES = {"lm": "lm.conf", "personal": "personal.conf_personal", "both": "lm_personal.conf_personal",
          "cache_lm": "lm_personal.cache_lm", "context": "lm_personal.conf_context",
          "by_source": "lm_personal.conf_by_source"}
POINT_KEYS = ("success_rate", "failed_rate", "gain_ms_all")


def point_row(metrics: dict[str, float], devel_oracle: float) -> dict[str, float]:
    """One sweep point's figures from the job's `headline` metrics of that point."""
    row = {"repeat_rate": metrics["prefetch.repeat_rate"], "devel_oracle_rate": devel_oracle,
           "requests": metrics["prefetch.requests"], "asr_wer": metrics["prefetch.asr_wer"],
           "repeat_final_differs_share": metrics.get("prefetch.asr.repeat_final_differs_share", float("nan"))}
    for label, name in CURVES.items():
        source = name.split(".")[0]
        row[f"{label}.oracle_rate"] = metrics[f"prefetch.{source}.oracle_rate"]
        row[f"{label}.oracle_gain_ms"] = metrics[f"prefetch.{source}.oracle_gain_ms"]
        for key in POINT_KEYS:
            row[f"{label}.{key}"] = metrics.get(f"prefetch.{name}.{key}_at_fail10", float("nan"))
    return row


def sweep_routine_shares(config: PredictiveAsrConfig, evaluate_at: EvaluateAt) -> list[dict[str, float]]:
    """One row per `[habit] routine_shares` value, in increasing order (see the module docstring);
    `evaluate_at(usage, asr)` gives a point's figures (`point_row`)."""
    return [{"routine_share": share,
             **evaluate_at(dataclasses.replace(config.usage, routine_share=share), config.asr)}
            for share in sorted(config.habit.routine_shares)]


def calibrate(rows: list[dict[str, float]], target: float) -> float:
    """The routine share whose devel LM + personal oracle is `target`, interpolated between sweep points."""
    points = sorted((r["routine_share"], r["devel_oracle_rate"]) for r in rows)
    oracles = [o for _, o in points]
    lo, hi = min(oracles), max(oracles)
    if not lo - 1e-9 <= target <= hi + 1e-9:  # an end of the range but for float rounding is in it
        nearest = lo if target < lo else hi
        share = points[oracles.index(nearest)][0]
        raise DataError(
            f"habit.target_oracle = {target:g}: the devel sweep over routine shares "
            f"{[s for s, _ in points]} reaches LM + personal oracle rates {lo:.3f} to {hi:.3f}. Fix: set "
            f"target_oracle to a reachable value (nearest: {nearest:.3f}, at routine share {share:g}), or "
            "widen routine_shares.")
    target = min(max(target, lo), hi)
    for (s0, o0), (s1, o1) in zip(points, points[1:]):
        if min(o0, o1) <= target <= max(o0, o1):
            share = s0 if o1 == o0 else s0 + (target - o0) * (s1 - s0) / (o1 - o0)
            return min(max(round(float(share), 2), s0), s1)  # to 0.01, never off the bracketing pair
    return round(float(points[int(np.argmin([abs(o - target) for o in oracles]))][0]), 2)


REFERENCE = ("reference", "headline")  # the knob table's first row: the headline [asr] on the knob users


def knob_users(total: int, knob: int) -> int:
    """How many users a knob variant takes from a population of `total` users (0: all, in both)."""
    if knob == 0 or total == 0:
        return knob or total
    return min(total, knob)


def knob_variants(config: PredictiveAsrConfig) -> list[tuple[str, str, Any]]:
    """(knob, its setting as text, the `[asr]` section with it): the reference (the headline `[asr]`) first,
    then every lower/higher rendering setting."""
    out = [(*REFERENCE, config.asr)]
    for value in config.habit.rate_ranges:
        out.append(("rate_range", f"{value[0]:g}-{value[1]:g}", dataclasses.replace(config.asr, rate_range=value)))
    for value in config.habit.snr_db_ranges:
        out.append(("snr_db_range", f"{value[0]:g}-{value[1]:g}",
                    dataclasses.replace(config.asr, snr_db_range=value)))
    for cents in config.habit.pitch_cents:
        out.append(("pitch_cents", f"{cents:g}", dataclasses.replace(config.asr, pitch_cents=cents)))
    return out


def sweep_knobs(config: PredictiveAsrConfig, evaluate_at: EvaluateAt, usage: Any) -> list[dict[str, Any]]:
    """One row per rendering-knob variant at the headline `usage` (the calibrated routine share), on the
    knob users: `evaluate_at` should be bound to a config whose `users`/`tune_users` are `knob_users`'."""
    return [{"knob": knob, "setting": setting, **evaluate_at(usage, asr)}
            for knob, setting, asr in knob_variants(config)]


def confidence_share(model: Any) -> float | None:
    """The routine share the confidence model's training users were simulated at (None when unrecorded)."""
    usage = model.metadata.get("train_config", {}).get("usage", {})
    return float(usage["routine_share"]) if "routine_share" in usage else None
