"""HCLG from the Sphinx model (`wfst.hclg`, `wfst.hmm_transducer`, `wfst.sphinx_lexicon`) against a brute-force
computation: for random word sequences, silence choices and HMM-state durations, the cheapest path of HCLG
that reads the resulting senone string and writes the words costs exactly what the model says, computed
directly from its parts (LM with back-off, silence probabilities, triphones with cross-word contexts and
pocketsphinx's back-off, self-loop and exit probabilities)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import kaldifst
import numpy as np
import pocketsphinx
import pytest

from specbench.wfst.arpa import read_arpa
from specbench.wfst.compose import arpa_to_g
from specbench.wfst.fst_binary import write_vector_fst
from specbench.wfst.graph import from_arrays
from specbench.wfst.hclg import compose_hclg
from specbench.wfst.hmm_transducer import add_self_loops
from specbench.wfst.lexicon import read_cmudict
from specbench.wfst.sphinx_lexicon import lexicon_graph, positional, split_phone
from specbench.wfst.sphinx_mdef import read_mdef, read_transition_matrices
from specbench.wfst.symbols import word_table

MODEL = Path(pocketsphinx.get_model_path()) / "en-us"
WORDS = ["yes", "no", "go", "stop", "left", "right", "play"]
ARPA = """\\data\\
ngram 1=9
ngram 2=4

\\1-grams:
-1.0 </s>
-99 <s> -0.3
-0.8 yes -0.2
-0.9 no -0.2
-0.9 go -0.1
-1.0 stop -0.1
-1.1 left
-1.1 right
-1.2 play -0.4

\\2-grams:
-0.3 <s> yes
-0.2 go left
-0.2 go right
-0.05 play </s>

\\end\\
"""
SCALE, SIL_PROB, NOISE_SHARE = 0.1, 0.5, 0.1


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("hclg")
    model = read_mdef(MODEL / "en-us" / "mdef")
    tmat = read_transition_matrices(MODEL / "en-us" / "transition_matrices")
    (out / "lm.arpa").write_text(ARPA)
    words = word_table(WORDS)
    words.write(out / "words.txt")
    arpa_to_g(out / "lm.arpa", out / "words.txt", out / "G.fst")
    dictionary = read_cmudict(MODEL / "cmudict-en-us.dict")
    prons = {w: dictionary[w][:1] for w in WORDS}  # one pronunciation each: a senone string names its words
    fillers = [model.ci_phones[i] for i in sorted(model.fillers) if i != model.silence]
    base = [p for i, p in enumerate(model.ci_phones) if i not in model.fillers]
    lexicon = lexicon_graph(prons, words, base, "SIL", fillers, SIL_PROB, NOISE_SHARE)
    graph, report, _ = compose_hclg(lexicon, out / "G.fst", model, tmat, out, self_loop_scale=SCALE)
    write_vector_fst(out / "HCLG.vector.fst", graph)
    return {"model": model, "tmat": tmat, "prons": prons, "words": words, "fillers": fillers, "graph": graph, "report": report,
                "fst": kaldifst.StdVectorFst.read(str(out / "HCLG.vector.fst")), "lm": read_arpa(out / "lm.arpa")}


def _lm_cost(lm, words: list[str]) -> float:
    """-ln p(words </s> | <s>), each word the cheaper of its listed n-gram and the back-off path (as G)."""
    def cost(word, history):
        listed = lm.ngrams[len(history)].get((*history, word))
        best = -math.log(10) * listed[0] if listed is not None else math.inf
        if history:
            bow = lm.ngrams[len(history) - 1].get(history)
            best = min(best, -math.log(10) * (bow[1] if bow else 0.0) + cost(word, history[1:]))
        return best
    history, total = ("<s>",), 0.0
    for w in [*words, "</s>"]:
        total += cost(w, history[-(lm.order - 1):])
        history = (*history, w)
    return total


def _expected(built, words, silences, rng):
    """The senone string of one path and its cost computed from the model's parts."""
    model, tmat = built["model"], built["tmat"]
    units: list[tuple[str, str | None]] = []  # (base phone, word position or None for a filler)
    cost = _lm_cost(built["lm"], words)
    for i in range(len(words) + 1):
        filler = silences[i]
        cost += -math.log(SIL_PROB) if filler else -math.log(1 - SIL_PROB)
        if filler:
            share = 1 - NOISE_SHARE if filler == "SIL" else NOISE_SHARE / len(built["fillers"])
            cost += -math.log(share)
            units.append((filler, None))
        if i < len(words):
            units += [split_phone(p) for p in positional(built["prons"][words[i]][0])]
    senones = []
    for k, (base, position) in enumerate(units):
        if position is None:
            phone = model.ci_phones.index(base)
        else:
            def context(j):
                return "SIL" if not 0 <= j < len(units) or units[j][1] is None else units[j][0]
            phone, _ = model.nearest_phone(base, context(k - 1), context(k + 1), position)
        for state in range(3):
            loop = tmat[model.tmat[phone], state, state]
            frames = rng.randint(1, 3)
            senones += [int(model.senones[phone, state])] * frames
            cost += SCALE * ((frames - 1) * -math.log(loop) - math.log(1 - loop))
    return senones, cost


