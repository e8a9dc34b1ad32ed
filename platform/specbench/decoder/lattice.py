"""Word lattices: the arcs a decoder kept for one utterance, pruned forward-backward as Kaldi does.

Nodes are (frame, state) pairs: frame f = frames consumed so far (0..T), state = graph state. A decoder
records arcs with `RawLatticeBuilder`; `prune_lattice` keeps the arcs on a complete path (start node to a
final frame-T node) within `lattice_beam` of the best and gives a `WordLattice`: best path, word sequences,
oracle word errors, a Kaldi word lattice (weights (graph, acoustic)). Costs are tropical. Epsilon arcs (one
frame) may form cycles of non-negative weight; each frame relaxes them to a fixed point (Bellman-Ford).
`lattice_file_oracle_errors` gives the oracle word errors of a lattice read back from its file.

These are state-level lattices: nodes are (frame, graph state) pairs and every alignment of a word sequence
within the beam is its own path. They are not determinized into word lattices, as Kaldi's decoders write
theirs by default (one best alignment per word sequence), so their density and sums over paths (word
posteriors) are not directly comparable with those of Kaldi's determinized lattices.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import kaldifst
import numpy as np

from specbench.errors import DataError

_FIELDS = ("src_frame", "src_state", "dst_frame", "dst_state", "ilabel", "olabel", "graph_cost",
           "acoustic_cost")
_DTYPE = dict(zip(_FIELDS, [np.int32] * 6 + [np.float64] * 2))
_NO_ARC = np.iinfo(np.int64).max
_FAR = 1 << 40  # "unreachable" in the integer edit-distance table
NEGATIVE_CYCLE = ("a cycle of epsilon arcs within one frame has a negative total weight, so costs have no "
                  "minimum. Fix: decode with a graph whose epsilon arcs have non-negative weights (or whose "
                  "epsilon cycles at least sum to >= 0)")


@dataclass(frozen=True)
class RawLattice:
    """Every arc between search tokens kept for one utterance (arrays of one length). dst_frame is
    src_frame + 1 on emitting arcs (ilabel > 0), src_frame on epsilon arcs (ilabel 0, acoustic cost 0).
    Duplicates (same nodes and labels) are allowed: pruning keeps the cheapest."""

    num_frames: int
    start_state: int
    src_frame: np.ndarray
    src_state: np.ndarray
    dst_frame: np.ndarray
    dst_state: np.ndarray
    ilabel: np.ndarray
    olabel: np.ndarray
    graph_cost: np.ndarray
    acoustic_cost: np.ndarray

    def __post_init__(self) -> None:
        for name in ("num_frames", "start_state"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
                raise ValueError(f"RawLattice.{name} must be a non-negative int, got {value!r}")
            object.__setattr__(self, name, int(value))
        for name in _FIELDS:
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=_DTYPE[name]).ravel())
        lengths = {name: len(getattr(self, name)) for name in _FIELDS}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"RawLattice arrays differ in length: {lengths}")
        step = self.dst_frame - self.src_frame
        for bad, what in [
            ((step != 0) & (step != 1), "dst_frame must be src_frame (epsilon) or src_frame + 1 (emitting)"),
            ((self.src_frame < 0) | (self.dst_frame > self.num_frames), "frames must lie in 0..num_frames"),
            ((self.src_state < 0) | (self.dst_state < 0) | (self.ilabel < 0) | (self.olabel < 0),
             "states, labels must be >= 0"),
            ((self.ilabel == 0) != (step == 0), "ilabel must be 0 exactly on epsilon arcs (no frame step)"),
            (~np.isfinite(self.graph_cost + self.acoustic_cost), "costs must be finite"),
        ]:
            if np.any(bad):
                raise ValueError(f"RawLattice: {what} (arc {int(np.argmax(bad))})")

    @property
    def num_arcs(self) -> int:
        return len(self.src_frame)


class RawLatticeBuilder:
    """Collects arcs chunk by chunk (arrays, or scalars broadcast against them); `build` joins them once."""

    def __init__(self) -> None:
        self._parts: dict[str, list[np.ndarray]] = {name: [] for name in _FIELDS}

    def add(self, src_frame, src_state, dst_frame, dst_state, ilabel, olabel, graph_cost,
            acoustic_cost) -> None:
        values = np.broadcast_arrays(*(np.asarray(v) for v in (
            src_frame, src_state, dst_frame, dst_state, ilabel, olabel, graph_cost, acoustic_cost)))
        for name, value in zip(_FIELDS, values):
            self._parts[name].append(np.array(value.ravel(), dtype=_DTYPE[name]))

    @property
    def num_arcs(self) -> int:
        return sum(len(part) for part in self._parts["src_frame"])

    def build(self, num_frames: int, start_state: int) -> RawLattice:
        arrays = {name: np.concatenate(parts) if parts else np.zeros(0, dtype=_DTYPE[name])
                  for name, parts in self._parts.items()}
        return RawLattice(num_frames=num_frames, start_state=start_state, **arrays)


# ---------------------------------------------------------------------------------------------- relaxation


def _frame_order(arc_frame: np.ndarray, emitting: np.ndarray, num_frames: int) -> tuple[np.ndarray, np.ndarray]:
    """(arc indices by frame, epsilon arcs before emitting ones, index order within; bounds): frame f's
    epsilon arcs are order[bounds[2f]:bounds[2f + 1]], its emitting arcs order[bounds[2f + 1]:bounds[2f + 2]]."""
    key = 2 * arc_frame.astype(np.int64) + emitting
    order = np.argsort(key, kind="stable")
    return order, np.searchsorted(key[order], np.arange(2 * num_frames + 3))


def _frame_groups(arc_frame: np.ndarray, emitting: np.ndarray, num_frames: int) -> list:
    """Per frame f: (epsilon arcs of f, emitting arcs leaving f), as arc index arrays."""
    order, bounds = _frame_order(arc_frame, emitting, num_frames)
    return [(order[bounds[2 * f]:bounds[2 * f + 1]], order[bounds[2 * f + 1]:bounds[2 * f + 2]])
            for f in range(num_frames + 1)]


def _fixed_point(step, arcs: np.ndarray, rounds: int, frame: int) -> None:
    for _ in range(rounds + 1):
        if not step(arcs):
            return
    raise RuntimeError(f"lattice: epsilon relaxation did not converge at frame {frame}: {NEGATIVE_CYCLE}")


def _shortest(init, tail, head, cost, groups, sizes, reverse: bool) -> tuple[np.ndarray, np.ndarray]:
    """Costs from `init` along arcs tail -> head, frame by frame (descending when `reverse`), with the
    predecessor arc of every improved node: a node keeps its arc unless a strictly cheaper one appears;
    equally cheap candidates of one round go to the lowest arc index."""
    dist, back = init.copy(), np.full(len(init), -1, dtype=np.int64)

    def step(arcs: np.ndarray) -> bool:
        if arcs.size == 0:
            return False
        to = head[arcs]
        cand = dist[tail[arcs]] + cost[arcs]
        old = dist[to]
        np.minimum.at(dist, to, cand)
        win = (cand < old) & (cand == dist[to])
        if not win.any():
            return False
        back[to[win]] = _NO_ARC
        np.minimum.at(back, to[win], arcs[win])
        return True

    for f in (reversed(range(len(groups))) if reverse else range(len(groups))):
        eps, emit = groups[f]
        if reverse:
            step(emit)
        _fixed_point(step, eps, int(sizes[f]), f)
        if not reverse:
            step(emit)
    return dist, back


# ---------------------------------------------------------------------------------------------- pruning


def _dedup(raw: RawLattice) -> np.ndarray:
    """Arc indices of `raw` without duplicates (same nodes and labels): the lowest total cost, then the
    lowest acoustic cost, then the first recorded."""
    width = int(max(raw.src_state.max(initial=0), raw.dst_state.max(initial=0))) + 1
    labels = int(max(raw.ilabel.max(initial=0), raw.olabel.max(initial=0))) + 1
    keys = [raw.src_frame.astype(np.int64) * width + raw.src_state,  # the same order as the six columns
            (raw.dst_frame.astype(np.int64) * width + raw.dst_state) * labels + raw.ilabel, raw.olabel]
    order = np.lexsort([raw.acoustic_cost, raw.graph_cost + raw.acoustic_cost] + keys[::-1])
    first = np.ones(len(order), dtype=bool)
    if len(order) > 1:
        first[1:] = np.any([k[order][1:] != k[order][:-1] for k in keys], axis=0)
    return order[first]


def final_too_short(entries: int, state: int) -> str:
    """The error of final weights that do not cover a frame-T node's state."""
    return (f"prune_lattice: final has {entries} entries, but a frame-T node (the destination or source of a "
            f"frame-T arc, or the start node when there are no frames) has state {state}. Fix: pass "
            "graph.final of the graph that made the lattice (one final weight per graph state)")


