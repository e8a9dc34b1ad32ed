"""Per-source prefetch thresholds on the LM + personal candidates.

With one threshold on the confidence model with the personal feature, the history's candidates take the
whole failed-prefetch budget: a candidate only the LM proposed (not in the user's history) scores below the
threshold the history's candidates need, so LM + personal decides exactly as personal only does. Yet a
confident LM candidate mostly belongs to a request the history cannot predict at all (a text the user never
said), where a prefetch competes with nothing, so it may buy more success per failure than the history's
least confident candidates. Two thresholds let it: `t` for candidates in the history and `t - offset` for
those only the LM proposed. Raising the LM-only candidates' scores by `offset` turns that into one threshold
over one score, so the usual sweep, its devel-chosen threshold and the paired bootstrap apply unchanged; the
offset is chosen on the devel users, like the cache model's weight. Offset 0 is the single threshold.

Which candidates pass is exactly that of two thresholds. Which one is sent when several pass at a partial
follows the offset score too: the candidate furthest above its own threshold, not the most probable one, so
an LM-only candidate at P = 0.3 passing `t - 0.6` is sent before a history candidate at P = 0.88 passing
`t = 0.85`. That keeps one score, and with it the sweep and the bootstrap; sending the most probable passing
candidate instead would make the choice depend on the threshold. On the headline run (metrics version 4)
the two rules differ in none of the 5,256 devel and 4,401 test outcomes; at version 3 they differed in 1 test
outcome (`scripts/by_source_choice_rule.py` at commit d3acfdb, docs/prediction.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import polars as pl

from specbench.errors import ConfigError


def lm_only(predictions: pl.DataFrame) -> np.ndarray:
    """Rows the LM proposed and the user's history did not (`in_lm` and not `in_personal`)."""
    return (predictions["in_lm"] & ~predictions["in_personal"]).to_numpy()


def offset_scores(scores: np.ndarray, predictions: pl.DataFrame, offset: float) -> np.ndarray:
    """`scores` with `offset` added to the LM-only rows (-inf, a row that is no candidate, stays -inf)."""
    if not np.isfinite(offset) or offset < 0:
        raise ConfigError(f"source offset {offset} must be a finite number >= 0. Fix: list offsets such as "
                          "[0.0, 0.2, 0.4].")
    return np.where(lm_only(predictions), scores + offset, scores)


def choose_offset(offsets: Sequence[float], devel_success: Callable[[float], float]) -> tuple[float, list[dict[str, float]]]:
    """The offset with the highest devel success at the devel operating point (`devel_success(offset)`, NaN
    where no threshold reaches the failed budget); ties go to the smaller offset (closer to one threshold).
    Also every offset's figure. When none reaches the budget (every figure NaN) all tie, so the smallest
    listed offset is returned (0 when the list has it)."""
    if not offsets:
        raise ConfigError("source_offsets must list at least one offset. Fix: list offsets such as [0.0, 0.2, 0.4].")
    rows = [{"offset": float(o), "devel_success": float(devel_success(float(o)))} for o in sorted(offsets)]
    best = max(rows, key=lambda r: (np.nan_to_num(r["devel_success"], nan=-1.0), -r["offset"]))
    return best["offset"], rows
