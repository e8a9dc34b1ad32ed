"""Word posteriors from our lattices: forward-backward in the log semiring over a `WordLattice`.

A complete path's probability is exp(-scale x (graph + acoustic + final cost)) normalized over every
complete path (`scale`: the posterior scale). The lattice's acoustic costs already carry the decoder's
acoustic scale a, and `scale` multiplies graph and acoustic costs together: the acoustic weight is scale x a
and the graph (LM) weight is scale. At scale 1.0 that is the decoder's own weighting, as Kaldi's
`lattice-to-post --acoustic-scale=a` on a lattice written with unscaled acoustic costs; at any other scale it
is not what that option does (it scales the acoustic costs only), but Kaldi's `lattice-scale
--acoustic-scale=scale*a --lm-scale=scale` followed by `lattice-to-post --acoustic-scale=1`.
`arc_posteriors` gives each arc the probability that a path uses it.

The confidence of the k-th word of the 1-best path (its word arc leaves frame f_k) is the probability that
a path emits the same word between the 1-best's neighbouring words: at a frame after f_(k-1) and before
f_(k+1), or at f_k itself (the graph emits word labels on epsilon arcs, so several can leave one frame; the
first word's window starts at frame 0, the last word's ends after frame T). Other paths place
a word's label a few frames earlier or later than the 1-best does (other alignments, labels the graph's
determinization moved), so a window that stopped halfway to the neighbours would miss them.

A group of r copies of one 1-best word shares one window, from the first copy's window's start to the last
one's end (the union of theirs), and the group's j-th copy gets the probability that a path emits the word
at least j times in it: consecutive copies, and copies whose windows overlap (in `a b a` with all three
leaving one frame). Separate windows would overlap, and a path with one copy of the word where they overlap
would confirm every copy. For r = 1 this is the probability of at least one
emission in the word's own window. It is computed exactly by a forward pass over r + 1 copies of the
lattice (copy c: c matching arcs so far, the top copy r or more): the word's posterior in [0, 1],
time-localized as Wessel et al.'s word posteriors are, and with no sausage alignment to approximate it.

A lattice that is missing, has no complete path, or has a cycle of epsilon arcs (its forward sum would be
an infinite series), and a scale that is not a finite real number > 0 (numpy's included, bools not), give a
status saying why and no posteriors (never NaN). The loops are compiled with numba;
`tests/unit/test_word_confidence.py` checks them against enumerating every path (runs of repeated words
included), and against the paths kaldifst's `lattice_to_nbest` (OpenFst's n-shortest paths) lists.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numba
import numpy as np

from specbench.decoder.lattice import WordLattice

STATUS_OK = "ok"
NO_LATTICE = "no lattice: the decoder kept none (no hypothesis reached a final state)"
NO_PATH = "no complete path: the lattice reaches no final state, so posteriors are undefined"
CYCLIC = "the lattice has a cycle of epsilon arcs: its path sum diverges, posteriors are undefined"
_NEG_INF = -np.inf


def _is_real(scale: object) -> bool:
    """A real number (numpy's too), but not a bool."""
    return isinstance(scale, numbers.Real) and not isinstance(scale, (bool, np.bool_))


def bad_scale(scale: object) -> str:
    if not _is_real(scale):
        return (f"posterior scale {scale!r} ({type(scale).__name__}) is not a number: posteriors are "
                "undefined. Fix: pass a real number > 0, e.g. 1.0 (the decoder's own acoustic weighting)")
    return (f"posterior scale {scale!r} is not a finite number > 0: posteriors are undefined. Fix: use a "
            "scale > 0 (1.0: the decoder's own acoustic weighting)")


@dataclass(frozen=True)
class WordPosteriors:
    """The 1-best words of one lattice with their posteriors (`status` ok), or the reason there are none."""

    status: str
    word_ids: tuple[int, ...] = ()
    frames: tuple[int, ...] = ()  # the frame each 1-best word's arc leaves
    posteriors: tuple[float, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK


@numba.njit(cache=True)
def _logadd(a: float, b: float) -> float:
    if a == _NEG_INF:
        return b
    if b == _NEG_INF:
        return a
    hi, lo = (a, b) if a > b else (b, a)
    return hi + math.log1p(math.exp(lo - hi))


@numba.njit(cache=True)
def _topological_arcs(num_nodes: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Arc indices ordered so that every arc into a node precedes every arc out of it (Kahn's order of the
    source nodes); an empty array when the arcs form a cycle."""
    indegree = np.zeros(num_nodes, np.int64)
    out_start = np.zeros(num_nodes + 1, np.int64)
    for a in range(len(src)):
        indegree[dst[a]] += 1
        out_start[src[a] + 1] += 1
    for v in range(num_nodes):
        out_start[v + 1] += out_start[v]
    fill = out_start[:-1].copy()
    by_src = np.empty(len(src), np.int64)
    for a in range(len(src)):
        by_src[fill[src[a]]] = a
        fill[src[a]] += 1
    queue = np.empty(num_nodes, np.int64)
    head, tail = 0, 0
    for v in range(num_nodes):
        if indegree[v] == 0:
            queue[tail] = v
            tail += 1
    order = np.empty(len(src), np.int64)
    n = 0
    while head < tail:
        v = queue[head]
        head += 1
        for i in range(out_start[v], out_start[v + 1]):
            a = by_src[i]
            order[n] = a
            n += 1
            indegree[dst[a]] -= 1
            if indegree[dst[a]] == 0:
                queue[tail] = dst[a]
                tail += 1
    if tail < num_nodes:
        return np.empty(0, np.int64)
    return order


@numba.njit(cache=True)
def _forward(num_nodes: int, order: np.ndarray, src: np.ndarray, dst: np.ndarray,
             logw: np.ndarray) -> np.ndarray:
    alpha = np.full(num_nodes, _NEG_INF)
    alpha[0] = 0.0
    for a in order:
        alpha[dst[a]] = _logadd(alpha[dst[a]], alpha[src[a]] + logw[a])
    return alpha


@numba.njit(cache=True)
def _backward(num_nodes: int, order: np.ndarray, src: np.ndarray, dst: np.ndarray, logw: np.ndarray,
              log_final: np.ndarray) -> np.ndarray:
    beta = log_final.copy()
    for i in range(len(order) - 1, -1, -1):
        a = order[i]
        beta[src[a]] = _logadd(beta[src[a]], logw[a] + beta[dst[a]])
    return beta


@numba.njit(cache=True)
def _log_masses_by_hits(num_nodes: int, order: np.ndarray, src: np.ndarray, dst: np.ndarray,
                        logw: np.ndarray, log_final: np.ndarray, hit: np.ndarray, runs: int) -> np.ndarray:
    """masses[j - 1]: log of the summed probability mass of the complete paths that use at least j `hit`
    arcs, for j = 1..runs: a forward pass over runs + 1 copies of the lattice (copy c: partial paths with c
    hit arcs so far; copy `runs`: with `runs` or more). With runs = 1 this is the two-copy pass (before and
    after a hit), operation for operation."""
    alpha = np.full((runs + 1, num_nodes), _NEG_INF)
    alpha[0, 0] = 0.0
    for a in order:
        s, d, w = src[a], dst[a], logw[a]  # s != d: the order exists only for acyclic arcs
        if hit[a]:
            alpha[runs, d] = _logadd(alpha[runs, d], _logadd(alpha[runs - 1, s], alpha[runs, s]) + w)
            for c in range(runs - 1, 0, -1):
                alpha[c, d] = _logadd(alpha[c, d], alpha[c - 1, s] + w)
        else:
            for c in range(runs + 1):
                alpha[c, d] = _logadd(alpha[c, d], alpha[c, s] + w)
    masses = np.empty(runs)
    above = _NEG_INF  # the mass of the copies above c
    for c in range(runs, 0, -1):
        total = _NEG_INF
        for v in range(num_nodes):
            total = _logadd(total, alpha[c, v] + log_final[v])
        above = _logadd(total, above)
        masses[c - 1] = above
    return masses


def _prepared(lattice: WordLattice | None, scale: float):
    """(order, log arc weights, log final weights) or the status that stops the computation."""
    if not (_is_real(scale) and math.isfinite(scale) and scale > 0):
        return bad_scale(scale)
    scale = float(scale)
    if lattice is None or lattice.num_nodes == 0:
        return NO_LATTICE
    if not np.isfinite(lattice.final_cost).any():
        return NO_PATH
    src, dst = lattice.src.astype(np.int64), lattice.dst.astype(np.int64)
    order = _topological_arcs(lattice.num_nodes, src, dst)
    if len(order) != len(src):
        return CYCLIC
    logw = -scale * (lattice.graph_cost + lattice.acoustic_cost).astype(np.float64)
    log_final = np.where(np.isfinite(lattice.final_cost), -scale * lattice.final_cost, _NEG_INF)
    return src, dst, order, logw, log_final


def arc_posteriors(lattice: WordLattice | None, scale: float = 1.0) -> tuple[str, np.ndarray, float]:
    """(status, each arc's posterior, log of the total path mass); empty posteriors unless ok."""
    prepared = _prepared(lattice, scale)
    if isinstance(prepared, str):
        return prepared, np.zeros(0), _NEG_INF
    src, dst, order, logw, log_final = prepared
    alpha = _forward(lattice.num_nodes, order, src, dst, logw)
    beta = _backward(lattice.num_nodes, order, src, dst, logw, log_final)
    total = float(beta[0])
    if not math.isfinite(total):
        return NO_PATH, np.zeros(0), _NEG_INF
    return STATUS_OK, np.exp(np.minimum(alpha[src] + logw + beta[dst] - total, 0.0)), total


def best_path_words(lattice: WordLattice) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The 1-best path's word ids and the frame each word arc leaves (`WordLattice.best_path`'s tie rule)."""
    word_arcs = [a for a in lattice.best_path_arcs() if lattice.olabel[a] != 0]
    return (tuple(int(lattice.olabel[a]) for a in word_arcs),
            tuple(int(lattice.node_frame[lattice.src[a]]) for a in word_arcs))


def word_windows(frames: tuple[int, ...], num_frames: int) -> list[tuple[float, float]]:
    """[lo, hi) frame windows of the 1-best words: after the previous word's frame and before the next
    one's, always including the word's own frame (several words' labels can leave one frame: the graph
    emits labels on epsilon arcs). See the module docstring."""
    before = [-1] + list(frames[:-1])
    after = list(frames[1:]) + [num_frames + 1]
    return [(float(min(b + 1, f)), float(max(a, f + 1))) for b, f, a in zip(before, frames, after)]


def word_groups(words: tuple[int, ...], windows: list[tuple[float, float]]) -> list[list[int]]:
    """The 1-best words that share one window, as lists of indices in order: copies of one word that are
    consecutive, or whose windows overlap the group's (several words can leave one frame, so in `a b a` the
    two copies of `a` can share frames); every other word alone."""
    groups: list[list[int]] = []
    latest: dict[int, int] = {}  # word -> its latest group
    for k, word in enumerate(words):
        g = latest.get(word)
        if g is not None and (groups[g][-1] == k - 1 or windows[k][0] < windows[groups[g][-1]][1]):
            groups[g].append(k)
        else:
            latest[word] = len(groups)
            groups.append([k])
    return groups


def word_posteriors(lattice: WordLattice | None, scale: float = 1.0) -> WordPosteriors:
    """The posterior of every 1-best word of `lattice` (see the module docstring)."""
    prepared = _prepared(lattice, scale)
    if isinstance(prepared, str):
        return WordPosteriors(prepared)
    src, dst, order, logw, log_final = prepared
    total = float(_backward(lattice.num_nodes, order, src, dst, logw, log_final)[0])
    if not math.isfinite(total):
        return WordPosteriors(NO_PATH)
    words, frames = best_path_words(lattice)
    windows = word_windows(frames, lattice.num_frames)
    arc_frame = lattice.node_frame[lattice.src]
    posteriors = [0.0] * len(words)
    for group in word_groups(words, windows):
        lo, hi = windows[group[0]][0], windows[group[-1]][1]
        hit = (lattice.olabel == words[group[0]]) & (arc_frame >= lo) & (arc_frame < hi)
        masses = _log_masses_by_hits(lattice.num_nodes, order, src, dst, logw, log_final, hit, len(group))
        for k, m in zip(group, masses):
            posteriors[k] = float(min(1.0, math.exp(m - total))) if math.isfinite(m) else 0.0
    return WordPosteriors(STATUS_OK, words, frames, tuple(posteriors))
