"""Symbol tables (`wfst.symbols`) on small inputs checked by hand against the layout the module docstring
gives: words.txt is `<eps>`, the vocabulary sorted and without repeats, then `#0 <s> </s>`; reserved symbols
(`<unk>` included: the graph has no unknown-word token) are refused; a table file may list its lines in any
order but its ids must be 0..n-1 without gaps; a table never holds a symbol twice; `first_ids` gives a symbol
listed twice its first id."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.errors import DataError
from specbench.wfst.symbols import SymbolTable, first_ids, token_table, word_table

pytestmark = pytest.mark.unit


def test_word_table_sorts_the_vocabulary_and_appends_the_markers() -> None:
    table = word_table(["play", "jazz", "play", "a"])
    assert table.symbols == ("<eps>", "a", "jazz", "play", "#0", "<s>", "</s>")
    assert table["jazz"] == 2 and table["#0"] == 4 and len(table) == 7


@pytest.mark.parametrize("reserved", ["<eps>", "#0", "<s>", "</s>", "<unk>"])
def test_word_table_refuses_reserved_symbols(reserved: str) -> None:
    with pytest.raises(ValueError, match="reserved"):
        word_table(["a", reserved])


def test_token_table_layout() -> None:
    table = token_table(("AA", "B"), 2)
    assert table.symbols == ("<eps>", "<blk>", "AA", "B", "#0", "#1", "#2")


def test_a_table_file_in_any_line_order_reads_by_id(tmp_path: Path) -> None:
    path = tmp_path / "words.txt"
    path.write_text("b 2\n<eps> 0\n#0 3\na 1\n", encoding="utf-8")
    assert SymbolTable.read(path).symbols == ("<eps>", "a", "b", "#0")


def test_a_table_file_with_a_gap_in_its_ids_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "words.txt"
    path.write_text("<eps> 0\na 1\nb 3\n", encoding="utf-8")
    with pytest.raises(DataError, match="without gaps"):
        SymbolTable.read(path)


@pytest.mark.parametrize(("text", "message"), [("<eps> 0\na 1\na 2\n", "'a' has two ids, 1 and 2"),
                                              ("<eps> 0\na \u00b2\n", "line 2: expected 'symbol id'")])
def test_a_damaged_table_file_is_a_data_error_naming_it(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "words.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=message) as err:
        SymbolTable.read(path)
    assert str(path) in str(err.value) and "--force" in str(err.value)


def test_a_symbol_listed_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        SymbolTable(("<eps>", "a", "a"))


def test_first_ids_gives_the_first_id_of_a_repeated_symbol() -> None:
    assert first_ids(["<eps>", "a", "b", "a", "c", "b"]) == {"<eps>": 0, "a": 1, "b": 2, "c": 4}
