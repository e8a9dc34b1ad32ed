"""The lattice's best-path relaxation compiled by numba (`lattice.WordLattice._relaxed`): the numpy
reference's rounds (`lattice._shortest`), predecessor arcs and tie rule included, array for array. Apart from
`lattice_kernels`, which imports `lattice`, so that `lattice` can use it without a circle."""

from __future__ import annotations

import numpy as np

from specbench.decoder.compiled_cache import entry, kernel

_NO_ARC = np.iinfo(np.int64).max  # a node's predecessor while a round chooses among its winning arcs


@kernel
def _step_back(dist, back, tail, head, cost, arcs, cand, old):
    """One round of the reference's relaxation with predecessors (`lattice._shortest`'s step): every arc reads
    the costs of the round before; a node that gets strictly cheaper takes, among this round's arcs that
    reach its new cost, the lowest index. True when some node got cheaper."""
    n = arcs.shape[0]
    for i in range(n):
        a = arcs[i]
        cand[i] = dist[tail[a]] + cost[a]
        old[i] = dist[head[a]]
    for i in range(n):
        h = head[arcs[i]]
        dist[h] = min(dist[h], cand[i])
    won = False
    for i in range(n):
        h = head[arcs[i]]
        if cand[i] < old[i] and cand[i] == dist[h]:
            back[h] = _NO_ARC
            won = True
    for i in range(n):
        h = head[arcs[i]]
        if cand[i] < old[i] and cand[i] == dist[h] and arcs[i] < back[h]:
            back[h] = arcs[i]
    return won


@entry("(float64[::1], int64[::1], int64[::1], float64[::1], int64[::1], int64[::1], int64[::1])")
def best_back(init, tail, head, cost, grouped, bounds, sizes):
    """`lattice._shortest(..., reverse=False)` compiled, the same costs and predecessor arcs: frame by frame,
    the epsilon arcs of frame f (grouped[bounds[2f]:bounds[2f + 1]]) to their fixed point, then its emitting
    arcs (grouped[bounds[2f + 1]:bounds[2f + 2]]) one round (`lattice._frame_order`). Returns (dist, back,
    converged)."""
    frames = sizes.shape[0]
    dist = init.copy()
    back = np.full(init.shape[0], -1, dtype=np.int64)
    cand = np.empty(tail.shape[0], dtype=np.float64)
    old = np.empty(tail.shape[0], dtype=np.float64)
    for f in range(frames):
        eps = grouped[bounds[2 * f]:bounds[2 * f + 1]]
        converged = False
        for _ in range(sizes[f] + 1):
            if eps.shape[0] == 0 or not _step_back(dist, back, tail, head, cost, eps, cand, old):
                converged = True
                break
        if not converged:
            return dist, back, False
        emit = grouped[bounds[2 * f + 1]:bounds[2 * f + 2]]
        if emit.shape[0]:
            _step_back(dist, back, tail, head, cost, emit, cand, old)
    return dist, back, True
