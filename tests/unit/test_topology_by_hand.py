"""L's disambiguation symbols and arcs (`wfst.topology`) on a lexicon worked out by hand with the rule of
Kaldi's `add_lex_disambig.pl`: a pronunciation gets `#k` when another word has the same phones or when it is a
proper prefix (of any length, one phone included) of another pronunciation; identical sequences count `#1`,
`#2`, ... each on their own; the largest `k` over all entries is returned, wherever it occurs. L has the word
on the first arc of each pronunciation (Kaldi's `make_lexicon_fst.py`), epsilon outputs on the others, and a
`#0:#0` self-loop for G's back-off arcs."""

from __future__ import annotations

import pytest

from specbench.wfst.symbols import token_table, word_table
from specbench.wfst.topology import add_disambiguation, lexicon_fst_text

pytestmark = pytest.mark.unit

PHONES = ("AH", "AW", "B", "D", "EH", "IY", "K", "R", "S", "T", "UW", "Z")
PRONS = {
    "a": [("AH",)],                                      # a one-phone proper prefix of "about"
    "about": [("AH", "B", "AW", "T")],
    "read": [("R", "IY", "D"), ("R", "EH", "D")],       # each a homophone pair: "reed", "red"
    "red": [("R", "EH", "D")],
    "reed": [("R", "IY", "D")],
    "x": [("EH", "K", "S")],
    "zoo": [("Z", "UW")],                                # the last entry that needs a symbol, with k = 1
    "zoos": [("Z", "UW", "Z")],
}
EXPECTED = [
    ("a", ("AH", "#1")),
    ("about", ("AH", "B", "AW", "T")),
    ("read", ("R", "IY", "D", "#1")),
    ("read", ("R", "EH", "D", "#1")),
    ("red", ("R", "EH", "D", "#2")),
    ("reed", ("R", "IY", "D", "#2")),
    ("x", ("EH", "K", "S")),
    ("zoo", ("Z", "UW", "#1")),
    ("zoos", ("Z", "UW", "Z")),
]


def test_disambiguation_symbols_by_hand() -> None:
    entries, max_k = add_disambiguation(PRONS)
    assert entries == EXPECTED
    assert max_k == 2


def test_a_homophone_pair_gets_one_and_two() -> None:
    entries, max_k = add_disambiguation({"reed": [("R", "IY", "D")], "read": [("R", "IY", "D")]})
    assert entries == [("read", ("R", "IY", "D", "#1")), ("reed", ("R", "IY", "D", "#2"))] and max_k == 2


def test_lexicon_fst_has_each_word_on_the_first_arc_of_its_pronunciation() -> None:
    entries, max_k = add_disambiguation(PRONS)
    tokens, words = token_table(PHONES, max_k), word_table(PRONS)
    lines = lexicon_fst_text(entries, tokens, words).splitlines()
    arcs = [tuple(int(x) for x in line.split()) for line in lines if len(line.split()) == 4]
    finals = [line for line in lines if len(line.split()) < 4]
    assert finals == ["0"]
    assert (0, 0, tokens["#0"], words["#0"]) in arcs
    leaving = {}
    for src, dst, ilabel, olabel in arcs:
        if src != 0:
            assert olabel == 0, "only the first arc of a pronunciation writes its word"
        leaving.setdefault(src, []).append((dst, ilabel, olabel))
    assert all(len(out) == 1 for state, out in leaving.items() if state != 0)  # each pronunciation a chain
    paths = set()
    for dst, ilabel, olabel in leaving[0]:
        if ilabel == tokens["#0"]:
            continue
        assert olabel != 0
        read = [ilabel]
        while dst != 0:
            dst, ilabel, _ = leaving[dst][0]
            read.append(ilabel)
        paths.add((words.symbols[olabel], tuple(tokens.symbols[i] for i in read)))
    assert paths == set(EXPECTED)
