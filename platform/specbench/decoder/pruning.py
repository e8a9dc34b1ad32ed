"""Beam pruning as Kaldi's `FasterDecoder::GetCutoff` does it (kaldi/src/decoder/faster-decoder.cc).

Before each frame's emitting step the active tokens are pruned to a cutoff: `best + beam`, tightened to
the `max_active`-th smallest cost when more than `max_active` tokens are active, or widened to the
`min_active`-th smallest when that lies beyond the beam (to +inf, no pruning at all, while at most
`min_active` tokens are active). Whenever max_active or min_active decides, the *adaptive beam* used for
the next frame's pruning becomes `cutoff - best + beam_delta`.

Kaldi's numeric types are kept so that cutoffs agree bit for bit: token costs are float64, the order
statistics are taken over the costs rounded to float32 (Kaldi's `tmp_array_` is a `vector<float>`), and the
adaptive beam is a float32 (computed in float64 and rounded).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np

INT32_MAX = 2**31 - 1

BIND_BEAM = 0
BIND_MAX_ACTIVE = 1
BIND_MIN_ACTIVE = 2


def check_pruning(owner: str, beam: float, max_active: int, min_active: int, beam_delta: float) -> None:
    """Raise ValueError naming `owner.field` and the value when a pruning option is out of range (the ranges
    of `PruningConfig`'s docstring)."""
    if not (is_number(beam) and 0 < beam < np.inf):
        raise ValueError(f"{owner}.beam must be a positive finite number (cost units), got {beam!r}")
    if not is_int(max_active) or not 1 < max_active <= INT32_MAX:
        raise ValueError(f"{owner}.max_active must be an int in (1, {INT32_MAX}], got {max_active!r}")
    if not is_int(min_active) or not 0 <= min_active < max_active:
        raise ValueError(f"{owner}.min_active must be an int in [0, max_active={max_active}), got {min_active!r}")
    if not (is_number(beam_delta) and 0 <= beam_delta < np.inf):
        raise ValueError(f"{owner}.beam_delta must be a finite number >= 0 (cost units), got {beam_delta!r}")


def is_number(value: object) -> bool:
    """A Python int or float (numpy float64 included), not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_int(value: object) -> bool:
    """A Python int, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class PruningConfig:
    """The pruning options of Kaldi's `FasterDecoderOptions`.

    beam: > 0, the beam in cost units (stored rounded to float32, as Kaldi's `float beam`).
    max_active: > 1, the most tokens kept per frame (INT32_MAX = no limit).
    min_active: in [0, max_active), the fewest tokens kept per frame when the beam would keep fewer.
    beam_delta: >= 0, added to the adaptive beam when max_active or min_active sets the cutoff (as float32).
    """

    beam: float = 16.0
    max_active: int = INT32_MAX
    min_active: int = 20
    beam_delta: float = 0.5

    def __post_init__(self) -> None:
        check_pruning("PruningConfig", self.beam, self.max_active, self.min_active, self.beam_delta)

    @cached_property
    def beam32(self) -> float:
        """The beam rounded to float32, as a Python float."""
        return float(np.float32(self.beam))

    @cached_property
    def beam_delta32(self) -> float:
        """beam_delta rounded to float32, as Kaldi's `float beam_delta` holds it (0.1 is not 0.1 there)."""
        return float(np.float32(self.beam_delta))

    @property
    def unconstrained(self) -> bool:
        """True when neither max_active nor min_active can decide (Kaldi's shortcut branch)."""
        return self.max_active == INT32_MAX and self.min_active == 0


class Cutoff(NamedTuple):
    """The result of `get_cutoff` for one frame.

    weight_cutoff: tokens with cost < weight_cutoff (strictly) are expanded.
    adaptive_beam: float32 value (as a Python float) added to candidate costs for the next frame's cutoff.
    best: position of the best token (-1 when there are none).
    binding: BIND_BEAM, BIND_MAX_ACTIVE or BIND_MIN_ACTIVE: what set the cutoff.
    all_below: every token's cost is below weight_cutoff (nothing to prune).
    """

    weight_cutoff: float
    adaptive_beam: float
    best: int
    binding: int
    all_below: bool


def _order_statistic(costs32: np.ndarray, k: int) -> float:
    """The k-th smallest (0-based) of `costs32` (float32), as a float (Kaldi's nth_element)."""
    costs32.partition(k)  # in place: the callers pass a scratch copy
    return float(costs32[k])


def get_cutoff(costs: np.ndarray, config: PruningConfig) -> Cutoff:
    """Kaldi's GetCutoff over the active tokens' costs: (N,) float64.

    The best token is the first position with the minimum cost (Kaldi takes the first in its hash-list
    order, so on exact ties the two may pick different tokens; only the next-cutoff pre-pass uses it).
    The min_active order statistic is skipped when even the worst token (rounded to float32) lies within
    the beam, since it cannot bind then.
    """
    count = costs.shape[0]
    if count == 0:
        return Cutoff(np.inf, config.beam32, -1, BIND_BEAM, True)
    best, worst = int(costs.argmin()), float(costs.max())
    best_cost = float(costs[best])
    beam_cutoff = best_cost + config.beam32
    if config.unconstrained:
        return Cutoff(beam_cutoff, config.beam32, best, BIND_BEAM, worst < beam_cutoff)
    costs32 = None
    if count > config.max_active:
        costs32 = costs.astype(np.float32)
        max_active_cutoff = _order_statistic(costs32, config.max_active)
        if max_active_cutoff < beam_cutoff:
            adaptive = float(np.float32(max_active_cutoff - best_cost + config.beam_delta32))
            return Cutoff(max_active_cutoff, adaptive, best, BIND_MAX_ACTIVE, worst < max_active_cutoff)
    min_active_cutoff = np.inf  # with min_active tokens or fewer, nothing is pruned (as in Kaldi)
    if count > config.min_active:
        if config.min_active == 0:
            min_active_cutoff = best_cost
        elif float(np.float32(worst)) <= beam_cutoff:
            min_active_cutoff = beam_cutoff  # the order statistic is <= float32(worst): it cannot bind
        else:
            costs32 = costs.astype(np.float32) if costs32 is None else costs32
            min_active_cutoff = _order_statistic(costs32, config.min_active)
    if min_active_cutoff > beam_cutoff:
        adaptive = float(np.float32(min_active_cutoff - best_cost + config.beam_delta32))
        return Cutoff(min_active_cutoff, adaptive, best, BIND_MIN_ACTIVE, worst < min_active_cutoff)
    return Cutoff(beam_cutoff, config.beam32, best, BIND_BEAM, worst < beam_cutoff)
