"""The CTC decoding graph TLG built by the recipe's steps (`wfst.topology`, `wfst.symbols`, `wfst.compose`)
against brute force, on a lexicon with homophones, a one-phone prefix and a word with two pronunciations, and
a bigram LM with back-off: for random word sequences spoken as CTC token strings (phones repeated, blanks
anywhere, a blank between equal phones), the cheapest path of TLG writes a word sequence that is cheapest
among all those whose pronunciations spell the phones, and costs exactly that: -ln p, each word the cheaper of
its listed bigram and the back-off path (G in the tropical semiring), to within the weight rounding of Kaldi's
minimization. Also: LG comes out determinized in the log semiring and minimal, and TLG arc-sorted on input
labels."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path

import kaldifst
import pytest

from specbench.wfst import compose, symbols, topology
from specbench.wfst.lexicon import PHONES

pytestmark = pytest.mark.unit

PRONS = {
    "a": [("AH",)],
    "about": [("AH", "B", "AW", "T")],
    "bead": [("B", "IY", "D")],
    "read": [("R", "IY", "D"), ("R", "EH", "D")],
    "red": [("R", "EH", "D")],
    "reed": [("R", "IY", "D")],
}
# log10 p and log10 bow (0 where the ARPA line has none)
UNIGRAMS = {"</s>": (-0.8, 0.0), "<s>": (-99.0, -0.3), "a": (-1.0, -0.2), "about": (-1.1, -0.4),
            "bead": (-1.2, 0.0), "read": (-0.9, -0.1), "red": (-1.0, 0.0), "reed": (-1.3, 0.0)}
# LG's minimization (Kaldi's MinimizeEncoded) first rounds every weight to a multiple of 1/1024: at most half
# of that per arc of a path, one more for the final weight
ROUNDING = 2.0 ** -11
BIGRAMS = {("<s>", "a"): -0.3, ("a", "bead"): -0.4, ("a", "read"): -0.6, ("about", "reed"): -0.2,
           ("read", "</s>"): -0.5, ("<s>", "red"): -0.7}


def _arpa_text() -> str:
    uni = "".join(f"{p}\t{w}" + (f"\t{b}" if b else "") + "\n" for w, (p, b) in UNIGRAMS.items())
    bi = "".join(f"{p}\t{h} {w}\n" for (h, w), p in BIGRAMS.items())
    return (f"\\data\\\nngram 1={len(UNIGRAMS)}\nngram 2={len(BIGRAMS)}\n\n\\1-grams:\n{uni}\n"
            f"\\2-grams:\n{bi}\n\\end\\\n")


def _lm_cost(words: tuple[str, ...]) -> float:
    """-ln p(words </s> | <s>) along G's cheapest path: each word the listed bigram or bow(h) p(w)."""
    total, history = 0.0, "<s>"
    for w in [*words, "</s>"]:
        options = [-UNIGRAMS[history][1] - UNIGRAMS[w][0]]
        if (history, w) in BIGRAMS:
            options.append(-BIGRAMS[(history, w)])
        total += math.log(10) * min(options)
        history = w
    return total


