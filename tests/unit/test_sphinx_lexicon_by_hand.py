"""`wfst.sphinx_lexicon` by hand: word positions of one-, two- and three-phone pronunciations, phone names
that only look positional, the word label of a one-phone word in L, and the arguments and noisedict lines
that are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.errors import DataError
from specbench.wfst.sphinx_lexicon import lexicon_graph, positional, read_noise_dict, split_phone
from specbench.wfst.symbols import word_table

pytestmark = pytest.mark.unit


def test_word_positions_by_pronunciation_length() -> None:
    assert positional(("AH",)) == ("AH_S",)
    assert positional(("G", "OW")) == ("G_B", "OW_E")
    assert positional(("S", "T", "AA", "P")) == ("S_B", "T_I", "AA_I", "P_E")


def test_only_the_four_positions_split_off() -> None:
    assert split_phone("AH_B") == ("AH", "b") and split_phone("AH_S") == ("AH", "s")
    assert split_phone("SIL") == ("SIL", None)
    assert split_phone("X_Y") == ("X_Y", None)  # an underscore that is no word position stays in the name


def test_a_one_phone_word_writes_its_word_on_its_only_arc() -> None:
    words = word_table(["a"])
    lexicon = lexicon_graph({"a": [("AH",)]}, words, ["AH"], "SIL", [], 0.5, 0.0)
    ah_s, word = lexicon.phones.ids["AH_S"], words.ids["a"]
    arcs = [line.split() for line in lexicon.text.splitlines() if len(line.split()) >= 4]
    # loop state 1 --AH_S:a--> loop (cost -ln 0.5) and --AH_S:a--> silence state 2
    assert [a[:4] for a in arcs if a[2] == str(ah_s)] == [["1", "1", str(ah_s), str(word)],
                                                           ["1", "2", str(ah_s), str(word)]]


def test_bad_probabilities_are_refused() -> None:
    words = word_table(["a"])
    for prob in (0.0, 1.0):
        with pytest.raises(ValueError, match="silence_prob must be in"):
            lexicon_graph({"a": [("AH",)]}, words, ["AH"], "SIL", ["+NSN+"], prob, 0.1)
    with pytest.raises(ValueError, match="needs noise phones"):
        lexicon_graph({"a": [("AH",)]}, words, ["AH"], "SIL", [], 0.5, 0.1)


def test_a_noisedict_line_with_three_fields_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "noisedict"
    path.write_text("<s> SIL\n[NOISE] +NSN+ extra\n")
    with pytest.raises(DataError, match="line 2: expected 'word FILLERPHONE'"):
        read_noise_dict(path)
