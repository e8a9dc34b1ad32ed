"""L's disambiguation symbols and the CTC topology T, on small inputs checked by hand and by kaldifst."""

from __future__ import annotations

import kaldifst
import pytest

from specbench.wfst.symbols import SymbolTable, token_table, word_table
from specbench.wfst.topology import add_disambiguation, ctc_topology_text, lexicon_fst_text

pytestmark = pytest.mark.unit


def test_homophones_and_prefixes_get_disambiguation_symbols() -> None:
    prons = {"to": [("T", "UW")], "two": [("T", "UW")], "too": [("T", "UW")], "tool": [("T", "UW", "L")],
             "a": [("AH",), ("EY",)], "cat": [("K", "AE", "T")]}
    entries, max_k = add_disambiguation(prons)
    got = dict(((w, p[:-1] if p[-1].startswith("#") else p), p[-1] if p[-1].startswith("#") else "") for w, p in entries)
    assert got[("to", ("T", "UW"))] and got[("two", ("T", "UW"))] and got[("too", ("T", "UW"))]
    assert sorted(got[(w, ("T", "UW"))] for w in ("to", "two", "too")) == ["#1", "#2", "#3"]
    assert got[("tool", ("T", "UW", "L"))] == "" and got[("cat", ("K", "AE", "T"))] == ""
    assert got[("a", ("AH",))] == "" and got[("a", ("EY",))] == ""
    assert max_k == 3
    # a pronunciation that is a proper prefix of another gets one even without homophones
    entries, max_k = add_disambiguation({"an": [("AE", "N")], "and": [("AE", "N", "D")]})
    assert entries == [("an", ("AE", "N", "#1")), ("and", ("AE", "N", "D"))] and max_k == 1


def test_lexicon_fst_transduces_pronunciations_to_words() -> None:
    phones = ("AE", "D", "N")
    entries, max_k = add_disambiguation({"an": [("AE", "N")], "and": [("AE", "N", "D")]})
    tokens, words = token_table(phones, max_k), word_table(["an", "and"])
    lex = kaldifst.compile(lexicon_fst_text(entries, tokens, words))
    assert lex.start == 0 and lex.final(0).value == 0.0
    for word, pron in entries:
        acceptor = kaldifst.compile("".join(f"{i} {i + 1} {tokens[p]} {tokens[p]}\n" for i, p in enumerate(pron))
                                    + f"{len(pron)}\n")
        kaldifst.arcsort(acceptor, sort_type="olabel")
        kaldifst.arcsort(lex, sort_type="ilabel")
        ok, _, out, _ = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(kaldifst.compose(acceptor, lex)))
        assert ok and out == [words[word]]


def test_ctc_topology_shape_and_repeat_rule() -> None:
    phones = ("A", "B")
    tokens = token_table(phones, 0)
    topo = kaldifst.compile(ctc_topology_text(tokens, phones))
    assert topo.num_states == 3 and sum(topo.num_arcs(s) for s in range(3)) == 9
    assert all(topo.final(s).value == 0.0 for s in range(3))

    def output(seq: list[str]) -> list[str]:
        ids = [tokens[s] for s in seq]
        acc = kaldifst.compile("".join(f"{i} {i + 1} {t} {t}\n" for i, t in enumerate(ids)) + f"{len(ids)}\n")
        kaldifst.arcsort(acc, sort_type="olabel")
        kaldifst.arcsort(topo, sort_type="ilabel")
        ok, _, out, _ = kaldifst.get_linear_symbol_sequence(kaldifst.shortest_path(kaldifst.compose(acc, topo)))
        assert ok
        return [tokens_by_id[o] for o in out]

    tokens_by_id = SymbolTable(tokens.symbols).symbols
    assert output(["A", "A", "<blk>", "A", "B", "B"]) == ["A", "A", "B"]
    assert output(["<blk>", "A", "B", "<blk>", "<blk>"]) == ["A", "B"]
    assert output(["A", "A", "A"]) == ["A"]