def _spellings(phones: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Every word sequence whose pronunciations concatenate to `phones`."""
    if not phones:
        return [()]
    out = []
    for word, prons in PRONS.items():
        for pron in prons:
            if phones[:len(pron)] == pron:
                out += [(word, *rest) for rest in _spellings(phones[len(pron):])]
    return sorted(set(out))


def _ctc_tokens(phones: tuple[str, ...], rng: random.Random) -> list[str]:
    out: list[str] = []
    for phone in phones:
        if (out and out[-1] == phone) or rng.random() < 0.3:
            out.append("<blk>")
        out += [phone] * rng.randint(1, 2)
    return out + ["<blk>"] * rng.randint(0, 1)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out: Path = tmp_path_factory.mktemp("tlg")
    entries, max_k = topology.add_disambiguation(PRONS)
    tokens, words = symbols.token_table(PHONES, max_k), symbols.word_table(PRONS)
    words.write(out / "words.txt")
    (out / "lm.arpa").write_text(_arpa_text(), encoding="utf-8")
    compose.arpa_to_g(out / "lm.arpa", out / "words.txt", out / "G.fst")
    lg = compose.compose_lg(topology.lexicon_fst_text(entries, tokens, words), out / "G.fst")
    lg_states = lg.num_states
    minimal = kaldifst.StdVectorFst(lg)
    kaldifst.minimize_encoded(minimal)
    no_disambiguation = compose.remove_disambiguation(lg, [tokens[f"#{k}"] for k in range(max_k + 1)])
    tlg = compose.compose_tlg(topology.ctc_topology_text(tokens, PHONES), no_disambiguation)
    return {"tokens": tokens, "words": words, "lg": lg, "tlg": tlg, "lg_states": lg_states,
            "minimal_states": minimal.num_states}


def _best(built: dict, tokens: list[str]) -> tuple[tuple[str, ...], float, float] | None:
    """The words and cost of the cheapest path of TLG reading `tokens`, and the rounding its cost may have."""
    acceptor = kaldifst.make_linear_acceptor([built["tokens"][t] for t in tokens])
    best = kaldifst.shortest_path(kaldifst.compose(acceptor, built["tlg"]))
    if best.num_states == 0:
        return None
    ok, _, out, weight = kaldifst.get_linear_symbol_sequence(best)
    assert ok
    return tuple(built["words"].symbols[o] for o in out), weight.value, best.num_states * ROUNDING


@pytest.mark.parametrize("seed", range(12))
def test_the_cheapest_path_writes_the_cheapest_spelling_at_its_lm_cost(built: dict, seed: int) -> None:
    rng = random.Random(seed)
    spoken = [rng.choice(list(PRONS)) for _ in range(rng.randint(1, 3))]
    phones = tuple(itertools.chain.from_iterable(rng.choice(PRONS[w]) for w in spoken))
    cheapest = min(_lm_cost(s) for s in _spellings(phones))
    found = _best(built, _ctc_tokens(phones, rng))
    assert found is not None, phones
    words, cost, rounding = found
    assert words in _spellings(phones), phones
    assert _lm_cost(words) == pytest.approx(cheapest, abs=1e-9), (phones, words)  # one of the cheapest
    assert cost == pytest.approx(cheapest, abs=rounding), phones


def test_lg_is_determinized_in_the_log_semiring(built: dict) -> None:
    """After the back-off arc from LG's start (into the unigram state), the arc reading R stands for every
    pronunciation that starts with R, read twice, red and reed: determinized in the log semiring (Kaldi's
    mkgraph), it costs -ln of their summed probability, not the cheapest one's -ln p."""
    tokens, lg = built["tokens"], built["lg"]

    def arcs(state: int) -> dict[int, tuple[float, int]]:
        return {arc.ilabel: (arc.weight.value, arc.nextstate) for arc in kaldifst.ArcIterator(lg, state)}

    back_off, unigram_state = arcs(lg.start)[tokens["#0"]]
    assert back_off == pytest.approx(-UNIGRAMS["<s>"][1] * math.log(10), abs=ROUNDING)
    p = {w: 10 ** UNIGRAMS[w][0] for w in PRONS}
    following = arcs(unigram_state)
    r_words = -math.log(2 * p["read"] + p["red"] + p["reed"])
    assert following[tokens["R"]][0] == pytest.approx(r_words, abs=ROUNDING)
    assert following[tokens["AH"]][0] == pytest.approx(-math.log(p["a"] + p["about"]), abs=ROUNDING)


def test_lg_is_minimal_and_tlg_sorted_on_input_labels(built: dict) -> None:
    assert built["lg_states"] == built["minimal_states"]
    tlg = built["tlg"]
    for state in range(tlg.num_states):
        labels = [arc.ilabel for arc in kaldifst.ArcIterator(tlg, state)]
        assert labels == sorted(labels)


def test_homophones_alone_by_hand(built: dict) -> None:
    """R IY D alone: "read" by back-off from <s> and its listed "read </s>", 10^(-0.3 - 0.9 - 0.5), beats
    "reed", 10^(-0.3 - 1.3 - 0.8); R EH D alone: "red" by its listed "<s> red", 10^(-0.7 - 0.8), beats "read",
    10^-1.7; AH R IY D: "a read" by two listed bigrams, 10^(-0.3 - 0.6 - 0.5)."""
    for tokens, words, log10_p in ((["R", "IY", "D"], ("read",), -1.7), (["R", "EH", "D"], ("red",), -1.5),
                                   (["AH", "R", "IY", "D"], ("a", "read"), -1.4)):
        found, cost, rounding = _best(built, tokens)
        assert found == words and cost == pytest.approx(-log10_p * math.log(10), abs=rounding)


def test_ctc_repeats_and_a_token_string_that_spells_no_sentence(built: dict) -> None:
    """A repeated token is one phone unless a blank separates them; B AW spells no word sequence."""
    assert _best(built, ["AH", "AH"])[0] == ("a",)
    assert _best(built, ["AH", "<blk>", "AH"])[0] == ("a", "a")
    assert _best(built, ["B", "AW"]) is None
