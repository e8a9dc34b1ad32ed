"""1-best parity of the CPU decoder with Kaldi's C++ FasterDecoder (kaldi-decoder), and their speed.

(a) Random small graphs with random scores; (b) the SLURP TLG with real acoustic scores when
`.specbench/scores/am_slurp/test.parquet` exists, else with peaky CTC-like scores generated from SLURP
training sentences through the graph's lexicon (25 frames/s, blank + 39 phones). Two settings each: one where
max_active does not bind (asserted: every utterance identical, a tie, or explained by Kaldi's final-frame
tokens) and one where it binds (on the random graphs, asserted: every difference from Kaldi explained by the
oracle below; on the SLURP TLG, reported). "Identical": same word sequence, graph and acoustic costs within
1e-3 relative. "Tie": a different result whose total cost equals Kaldi's within 1e-4. "Final-frame tokens":
Kaldi prunes each frame with a cutoff that shrinks while it walks the tokens, so it keeps a few tokens above
the frame's final cutoff; the next GetCutoff prunes them, except after the last frame, where one of them can
be Kaldi's best final token (or its only one) while ours, pruned to the final cutoff, has none or a
costlier one. Where max_active binds, those tokens also enter Kaldi's max_active counts. The oracle
(`tests/kaldi_faster_reference.py`, Kaldi's FasterDecoder in Python) explains a difference exactly: Kaldi's
result is the oracle's, and ours the oracle's with our documented difference (only the tokens strictly below
each frame's final cutoff kept; on exact ties, any of the tied best paths). Run with `-s` to see the counts
and frames per second.
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import kaldifst
import numpy as np
import pytest
from kaldi_faster_reference import (
    KALDI_TOLERANCE,
    TextGraph,
    faster_decode,
    mismatch,
    parse_fst_text,
    random_graph_text,
    random_scores,
)

from specbench.decoder.backends import make_decoder
from specbench.decoder.cpu import CpuDecoder
from specbench.decoder.kaldi_reference import KaldiFasterDecoder
from specbench.decoder.options import SearchOptions
from specbench.decoder.pruning import INT32_MAX, PruningConfig
from specbench.decoder.result import STATUS_NO_FINAL, DecodeResult
from specbench.experiments.graph_recipe import GraphArtifacts
from specbench.wfst.graph import CsrGraph, read_graph

pytestmark = pytest.mark.integration

NUM_UTTERANCES = 200


@dataclass
class Tally:
    """Agreement counts and decoding times of one setting."""

    name: str
    identical: int = 0
    ties: int = 0
    final_frame: list[str] = field(default_factory=list)
    differing: list[str] = field(default_factory=list)
    differing_bound: list[str] = field(default_factory=list)  # in utterances where max_active bound
    frames: int = 0
    ours_s: float = 0.0
    kaldi_s: float = 0.0
    end_frames_equal: int = 0
    words: int = 0
    max_active_binds: int = 0

    @property
    def total(self) -> int:
        differing = len(self.differing) + len(self.differing_bound)
        return self.identical + self.ties + len(self.final_frame) + differing

    def report(self) -> str:
        speed = ""
        if self.ours_s and self.kaldi_s:
            speed = (f"; frames/s ours {self.frames / self.ours_s:,.0f} vs Kaldi "
                     f"{self.frames / self.kaldi_s:,.0f} (ours/Kaldi {self.kaldi_s / self.ours_s:.2f})")
        ends = f"; word end frames equal to Kaldi's {self.end_frames_equal}/{self.words}" * bool(self.words)
        return (f"{self.name}: {self.total} utterances, {self.identical} identical, {self.ties} ties, "
                f"{len(self.final_frame)} explained by Kaldi's final-frame tokens, other differences "
                f"{len(self.differing_bound)} where max_active bound and {len(self.differing)} elsewhere; "
                f"{self.max_active_binds} frames where max_active bound{speed}{ends}")


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-3)


def widened_last_frame(decoder: CpuDecoder, loglikes: np.ndarray, utt_id: str) -> DecodeResult:
    """Our decode with an unbounded beam on the last frame only: its final tokens include every token
    Kaldi can hold at the end (Kaldi keeps emitting tokens that beat its running cutoff when created, some of
    them above the frame's final cutoff; after the last frame no GetCutoff prunes them)."""
    config = decoder.config
    decoder.init(utt_id)
    decoder.advance(loglikes[:-1])
    decoder.config = PruningConfig(beam=1e9, max_active=INT32_MAX, min_active=0)
    try:
        decoder.advance(loglikes[-1:])
        return decoder.result()
    finally:
        decoder.config = config


def compare(tally: Tally, utt_id: str, ours: DecodeResult, kaldi: DecodeResult,
            decoder: CpuDecoder, loglikes: np.ndarray) -> None:
    """Count one utterance (Kaldi's result not ok: it reached no final state).

    A difference counts as Kaldi's final-frame tokens when Kaldi's path is cheaper than ours (or we reached
    no final state) and no cheaper than the best path with the last frame unpruned. Other differences are
    filed apart when max_active bound in the utterance (Kaldi's extra tokens then enter its counts).
    """
    assert kaldi.ok or kaldi.status == STATUS_NO_FINAL, kaldi.status
    assert kaldi.num_frames == ours.num_frames == kaldi.stats.frames
    kaldi_total = kaldi.total_cost  # +inf when not ok
    if kaldi.ok and ours.ok and ours.word_ids == kaldi.word_ids \
            and _close(ours.graph_cost, kaldi.graph_cost) and _close(ours.acoustic_cost, kaldi.acoustic_cost):
        tally.identical += 1
        # Kaldi's best path went through RemoveEpsLocal, which may move a word label onto the emitting arc
        # before it: its word end frames (from the frames its labels sit at) can be one earlier than ours.
        kaldi_ends = kaldi.word_end_frames
        assert all(abs(k - o) <= 1 for k, o in zip(kaldi_ends, ours.word_end_frames, strict=True)), utt_id
        tally.end_frames_equal += sum(k == o for k, o in zip(kaldi_ends, ours.word_end_frames, strict=True))
        tally.words += len(ours.word_ids)
    elif not kaldi.ok and not ours.ok or abs(ours.total_cost - kaldi_total) <= 1e-4:
        tally.ties += kaldi.ok
        tally.identical += not kaldi.ok
    else:
        line = (f"{utt_id}: ours {ours.status} {ours.word_ids} {ours.total_cost:.5f}, Kaldi "
                f"{kaldi.ok and kaldi.word_ids} {kaldi_total:.5f}")
        widened = widened_last_frame(decoder, loglikes, utt_id).total_cost
        explained = widened - 1e-4 <= kaldi_total <= ours.total_cost + 1e-4 and kaldi_total < math.inf
        line += f", last frame unpruned {widened:.5f}"
        bound = ours.stats.max_active_binds > 0
        (tally.final_frame if explained else tally.differing_bound if bound else tally.differing).append(line)


def run_setting(tally: Tally, ours: CpuDecoder, kaldi: KaldiFasterDecoder,
                utterances: list[tuple[str, np.ndarray]]) -> Tally:
    """Decode every utterance with both, interleaved so that load changes hit both alike."""
    for utt_id, loglikes in utterances:
        start = time.perf_counter()
        theirs = kaldi.decode(loglikes, utt_id)
        middle = time.perf_counter()
        mine = ours.decode(loglikes, utt_id)
        end = time.perf_counter()
        tally.kaldi_s += middle - start
        tally.ours_s += end - middle
        tally.frames += loglikes.shape[0]
        tally.max_active_binds += mine.stats.max_active_binds
        compare(tally, utt_id, mine, theirs, ours, loglikes)
    print(tally.report())
    return tally


# ------------------------------------------------------------------------------------- (a) random graphs


def unexplained(graph: TextGraph, options: SearchOptions, utt_id: str, loglikes: np.ndarray,
                ours: DecodeResult, kaldi: DecodeResult) -> str | None:
    """None when the oracle explains a difference between ours and Kaldi (Kaldi's result is the oracle's,
    ours the oracle's with our documented difference), else what it does not explain."""
    kaldi_problem = mismatch(kaldi, faster_decode(graph, loglikes, options), KALDI_TOLERANCE)
    ours_problem = mismatch(ours, faster_decode(graph, loglikes, options, ours=True))
    if kaldi_problem is None and ours_problem is None:
        return None
    return (f"{utt_id}: Kaldi {kaldi_problem or 'is the oracle'}; "
            f"ours {ours_problem or 'is the oracle with our difference'}")


@pytest.mark.parametrize("binding", [False, True], ids=["beam_only", "max_active_binds"])
def test_random_graphs_match_kaldi(binding: bool) -> None:
    options = SearchOptions(beam=3.0, max_active=4, min_active=2) if binding else \
        SearchOptions(beam=3.0, max_active=INT32_MAX, min_active=0)
    tally = Tally(f"random graphs, {options}")
    explained, problems = 0, []  # differences from Kaldi where max_active binds: the oracle's or not
    rng = np.random.default_rng(20240601)
    with tempfile.TemporaryDirectory() as tmp:
        for g in range(60):
            width = int(rng.integers(3, 7))
            text = random_graph_text(rng, int(rng.integers(3, 25)), width)
            fst = kaldifst.compile(text, keep_state_numbering=True)
            path = Path(tmp) / f"g{g}.fst"
            assert kaldifst.StdConstFst(fst).write(str(path))
            ours = CpuDecoder(read_graph(path), options)
            kaldi = KaldiFasterDecoder(path, options)
            graph = parse_fst_text(text)
            utterances = [(f"g{g}u{u}", random_scores(rng, int(rng.integers(1, 30)), width))
                          for u in range(5)]
            for utt_id, loglikes in utterances:
                mine, theirs = ours.decode(loglikes, utt_id), kaldi.decode(loglikes, utt_id)
                tally.max_active_binds += mine.stats.max_active_binds
                identical = tally.identical
                compare(tally, utt_id, mine, theirs, ours, loglikes)
                if binding and tally.identical == identical:  # ours differs from Kaldi
                    problem = unexplained(graph, options, utt_id, loglikes, mine, theirs)
                    explained += problem is None
                    problems += [problem] if problem else []
    print(tally.report())
    assert tally.total == 300
    if not binding:
        assert not tally.differing and not tally.differing_bound, tally.differing[:5]
        assert tally.identical + tally.ties >= 0.95 * tally.total
    else:  # Kaldi's extra tokens enter its max_active counts: every difference is the oracle's
        print(f"{explained} differences from Kaldi explained by the oracle, {len(problems)} not")
        assert tally.max_active_binds > 0 and explained > 0
        assert not problems, "\n".join(problems[:10])


# ------------------------------------------------------------------------------------------- (b) SLURP


def read_lexicon_phones(directory: Path) -> tuple[dict[str, list[int]], list[str]]:
    """word -> score columns of its first pronunciation (token id - 1; column 0 is blank), and the words."""
    lines = (directory / "tokens.txt").read_text().splitlines()
    token_ids = dict(line.split() for line in lines if line.strip())
    prons: dict[str, list[int]] = {}
    for line in (directory / "lexicon.txt").read_text().splitlines():
        word, phones = line.split("\t")[:2]
        prons.setdefault(word, [int(token_ids[p]) - 1 for p in phones.split()])
    return prons, sorted(prons)


def peaky_scores(rng: np.random.Generator, columns: list[int], width: int) -> np.ndarray:
    """CTC-like (T, width) float32 log-probabilities: blank runs, one or two frames per phone spike (a blank
    between repeats), 15% of frames with a strong competitor."""
    frames = [0] * int(rng.integers(3, 10))
    for k, column in enumerate(columns):
        if k and columns[k - 1] == column:
            frames.append(0)
        frames += [column] * int(rng.choice([1, 1, 1, 2]))
        frames += [0] * int(rng.geometric(0.5) - 1)
    frames += [0] * int(rng.integers(3, 10))
    count, target = len(frames), np.array(frames)
    logits = rng.normal(0.0, 1.5, size=(count, width))
    logits[np.arange(count), target] += rng.normal(9.0, 2.0, size=count)
    confused = np.flatnonzero(rng.random(count) < 0.15)
    logits[confused, rng.integers(0, width, size=confused.size)] += rng.normal(7.0, 2.0, size=confused.size)
    logits -= logits.max(axis=1, keepdims=True)
    return (logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))).astype(np.float32)


