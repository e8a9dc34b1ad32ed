"""The HMM transducer H of a Sphinx model and the self-loops added after determinization, as in Kaldi's
`mkgraph.sh` (`make-h-transducer`, then `add-self-loops` once HCLG is determinized and minimized).

H maps the context-dependent phones of `C o L o G` (kaldifst's `compose_context` labels: one window
`[left, centre, right]` of word-position-dependent phones per label, 0 at an utterance boundary, `[-d]` for
a disambiguation symbol) to HMM-state labels. A window becomes a Sphinx phone: the triphone of the centre's
base phone and word position with the neighbours' base phones as context (a boundary or a filler neighbour
counts as `SIL`; a filler centre is context-independent), or the nearest triphone the way pocketsphinx
backs off (`SphinxMdef.nearest_phone`). Its three emitting states are a path of three arcs whose input
labels are *entry labels*, one per (senone, transition matrix, state): entering a state reads its first
frame. Each disambiguation window gets an input label of its own, removed after determinization.

`add_self_loops` then gives every state that an entry label leads into the self-loop of that HMM state
and moves the exit probability onto the state's outgoing arcs and final weight, splitting a state whose
incoming arcs enter different HMM states (Kaldi's `MakePrecedingInputSymbolsSame`, then `AddSelfLoops`
with reordering). Transition costs are scaled by `self_loop_scale` (Kaldi's default 0.1, matching an
acoustic scale near 0.1); entry labels finally become senone ids + 1, so input label j reads score column
j - 1. Sphinx's HMMs are strictly left to right (each state loops or moves to the next; no skips), which
is checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specbench.errors import DataError
from specbench.wfst.graph import CsrGraph, from_arrays
from specbench.wfst.sphinx_lexicon import split_phone
from specbench.wfst.sphinx_mdef import SphinxMdef
from specbench.wfst.symbols import SymbolTable


@dataclass(frozen=True)
class HmmTransducer:
    """H as OpenFst text (input: entry or disambiguation labels; output: C o L o G input labels), and per
    entry label its senone, self-loop probability and exit probability (index 0 unused)."""

    text: str
    senone: np.ndarray
    loop_prob: np.ndarray
    disambig_labels: tuple[int, ...]
    windows: int
    backed_off: int  # windows whose exact triphone the model lacks

    @property
    def num_entries(self) -> int:
        return int(self.senone.shape[0] - 1)


def check_left_to_right(tmat: np.ndarray) -> None:
    """Every matrix moves from state i only to i (self-loop) or i + 1 (the last state's i + 1 is the exit)."""
    states = tmat.shape[1]
    allowed = np.zeros(tmat.shape[1:], dtype=bool)
    allowed[np.arange(states), np.arange(states)] = True
    allowed[np.arange(states), np.arange(states) + 1] = True
    bad = np.argwhere((tmat > 0) & ~allowed)
    if bad.size:
        m, i, j = (int(x) for x in bad[0])
        raise DataError(f"transition matrix {m} moves from state {i} to {j}: only strictly left-to-right HMMs "
                        "without skips are compiled into H. Fix: use a model with Sphinx's standard 3-state "
                        "topology (such as pocketsphinx's en-us).")
    if np.any(tmat[:, np.arange(states), np.arange(states) + 1] <= 0):
        raise DataError("a transition matrix has a state that never moves on (an HMM that cannot be left)")


def window_phone(window: Sequence[int], phones: SymbolTable, model: SphinxMdef) -> tuple[int, bool]:
    """The Sphinx phone id of a `[left, centre, right]` window of phone-table ids; and whether it backed off."""
    silence = model.ci_phones[model.silence]
    filler_names = {model.ci_phones[i] for i in model.fillers}

    def context(symbol_id: int) -> str:
        if symbol_id <= 0:
            return silence
        base, _ = split_phone(phones.symbols[symbol_id])
        return silence if base in filler_names else base

    base, position = split_phone(phones.symbols[window[1]])
    if position is None:
        return model.ci_phones.index(base), False
    phone, exact = model.nearest_phone(base, context(window[0]), context(window[2]), position)
    return phone, not exact


def hmm_transducer(ilabels: Sequence[Sequence[int]], phones: SymbolTable, model: SphinxMdef,
                   tmat: np.ndarray) -> HmmTransducer:
    """H for the input labels of `C o L o G` (`ilabels[i]`: the window of label i)."""
    check_left_to_right(tmat)
    entries: dict[tuple[int, int, int], int] = {}
    lines: list[str] = []
    next_state, backed_off, windows = 1, 0, 0
    disambig_windows = []
    for label, window in enumerate(ilabels):
        if label == 0:
            continue
        if len(window) != 3 or window[1] <= 0:
            disambig_windows.append(label)
            continue
        phone, backoff = window_phone(window, phones, model)
        backed_off += backoff
        windows += 1
        tm = int(model.tmat[phone])
        path = [entries.setdefault((int(model.senones[phone, s]), tm, s), len(entries) + 1)
                for s in range(model.senones.shape[1])]
        src = 0
        for k, entry in enumerate(path):
            dst = 0 if k == len(path) - 1 else next_state
            if dst:
                next_state += 1
            lines.append(f"{src} {dst} {entry} {label if k == 0 else 0}")
            src = dst
    first_disambig = len(entries) + 1
    disambig_labels = tuple(range(first_disambig, first_disambig + len(disambig_windows)))
    lines += [f"0 0 {tid} {label}" for tid, label in zip(disambig_labels, disambig_windows)]
    lines.append("0")
    senone = np.zeros(len(entries) + 1, dtype=np.int64)
    loop = np.zeros(len(entries) + 1, dtype=np.float64)
    for (sen, tm, state), entry in entries.items():
        senone[entry], loop[entry] = sen, tmat[tm, state, state]
    return HmmTransducer("\n".join(lines) + "\n", senone, loop, disambig_labels, windows, backed_off)


def add_self_loops(graph: CsrGraph, senone: np.ndarray, loop_prob: np.ndarray, self_loop_scale: float
                   ) -> CsrGraph:
    """HCLG from the determinized, minimized HCLGa (input labels: entry labels or 0): self-loops and exit
    costs added, states split where their incoming arcs enter different HMM states, labels -> senone + 1."""
    fst = graph.to_arrays()
    num_states, num_arcs = graph.num_states, fst.ilabel.shape[0]
    if num_arcs and int(fst.ilabel.max()) >= senone.shape[0]:
        raise ValueError("an input label of the graph is not an entry label of H (disambiguation left in?)")
    width = np.int64(senone.shape[0])
    keys = fst.nextstate.astype(np.int64) * width + fst.ilabel
    pairs = np.unique(np.concatenate([keys, [np.int64(max(fst.start, 0)) * width]]))
    pair_state, pair_label = pairs // width, pairs % width
    group_start = np.flatnonzero(np.r_[True, pair_state[1:] != pair_state[:-1]])
    rank = np.arange(pairs.shape[0]) - np.repeat(group_start, np.diff(np.r_[group_start, pairs.shape[0]]))
    is_new = rank > 0  # the first (state, label) pair of a state keeps the state; the others get a copy
    target = np.where(is_new, num_states + np.cumsum(is_new) - 1, pair_state)
    total = num_states + int(is_new.sum())
    source = np.concatenate([np.arange(num_states), pair_state[is_new]])  # whose arcs each state copies
    loop_label = np.zeros(total, dtype=np.int64)
    loop_label[target] = pair_label
    loop_cost = np.where(loop_label > 0, -self_loop_scale * np.log(np.maximum(loop_prob[loop_label], 1e-300)), 0.0)
    exit_cost = np.where(loop_label > 0, -self_loop_scale * np.log1p(-loop_prob[loop_label]), 0.0)
    degree = np.diff(fst.offsets)[source]
    arc_of = np.repeat(fst.offsets[:-1][source], degree) + (
        np.arange(int(degree.sum())) - np.repeat(np.cumsum(degree) - degree, degree))
    new_src = np.repeat(np.arange(total), degree)
    dest = target[np.searchsorted(pairs, keys[arc_of])]
    weight = fst.weight[arc_of].astype(np.float64) + exit_cost[new_src]
    looped = np.flatnonzero(loop_label)
    final = fst.final.astype(np.float64)[source] + exit_cost
    labels = np.concatenate([fst.ilabel[arc_of], loop_label[looped]])
    return from_arrays(
        fst.start, final.astype(np.float32), src=np.concatenate([new_src, looped]),
        dest=np.concatenate([dest, looped]), ilabel=np.where(labels > 0, senone[labels] + 1, 0),
        olabel=np.concatenate([fst.olabel[arc_of], np.zeros(looped.shape[0], dtype=np.int32)]),
        weight=np.concatenate([weight, loop_cost[looped]]))
