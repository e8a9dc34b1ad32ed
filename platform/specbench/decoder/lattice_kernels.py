"""Kaldi's forward-backward lattice pruning compiled by numba: `prune_compiled` gives the same `WordLattice`
as `lattice.prune_lattice` (the numpy reference), array for array.

The steps are the reference's: duplicate arcs (same nodes and labels) keep the lowest total cost, then the
lowest acoustic cost, then the first recorded; nodes are the distinct (frame, state) pairs in ascending
order; alpha (from the start node) and beta (to the final frame-T nodes) are relaxed frame by frame, the
epsilon arcs of a frame to their fixed point in rounds where every arc reads the costs of the round before
(as `np.minimum.at` over a fancy-indexed copy does); arcs with alpha + cost + beta within the beam of the
best path are kept, with their nodes renumbered (the start node first) and sorted by (src, dst, ilabel,
olabel). Sorting uses stable merge sorts key by key, as `np.lexsort` does.
"""

from __future__ import annotations

import numpy as np

from specbench.decoder.compiled_cache import entry, kernel
from specbench.decoder.lattice import RawLattice, WordLattice


@kernel
def _then_by(order: np.ndarray, key: np.ndarray) -> np.ndarray:
    """`order` stably re-sorted by `key` (one pass of np.lexsort, from the least significant key)."""
    return order[np.argsort(key[order], kind="mergesort")]


@kernel
def _better(a: int, b: int, total: np.ndarray, acoustic: np.ndarray) -> bool:
    """Whether arc a beats its duplicate b: lower total cost, lower acoustic cost, then first recorded."""
    if total[a] != total[b]:
        return total[a] < total[b]
    if acoustic[a] != acoustic[b]:
        return acoustic[a] < acoustic[b]
    return a < b


@kernel
def _dedup(sf, ss, df, ds, ilabel, olabel, graph, acoustic):  # noqa: ANN001, ANN201
    """Indices of the arcs without duplicates (see the module docstring), in no particular order (the
    pruned lattice is sorted by its own keys, which no two remaining arcs share). Arcs are grouped by
    their source node; duplicates are looked for within a group (a node's arcs: a handful)."""
    m = sf.shape[0]
    width = max(ss.max(), ds.max()) + 1 if m else 1
    labels = max(ilabel.max(), olabel.max()) + 1 if m else 1
    k1 = sf.astype(np.int64) * width + ss
    k2 = (df.astype(np.int64) * width + ds) * labels + ilabel
    total = graph + acoustic
    order = np.argsort(k1)
    keep = np.ones(m, dtype=np.bool_)
    first = 0
    while first < m:
        last = first + 1
        while last < m and k1[order[last]] == k1[order[first]]:
            last += 1
        for i in range(first, last):
            a = order[i]
            for j in range(first, i):
                b = order[j]
                if keep[b] and k2[a] == k2[b] and olabel[a] == olabel[b]:
                    if _better(a, b, total, acoustic):
                        keep[b] = False
                    else:
                        keep[a] = False
                    break
        first = last
    return np.flatnonzero(keep)


@kernel
def _relax(dist, tail, head, cost, arcs, count):  # noqa: ANN001, ANN201
    """One round over arcs[:count]: every candidate reads `dist` as it was before the round; True when some
    node got strictly cheaper."""
    cand = np.empty(count)
    old = np.empty(count)
    for i in range(count):
        cand[i] = dist[tail[arcs[i]]] + cost[arcs[i]]
        old[i] = dist[head[arcs[i]]]
    for i in range(count):
        to = head[arcs[i]]
        if cand[i] < dist[to]:
            dist[to] = cand[i]
    improved = False
    for i in range(count):
        if cand[i] < old[i] and cand[i] == dist[head[arcs[i]]]:
            improved = True
    return improved


