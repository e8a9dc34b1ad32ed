"""What every decoder backend returns for one utterance: `DecodeResult`, with its `DecodeStats`.

Costs are tropical (negated natural-log probabilities), split like the weight of Kaldi's best-path lattice:
`graph_cost` (value1) is the sum of the graph weights along the best path plus the final weight of its last
state; `acoustic_cost` (value2) is the negated sum of the *scaled* log-likelihoods the path consumed, one per
frame (`-acoustic_scale * loglikes[t, ilabel - 1]`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields

import numpy as np

from specbench.decoder.inputs import ScoresError

STATUS_OK = "ok"
STATUS_NO_FINAL = "no final state reached"
STATUS_EMPTY = "empty utterance"
STATUS_BAD_SCORES = "bad scores"  # followed by ": " and the reason
STATUS_OVERFLOW = "queue overflow"  # a lane decoder's fixed-size queue was full
STATUS_MALFORMED = "malformed scores"  # followed by ": " and the reason (a row whose size is not T x P)
STATUS_DECODER_ERROR = "decoder error"  # followed by ": " and the reason (the search itself failed)


@dataclass(frozen=True)
class DecodeStats:
    """Counters of one decoded utterance (all non-negative ints).

    frames: frames decoded.
    tokens_created: candidate tokens that survived the beam, before recombination (emitting arcs with a
        cost below the frame's next cutoff, epsilon expansions at or below it).
    tokens_pruned: active tokens not expanded because their cost reached the frame's cutoff, plus candidate
        tokens rejected by the beam.
    max_active_binds: frames whose cutoff was set by max_active (more tokens than max_active within beam).
    min_active_binds: frames whose cutoff was widened by min_active (fewer than min_active within beam).
    beam_narrowings: frames whose adaptive beam came out below the configured beam.
    epsilon_iterations: rounds of epsilon expansion over all frames (a precomputed epsilon closure counts
        one round per expansion).
    queue_overflows: tokens dropped because a fixed-size queue was full (always 0 on the CPU).
    """

    frames: int = 0
    tokens_created: int = 0
    tokens_pruned: int = 0
    max_active_binds: int = 0
    min_active_binds: int = 0
    beam_narrowings: int = 0
    epsilon_iterations: int = 0
    queue_overflows: int = 0

    def __post_init__(self) -> None:
        for name in _STATS_FIELDS:  # cached: `fields()` per result was a large share of lane result assembly
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"DecodeStats.{name} must be a non-negative int, got {value!r}")



_STATS_FIELDS = tuple(item.name for item in fields(DecodeStats))

@dataclass(frozen=True)
class PartialHypothesis:
    """The best path after frames 0..frame, cut to its complete words (see `traceback.partial_words`).

    frame: the last frame used (0-based); its end time is (frame + 1) * frame shift.
    word_ids: the complete words of the best partial path, in order.
    lattice: with `SearchOptions.partial_lattices`, the pruned lattice of frames 0..frame with every state
        final at cost 0 (`lattice.WordLattice`, None when no path survives); not part of equality.
    """

    frame: int
    word_ids: tuple[int, ...]
    lattice: object | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class DecodeResult:
    """The 1-best of one utterance.

    utt_id: the utterance id.
    status: "ok", or why there is no hypothesis, as a plain sentence (the STATUS_* texts above: "no final
        state reached", "empty utterance", "bad scores: <reason>", "queue overflow"; rows of the decoder
        stage may also say "malformed scores: <reason>" or "decoder error: <reason>"), never an exception's
        class name; then word_ids and word_end_frames are empty and both costs are +inf.
    word_ids: output labels (word ids) along the best path, epsilons (0) left out.
    graph_cost, acoustic_cost: see the module docstring; total_cost is their sum.
    num_frames: frames decoded (T).
    word_end_frames: one int per word. Number the path's emitting arcs 0..T-1 (= the frame each consumed).
        Word k's label sits on some arc of the path; word_end_frames[k] is the frame of the last emitting arc
        before the arc that carries word k + 1's label (i.e. one less than the number of emitting arcs
        before that arc), and T - 1 for the last word. So a word's segment runs from its own label to the
        next word's label, trailing blanks included; a word whose segment holds no emitting arc gets the
        frame before its label (possibly -1 when no frame precedes it).
    stats: the search's counters.
    lattice: the pruned word lattice (`lattice.WordLattice`) when one was asked for, else None.
    partials: `PartialHypothesis` values at the frames asked for, in frame order.
    """

    utt_id: str
    status: str
    word_ids: tuple[int, ...]
    graph_cost: float
    acoustic_cost: float
    num_frames: int
    word_end_frames: tuple[int, ...]
    stats: DecodeStats = field(default_factory=DecodeStats)
    lattice: object | None = None
    partials: tuple = ()

    def __post_init__(self) -> None:
        if not isinstance(self.status, str) or not self.status:
            raise ValueError(f"DecodeResult.status must be a non-empty string, got {self.status!r}")
        if len(self.word_end_frames) != len(self.word_ids):
            raise ValueError(
                f"DecodeResult.word_end_frames has {len(self.word_end_frames)} entries for "
                f"{len(self.word_ids)} words (utterance {self.utt_id!r})"
            )
        if self.num_frames < 0:
            raise ValueError(f"DecodeResult.num_frames must be >= 0, got {self.num_frames!r}")
        finite = math.isfinite(self.graph_cost) and math.isfinite(self.acoustic_cost)
        if self.status == STATUS_OK and not finite:
            raise ValueError(f"DecodeResult with status ok needs finite costs (utterance {self.utt_id!r})")

    @property
    def ok(self) -> bool:
        """Whether a hypothesis was found."""
        return self.status == STATUS_OK

    @property
    def total_cost(self) -> float:
        """graph_cost + acoustic_cost (+inf without a hypothesis)."""
        return self.graph_cost + self.acoustic_cost

    @classmethod
    def failed(cls, utt_id: str, status: str, num_frames: int, stats: DecodeStats) -> DecodeResult:
        """The defined empty result of an utterance without a hypothesis: no words, costs +inf."""
        if status == STATUS_OK:
            raise ValueError("DecodeResult.failed needs a reason, not 'ok'")
        return cls(
            utt_id=utt_id, status=status, word_ids=(), graph_cost=math.inf, acoustic_cost=math.inf,
            num_frames=num_frames, word_end_frames=(), stats=stats,
        )

    @classmethod
    def bad_scores(cls, utt_id: str, err: Exception) -> DecodeResult:
        """The failed result of an utterance whose scores were rejected (`STATUS_BAD_SCORES: reason`)."""
        return cls.failed(str(utt_id), f"{STATUS_BAD_SCORES}: {err}", 0, DecodeStats())

    def output_row(self, id_key: str = "id") -> dict:
        """DESIGN.md's decoder-output fields: the utterance id (under `id_key`), status, word_ids, graph_cost
        and acoustic_cost (None without a hypothesis), num_frames, word_end_frames."""
        return {id_key: self.utt_id, "status": self.status, "num_frames": self.num_frames,
                "word_ids": list(self.word_ids), "word_end_frames": list(self.word_end_frames),
                "graph_cost": self.graph_cost if self.ok else None,
                "acoustic_cost": self.acoustic_cost if self.ok else None}


DecodeOne = Callable[[np.ndarray, str, "int | None"], DecodeResult]


def decode_each(decode: DecodeOne, items: Sequence[tuple[str, np.ndarray]],
                partial_every: int | None = None) -> list[DecodeResult]:
    """`decode_batch` of a backend that decodes one utterance at a time: `decode(loglikes (T, P), utt_id,
    partial_every)` per (utt_id, loglikes) item, in order; an item whose scores `decode` rejects
    (`ScoresError`) gets `DecodeResult.bad_scores` and never stops the others (any other error is the
    decoder's, and raises)."""
    results = []
    for utt_id, loglikes in items:
        try:
            results.append(decode(loglikes, str(utt_id), partial_every))
        except ScoresError as err:
            results.append(DecodeResult.bad_scores(str(utt_id), err))
    return results