def _best_cost(fst, senones, word_ids) -> float:
    """Cost of the cheapest path of HCLG reading `senones` (labels + 1) and writing `word_ids`."""
    frames = kaldifst.make_linear_acceptor([s + 1 for s in senones])
    kaldifst.arcsort(fst, sort_type="ilabel")
    reading = kaldifst.compose(frames, fst)
    writing = kaldifst.compose(kaldifst.StdVectorFst(reading), kaldifst.make_linear_acceptor(word_ids))
    best = kaldifst.shortest_path(writing)
    total, state = 0.0, best.start
    if state < 0:
        return math.inf
    while True:
        arcs = list(kaldifst.ArcIterator(best, state))
        if not arcs:
            return total + best.final(state).value
        total += arcs[0].weight.value
        state = arcs[0].nextstate


@pytest.mark.parametrize("seed", range(12))
def test_every_path_costs_what_the_model_says(built, seed) -> None:
    rng = random.Random(seed)
    words = [rng.choice(WORDS) for _ in range(rng.randint(1, 3))]
    options = [None, None, "SIL", *built["fillers"]]
    silences = [rng.choice(options) for _ in range(len(words) + 1)]
    senones, expected = _expected(built, words, silences, rng)
    found = _best_cost(built["fst"], senones, [built["words"][w] for w in words])
    assert found == pytest.approx(expected, abs=2e-3), (words, silences)


def test_a_senone_string_of_no_sentence_has_no_path(built) -> None:
    model = built["model"]
    senones = [int(model.senones[model.ci_phones.index("AA"), s]) for s in range(3)]  # a bare CI vowel
    assert _best_cost(built["fst"], senones, [built["words"]["yes"]]) == math.inf


def test_the_graph_reads_senone_columns_and_reports_its_stages(built) -> None:
    graph, report = built["graph"], built["report"]
    assert graph.max_ilabel <= built["model"].n_senones
    assert set(report.stages) == {"LG", "CLG", "Ha", "HCLGa_det", "HCLGa", "HCLG"}
    assert report.windows > 0 and report.entry_labels > 0


def test_a_state_entered_from_two_hmm_states_is_split() -> None:
    """State 2 is entered by entry labels 1 and 2: each gets its own copy with its loop and exit costs."""
    graph = from_arrays(0, np.array([np.inf, np.inf, 0.5, 0.0]), src=np.array([0, 0, 1, 2]),
                        dest=np.array([1, 2, 2, 3]), ilabel=np.array([3, 1, 2, 0]),
                        olabel=np.array([0, 5, 0, 0]), weight=np.array([0.0, 1.0, 0.0, 0.25]))
    senone = np.array([0, 10, 20, 30])
    loop = np.array([0.0, 0.5, 0.8, 0.9])
    out = add_self_loops(graph, senone, loop, 1.0).to_arrays()
    src = np.repeat(np.arange(len(out.final)), np.diff(out.offsets))
    loops = [(int(s), int(lab), float(w)) for s, d, lab, w in zip(src, out.nextstate, out.ilabel, out.weight)
             if s == d]
    assert sorted(lab for _, lab, _ in loops) == [11, 21, 31]  # labels are senone + 1
    by_label = {lab: (s, w) for s, lab, w in loops}
    assert by_label[11][1] == pytest.approx(-math.log(0.5)) and by_label[21][1] == pytest.approx(-math.log(0.8))
    copies = {by_label[11][0], by_label[21][0]}
    assert len(copies) == 2  # state 2 split in two
    for label, p in ((11, 0.5), (21, 0.8)):
        state = by_label[label][0]
        assert out.final[state] == pytest.approx(0.5 - math.log(1 - p), abs=1e-6)
        leaving = [float(w) for s, d, w in zip(src, out.nextstate, out.weight) if s == state and d == 3]
        assert leaving == [pytest.approx(0.25 - math.log(1 - p), abs=1e-6)]
