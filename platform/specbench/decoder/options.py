"""`SearchOptions`: the search settings that every decoder backend takes, whole, as one value.

Every backend (`cpu.CpuDecoder`, `twin.TwinDecoder`, `gpu.GpuDecoder`, `kaldi_reference.KaldiFasterDecoder`,
all built by `backends.make_decoder`) reads its beams, active-token limits, acoustic scale, lattice beam and
partial-hypothesis interval from one `SearchOptions`; what only one backend has (the CPU epsilon mode, the
lane count and queue capacities, the CUDA device) stays a keyword argument of that backend.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from functools import cached_property

from specbench.decoder.pruning import PruningConfig, check_pruning, is_int, is_number

# Added to the lattice beam when a link is recorded (cost units): a token's cost and the cost through a link
# into it are sums of the same terms in different orders, so they may differ by a few ulps; without it a
# lattice beam of 0 could drop a link of the 1-best path itself. Pruning uses the beam as given.
LINK_SLACK = 1e-6


@dataclass(frozen=True)
class SearchOptions:
    """The search settings of one decoder (Kaldi's `FasterDecoderOptions`, plus lattices and partials).

    Costs are tropical: negated natural-log probabilities (graph weights plus scaled acoustic costs).

    beam: > 0, cost units: tokens costing more than the frame's best + beam are pruned.
    max_active: int in (1, 2^31 - 1], tokens: the most kept per frame (2^31 - 1: no limit).
    min_active: int in [0, max_active), tokens: the fewest kept per frame when the beam would keep fewer.
    beam_delta: >= 0, cost units: added to the adaptive beam when max_active or min_active sets the cutoff.
    acoustic_scale: > 0, finite: the (T, P) log-likelihoods are multiplied by it (in float32) before decoding.
    lattice_beam: None (1-best only) or >= 0 (math.inf allowed), cost units: the pruned word lattice keeps
        the arcs on paths within this of the best path.
    partial_every: None (no partial hypotheses) or int >= 1, frames: the best partial path is taken after
        every that many frames (`DecodeResult.partials`).
    partial_lattices: with a lattice beam, each partial hypothesis also carries the pruned lattice of the
        audio so far (`PartialHypothesis.lattice`: every state final at cost 0, Kaldi's `use_final_probs =
        false`), built in the same pass from the links recorded up to that frame.
    """

    beam: float = 15.0
    max_active: int = 10000
    min_active: int = 20
    beam_delta: float = 0.5
    acoustic_scale: float = 1.0
    lattice_beam: float | None = None
    partial_every: int | None = None
    partial_lattices: bool = False

    def __post_init__(self) -> None:
        check_pruning("SearchOptions", self.beam, self.max_active, self.min_active, self.beam_delta)
        scale = self.acoustic_scale
        if not (is_number(scale) and 0 < scale < math.inf):
            raise ValueError(f"SearchOptions.acoustic_scale must be a positive finite number, got {scale!r}")
        if self.lattice_beam is not None and not (is_number(self.lattice_beam) and self.lattice_beam >= 0):
            raise ValueError("SearchOptions.lattice_beam must be a number >= 0 (cost units), or None for no "
                             f"lattice, got {self.lattice_beam!r}")
        every = self.partial_every
        if every is not None and not (is_int(every) and every >= 1):
            raise ValueError("SearchOptions.partial_every must be an int >= 1 (frames), or None for no partial "
                             f"hypotheses, got {every!r}")
        if self.partial_lattices and self.lattice_beam is None:
            raise ValueError("SearchOptions.partial_lattices needs a lattice: set lattice_beam (e.g. 8.0) too")

    @property
    def link_beam(self) -> float | None:
        """The beam within which a link is recorded during the search: `lattice_beam` + `LINK_SLACK`."""
        return None if self.lattice_beam is None else float(self.lattice_beam) + LINK_SLACK

    @cached_property
    def pruning(self) -> PruningConfig:
        """The pruning part (beam, max_active, min_active, beam_delta) as `pruning.PruningConfig`."""
        return PruningConfig(beam=self.beam, max_active=self.max_active, min_active=self.min_active,
                             beam_delta=self.beam_delta)

    def require_one_best(self, backend: str, partials: bool = False) -> None:
        """Raise ValueError when a backend that gives the 1-best only is asked for a lattice or for partial
        hypotheses (here, or with `partials`)."""
        if self.lattice_beam is not None or self.partial_every or partials:
            raise ValueError(f"the {backend} backend gives 1-best only: lattices and partials need cpu, twin "
                             "or gpu (leave lattice_beam and partial_every unset)")

    def require_no_partial_lattices(self, backend: str) -> None:
        """Raise ValueError when a backend without partial lattices is asked for them."""
        if self.partial_lattices:
            raise ValueError(f"the {backend} backend has no partial lattices yet: use the cpu or cpu_numpy "
                             "backend, or leave partial_lattices unset")


DEFAULT_OPTIONS = SearchOptions()


def require_options(owner: str, options: object) -> SearchOptions:
    """`options` when it is a SearchOptions, else a TypeError naming `owner` and the fix."""
    if not isinstance(options, SearchOptions):
        raise TypeError(f"{owner}.options must be a specbench.decoder.options.SearchOptions, got "
                        f"{type(options).__name__}. Fix: pass SearchOptions(beam=..., max_active=..., ...)")
    return options


def call_partial_every(options: SearchOptions, partial_every: int | None) -> int | None:
    """The partial interval of one decode call: the call's `partial_every` when given (0: none in this call),
    else the options'. A call's value that is not a whole number >= 0 is a ValueError (every backend the
    same: a float was rounded by one and used as a modulus by another)."""
    if partial_every is not None and (isinstance(partial_every, bool) or
                                      not isinstance(partial_every, numbers.Integral) or partial_every < 0):
        raise ValueError("partial_every must be >= 1 frame, a whole number (0 or None: no partial hypotheses "
                         f"in this call), got {partial_every!r}")
    return options.partial_every if partial_every is None else int(partial_every)