def prune_lattice(raw: RawLattice, final: np.ndarray, lattice_beam: float) -> WordLattice | None:
    """Keep the arcs with alpha[src] + cost + beta[dst] <= best + lattice_beam (and final weights with
    alpha + final within it); None when no final frame-T node is reachable. Node 0 is the start node, the
    others follow in (frame, state) order; arcs are sorted by (src, dst, ilabel, olabel)."""
    if not float(lattice_beam) >= 0:
        raise ValueError(f"prune_lattice: lattice_beam must be >= 0, got {lattice_beam!r}")
    final = np.asarray(final, dtype=np.float64)
    unique = _dedup(raw)
    sf, ss, df, ds, ilabel, olabel, graph, acoustic = (getattr(raw, name)[unique] for name in _FIELDS)
    sf, ss, df, ds = (a.astype(np.int64) for a in (sf, ss, df, ds))
    width = int(max(ss.max(initial=0), ds.max(initial=0), raw.start_state)) + 1
    keys, inverse = np.unique(np.concatenate([[raw.start_state], sf * width + ss, df * width + ds]),
                              return_inverse=True)
    start, src, dst = int(inverse[0]), inverse[1:1 + len(sf)], inverse[1 + len(sf):]
    node_frame, node_state = keys // width, keys % width
    num_frames, n = raw.num_frames, len(keys)
    at_end = node_frame == num_frames
    if node_state[at_end].max(initial=-1) >= len(final):
        raise ValueError(final_too_short(len(final), int(node_state[at_end].max())))
    end_cost = np.full(n, np.inf)
    end_cost[at_end] = final[node_state[at_end]]
    groups = _frame_groups(sf, df != sf, num_frames)
    sizes = np.bincount(node_frame, minlength=num_frames + 1)
    cost = graph + acoustic
    init = np.full(n, np.inf)
    init[start] = 0.0
    alpha, _ = _shortest(init, src, dst, cost, groups, sizes, reverse=False)
    beta, _ = _shortest(end_cost, dst, src, cost, groups, sizes, reverse=True)
    best = float(np.min(alpha + end_cost))
    if not math.isfinite(best):
        return None
    limit = best + lattice_beam + 1e-6 * max(1.0, abs(best))
    through = alpha[src] + cost + beta[dst]
    arc_keep = np.isfinite(through) & (through <= limit)
    ends = alpha + end_cost
    node_keep = np.zeros(n, dtype=bool)
    node_keep[src[arc_keep]] = node_keep[dst[arc_keep]] = True
    old = np.flatnonzero(node_keep)
    old = np.concatenate([[start], old[old != start]])
    new = np.full(n, -1, dtype=np.int64)
    new[old] = np.arange(len(old))
    a_src, a_dst = new[src[arc_keep]], new[dst[arc_keep]]
    order = np.lexsort((olabel[arc_keep], ilabel[arc_keep], a_dst, a_src))
    return WordLattice(
        num_frames=num_frames, node_frame=node_frame[old].astype(np.int32),
        node_state=node_state[old].astype(np.int32),
        final_cost=np.where(np.isfinite(ends) & (ends <= limit), end_cost, np.inf)[old],
        src=a_src[order].astype(np.int32), dst=a_dst[order].astype(np.int32),
        ilabel=ilabel[arc_keep][order], olabel=olabel[arc_keep][order],
        graph_cost=graph[arc_keep][order], acoustic_cost=acoustic[arc_keep][order])


