"""Kaldi's `FasterDecoder` in plain Python: the oracle for our decoders' beam, max_active and min_active.

`faster_decode(graph, loglikes, options)` follows `kaldi/src/decoder/faster-decoder.cc` (as kaldi-decoder
copies it, `kaldi-decoder/csrc/faster-decoder.cc`) step by step, over a graph given as OpenFst text
(`parse_fst_text`), with the beam, max_active, min_active, beam_delta and acoustic scale of a `SearchOptions`:

- InitDecoding: one token at the start state, cost 0, then ProcessNonemitting(FLT_MAX).
- GetCutoff, over the tokens in list order: the best token is the first with the lowest cost; the beam
  cutoff is best + beam. Unless max_active is 2^31 - 1 and min_active 0 (no order statistics then): with more
  than max_active tokens, the max_active-th smallest cost (0-based) is the cutoff when it is below the beam
  cutoff; else, with more than min_active tokens, the min_active-th smallest (the best when min_active is 0)
  is the cutoff when it is above the beam cutoff; with min_active tokens or fewer the cutoff is +inf. When
  max_active or min_active sets the cutoff, the adaptive beam is cutoff - best + beam_delta, else the beam.
  The order statistics are over the costs rounded to float32 (`tmp_array_` is a `vector<float>`); the beam,
  beam_delta and the adaptive beam are float32.
- ProcessEmitting: the best token's emitting arcs seed the next cutoff (new + adaptive beam); then every
  token with cost < the weight cutoff, in list order, expands its emitting arcs in arc order: a candidate
  new = (weight + cost) + ac_cost (ac_cost: the negated scaled log-likelihood, float32) is created when new <
  the running next cutoff, which then becomes min(itself, new + adaptive beam); a state keeps its first
  token unless a strictly cheaper one comes. The next cutoff is the running one after the last token.
- ProcessNonemitting(cutoff): a last-in-first-out stack of the tokens, pushed in list order; a popped token
  above the cutoff is skipped; an epsilon arc gives cost + weight, dropped above the cutoff, else kept (and
  pushed) when its state has no token or a costlier one.
- ReachedFinal and GetBestPath: a final state is reached when a token sits on a state with a final weight;
  the best path is then that of the first token in list order with the lowest cost + final weight.

Kaldi's token list is a HashList: with one bucket per state (graphs of fewer than its 1000 initial buckets),
its order is the order of insertion, a replaced token keeping its place, as in a Python dict. Token costs are
float64, weights and acoustic costs float32, as in Kaldi.

`ours=True` applies the documented difference of our backends (`specbench/decoder/cpu.py`, "Where Kaldi
differs"; docs/decoders.md): only the tokens strictly below each frame's final cutoff are kept. Kaldi compares
its candidates with a running cutoff that falls as it walks the tokens, so it keeps tokens created before
the cutoff fell below them (the next GetCutoff prunes them, but they enter its max_active and min_active
counts, and after the last frame they stay), and its epsilon step keeps a move landing exactly on the
cutoff (our epsilon closure, the default for epsilon weights >= 0, drops it). Everything else is Kaldi's.

Ties are the other documented difference: among equally cheap candidates Kaldi keeps the first in its list
order, ours the lowest arc code. That changes no token cost (with `ours=True` which tokens are kept, and
their costs, do not depend on the order of the walk), only which of several equally cheap paths is traced
back, so the oracle does not copy our order: with `ours=True`, `Result.tied_words` holds the words of every
best path, and `mismatch` accepts any of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from specbench.decoder.options import SearchOptions
from specbench.decoder.result import STATUS_NO_FINAL, DecodeResult

FLT_MAX = float(np.finfo(np.float32).max)
NO_LIMIT = 2**31 - 1  # max_active without a limit (std::numeric_limits<int32>::max())
TIE = 1e-9  # relative: costs this close are equal (float64 sums of float32 values, added in another order)
KALDI_TOLERANCE = 1e-5  # relative: kaldi-decoder's total cost sums its best path's float32 costs


def f32(value: float) -> float:
    """`value` rounded to float32, as a Python float."""
    return float(np.float32(value))


def tied(cost: float, other: float, rel_tol: float = TIE) -> bool:
    """`cost` equals `other` within `rel_tol` relative (absolute below 1): by default, up to float64
    rounding."""
    return abs(cost - other) <= rel_tol * max(1.0, abs(other))


# ------------------------------------------------------------------------------------------------- graphs


@dataclass(frozen=True)
class Arc:
    dest: int
    ilabel: int
    olabel: int
    weight: float  # float32


@dataclass(frozen=True)
class TextGraph:
    """An OpenFst text graph: each state's arcs in the file's order (Kaldi's ArcIterator order), the final
    weights, and the start state (the source of the first line)."""

    arcs: dict[int, list[Arc]]
    finals: dict[int, float]
    start: int


def parse_fst_text(text: str) -> TextGraph:
    """OpenFst text: `src dest ilabel olabel [weight]` arcs, `state [weight]` finals; weights as float32."""
    arcs: dict[int, list[Arc]] = {}
    finals: dict[int, float] = {}
    for line in text.strip().splitlines():
        parts = line.split()
        weight = f32(float(parts[-1])) if len(parts) in (2, 5) else 0.0
        if len(parts) >= 4:
            arc = Arc(int(parts[1]), int(parts[2]), int(parts[3]), weight)
            arcs.setdefault(int(parts[0]), []).append(arc)
        else:
            finals[int(parts[0])] = weight
    states = set(arcs) | set(finals) | {arc.dest for out in arcs.values() for arc in out}
    assert arcs and max(states) < 1000, "Kaldi's token order is the insertion order below 1000 states only"
    return TextGraph(arcs, finals, int(text.split()[0]))


# ------------------------------------------------------------------------------------------------- search


@dataclass(eq=False)
class Token:
    cost: float  # float64
    prev: Token | None
    olabel: int

    def words(self) -> tuple[int, ...]:
        """The output labels of the path to this token, epsilons left out."""
        labels, token = [], self
        while token is not None:
            labels.append(token.olabel)
            token = token.prev
        return tuple(label for label in reversed(labels) if label)


@dataclass(frozen=True)
class Cutoff:
    """GetCutoff's answer for one frame.

    weight_cutoff: the tokens below it are expanded. adaptive_beam: float32, for the next cutoff.
    best: the best token's state (None without tokens).
    binding: what set the cutoff: "beam", "max_active" or "min_active" (+inf with min_active tokens or fewer).
    pruned: the tokens at or above the cutoff. tied: the tokens whose float32 cost equals it (2 or more: equal
        costs at an order statistic).
    """

    weight_cutoff: float
    adaptive_beam: float
    best: int | None
    binding: str
    pruned: int
    tied: int


def get_cutoff(tokens: dict[int, Token], options: SearchOptions) -> Cutoff:
    """Kaldi's GetCutoff over the tokens in list order (the module docstring)."""
    beam, beam_delta = f32(options.beam), f32(options.beam_delta)
    max_active, min_active = options.max_active, options.min_active
    best, best_cost = None, math.inf
    for state, token in tokens.items():
        if token.cost < best_cost:
            best, best_cost = state, token.cost
    costs = np.array([token.cost for token in tokens.values()])
    costs32 = costs.astype(np.float32)  # Kaldi's tmp_array_

    def answer(cutoff: float, adaptive: float, binding: str) -> Cutoff:
        pruned, tied_at = int((costs >= cutoff).sum()), int((costs32 == cutoff).sum())
        return Cutoff(cutoff, adaptive, best, binding, pruned, tied_at)

    beam_cutoff = best_cost + beam
    if max_active == NO_LIMIT and min_active == 0:
        return answer(beam_cutoff, beam, "beam")
    if len(costs) > max_active:
        max_active_cutoff = float(np.partition(costs32, max_active)[max_active])
        if max_active_cutoff < beam_cutoff:
            return answer(max_active_cutoff, f32(max_active_cutoff - best_cost + beam_delta), "max_active")
    min_active_cutoff = math.inf
    if len(costs) > min_active:
        min_active_cutoff = float(np.partition(costs32, min_active)[min_active]) if min_active else best_cost
    if min_active_cutoff > beam_cutoff:
        return answer(min_active_cutoff, f32(min_active_cutoff - best_cost + beam_delta), "min_active")
    return answer(beam_cutoff, beam, "beam")


def process_emitting(graph: TextGraph, tokens: dict[int, Token], ac_costs: np.ndarray,
                     cut: Cutoff) -> tuple[dict[int, Token], float]:
    """Kaldi's ProcessEmitting after GetCutoff: the new tokens and the next cutoff. ac_costs: (P,) float32."""
    next_cutoff = math.inf
    if cut.best is not None:  # the best token's arcs give a first bound
        for arc in graph.arcs.get(cut.best, []):
            if arc.ilabel:
                new = arc.weight + tokens[cut.best].cost + float(ac_costs[arc.ilabel - 1])
                next_cutoff = min(next_cutoff, new + cut.adaptive_beam)
    fresh: dict[int, Token] = {}
    for state, token in tokens.items():
        if not token.cost < cut.weight_cutoff:
            continue
        for arc in graph.arcs.get(state, []):
            if not arc.ilabel:
                continue
            new = arc.weight + token.cost + float(ac_costs[arc.ilabel - 1])
            if new < next_cutoff:
                next_cutoff = min(next_cutoff, new + cut.adaptive_beam)
                found = fresh.get(arc.dest)
                if found is None or found.cost > new:
                    fresh[arc.dest] = Token(new, token, arc.olabel)
    return fresh, next_cutoff


def process_nonemitting(graph: TextGraph, tokens: dict[int, Token], cutoff: float, ours: bool) -> None:
    """Kaldi's ProcessNonemitting(cutoff), in place. `ours`: a move landing exactly on the cutoff is dropped
    (Kaldi keeps it)."""
    stack = list(tokens)
    while stack:
        state = stack.pop()
        token = tokens[state]
        if token.cost > cutoff:
            continue
        for arc in graph.arcs.get(state, []):
            if arc.ilabel:
                continue
            new = token.cost + arc.weight
            if new > cutoff or (ours and new == cutoff):
                continue
            found = tokens.get(arc.dest)
            if found is None or found.cost > new:
                tokens[arc.dest] = Token(new, token, arc.olabel)
                stack.append(arc.dest)


@dataclass
class Result:
    """reached_final: a final state was reached (else no words and total_cost +inf).
    words, total_cost: the best path (on ties, the first in Kaldi's token order).
    tied_words: with `ours=True`, the words of every best path (`tied_paths`); else `words` alone.
    cutoffs: GetCutoff's answer for every frame."""

    reached_final: bool
    words: tuple[int, ...] = ()
    total_cost: float = math.inf
    tied_words: frozenset[tuple[int, ...]] = frozenset()
    cutoffs: list[Cutoff] = field(default_factory=list)

    def binds(self, binding: str) -> bool:
        """Whether `binding` set the cutoff of some frame and pruned a token there ("beam", "max_active"), or
        set a finite cutoff above the beam's ("min_active")."""
        return any(cut.binding == binding and (cut.weight_cutoff < math.inf if binding == "min_active"
                                               else cut.pruned > 0) for cut in self.cutoffs)


def faster_decode(graph: TextGraph, loglikes: np.ndarray, options: SearchOptions,
                  ours: bool = False) -> Result:
    """Kaldi's FasterDecoder over `loglikes` (T, P) float32 (column j: input label j + 1), multiplied by the
    acoustic scale in float32 first (as specbench's kaldi backend does). `ours`: keep only the tokens strictly
    below each frame's final cutoff (the module docstring). Only the pruning options and the acoustic scale
    of `options` are read."""
    scaled = (np.asarray(loglikes, dtype=np.float32) * np.float32(options.acoustic_scale)).astype(np.float32)
    ac_costs = -scaled
    tokens = {graph.start: Token(0.0, None, 0)}
    process_nonemitting(graph, tokens, FLT_MAX, ours)
    kept, cutoffs = [tokens], []
    for row in ac_costs:
        cut = get_cutoff(tokens, options)
        tokens, next_cutoff = process_emitting(graph, tokens, row, cut)
        if ours:
            tokens = {state: token for state, token in tokens.items() if token.cost < next_cutoff}
        process_nonemitting(graph, tokens, next_cutoff, ours)
        cutoffs.append(cut)
        kept.append(tokens)
    finals = [(token.cost + graph.finals[state], token) for state, token in tokens.items()
              if state in graph.finals and token.cost != math.inf]
    if not finals:
        return Result(False, cutoffs=cutoffs)
    total, best = min(finals, key=lambda pair: pair[0])  # the first of equal ones, as in Kaldi
    words = best.words()
    alternatives = tied_paths(graph, kept, cutoffs, ac_costs, total) if ours else frozenset({words})
    assert words in alternatives
    return Result(True, words, total, alternatives, cutoffs)


# --------------------------------------------------------------------------------------------------- ties


def tied_paths(graph: TextGraph, kept: list[dict[int, Token]], cutoffs: list[Cutoff], ac_costs: np.ndarray,
               total: float) -> frozenset[tuple[int, ...]]:
    """The words of every path through the kept tokens (kept[t]: after frame t; kept[0]: after InitDecoding)
    whose every arc reaches its token at the token's cost (an emitting arc only from a token below its frame's
    weight cutoff) and that ends on a final state at `total` (costs compared by `tied`). Forward, one set of
    word sequences per token; within a frame, epsilon paths visit no state twice."""
    words: dict[int, set[tuple[int, ...]]] = {graph.start: {()}}
    for t, tokens in enumerate(kept):
        if t:  # the emitting arcs of frame t - 1
            before, entering = kept[t - 1], {}
            for state, sequences in words.items():
                if not before[state].cost < cutoffs[t - 1].weight_cutoff:
                    continue
                for arc in graph.arcs.get(state, []):
                    if not arc.ilabel or arc.dest not in tokens:
                        continue
                    new = arc.weight + before[state].cost + float(ac_costs[t - 1, arc.ilabel - 1])
                    if tied(new, tokens[arc.dest].cost):
                        entering.setdefault(arc.dest, set()).update(_append(sequences, arc.olabel))
            words = entering
        closed: dict[int, set[tuple[int, ...]]] = {}

        def walk(state: int, sequences: set[tuple[int, ...]], visited: frozenset[int]) -> None:
            closed.setdefault(state, set()).update(sequences)
            for arc in graph.arcs.get(state, []):
                if not arc.ilabel and arc.dest in tokens and arc.dest not in visited \
                        and tied(tokens[state].cost + arc.weight, tokens[arc.dest].cost):
                    walk(arc.dest, _append(sequences, arc.olabel), visited | {arc.dest})

        for state, sequences in words.items():
            walk(state, sequences, frozenset({state}))
        words = closed
        assert sum(map(len, words.values())) < 100_000, "too many tied paths for this oracle"
    return frozenset(sequence for state, sequences in words.items() if state in graph.finals
                     and tied(kept[-1][state].cost + graph.finals[state], total) for sequence in sequences)


def _append(sequences: set[tuple[int, ...]], label: int) -> set[tuple[int, ...]]:
    return {sequence + (label,) for sequence in sequences} if label else sequences


def mismatch(result: DecodeResult, expected: Result, rel_tol: float = TIE) -> str | None:
    """What differs between a decoder's result and the oracle's (None: nothing). They agree when neither
    reaches a final state (status "no final state reached", no words, cost +inf), or when both do with total
    costs within `rel_tol` (`tied`) and the decoder's words among `expected.tied_words`."""
    if not expected.reached_final:
        if result.status == STATUS_NO_FINAL and result.word_ids == () and result.total_cost == math.inf:
            return None
        return f"{result.status!r} {result.word_ids} {result.total_cost!r}, the oracle reached no final state"
    if result.ok and result.word_ids in expected.tied_words \
            and tied(result.total_cost, expected.total_cost, rel_tol):
        return None
    several = len(expected.tied_words) > 1
    ties = f" (words of its best paths: {sorted(expected.tied_words)})" if several else ""
    return (f"{result.status!r} {result.word_ids} {result.total_cost!r}, the oracle {expected.words} "
            f"{expected.total_cost!r}{ties}")


# ------------------------------------------------------------------------------------------ random inputs


def random_graph_text(rng: np.random.Generator, num_states: int, width: int, zero_epsilons: float = 0.0,
                      step: float = 0.0) -> str:
    """OpenFst text: 1-4 arcs per state (a fifth epsilon, weights >= 0), self-loops, several finals.
    `zero_epsilons`: the share of epsilon arcs that weigh 0; `step` > 0: weights rounded to multiples of it.
    Either makes paths of exactly equal cost; with neither, the random draws are those of the generator that
    tests/integration/test_decoder_kaldi_parity.py had before these options."""

    def weight(high: float) -> float:
        value = rng.uniform(0.0, high)
        return f32(round(value / step) * step if step else value)

    lines = []
    for src in range(num_states):
        for _ in range(int(rng.integers(1, 5))):
            ilabel = 0 if rng.random() < 0.2 else int(rng.integers(1, width + 1))
            olabel = 0 if rng.random() < 0.6 else int(rng.integers(1, 20))
            cost = weight(2.0)
            if ilabel == 0 and zero_epsilons and rng.random() < zero_epsilons:
                cost = 0.0
            lines.append(f"{src} {int(rng.integers(0, num_states))} {ilabel} {olabel} {cost!r}")
    finals = [s for s in range(num_states) if rng.random() < 0.3] or [num_states - 1]
    lines += [f"{s} {weight(1.0)!r}" for s in finals]
    return "\n".join(lines) + "\n"


def random_scores(rng: np.random.Generator, frames: int, width: int, step: float = 0.0) -> np.ndarray:
    """(frames, width) float32 log-softmax of N(0, 2) logits; `step` > 0: rounded to multiples of it (many
    equal scores)."""
    logits = rng.normal(0.0, 2.0, size=(frames, width))
    logits -= logits.max(axis=1, keepdims=True)
    scores = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return (np.round(scores / step) * step if step else scores).astype(np.float32)
