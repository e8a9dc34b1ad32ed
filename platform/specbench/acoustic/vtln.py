"""Vocal-tract-length normalization (VTLN): one mel-axis warp per speaker, chosen without transcripts.

A speaker whose vocal tract is longer than any training voice's has lower formants than the model has
heard (flite's `rms` against the nine training voices). Stretching that speaker's normalized fbank along
the mel axis by one factor moves the formants back among the training voices'. The model already saw such
stretches: training warps every utterance by a random factor in [1 - freq_warp, 1 + freq_warp]
(`training.spec_augment`; [0.88, 1.12] for the shipped model), with this same function; a grid that goes
further (`jobs/am_eval.toml` to 1.15) offers factors it never saw.

The factor is chosen per speaker from the speaker's *other* utterances (in a voice assistant: the user's
earlier requests), never from the utterance being recognized, so recognition stays causal. It is the
factor, on a grid, under which the model is most confident about phones: the highest mean, over the output
frames whose most likely class is a phone, of that class's log-posterior. Blank frames are left out: they
are most of a CTC model's output and it is sure of them whatever the warp (on 50 noisy devel utterances of
`rms`, the mean over all frames was flat across 0.94..1.10 and peaked at 0.96, while the phone frames
peaked at 1.08, next to 1.06, the warp of lowest phone error rate on them; the evaluation uses 100). A factor
under which the blank wins every frame ranks last. That is the classic VTLN search (a grid of warps, keep
the one of maximum likelihood; Lee & Rose, "Speaker normalization using efficient frequency warping
procedures", ICASSP 1996), with the CTC model's own confidence in place of an HMM likelihood, since no
transcript is used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

IDENTITY = 1.0
BLANK = 0  # the CTC blank's column


def warp_mel_axis(feats: torch.Tensor, factor: float) -> torch.Tensor:
    """Stretch `(..., F)` features along the last (mel) axis by `factor`: output bin i reads input position
    i / factor (linear interpolation, clamped at the edges). factor > 1 moves spectral features to higher
    bins (raises formants), factor < 1 lowers them; factor 1 returns the input unchanged."""
    if factor <= 0:
        raise ValueError(f"warp factor must be positive, got {factor}")
    if factor == IDENTITY:
        return feats
    bins = feats.shape[-1]
    source = torch.clamp(torch.arange(bins, dtype=torch.float32, device=feats.device) / factor, 0, bins - 1)
    low = source.floor().long()
    high = torch.clamp(low + 1, max=bins - 1)
    frac = (source - low).to(feats.dtype)
    return feats[..., low] * (1 - frac) + feats[..., high] * frac


def warp_grid(low: float, high: float, step: float) -> tuple[float, ...]:
    """Factors from `low` to `high` inclusive in steps of `step`, rounded to 4 decimals; always holds 1.0."""
    if not 0 < low <= IDENTITY <= high or step <= 0:
        raise ValueError(f"warp grid needs 0 < low <= 1 <= high and step > 0, got low={low}, high={high}, "
                         f"step={step}")
    count = int(round((high - low) / step))
    grid = {round(low + i * step, 4) for i in range(count + 1)} | {IDENTITY}
    return tuple(sorted(f for f in grid if f <= high + 1e-9))


class NoPhoneFrames(ValueError):
    """The model puts the blank first on every frame of the adaptation audio: no confidence to compare."""


def frame_confidence(logprobs: Sequence[np.ndarray], blank: int = BLANK) -> float:
    """Mean, over the frames whose most likely class is not the blank, of that class's log-posterior (0 is
    certainty; lower is less sure)."""
    frames = [m.max(axis=1)[m.argmax(axis=1) != blank] for m in logprobs if len(m)]
    frames = [f for f in frames if len(f)]
    if not frames:
        raise NoPhoneFrames("no output frame where a phone is most likely: the adaptation audio is empty or "
                         "silent; give the speaker utterances with speech in them")
    return float(np.concatenate(frames).mean())


@dataclass(frozen=True)
class WarpChoice:
    """The chosen factor and the confidence of every factor tried (`{factor: frame_confidence}`)."""

    factor: float
    confidence: dict[float, float]


def choose_warp(score: Callable[[Sequence[np.ndarray], float], Sequence[np.ndarray]],
                feats_list: Sequence[np.ndarray], factors: Sequence[float]) -> WarpChoice:
    """The factor of `factors` under which `score(feats_list, factor)` (log-probability matrices) is most
    confident; ties go to the factor closest to 1. A factor under which no frame puts a phone first ranks
    last (confidence -inf); `NoPhoneFrames` only when that holds for every factor."""
    if not factors:
        raise ValueError("no warp factors to choose from")
    confidence: dict[float, float] = {}
    for f in map(float, factors):
        try:
            confidence[f] = frame_confidence(score(feats_list, f))
        except NoPhoneFrames:
            confidence[f] = -math.inf
    if all(c == -math.inf for c in confidence.values()):
        raise NoPhoneFrames(f"no output frame where a phone is most likely under any warp from "
                            f"{min(confidence)} to {max(confidence)}: the adaptation audio is empty or "
                            "silent; give the speaker utterances with speech in them")
    best = max(confidence, key=lambda f: (round(confidence[f], 9), -abs(f - IDENTITY)))
    return WarpChoice(best, confidence)
