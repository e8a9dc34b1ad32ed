"""Beam pruning settings and rules (`specbench.decoder.pruning`) by hand: the defaults are Kaldi's
`FasterDecoderOptions` defaults (read from kaldi-decoder), every option is accepted at the edge of its range and
refused just outside it (and refused when of the wrong type: bools, floats for counts, infinities, NaN), and
`get_cutoff` on tiny token sets counted by hand, including a frame with no active tokens."""

from __future__ import annotations

import math

import kaldi_decoder
import numpy as np
import pytest

from specbench.decoder.pruning import (
    BIND_BEAM,
    BIND_MAX_ACTIVE,
    BIND_MIN_ACTIVE,
    INT32_MAX,
    Cutoff,
    PruningConfig,
    get_cutoff,
)

pytestmark = pytest.mark.unit


def test_the_defaults_are_kaldis_faster_decoder_defaults() -> None:
    kaldi = kaldi_decoder.FasterDecoderOptions()
    ours = PruningConfig()
    assert (ours.beam, ours.max_active, ours.min_active, ours.beam_delta) == (
        kaldi.beam, kaldi.max_active, kaldi.min_active, kaldi.beam_delta)  # 16, 2^31 - 1, 20, 0.5


@pytest.mark.parametrize("fields", [
    {"beam": 1e-6},  # any beam > 0
    {"beam": np.float64(2.5)},  # numpy's float64 is a float
    {"max_active": 2, "min_active": 1},  # the smallest max_active; min_active just below it
    {"max_active": INT32_MAX, "min_active": 0},  # no limit at all
    {"max_active": 10, "min_active": 9},
    {"beam_delta": 0.0},
    {"beam_delta": 0},  # an int is a number
])
def test_values_at_the_edges_of_each_range_are_accepted(fields: dict) -> None:
    config = PruningConfig(**fields)
    for name, value in fields.items():
        assert getattr(config, name) == value


@pytest.mark.parametrize(("fields", "says"), [
    ({"beam": 0.0}, "PruningConfig.beam must be a positive finite number"),
    ({"beam": -1.0}, "PruningConfig.beam must be a positive finite number"),
    ({"beam": math.inf}, "PruningConfig.beam must be a positive finite number"),
    ({"beam": math.nan}, "PruningConfig.beam must be a positive finite number"),
    ({"beam": True}, "PruningConfig.beam must be a positive finite number"),
    ({"beam": "16"}, "PruningConfig.beam must be a positive finite number"),
    ({"max_active": 1, "min_active": 0}, r"PruningConfig.max_active must be an int in \(1, 2147483647\]"),
    ({"max_active": INT32_MAX + 1}, r"PruningConfig.max_active must be an int in \(1, 2147483647\]"),
    ({"max_active": 30.0}, r"PruningConfig.max_active must be an int"),
    ({"max_active": True, "min_active": 0}, r"PruningConfig.max_active must be an int"),
    ({"max_active": 10, "min_active": 10}, r"PruningConfig.min_active must be an int in \[0, max_active=10\)"),
    ({"min_active": -1}, r"PruningConfig.min_active must be an int in \[0, max_active="),
    ({"min_active": 2.0}, r"PruningConfig.min_active must be an int"),
    ({"min_active": True}, r"PruningConfig.min_active must be an int"),
    ({"beam_delta": -0.25}, "PruningConfig.beam_delta must be a finite number >= 0"),
    ({"beam_delta": math.inf}, "PruningConfig.beam_delta must be a finite number >= 0"),
    ({"beam_delta": math.nan}, "PruningConfig.beam_delta must be a finite number >= 0"),
    ({"beam_delta": False}, "PruningConfig.beam_delta must be a finite number >= 0"),
])
def test_values_outside_each_range_are_refused_naming_the_field(fields: dict, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        PruningConfig(**fields)


def test_a_frame_with_no_tokens_prunes_nothing_and_has_no_best() -> None:
    config = PruningConfig(beam=1.1, max_active=3, min_active=1)
    # beam 1.1 is not a float32: the adaptive beam is float32(1.1) = 1.10000002384185791015625
    assert get_cutoff(np.zeros(0), config) == Cutoff(math.inf, 1.10000002384185791015625, -1, BIND_BEAM, True)


def test_cutoffs_of_tiny_token_sets_counted_by_hand() -> None:
    costs = np.array([3.0, 0.0, 4.0, 1.0, 2.0])
    # beam alone: best 0.0 at position 1, cutoff 0 + 2.5; the 4.0 and 3.0 tokens are at/above it
    assert get_cutoff(costs, PruningConfig(beam=2.5, max_active=INT32_MAX, min_active=0)) == (
        2.5, 2.5, 1, BIND_BEAM, False)
    # max_active 2: sorted 0,1,2,3,4; the 0-based 2nd is 2.0 < 2.5: cutoff 2.0 keeps 2 tokens, adaptive 2 - 0 + 0.5
    assert get_cutoff(costs, PruningConfig(beam=2.5, max_active=2, min_active=0)) == (
        2.0, 2.5, 1, BIND_MAX_ACTIVE, False)
    # min_active 4: the 0-based 4th is 4.0 > 0 + 0.5: cutoff 4.0 (keeps 4 tokens), adaptive 4 - 0 + 0.25
    assert get_cutoff(costs, PruningConfig(beam=0.5, max_active=10, min_active=4, beam_delta=0.25)) == (
        4.0, 4.25, 1, BIND_MIN_ACTIVE, False)
    # 5 tokens, min_active 5: no more than min_active are active, so nothing is pruned (+inf), adaptive inf
    assert get_cutoff(costs, PruningConfig(beam=0.5, max_active=10, min_active=5)) == (
        math.inf, math.inf, 1, BIND_MIN_ACTIVE, True)
    # every token within the beam: all below the cutoff 0 + 8
    assert get_cutoff(costs, PruningConfig(beam=8.0, max_active=10, min_active=4)) == (8.0, 8.0, 1, BIND_BEAM, True)


def test_the_adaptive_beam_adds_beam_delta_as_kaldis_float32() -> None:
    f32 = np.float32
    # a best cost where float64 0.1 and float32 0.1 round the adaptive beam to different float32 values
    best = next(c for c in (float(f32(0.01 + k * 1e-7)) for k in range(1, 100_000))
                if f32(3.5 - c + 0.1) != f32(3.5 - c + float(f32(0.1))))
    cut = get_cutoff(np.array([best, 1.0, 2.0, 3.5]), PruningConfig(beam=10.0, max_active=3, min_active=1,
                                                                    beam_delta=0.1))
    assert cut.adaptive_beam == float(f32(3.5 - best + float(f32(0.1))))  # Kaldi's `float beam_delta`
