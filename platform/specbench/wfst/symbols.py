"""Symbol tables (`words.txt`, `tokens.txt`) in OpenFst text form: `symbol id` per line, `<eps>` = 0.

tokens.txt: `<eps>` 0, `<blk>` 1, the 39 CMUdict phones 2..40, then `#0`, `#1`, ... (disambiguation).
Graph input label j is acoustic-score column j - 1 (kaldi-decoder's DecodableCtc convention): column 0 is
the CTC blank, column k the k-th phone of `lexicon.PHONES`.

words.txt: `<eps>` 0, the vocabulary sorted, then `#0`, `<s>`, `</s>` (what kaldilm's arpa2fst expects).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from specbench.errors import DataError
from specbench.text_files import read_utf8

EPS, BLANK = "<eps>", "<blk>"


def first_ids(symbols: Sequence[str]) -> dict[str, int]:
    """Each symbol's id in a list of symbols by id (the first id of one listed twice): how reference words
    are looked up; a word not in the list has none."""
    ids: dict[str, int] = {}
    for i, symbol in enumerate(symbols):
        ids.setdefault(symbol, i)
    return ids


@dataclass(frozen=True)
class SymbolTable:
    """A bijection between symbols and integer ids."""

    symbols: tuple[str, ...]  # symbols[id]

    def __post_init__(self) -> None:
        if len(set(self.symbols)) != len(self.symbols):
            raise ValueError("symbol table has duplicate symbols")

    @property
    def ids(self) -> dict[str, int]:
        return {s: i for i, s in enumerate(self.symbols)}

    def __len__(self) -> int:
        return len(self.symbols)

    def __getitem__(self, symbol: str) -> int:
        return self.ids[symbol]

    def write(self, path: Path) -> None:
        Path(path).write_text("".join(f"{s} {i}\n" for i, s in enumerate(self.symbols)), encoding="utf-8")

    @classmethod
    def read(cls, path: Path) -> SymbolTable:
        """A table in OpenFst text form (UTF-8, `symbol id` per line); DataError naming the file, the line
        and the fix when it is not one."""
        text = read_utf8(path, str(path), "Fix: save it as UTF-8, or rebuild the graph with `specbench graph "
                                          "build JOB.toml`.")
        pairs = []
        for lineno, line in enumerate(text.splitlines(), 1):
            parts = line.split()
            if len(parts) != 2 or not (parts[1].isascii() and parts[1].isdigit()):
                raise DataError(f"{path}, line {lineno}: expected 'symbol id', found {line!r}. "
                                "Fix: rebuild the graph with `specbench graph build JOB.toml --force`.")
            pairs.append((int(parts[1]), parts[0]))
        pairs.sort()
        if [i for i, _ in pairs] != list(range(len(pairs))):
            raise DataError(f"{path}: ids are not 0..{len(pairs) - 1} without gaps. "
                            "Fix: rebuild the graph with `specbench graph build JOB.toml --force`.")
        seen: dict[str, int] = {}
        for i, symbol in pairs:
            if seen.setdefault(symbol, i) != i:
                raise DataError(f"{path}: the symbol {symbol!r} has two ids, {seen[symbol]} and {i}. "
                                "Fix: rebuild the graph with `specbench graph build JOB.toml --force`.")
        return cls(tuple(s for _, s in pairs))


def token_table(phones: Sequence[str], num_disambig: int) -> SymbolTable:
    """`<eps>`, `<blk>`, the phones, `#0`..`#{num_disambig}`."""
    return SymbolTable((EPS, BLANK, *phones, *(f"#{i}" for i in range(num_disambig + 1))))


def word_table(words: Iterable[str]) -> SymbolTable:
    """`<eps>`, the sorted vocabulary, `#0`, `<s>`, `</s>`."""
    vocab = sorted(set(words))
    reserved = {EPS, "#0", "<s>", "</s>", "<unk>"} & set(vocab)
    if reserved:
        raise ValueError(f"vocabulary contains reserved symbols {sorted(reserved)}")
    return SymbolTable((EPS, *vocab, "#0", "<s>", "</s>"))
