"""Latency of simultaneous translation, as pure functions of the delays.

Notation: `delays[i]` (g_i, i = 1..|y|) is the number of source tokens read when target token i was
written; `source_len` is |x|. All functions take plain sequences and return floats; an empty hypothesis has
latency 0 (nothing was waited for). The unit is whatever the delays count (here: BPE tokens, the units the
policies read and write).

- AL, Average Lagging (Ma et al. 2019, STACL, eq. 4): r = |y| / |x|; tau = the first i with g_i >= |x|
  (|y| if none); AL = (1/tau) sum_{i=1}^{tau} (g_i - (i - 1) / r). Wait-k with |x| = |y| gives k; reading
  the whole source first gives |x|.
- AL as SimulEval computes it (`ALScorer`, use_ref_len=True): the same with r = |y*| / |x| from the
  reference length |y*| (`average_lagging(..., target_len=|y*|)`).
- LAAL, Length-Adaptive Average Lagging (Papi et al. 2022): AL with r = max(|y|, |y*|) / |x|.
- DAL, Differentiable Average Lagging (Cherry and Foster 2019): g'_1 = g_1, g'_i = max(g_i, g'_{i-1} +
  1/gamma) with gamma = |y| / |x|; DAL = (1/|y|) sum_i (g'_i - (i - 1) / gamma).
- AP, Average Proportion (Cho and Esipova 2016): AP = sum_i g_i / (|x| |y|); SimulEval's `APScorer` divides
  by |x| |y*| instead (`average_proportion(..., target_len=|y*|)`).
- CW, Consecutive Wait (Gu et al. 2017): the mean number of source tokens read per run of READs, i.e. the
  increases of g (from g_0 = 0) averaged over the writes that follow a read.
"""

from __future__ import annotations

from collections.abc import Sequence


def _check(delays: Sequence[float], source_len: int) -> None:
    if source_len <= 0:
        raise ValueError(f"source_len must be positive, got {source_len}")
    previous = 0
    for i, d in enumerate(delays):
        if not previous <= d <= source_len:  # NaN fails too
            raise ValueError(f"delays must be non-decreasing and within [0, source_len={source_len}]; delay {i} "
                             f"is {d} after {previous}")
        previous = d


def _check_target(target_len: int | None) -> None:
    if target_len is not None and not target_len > 0:
        raise ValueError(f"target_len must be positive (a reference of at least one token), got {target_len}")


def average_lagging(delays: Sequence[float], source_len: int, target_len: int | None = None) -> float:
    """AL; `target_len` sets r = target_len / |x| (default |y|: STACL; the reference length: SimulEval)."""
    _check(delays, source_len)
    if not delays:
        return 0.0
    _check_target(target_len)
    rate = (len(delays) if target_len is None else target_len) / source_len
    total, tau = 0.0, 0
    for i, d in enumerate(delays):
        total += d - i / rate
        tau = i + 1
        if d >= source_len:
            break
    return total / tau


def length_adaptive_average_lagging(delays: Sequence[float], source_len: int, reference_len: int) -> float:
    """LAAL: AL with r = max(|y|, |y*|) / |x|."""
    return average_lagging(delays, source_len, max(len(delays), reference_len))


def differentiable_average_lagging(delays: Sequence[float], source_len: int) -> float:
    """DAL (with gamma = |y| / |x|)."""
    _check(delays, source_len)
    if not delays:
        return 0.0
    gamma = len(delays) / source_len
    total, previous = 0.0, 0.0
    for i, d in enumerate(delays):
        current = d if i == 0 else max(d, previous + 1 / gamma)
        total += current - i / gamma
        previous = current
    return total / len(delays)


def average_proportion(delays: Sequence[float], source_len: int, target_len: int | None = None) -> float:
    """AP = sum g_i / (|x| * target_len), target_len defaulting to |y| (SimulEval: the reference length)."""
    _check(delays, source_len)
    if not delays:
        return 0.0
    _check_target(target_len)
    return sum(delays) / (source_len * (len(delays) if target_len is None else target_len))


def consecutive_wait(delays: Sequence[float], source_len: int) -> float:
    """CW: mean size of the runs of READs that precede writes."""
    _check(delays, source_len)
    steps = [d - p for p, d in zip([0, *delays], delays) if d > p]
    return sum(steps) / len(steps) if steps else 0.0
