"""The lexicon transducer L (with disambiguation symbols) and the CTC topology T, as OpenFst text.

L follows Kaldi's `make_lexicon_fst.py` without silence, for CTC: one loop state (start and final); each
pronunciation is a path from it back to it, the word on the first arc; `#1`, `#2`, ... disambiguate
homophones and pronunciations that are prefixes of others (Kaldi's `add_lex_disambig.pl`); a `#0:#0`
self-loop passes G's back-off symbol.

T is the standard (non-modified) CTC topology (k2's `ctc_topo`): one state per token (blank + phones), an arc
between any two states reading the destination's token and writing its phone unless the destination is
blank or the source itself, so a repeated phone needs a blank in between. Every state is final.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from specbench.wfst.symbols import BLANK, SymbolTable


def add_disambiguation(prons: Mapping[str, Sequence[tuple[str, ...]]]) -> tuple[list[tuple[str, tuple[str, ...]]], int]:
    """Every (word, pronunciation) in sorted order, with `#k` appended where needed; and the largest k used.

    A pronunciation gets a disambiguation symbol when another word has the same phones, or when it is a
    proper prefix of another pronunciation; identical sequences get `#1`, `#2`, ... in turn.
    """
    entries = [(w, tuple(p)) for w in sorted(prons) for p in prons[w]]
    count = Counter(p for _, p in entries)
    prefixes = {p[:i] for _, p in entries for i in range(1, len(p))}
    next_index: Counter[tuple[str, ...]] = Counter()
    out, max_k = [], 0
    for word, pron in entries:
        if count[pron] == 1 and pron not in prefixes:
            out.append((word, pron))
            continue
        next_index[pron] += 1
        k = next_index[pron]
        max_k = max(max_k, k)
        out.append((word, (*pron, f"#{k}")))
    return out, max_k


def lexicon_fst_text(entries: Sequence[tuple[str, tuple[str, ...]]], tokens: SymbolTable,
                     words: SymbolTable) -> str:
    """L as OpenFst text with integer labels (input: tokens.txt ids, output: words.txt ids)."""
    tok, wrd = tokens.ids, words.ids
    lines = []
    next_state = 1
    for word, pron in entries:
        if not pron:
            raise ValueError(f"word {word!r} has an empty pronunciation")
        src = 0
        for i, sym in enumerate(pron):
            last = i == len(pron) - 1
            dst = 0 if last else next_state
            if not last:
                next_state += 1
            lines.append(f"{src} {dst} {tok[sym]} {wrd[word] if i == 0 else 0}")
            src = dst
    lines.append(f"0 0 {tok['#0']} {wrd['#0']}")
    lines.append("0")
    return "\n".join(lines) + "\n"


def ctc_topology_text(tokens: SymbolTable, phones: Sequence[str]) -> str:
    """T as OpenFst text: input token ids (blank + phones), output phone ids (same table), all final."""
    states = [BLANK, *phones]
    ids = tokens.ids
    lines = []
    for s, src in enumerate(states):
        for d, dst in enumerate(states):
            out = 0 if (d == 0 or d == s) else ids[dst]
            lines.append(f"{s} {d} {ids[dst]} {out}")
    lines.extend(str(s) for s in range(len(states)))
    return "\n".join(lines) + "\n"