def _oracle_errors(num_nodes: int, start: int, src: np.ndarray, dst: np.ndarray, olabel: np.ndarray,
                   finals: np.ndarray, reference: Sequence[int], groups: list | None = None,
                   sizes: np.ndarray | None = None) -> int:
    """The least word edit distance between `reference` and the words (olabel != 0) of a path from `start`
    to a node of `finals`: DP over (node, reference position). With `groups` (`_frame_groups`), group by
    group: each group's first arcs relaxed to their fixed point, then its second arcs once (costs are
    non-negative, so every fixed point is reached within `sizes[g]` x (len(reference) + 1) rounds). Without,
    for arcs in no known order: rounds over the arcs leaving the nodes the round before improved, from the
    start node, until none improves (after k rounds every (node, position) whose best path has at most k
    arcs holds its final value, and a best path visits each (node, position) once: a word arc that returns
    to its node, as a self-loop does, moves on to a later position)."""
    ref = np.asarray(list(reference), dtype=np.int64)
    pos = np.arange(len(ref) + 1)
    table = np.full((num_nodes, len(ref) + 1), _FAR, dtype=np.int64)
    table[start] = pos  # rows stay closed under deletions: table[v, j] <= table[v, j - 1] + 1

    def step(arcs: np.ndarray) -> np.ndarray:
        """One round over `arcs` (all reading the costs before it); the destinations that improved."""
        if arcs.size == 0:
            return arcs
        prev, words = table[src[arcs]], olabel[arcs]
        cand, has = prev.copy(), words != 0
        if has.any():
            sub = np.full_like(prev[has], _FAR)
            sub[:, 1:] = prev[has][:, :-1] + (words[has, None] != ref[None, :])
            cand[has] = np.minimum(prev[has] + 1, sub)
            cand = np.minimum.accumulate(cand - pos, axis=1) + pos
        to = dst[arcs]
        old = table[to]
        np.minimum.at(table, to, cand)
        return to[(table[to] < old).any(axis=1)]

    if groups is not None and sizes is not None:
        for g, (first, second) in enumerate(groups):
            _fixed_point(lambda arcs: step(arcs).size > 0, first, int(sizes[g]) * len(pos), g)
            step(second)
        return int(table[finals, len(ref)].min())
    by_src = np.argsort(src, kind="stable")
    bounds = np.searchsorted(src[by_src], np.arange(num_nodes + 1))
    active = np.array([start], dtype=np.int64)
    for _ in range(num_nodes * len(pos) + 1):
        counts = bounds[active + 1] - bounds[active]
        if not counts.sum():
            return int(table[finals, len(ref)].min())
        first = np.repeat(bounds[active] - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        active = np.unique(step(by_src[first]))
    raise RuntimeError("lattice oracle: the edit-distance relaxation did not converge, which non-negative "
                       "edit costs rule out. Fix: report this lattice as a bug")


def lattice_file_oracle_errors(fst: kaldifst.Lattice, reference: Sequence[int]) -> int:
    """`WordLattice.oracle_errors` of a lattice read back from its file (`read_lattice`; any word acceptor:
    ilabel = olabel = word id, 0 = no word): the least word edit distance between `reference` and a complete
    path's words. The file keeps no frames, so the same DP (`_oracle_errors`) runs in rounds over the arcs
    leaving the nodes that the round before improved. ValueError when no state is final."""
    num_nodes = fst.num_states
    src, dst, olabel, finals = [], [], [], []
    for line in fst.to_str().splitlines():  # "src dst ilabel olabel [weight]" or "state [weight]"
        fields = line.split()
        if len(fields) >= 4:
            src.append(int(fields[0]))
            dst.append(int(fields[1]))
            olabel.append(int(fields[3]))
        elif fields and (len(fields) == 1 or all(math.isfinite(float(x)) for x in fields[1].split(","))):
            finals.append(int(fields[0]))  # a final weight: none written is One; (Infinity, Infinity) is Zero
    if num_nodes == 0 or not finals:
        raise ValueError("the lattice has no final state (no complete path), so it has no oracle. Fix: pass "
                         "a lattice that the decoder wrote (it writes none without a complete path)")
    return _oracle_errors(num_nodes, int(fst.start), np.array(src, dtype=np.int64),
                          np.array(dst, dtype=np.int64), np.array(olabel, dtype=np.int64),
                          np.array(sorted(set(finals)), dtype=np.int64), reference)


# ---------------------------------------------------------------------------------------------- lattice


@dataclass(frozen=True)
class WordLattice:
    """A pruned lattice: nodes (0 = start), arcs src -> dst. final_cost: the final weight of kept final
    frame-T nodes, +inf elsewhere. A complete path runs from node 0 to a node with a finite final_cost."""

    num_frames: int
    node_frame: np.ndarray
    node_state: np.ndarray
    final_cost: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    ilabel: np.ndarray
    olabel: np.ndarray
    graph_cost: np.ndarray
    acoustic_cost: np.ndarray

    @property
    def num_nodes(self) -> int:
        return len(self.node_frame)

    @property
    def num_arcs(self) -> int:
        return len(self.src)

    @property
    def density(self) -> float:
        """Lattice arcs per frame."""
        return self.num_arcs / max(self.num_frames, 1)

    def _layout(self) -> tuple[list, np.ndarray]:
        frame = self.node_frame[self.src]
        return (_frame_groups(frame, self.node_frame[self.dst] != frame, self.num_frames),
                np.bincount(self.node_frame, minlength=self.num_frames + 1))

    def _finals(self) -> np.ndarray:
        finals = np.flatnonzero(np.isfinite(self.final_cost))
        if finals.size == 0:
            raise ValueError("WordLattice has no final node (no complete path)")
        return finals

    def best_path(self) -> tuple[tuple[int, ...], float, float]:
        """(word ids, graph cost incl. final weight, acoustic cost) of the cheapest complete path (its arcs:
        `best_path_arcs`)."""
        path, end = self._best_path()
        words = tuple(int(w) for w in self.olabel[path] if w != 0)
        graph = sum(self.graph_cost[path].tolist(), 0.0) + float(self.final_cost[end])
        return words, graph, sum(self.acoustic_cost[path].tolist(), 0.0)

    def best_path_arcs(self) -> list[int]:
        """The arc indices of the cheapest complete path, from the start node."""
        return self._best_path()[0]

    def _best_path(self) -> tuple[list[int], int]:
        """The cheapest complete path's arcs and its final node.

        Ties: the final node with the lowest id; into each node, the path of the frame-synchronous
        relaxation (`_shortest`): a node's predecessor changes only for a strictly cheaper cost, and among
        equally cheap candidates of one round the lowest arc index (arcs sorted by src, dst, ilabel, olabel).
        """
        finals = self._finals()
        init = np.full(self.num_nodes, np.inf)
        init[0] = 0.0
        dist, back = self._relaxed(init)
        end = int(finals[np.argmin(dist[finals] + self.final_cost[finals])])
        path, node = [], end
        while node != 0 and len(path) <= self.num_arcs:
            path.insert(0, int(back[node]))
            node = int(self.src[back[node]])
        if node != 0:
            raise RuntimeError("WordLattice.best_path: the traceback does not reach the start node")
        return path, end

    def _relaxed(self, init: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Costs from `init` and the predecessor arcs (`_shortest`, forward), by the compiled kernel
        (`relax_kernels.best_back`, the same arrays; about 20x faster on a partial lattice's few hundred arcs)."""
        from specbench.decoder.relax_kernels import best_back

        frame = self.node_frame[self.src]
        order, bounds = _frame_order(frame, self.node_frame[self.dst] != frame, self.num_frames)
        sizes = np.bincount(self.node_frame, minlength=self.num_frames + 1).astype(np.int64)
        cost = (self.graph_cost + self.acoustic_cost).astype(np.float64)
        dist, back, converged = best_back(init, self.src.astype(np.int64), self.dst.astype(np.int64), cost,
                                          order.astype(np.int64), bounds.astype(np.int64), sizes)
        if not converged:
            raise RuntimeError(f"lattice: epsilon relaxation did not converge: {NEGATIVE_CYCLE}")
        return dist, back

    def _relaxed_reference(self, init: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`_relaxed` by the numpy reference (`_shortest`)."""
        return _shortest(init, self.src, self.dst, self.graph_cost + self.acoustic_cost, *self._layout(),
                         reverse=False)

    def _successors(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.num_nodes)]
        for arc, node in enumerate(self.src.tolist()):
            out[node].append(arc)
        return out

    def word_sequences(self, limit: int = 100_000) -> dict[tuple[int, ...], float]:
        """Every word sequence of a complete path with its lowest total cost, by DP over prefixes when the
        lattice is acyclic, else of a complete path that never revisits a node, by depth-first search (with
        non-negative cycles whose arcs put out no word a sequence's cheapest path needs no revisit; going
        round one that puts out a word makes other sequences, infinitely many, which are not listed, and may
        make a listed sequence more cheaply than its cost here). ValueError beyond `limit` paths."""
        succ, finals, final = self._successors(), np.isfinite(self.final_cost), self.final_cost.tolist()
        dst, words = self.dst.tolist(), self.olabel.tolist()
        cost = (self.graph_cost + self.acoustic_cost).tolist()
        result: dict[tuple[int, ...], float] = {}
        too_many = ValueError(f"WordLattice.word_sequences: more than {limit} paths")

        def keep(table: dict, key: tuple[int, ...], value: float) -> None:
            if value < table.get(key, math.inf):
                table[key] = value

        def extend(seq: tuple[int, ...], arc: int) -> tuple[int, ...]:
            return seq + (words[arc],) if words[arc] else seq

        indegree, order = np.bincount(self.dst, minlength=self.num_nodes).tolist(), []
        ready = [0] if indegree[0] == 0 else []
        while ready:  # Kahn's topological order; it misses nodes on a cycle
            order.append(ready.pop())
            for arc in succ[order[-1]]:
                indegree[dst[arc]] -= 1
                if indegree[dst[arc]] == 0:
                    ready.append(dst[arc])
        if len(order) == self.num_nodes:
            count = [1] + [0] * (self.num_nodes - 1)
            for node in order:
                for arc in succ[node]:
                    count[dst[arc]] += count[node]
            if sum(count[node] for node in np.flatnonzero(finals).tolist()) > limit:
                raise too_many
            prefixes: list[dict] = [{(): 0.0}] + [{} for _ in range(self.num_nodes - 1)]
            for node in order:
                here, prefixes[node] = prefixes[node], {}
                for seq, value in here.items():
                    if finals[node]:
                        keep(result, seq, value + final[node])
                    for arc in succ[node]:
                        keep(prefixes[dst[arc]], extend(seq, arc), value + cost[arc])
            return result
        paths, on_path = int(finals[0]), np.zeros(self.num_nodes, dtype=bool)
        if finals[0]:
            result[()] = final[0]
        stack, on_path[0] = [(0, iter(succ[0]), (), 0.0)], True
        while stack:
            node, arcs, seq, value = stack[-1]
            arc = next(arcs, None)
            if arc is None:
                stack.pop()
                on_path[node] = False
            elif not on_path[dst[arc]]:
                nxt, key, total = dst[arc], extend(seq, arc), value + cost[arc]
                if finals[nxt]:
                    paths += 1
                    if paths > limit:
                        raise too_many
                    keep(result, key, total + final[nxt])
                on_path[nxt] = True
                stack.append((nxt, iter(succ[nxt]), key, total))
        return result

    def oracle_errors(self, reference: Sequence[int]) -> int:
        """The least word edit distance (substitution, insertion, deletion: 1 each) between `reference`
        and a complete path's words: DP over (node, reference position), frame by frame (`_oracle_errors`)."""
        return _oracle_errors(self.num_nodes, 0, self.src, self.dst, self.olabel, self._finals(), reference,
                              *self._layout())

    def to_kaldifst(self, acoustic_scale: float = 1.0) -> kaldifst.Lattice:
        """A word acceptor (ilabel = olabel = word id, 0 = epsilon), weights LatticeWeight(graph, acoustic),
        final weights LatticeWeight(final, 0); state i = node i, start 0. The acoustic costs are divided by
        `acoustic_scale`, the scale they were decoded at, as Kaldi's decoders write lattices: unscaled, so that
        Kaldi's lattice tools apply their own `--acoustic-scale` once."""
        if not (math.isfinite(acoustic_scale) and acoustic_scale > 0):
            raise ValueError(f"acoustic_scale must be a positive finite number, got {acoustic_scale!r}")
        fst = kaldifst.Lattice()
        for _ in range(self.num_nodes):
            fst.add_state()
        fst.start = 0
        for s, d, w, g, a in zip(self.src.tolist(), self.dst.tolist(), self.olabel.tolist(),
                                 self.graph_cost.tolist(), (self.acoustic_cost / acoustic_scale).tolist()):
            fst.add_arc(s, kaldifst.LatticeArc(w, w, kaldifst.LatticeWeight(g, a), d))
        for node in np.flatnonzero(np.isfinite(self.final_cost)).tolist():
            fst.set_final(node, kaldifst.LatticeWeight(float(self.final_cost[node]), 0.0))
        return fst

    def write(self, path: str | os.PathLike, acoustic_scale: float = 1.0) -> None:
        """Write `to_kaldifst(acoustic_scale)` (acoustic costs unscaled, as Kaldi writes lattices) as an OpenFst
        binary file, atomically; parent folders are created."""
        path, tmp = Path(path), Path(f"{path}.tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        if not self.to_kaldifst(acoustic_scale).write(str(tmp)):
            raise DataError(f"cannot write lattice file {path}")
        os.replace(tmp, path)


def read_lattice(path: str | os.PathLike) -> kaldifst.Lattice:
    """Read an OpenFst lattice file written by `WordLattice.write`."""
    if not Path(path).is_file():
        raise DataError(f"lattice file {path} does not exist")
    try:
        fst = kaldifst.Lattice.read(str(path))
    except RuntimeError as err:
        raise DataError(f"cannot read lattice file {path}: {err}") from err
    if fst is None:
        raise DataError(f"cannot read lattice file {path}: not an OpenFst lattice (weights graph,acoustic)")
    return fst
