"""The lexicon transducer L of a Sphinx model, as Kaldi's `prepare_lang.sh` builds it: word-position-dependent
phones, optional silence between words, and the model's noise words.

Phones (`phones.txt`): `<eps>` 0; each non-filler phone of the model in its four word positions, `AH_B`
(first phone of a word), `AH_E` (last), `AH_I` (inside), `AH_S` (a one-phone word), since Sphinx's triphones
depend on the word position of their centre phone; the filler phones (`SIL`, `+NSN+`, `+SPN+`) without
position; then `#0`, `#1`, ... and `#sil`, the disambiguation symbols.

L follows Kaldi's `make_lexicon_fst.py` with a silence probability p: a start state, a loop state (words
start and end there; final) and a silence state. From the start, p leads to the silence state and 1 - p
straight to the loop state; every word ends in the loop state with 1 - p or in the silence state with p; the
silence state returns to the loop state through one filler phone and `#sil` (Kaldi's silence
disambiguation symbol). The fillers share the silence: `SIL` with 1 - noise_share, the model's noise phones
(its `noisedict`, `[NOISE] +NSN+`, `[SPEECH] +SPN+`) with noise_share between them; they write no word,
so a hypothesis holds only words of the language model. A word's output is on its first arc;
pronunciations that are homophones or prefixes of others get `#1`, `#2`, ... (Kaldi's
`add_lex_disambig.pl`), and a `#0:#0` self-loop on the loop state passes G's back-off symbol.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specbench.errors import DataError
from specbench.wfst.symbols import EPS, SymbolTable
from specbench.wfst.topology import add_disambiguation

POSITIONS = ("B", "E", "I", "S")
SIL_DISAMBIG = "#sil"


def positional(pron: Sequence[str]) -> tuple[str, ...]:
    """A pronunciation's phones with their word positions: `AH_S` alone, else `_B`, `_I`..., `_E`."""
    if len(pron) == 1:
        return (f"{pron[0]}_S",)
    return (f"{pron[0]}_B", *(f"{p}_I" for p in pron[1:-1]), f"{pron[-1]}_E")


def split_phone(symbol: str) -> tuple[str, str | None]:
    """`AH_B` -> ("AH", "b"); a filler such as `SIL` -> ("SIL", None). Positions in Sphinx's lower case."""
    base, sep, position = symbol.rpartition("_")
    if sep and position in POSITIONS:
        return base, position.lower()
    return symbol, None


def phone_table(phones: Sequence[str], fillers: Sequence[str], max_disambig: int) -> SymbolTable:
    """`<eps>`, every phone in its four positions, the fillers, `#0`..`#max_disambig`, `#sil`."""
    return SymbolTable((EPS, *(f"{p}_{pos}" for p in phones for pos in POSITIONS), *fillers,
                        *(f"#{k}" for k in range(max_disambig + 1)), SIL_DISAMBIG))


def read_noise_dict(path: Path) -> dict[str, str]:
    """A Sphinx `noisedict` (`word PHONE` per line) -> {word: filler phone}."""
    out = {}
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2:
            raise DataError(f"{path}, line {lineno}: expected 'word FILLERPHONE', got {line.strip()!r}. "
                            "Fix: restore the model's noisedict from the pocketsphinx package.")
        out[fields[0]] = fields[1]
    return out


@dataclass(frozen=True)
class LexiconGraph:
    """L as OpenFst text and the tables it uses: `phones` (input), `words` (output), the ids of the
    disambiguation symbols (`#0`.. and `#sil`), and how many pronunciations it holds."""

    text: str
    phones: SymbolTable
    words: SymbolTable
    disambig_ids: tuple[int, ...]
    prons: int


def lexicon_graph(prons: Mapping[str, Sequence[tuple[str, ...]]], words: SymbolTable, phones: Sequence[str],
                  silence: str, noises: Sequence[str], silence_prob: float = 0.5,
                  noise_share: float = 0.1) -> LexiconGraph:
    """L over the words of `words` that `prons` pronounces (words without a pronunciation are left out).

    `phones`: the model's non-filler phones; `silence`: its silence phone; `noises`: its noise phones."""
    if not 0.0 < silence_prob < 1.0:
        raise ValueError(f"silence_prob must be in (0, 1), got {silence_prob}")
    if not 0.0 <= noise_share < 1.0 or (noise_share > 0 and not noises):
        raise ValueError(f"noise_share must be in [0, 1) and needs noise phones, got {noise_share}")
    known = set(words.symbols)
    entries, max_k = add_disambiguation({w: p for w, p in prons.items() if w in known})
    table = phone_table(phones, (silence, *noises), max_k)
    ids, word_ids = table.ids, words.ids
    sil_cost, no_sil_cost = -math.log(silence_prob), -math.log(1.0 - silence_prob)
    start, loop, sil, sil_exit = 0, 1, 2, 3
    lines = [f"{start} {loop} 0 0 {no_sil_cost:.6g}", f"{start} {sil} 0 0 {sil_cost:.6g}",
             f"{sil_exit} {loop} {ids[SIL_DISAMBIG]} 0"]
    fillers = [(silence, 1.0 - noise_share)] + [(n, noise_share / len(noises)) for n in noises if noise_share > 0]
    lines += [f"{sil} {sil_exit} {ids[f]} 0 {-math.log(share):.6g}" for f, share in fillers]
    next_state = 4
    for word, pron in entries:
        phones_here = pron if not pron else (*positional([p for p in pron if not p.startswith("#")]),
                                            *(p for p in pron if p.startswith("#")))
        state = loop
        for i, symbol in enumerate(phones_here[:-1]):
            lines.append(f"{state} {next_state} {ids[symbol]} {word_ids[word] if i == 0 else 0}")
            state, next_state = next_state, next_state + 1
        out = word_ids[word] if len(phones_here) == 1 else 0
        last = ids[phones_here[-1]]
        lines.append(f"{state} {loop} {last} {out} {no_sil_cost:.6g}")
        lines.append(f"{state} {sil} {last} {out} {sil_cost:.6g}")
    lines.append(f"{loop} {loop} {ids['#0']} {word_ids['#0']}")
    lines.append(f"{loop}")
    disambig = tuple(ids[f"#{k}"] for k in range(max_k + 1)) + (ids[SIL_DISAMBIG],)
    return LexiconGraph("\n".join(lines) + "\n", table, words, disambig, len(entries))