@kernel
def _shortest(init, tail, head, cost, eps_start, eps_arcs, emit_start, emit_arcs, sizes, reverse):  # noqa: ANN001, ANN201
    """Costs from `init` along arcs tail -> head, frame by frame (descending when `reverse`): the epsilon
    arcs of frame f (eps_arcs[eps_start[f]:eps_start[f + 1]]) to their fixed point, the emitting arcs
    leaving f one round. Returns (dist, converged)."""
    dist = init.copy()
    frames = sizes.shape[0]
    for step in range(frames):
        f = frames - 1 - step if reverse else step
        emit = emit_arcs[emit_start[f]:emit_start[f + 1]]
        eps = eps_arcs[eps_start[f]:eps_start[f + 1]]
        if reverse and emit.shape[0]:
            _relax(dist, tail, head, cost, emit, emit.shape[0])
        converged = False
        for _ in range(sizes[f] + 1):
            if eps.shape[0] == 0 or not _relax(dist, tail, head, cost, eps, eps.shape[0]):
                converged = True
                break
        if not converged:
            return dist, False
        if not reverse and emit.shape[0]:
            _relax(dist, tail, head, cost, emit, emit.shape[0])
    return dist, True


@kernel
def _bucket(frame, mask, frames):  # noqa: ANN001, ANN201
    """(starts (frames + 2,), arc indices) of the arcs with `mask`, grouped by frame (0..frames) in index
    order: the arcs of frame f are arcs[starts[f]:starts[f + 1]]."""
    counts = np.zeros(frames + 2, dtype=np.int64)
    for i in range(frame.shape[0]):
        if mask[i]:
            counts[frame[i] + 1] += 1
    starts = np.cumsum(counts)
    arcs = np.empty(starts[-1], dtype=np.int64)
    fill = starts[:-1].copy()
    for i in range(frame.shape[0]):
        if mask[i]:
            arcs[fill[frame[i]]] = i
            fill[frame[i]] += 1
    return starts, arcs


@kernel
def _nodes(start_state, sf, ss, df, ds, width):  # noqa: ANN001, ANN201
    """np.unique(return_inverse) over the start node and the arcs' (frame, state) keys: (keys, start, src,
    dst)."""
    m = sf.shape[0]
    all_keys = np.empty(1 + 2 * m, dtype=np.int64)
    all_keys[0] = start_state
    for i in range(m):
        all_keys[1 + i] = sf[i] * width + ss[i]
        all_keys[1 + m + i] = df[i] * width + ds[i]
    order = np.argsort(all_keys)
    inverse = np.empty(all_keys.shape[0], dtype=np.int64)
    keys = np.empty(all_keys.shape[0], dtype=np.int64)
    n = -1
    for j in range(order.shape[0]):
        k = all_keys[order[j]]
        if n < 0 or keys[n] != k:
            n += 1
            keys[n] = k
        inverse[order[j]] = n
    return keys[:n + 1], inverse[0], inverse[1:1 + m], inverse[1 + m:]


@entry("(int64, int64, int32[::1], int32[::1], int32[::1], int32[::1], int32[::1], int32[::1], float64[::1], "
       "float64[::1], float64[::1], float64)")
