"""The backends' beam, max_active and min_active pruning at finite beams against a Kaldi FasterDecoder oracle.

The oracle (`tests/kaldi_faster_reference.py`) follows Kaldi's FasterDecoder step by step; with `ours=True`
it applies the backends' documented difference (only the tokens strictly below a frame's final cutoff are
kept). On seeded random small graphs and scores, `cpu_numpy`, `cpu` and `twin` must give the oracle's
status, its total cost (up to float64 rounding) and its 1-best words, or, where several best paths cost
exactly the same, the words of one of them (ties are broken by the lowest arc code, not by Kaldi's token
order). The inputs are made so that the beam, max_active and min_active each set cutoffs (counted by the
oracle and asserted, so that the comparison cannot pass vacuously), at acoustic scales 1 and 0.3, with
zero-weight epsilon arcs, weights and scores rounded to a grid (equal token costs, also at the max_active and
min_active order statistics), and with the documented difference changing the result of some utterances.
The oracle itself is checked against kaldi-decoder's C++ FasterDecoder (without the difference) and its
tied paths against brute force. Run with `-s` to see the counts.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import kaldifst
import numpy as np
import pytest
from kaldi_faster_reference import (
    KALDI_TOLERANCE,
    NO_LIMIT,
    Result,
    TextGraph,
    Token,
    faster_decode,
    get_cutoff,
    mismatch,
    parse_fst_text,
    random_graph_text,
    random_scores,
    tied,
)
from test_decoder_bruteforce import brute_force

from specbench.decoder.backends import make_decoder
from specbench.decoder.compiled_kernels import get_cutoff as compiled_cutoff
from specbench.decoder.options import SearchOptions
from specbench.decoder.pruning import BIND_BEAM, BIND_MAX_ACTIVE, BIND_MIN_ACTIVE, PruningConfig
from specbench.decoder.pruning import get_cutoff as our_cutoff

pytestmark = pytest.mark.unit

BACKENDS = ("cpu_numpy", "cpu", "twin")
SETTINGS = (  # every branch of Kaldi's GetCutoff, at acoustic scales 1 and 0.3
    SearchOptions(beam=2.0, max_active=NO_LIMIT, min_active=0),  # no order statistics: the beam alone
    SearchOptions(beam=1.0, max_active=3, min_active=1),
    SearchOptions(beam=4.0, max_active=4, min_active=2, acoustic_scale=0.3),
    SearchOptions(beam=0.5, max_active=6, min_active=3),
    SearchOptions(beam=1.0, max_active=NO_LIMIT, min_active=2, beam_delta=1.0, acoustic_scale=0.3),
    SearchOptions(beam=8.0, max_active=2, min_active=0, beam_delta=0.1, acoustic_scale=0.3),  # 0.1: not a float32
)
GRAPH_KINDS = ((0.0, 0.0), (0.4, 0.0), (0.0, 0.5), (0.4, 0.5))  # (share of zero-weight epsilons, weight step)
NUM_GRAPHS = 8 * len(SETTINGS) * len(GRAPH_KINDS)  # every setting on every kind of graph, 8 times
UTTERANCES = 5  # per graph, 1-29 frames each; the odd ones with scores rounded to integers


@dataclass
class Case:
    """One graph, its search settings, its utterances and the oracle's results (with our difference)."""

    name: str
    path: Path  # the graph as an OpenFst const file
    graph: TextGraph
    options: SearchOptions
    utterances: list[tuple[str, np.ndarray]]
    oracle: list[Result]


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> list[Case]:
    rng = np.random.default_rng(20250105)
    folder = tmp_path_factory.mktemp("pruning_oracle")
    made = []
    for g in range(NUM_GRAPHS):
        options = SETTINGS[g % len(SETTINGS)]
        zero_epsilons, step = GRAPH_KINDS[g // len(SETTINGS) % len(GRAPH_KINDS)]
        width = int(rng.integers(3, 7))
        text = random_graph_text(rng, int(rng.integers(3, 25)), width, zero_epsilons=zero_epsilons, step=step)
        path = folder / f"g{g}.fst"
        assert kaldifst.StdConstFst(kaldifst.compile(text, keep_state_numbering=True)).write(str(path))
        graph = parse_fst_text(text)
        utterances = [(f"g{g}u{u}", random_scores(rng, int(rng.integers(1, 30)), width, step=float(u % 2)))
                      for u in range(UTTERANCES)]
        oracle = [faster_decode(graph, loglikes, options, ours=True) for _, loglikes in utterances]
        made.append(Case(f"g{g} {options}", path, graph, options, utterances, oracle))
    return made


def test_the_cases_bind_every_limit(cases: list[Case]) -> None:
    """The beam, max_active and min_active each set cutoffs in many utterances, equal costs meet at the
    order statistics, and our documented difference changes the oracle's result in some utterances."""
    counts: Counter[str] = Counter()
    for case in cases:
        for (_, loglikes), result in zip(case.utterances, case.oracle, strict=True):
            counts["utterances"] += 1
            counts["reached a final state"] += result.reached_final
            for binding in ("beam", "max_active", "min_active"):
                counts[f"{binding} bound"] += result.binds(binding)
            counts["equal costs at an order statistic"] += any(
                c.binding != "beam" and c.tied > 1 and c.weight_cutoff < math.inf for c in result.cutoffs)
            counts["several best paths"] += len(result.tied_words) > 1
            kaldi = faster_decode(case.graph, loglikes, case.options)
            counts["changed by our difference"] += (kaldi.reached_final, kaldi.words, kaldi.total_cost) != (
                result.reached_final, result.words, result.total_cost)
    print(dict(counts))
    assert counts["utterances"] == NUM_GRAPHS * UTTERANCES
    for name in ("beam bound", "max_active bound", "min_active bound", "reached a final state"):
        assert counts[name] >= counts["utterances"] // 5, (name, counts)
    for name in ("equal costs at an order statistic", "several best paths", "changed by our difference"):
        assert counts[name] >= 10, (name, counts)
    assert counts["reached a final state"] <= counts["utterances"] - 20, counts


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_equals_the_oracle(cases: list[Case], backend: str) -> None:
    """Every utterance: the oracle's status, total cost and words (one of its tied best paths)."""
    differing, kaldi_order = [], 0
    for case in cases:
        decoder = make_decoder(backend, case.path, case.options)
        results = decoder.decode_batch(case.utterances)
        for (utt_id, _), result, expected in zip(case.utterances, results, case.oracle, strict=True):
            assert result.utt_id == utt_id
            problem = mismatch(result, expected)
            if problem:
                differing.append(f"{case.name} {utt_id}: {backend} {problem}")
            kaldi_order += result.ok and result.word_ids == expected.words
    print(f"{backend}: {len(differing)} of {NUM_GRAPHS * UTTERANCES} utterances differ from the oracle; "
          f"{kaldi_order} found paths have the words of Kaldi's tie order")
    assert not differing, "\n".join(differing[:10])


def test_the_cutoff_of_one_frame_equals_the_oracles() -> None:
    """`pruning.get_cutoff` (and the compiled frame loop's) against the oracle's GetCutoff frame by frame, on token costs drawn on a grid
    (ties at the order statistics, a worst token exactly at best + beam) and from a continuum, at beams that
    float32 cannot hold exactly (1.1: the cutoff is best + float32(beam)) and at min_active 0 with a finite
    max_active (the min_active step then never binds). `all_below`: every token strictly below the cutoff."""
    rng = np.random.default_rng(7)
    names = {BIND_BEAM: "beam", BIND_MAX_ACTIVE: "max_active", BIND_MIN_ACTIVE: "min_active"}
    settings = [(1.1, NO_LIMIT, 0), (1.1, 50, 0), (2.0, 4, 0), (1.0, 3, 1), (0.5, 6, 3), (1.1, NO_LIMIT, 2),
                (16.0, 8, 2)]
    seen, at_beam = set(), 0
    for beam, max_active, min_active in settings:
        config = PruningConfig(beam=beam, max_active=max_active, min_active=min_active, beam_delta=0.5)
        options = SearchOptions(beam=beam, max_active=max_active, min_active=min_active, beam_delta=0.5)
        for trial in range(300):
            count = int(rng.integers(1, 12))
            if trial % 3 == 0:  # a grid of quarter costs: ties, and a worst token at best + beam
                costs = rng.integers(0, 9, count) * 0.25
                if trial % 6 == 0:
                    costs[-1] = costs.min() + float(np.float32(beam))
            else:
                costs = rng.uniform(0, 3 * beam, count)
            ours = our_cutoff(costs, config)
            oracle = get_cutoff({i: Token(float(c), None, 0) for i, c in enumerate(costs)}, options)
            assert (ours.weight_cutoff, ours.adaptive_beam, ours.best, names[ours.binding]) == (
                oracle.weight_cutoff, oracle.adaptive_beam, oracle.best, oracle.binding), (beam, costs)
            assert ours.all_below == bool((costs < ours.weight_cutoff).all()), (beam, costs)
            assert compiled_cutoff(costs, count, config.beam32, max_active, min_active, 0.5,
                                   config.unconstrained) == tuple(ours), (beam, costs)
            seen.add((beam, max_active, min_active, oracle.binding))
            at_beam += bool(costs.max() == ours.weight_cutoff)
    assert {(b, m, n) for b, m, n, _ in seen} == set(settings) and at_beam >= 50
    assert {binding for *_, binding in seen} == {"beam", "max_active", "min_active"}


def test_the_oracle_equals_kaldi(cases: list[Case]) -> None:
    """Without our difference, the oracle is kaldi-decoder's FasterDecoder: same status, same words (its tie
    order too), the same total cost (Kaldi's best-path lattice sums float32 costs)."""
    differing = []
    for case in cases:
        kaldi = make_decoder("kaldi", case.path, case.options)
        for utt_id, loglikes in case.utterances:
            expected = faster_decode(case.graph, loglikes, case.options)
            problem = mismatch(kaldi.decode(loglikes, utt_id), expected, KALDI_TOLERANCE)
            if problem:
                differing.append(f"{case.name} {utt_id}: kaldi {problem}")
    assert not differing, "\n".join(differing[:10])


def test_the_oracles_tied_paths_equal_brute_force() -> None:
    """At an infinite beam the oracle's tied best paths are brute force's: every word sequence of a path
    within 1e-6 of the best cost (graphs whose epsilon arcs all weigh more than 0, so that brute force ends;
    weights and scores on a grid, so that many paths tie)."""
    rng = np.random.default_rng(7)
    infinite = SearchOptions(beam=1e9, max_active=NO_LIMIT, min_active=0)
    checked = several = 0
    while checked < 120:
        width = int(rng.integers(3, 6))
        graph = parse_fst_text(random_graph_text(rng, int(rng.integers(3, 10)), width, step=0.5))
        arcs = [(s, a.dest, a.ilabel, a.olabel, a.weight) for s, out in graph.arcs.items() for a in out]
        if any(not ilabel and weight == 0 for _, _, ilabel, _, weight in arcs):
            continue
        num_states = 1 + max(max(s, d) for s, d, *_ in arcs)
        loglikes = random_scores(rng, int(rng.integers(1, 10)), width, step=1.0)
        best, sequences = brute_force(arcs, graph.finals, num_states, -loglikes.astype(np.float64))
        result = faster_decode(graph, loglikes, infinite, ours=True)
        checked += 1
        assert result.reached_final == math.isfinite(best)
        if result.reached_final:
            assert tied(result.total_cost, best) and result.tied_words == sequences, (result, best, sequences)
            several += len(sequences) > 1
    assert several >= 10, several