def generated_utterances(graph_dir: Path, width: int) -> list[tuple[str, np.ndarray]]:
    """NUM_UTTERANCES peaky scores of SLURP training sentences (random lexicon words without train.txt)."""
    prons, words = read_lexicon_phones(graph_dir)
    train = graph_dir / "train.txt"
    lines = train.read_text().splitlines() if train.exists() else []
    sentences = [line.split() for line in lines if line.strip()]
    rng = np.random.default_rng(7)
    utterances = []
    for u in range(NUM_UTTERANCES):
        sentence = sentences[int(rng.integers(len(sentences)))] if sentences else \
            [words[int(i)] for i in rng.integers(0, len(words), size=int(rng.integers(2, 9)))]
        columns = [c for word in sentence for c in prons.get(word, [])]
        utterances.append((f"gen{u:03d}", peaky_scores(rng, columns, width)))
    return utterances


@pytest.fixture(scope="module")
def slurp_tlg(slurp_graph: GraphArtifacts) -> CsrGraph:
    return read_graph(slurp_graph.tlg)


@pytest.mark.parametrize("max_active", [10000, 200])
@pytest.mark.parametrize("source", ["real", "generated"])
def test_slurp_tlg_matches_kaldi(slurp_graph: GraphArtifacts, slurp_tlg: CsrGraph, source: str,
                                 max_active: int, request: pytest.FixtureRequest) -> None:
    utterances = request.getfixturevalue("real_test_scores") if source == "real" else \
        generated_utterances(slurp_graph.directory, slurp_tlg.max_ilabel)
    options = SearchOptions(beam=15.0, max_active=max_active, min_active=20)
    ours = make_decoder("cpu", slurp_tlg, options)
    kaldi = make_decoder("kaldi", slurp_graph.tlg, options)
    ours.decode(utterances[0][1], "warm-up")
    name = f"SLURP TLG, {source} scores, beam 15, max_active {max_active}"
    tally = run_setting(Tally(name), ours, kaldi, utterances)
    assert tally.total == len(utterances) == NUM_UTTERANCES
    if max_active == 10000:  # binds in a few frames of a few utterances at most (2 frames in 1,000 real ones)
        assert tally.max_active_binds <= tally.frames // 1000, "max_active 10000 was meant not to bind"
        assert not tally.differing and not tally.differing_bound, (tally.differing + tally.differing_bound)[:5]
        assert tally.identical + tally.ties >= 0.95 * tally.total
    else:  # Kaldi's extra tokens enter its max_active counts, yet on this graph they change no 1-best
        assert tally.max_active_binds > 0, "max_active 200 was meant to bind"
        assert not tally.differing, tally.differing[:5]  # every difference is where max_active bound
        assert tally.identical + tally.ties >= 0.95 * tally.total, tally.report()  # 200 of 200 of each source