def _prune(num_frames, start_state, sf, ss, df, ds, ilabel, olabel, graph, acoustic, final, beam):  # noqa: ANN001, ANN201
    unique = _dedup(sf, ss, df, ds, ilabel, olabel, graph, acoustic)
    sf, ss, df, ds = sf[unique].astype(np.int64), ss[unique].astype(np.int64), df[unique].astype(np.int64), \
        ds[unique].astype(np.int64)
    ilabel, olabel, graph, acoustic = ilabel[unique], olabel[unique], graph[unique], acoustic[unique]
    m = sf.shape[0]
    width = max(ss.max() if m else 0, ds.max() if m else 0, start_state) + 1
    keys, start, src, dst = _nodes(start_state, sf, ss, df, ds, width)
    n = keys.shape[0]
    node_frame, node_state = keys // width, keys % width
    end_cost = np.full(n, np.inf)
    for i in range(n):
        if node_frame[i] == num_frames:
            end_cost[i] = final[node_state[i]]
    epsilon = df == sf
    eps_start, eps_arcs = _bucket(sf, epsilon, num_frames)
    emit_start, emit_arcs = _bucket(sf, ~epsilon, num_frames)
    sizes = np.zeros(num_frames + 1, dtype=np.int64)
    for i in range(n):
        sizes[node_frame[i]] += 1
    cost = graph + acoustic
    init = np.full(n, np.inf)
    init[start] = 0.0
    alpha, ok_a = _shortest(init, src, dst, cost, eps_start, eps_arcs, emit_start, emit_arcs, sizes, False)
    beta, ok_b = _shortest(end_cost, dst, src, cost, eps_start, eps_arcs, emit_start, emit_arcs, sizes, True)
    if not (ok_a and ok_b):
        raise RuntimeError("lattice: epsilon relaxation did not converge (negative cycle?)")
    best = np.inf
    for i in range(n):
        best = min(best, alpha[i] + end_cost[i])
    if not np.isfinite(best):
        return None
    limit = best + beam + 1e-6 * max(1.0, abs(best))
    keep = np.zeros(m, dtype=np.bool_)
    node_keep = np.zeros(n, dtype=np.bool_)
    for i in range(m):
        through = alpha[src[i]] + cost[i] + beta[dst[i]]
        if np.isfinite(through) and through <= limit:
            keep[i] = True
            node_keep[src[i]] = node_keep[dst[i]] = True
    new = np.full(n, -1, dtype=np.int64)
    old = np.empty(n, dtype=np.int64)
    old[0], new[start], count = start, 0, 1
    for i in range(n):
        if node_keep[i] and i != start:
            old[count], new[i] = i, count
            count += 1
    old = old[:count]
    kept = np.flatnonzero(keep)
    a_src, a_dst = new[src[kept]], new[dst[kept]]
    order = _then_by(_then_by(np.arange(kept.shape[0]), olabel[kept]), ilabel[kept])
    order = _then_by(_then_by(order, a_dst), a_src)
    final_cost = np.full(count, np.inf)
    for j in range(count):
        end = alpha[old[j]] + end_cost[old[j]]
        if np.isfinite(end) and end <= limit:
            final_cost[j] = end_cost[old[j]]
    return (node_frame[old].astype(np.int32), node_state[old].astype(np.int32), final_cost,
            a_src[order].astype(np.int32), a_dst[order].astype(np.int32), ilabel[kept][order],
            olabel[kept][order], graph[kept][order], acoustic[kept][order])


def prune_compiled(raw: RawLattice, final: np.ndarray, lattice_beam: float) -> WordLattice | None:
    """`lattice.prune_lattice(raw, final, lattice_beam)`, compiled (same arrays); None when no final
    frame-T node is reachable."""
    if not float(lattice_beam) >= 0:
        raise ValueError(f"prune_lattice: lattice_beam must be >= 0, got {lattice_beam!r}")
    final = np.asarray(final, dtype=np.float64)
    at_end = raw.dst_frame == raw.num_frames
    top = int(max(raw.dst_state[at_end].max(initial=-1), raw.start_state if raw.num_frames == 0 else -1))
    if top >= len(final):
        raise ValueError(f"prune_lattice: final has {len(final)} entries, a frame-T node has state {top}")
    ints = (np.require(getattr(raw, name), np.int32, ["C", "W"]) for name in (
        "src_frame", "src_state", "dst_frame", "dst_state", "ilabel", "olabel"))
    costs = (np.require(getattr(raw, name), np.float64, ["C", "W"])
             for name in ("graph_cost", "acoustic_cost"))
    out = _prune(raw.num_frames, raw.start_state, *ints, *costs, np.require(final, np.float64, ["C", "W"]),
                 float(lattice_beam))
    if out is None:
        return None
    names = ("node_frame", "node_state", "final_cost", "src", "dst", "ilabel", "olabel", "graph_cost",
             "acoustic_cost")
    return WordLattice(num_frames=raw.num_frames, **dict(zip(names, out)))

