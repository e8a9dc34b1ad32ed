"""The full SLURP graph: CSR against kaldifst, the LM against kaldilm and KenLM, and TLG paths against
the LM's own scores."""

from __future__ import annotations

import math
import random

import kaldifst
import numpy as np
import pytest

from specbench.data import slurp, text_norm
from specbench.experiments.graph_recipe import GraphArtifacts
from specbench.wfst.arpa import read_arpa
from specbench.wfst.graph import read_graph
from specbench.wfst.lexicon import read_lexicon
from specbench.wfst.symbols import SymbolTable

pytestmark = pytest.mark.integration
LN10 = math.log(10.0)


def test_csr_equals_kaldifst_arc_iteration_on_the_full_tlg(slurp_graph: GraphArtifacts) -> None:
    csr = read_graph(slurp_graph.tlg)
    fst = kaldifst.StdConstFst.read(str(slurp_graph.tlg))
    assert csr.num_states == fst.num_states and csr.start == fst.start
    for state in kaldifst.StateIterator(fst):
        arcs = [(a.ilabel, a.olabel, a.nextstate, a.weight.value) for a in kaldifst.ArcIterator(fst, state)]
        sl_e, sl_p = csr.emitting.state_arcs(state), csr.epsilon.state_arcs(state)
        ours = [(int(i), int(o), int(d), float(w)) for part, sl in ((csr.epsilon, sl_p), (csr.emitting, sl_e))
                for i, o, d, w in zip(part.ilabel[sl], part.olabel[sl], part.dest[sl], part.weight[sl])]
        assert ours == arcs, f"state {state}"
        final = fst.final(state).value
        assert (np.isinf(csr.final[state]) and math.isinf(final)) or csr.final[state] == np.float32(final)
    stats = slurp_graph.stats
    assert (stats.states, stats.arcs, stats.epsilon_arcs) == (csr.num_states, csr.num_arcs, csr.num_epsilon_arcs)


def test_every_slurp_word_is_in_the_graph(slurp_graph: GraphArtifacts) -> None:
    words = SymbolTable.read(slurp_graph.words).ids
    lexicon = read_lexicon(slurp_graph.directory / "lexicon.txt")
    texts = slurp.read_training_text() + [u.sentence for s in ("devel", "test") for u in slurp.read_split(s)]
    needed = {w for t in texts for w in text_norm.normalize_words(t)}
    assert not needed - set(words)
    assert not lexicon.missing(needed)


def _prob_from_state(g, state: int, label: int, backoff_label: int) -> float:  # type: ignore[no-untyped-def]
    """Cost (-ln p) of reading `label` (0: ending the sentence) from G `state`, following back-off arcs."""
    cost = 0.0
    while True:
        if label == 0:
            if np.isfinite(g.final[state]):
                return cost + float(g.final[state])
        else:
            sl = g.emitting.state_arcs(state)
            hit = np.nonzero(g.emitting.ilabel[sl] == label)[0]
            if hit.size:
                return cost + float(g.emitting.weight[sl][hit[0]])
        sl = g.emitting.state_arcs(state)
        back = np.nonzero(g.emitting.ilabel[sl] == backoff_label)[0]
        assert back.size == 1, f"state {state} has no back-off arc"
        cost += float(g.emitting.weight[sl][back[0]])
        state = int(g.emitting.dest[sl][back[0]])


def test_g_contexts_sum_to_one(slurp_graph: GraphArtifacts) -> None:
    """kaldilm read the ARPA back: from a few G states, p(w | h) over the vocabulary and </s> sums to 1."""
    g = read_graph(slurp_graph.directory / "G.fst")
    words = SymbolTable.read(slurp_graph.words)
    backoff = words["#0"]
    vocab = [i for s, i in words.ids.items() if s not in ("<eps>", "#0", "<s>", "</s>")]
    rng = random.Random(7)
    states = [g.start, *rng.sample(range(g.num_states), 5)]
    for state in states:
        total = sum(math.exp(-_prob_from_state(g, state, w, backoff)) for w in [0, *vocab])
        assert total == pytest.approx(1.0, abs=2e-3), f"G state {state}"


def test_perplexity_matches_kenlm(slurp_graph: GraphArtifacts) -> None:
    stats = slurp_graph.stats
    assert stats.ppl_test == pytest.approx(stats.ppl_test_kenlm, rel=1e-4)
    assert 20 < stats.ppl_devel < 200 and 20 < stats.ppl_test < 200
    assert 0.02 < stats.test_unseen_rate < 0.06


def _ctc_tokens(phones: list[str], tokens: dict[str, int]) -> list[int]:
    """One frame per phone, a blank between identical neighbours (and at the ends)."""
    out = [tokens["<blk>"]]
    for i, p in enumerate(phones):
        if i and phones[i - 1] == p:
            out.append(tokens["<blk>"])
        out.append(tokens[p])
    return out + [tokens["<blk>"]]


def _linear(labels: list[int], outputs: list[int] | None = None) -> kaldifst.StdVectorFst:
    outputs = outputs or labels
    text = "".join(f"{i} {i + 1} {a} {b}\n" for i, (a, b) in enumerate(zip(labels, outputs)))
    return kaldifst.compile(text + f"{len(labels)}\n", acceptor=False)


def _shortest(fst: kaldifst.StdVectorFst) -> tuple[list[int], float]:
    best = kaldifst.shortest_path(fst, n=1)
    ok, _, words, weight = kaldifst.get_linear_symbol_sequence(best)
    assert ok, "no path"
    return [w for w in words if w], float(weight.value)


def test_tlg_paths_score_test_sentences_like_the_lm(slurp_graph: GraphArtifacts) -> None:
    """Through TLG, the CTC tokens of a sentence read out that sentence at exactly -ln p_LM(sentence), and
    their cheapest reading (the sentence, or a homophone sequence that costs less) at its own LM cost."""
    tlg = kaldifst.StdVectorFst(kaldifst.StdConstFst.read(str(slurp_graph.tlg)))
    tokens = SymbolTable.read(slurp_graph.tokens).ids
    word_table = SymbolTable.read(slurp_graph.words)
    words = word_table.ids
    lexicon = read_lexicon(slurp_graph.directory / "lexicon.txt")
    lm = read_arpa(slurp_graph.directory / "lm.arpa")
    sentences = [text_norm.normalize_words(u.sentence) for u in slurp.read_split("test")]
    for sentence in random.Random(3).sample([s for s in sentences if len(s) <= 8], 12):
        phones = [p for w in sentence for p in lexicon.prons[w][0]]
        acceptor = _linear(_ctc_tokens(phones, tokens))
        kaldifst.arcsort(acceptor, sort_type="olabel")
        lattice = kaldifst.StdVectorFst(kaldifst.compose(acceptor, tlg))
        kaldifst.arcsort(lattice, sort_type="olabel")
        best_words, best_cost = _shortest(lattice)
        lm_cost = -LN10 * lm.sentence_log10(sentence)
        exact = kaldifst.compose(lattice, _linear([words[w] for w in sentence]))
        got_words, got_cost = _shortest(exact)
        assert got_words == [words[w] for w in sentence]
        assert got_cost == pytest.approx(lm_cost, abs=1e-3 * max(1.0, lm_cost))
        reading = [word_table.symbols[w] for w in best_words]
        best_lm = -LN10 * lm.sentence_log10(reading)
        assert best_cost <= got_cost + 1e-3 and best_cost == pytest.approx(best_lm, abs=1e-3 * max(1.0, best_lm))
