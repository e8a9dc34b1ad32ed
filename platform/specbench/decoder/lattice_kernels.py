"""Kaldi's forward-backward lattice pruning compiled by numba: `prune_compiled` gives the same `WordLattice`
as `lattice.prune_lattice` (the numpy reference), array for array.

The steps are the reference's: duplicate arcs (same nodes and labels) keep the lowest total cost, then the
lowest acoustic cost, then the first recorded; nodes are the distinct (frame, state) pairs in ascending
order; alpha (from the start node) and beta (to the final frame-T nodes) are relaxed frame by frame, the
epsilon arcs of a frame to their fixed point (the reference's costs, see `_relax`); arcs with alpha + cost +
beta within the beam of the best path are kept, with their nodes renumbered (the start node first) and
sorted by (src, dst, ilabel, olabel). No step sorts the whole lattice: nodes are grouped by frame and arcs by source node with
counting sorts, and only a frame's states or a node's arcs (a handful to a few hundred) are sorted.
"""

from __future__ import annotations

import threading

import numpy as np

from specbench.decoder.compiled_cache import entry, kernel
from specbench.decoder.lattice import RawLattice, WordLattice, final_too_short
from specbench.wfst.graph import CsrGraph


SMALL_GROUP = 24  # groups up to this size are handled by insertion sort, larger ones by np.argsort


@kernel
def _group(key, groups):  # noqa: ANN001, ANN201
    """Counting sort of indices 0..len(key)-1 by key (0 <= key < groups), index order within a key: (starts
    (groups + 1,), indices): the indices with key g are indices[starts[g]:starts[g + 1]]."""
    starts = np.zeros(groups + 1, dtype=np.int64)
    for i in range(key.shape[0]):
        starts[key[i] + 1] += 1
    for g in range(groups):
        starts[g + 1] += starts[g]
    fill = starts[:-1].copy()
    indices = np.empty(key.shape[0], dtype=np.int64)
    for i in range(key.shape[0]):
        indices[fill[key[i]]] = i
        fill[key[i]] += 1
    return starts, indices


@kernel
def _sort_run(items, first, last, key):  # noqa: ANN001, ANN201
    """Sort items[first:last] in place by key[item], stably (a handful of items: insertion sort; more:
    a stable argsort)."""
    if last - first <= SMALL_GROUP:
        for i in range(first + 1, last):
            item = items[i]
            j = i - 1
            while j >= first and key[items[j]] > key[item]:
                items[j + 1] = items[j]
                j -= 1
            items[j + 1] = item
    else:
        run = items[first:last].copy()
        items[first:last] = run[np.argsort(key[run], kind="mergesort")]


@kernel
def _better(a: int, b: int, total: np.ndarray, acoustic: np.ndarray) -> bool:
    """Whether arc a beats its duplicate b: lower total cost, lower acoustic cost, then first recorded."""
    if total[a] != total[b]:
        return total[a] < total[b]
    if acoustic[a] != acoustic[b]:
        return acoustic[a] < acoustic[b]
    return a < b


@kernel
def _dedup(arcs, src, dst, ilabel, olabel, graph, acoustic, nodes):  # noqa: ANN001, ANN201
    """The arcs of `arcs` (indices) without duplicates (see the module docstring), in no particular order
    (the pruned lattice is sorted by its own keys, which no two remaining arcs share). They are grouped by
    source node (a counting sort), each group sorted by (dst, ilabel, olabel); a run of equal keys keeps
    its best arc."""
    m = arcs.shape[0]
    labels = 1
    for i in range(m):
        labels = max(labels, ilabel[arcs[i]] + 1, olabel[arcs[i]] + 1)
    key = np.empty(m, dtype=np.int64)
    src_of = np.empty(m, dtype=np.int64)
    for i in range(m):
        a = arcs[i]
        key[i] = (dst[a] * labels + ilabel[a]) * labels + olabel[a]
        src_of[i] = src[a]
    total = graph + acoustic
    starts, order = _group(src_of, nodes)
    keep = np.empty(m, dtype=np.int64)
    kept = 0
    for g in range(nodes):
        first, last = starts[g], starts[g + 1]
        if first == last:
            continue
        _sort_run(order, first, last, key)
        i = first
        while i < last:
            best = order[i]
            j = i + 1
            while j < last and key[order[j]] == key[best]:
                if _better(arcs[order[j]], arcs[best], total, acoustic):
                    best = order[j]
                j += 1
            keep[kept] = arcs[best]
            kept += 1
            i = j
    return keep[:kept]


@kernel
def _relax(dist, tail, head, cost, arcs, count):  # noqa: ANN001, ANN201
    """One round over arcs[:count], in place (an arc may read a cost this round lowered); True when some
    node got strictly cheaper. The reference's rounds read the costs of the round before; both reach the
    same fixed point, value for value: with non-negative cycles a node's cost there is the lowest
    left-to-right float sum over its paths (float addition is monotone), whatever the order of relaxation,
    and in-place rounds need no more of them."""
    improved = False
    for i in range(count):
        a = arcs[i]
        cand = dist[tail[a]] + cost[a]
        if cand < dist[head[a]]:
            dist[head[a]] = cand
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
def _within_beam(init, end_cost, src, dst, cost, eps_start, eps_arcs, emit_start, emit_arcs, sizes, beam):  # noqa: ANN001, ANN201
    """Forward-backward: (whether a complete path exists, alpha, the cost limit best + beam, the arcs with
    alpha + cost + beta within it, in index order)."""
    alpha, ok_a = _shortest(init, src, dst, cost, eps_start, eps_arcs, emit_start, emit_arcs, sizes, False)
    beta, ok_b = _shortest(end_cost, dst, src, cost, eps_start, eps_arcs, emit_start, emit_arcs, sizes, True)
    if not (ok_a and ok_b):
        raise RuntimeError("lattice: epsilon relaxation did not converge: a cycle of epsilon arcs within one "
                           "frame has a negative total weight, so costs have no minimum. Fix: decode with a "
                           "graph whose epsilon arcs have non-negative weights (or whose epsilon cycles at "
                           "least sum to >= 0)")
    best = np.inf
    for i in range(alpha.shape[0]):
        best = min(best, alpha[i] + end_cost[i])
    m = src.shape[0]
    within = np.empty(m, dtype=np.int64)
    if not np.isfinite(best):
        return False, alpha, np.inf, within[:0]
    limit = best + beam + 1e-6 * max(1.0, abs(best))
    count = 0
    for i in range(m):
        through = alpha[src[i]] + cost[i] + beta[dst[i]]
        if np.isfinite(through) and through <= limit:
            within[count] = i
            count += 1
    return True, alpha, limit, within[:count]


@kernel
def _nodes(start_state, sf, ss, df, ds, order, table):  # noqa: ANN001, ANN201
    """The distinct (frame, state) nodes of the start node and the arcs' ends, numbered as first seen (the
    start node 0), the arcs taken in `order` (by source frame): (node frame, node state, src, dst). An arc
    of source frame f ends at frame f or f + 1, so a table holding two frames, by parity, finds every node
    seen before: table[2 s + f % 2] = (frame, node) of state s. `table` ((2 S, 2) int32, all -1: one per
    thread, reused, `node_table`) is restored on return, so it costs only the rows this lattice touches."""
    m = sf.shape[0]
    node_frame = np.empty(1 + 2 * m, dtype=np.int64)
    node_state = np.empty(1 + 2 * m, dtype=np.int64)
    src = np.empty(m, dtype=np.int64)
    dst = np.empty(m, dtype=np.int64)
    node_frame[0], node_state[0] = 0, start_state
    table[2 * start_state, 0], table[2 * start_state, 1] = 0, 0
    n = 1
    for i in range(m):
        a = order[i]
        for end in range(2):
            f, s = (sf[a], ss[a]) if end == 0 else (df[a], ds[a])
            row = 2 * s + (f & 1)
            if table[row, 0] != f:
                table[row, 0], table[row, 1] = f, n
                node_frame[n], node_state[n] = f, s
                n += 1
            if end == 0:
                src[a] = table[row, 1]
            else:
                dst[a] = table[row, 1]
    for j in range(n):
        row = 2 * node_state[j] + (node_frame[j] & 1)
        table[row, 0], table[row, 1] = -1, -1
    return node_frame[:n], node_state[:n], src, dst


@kernel
def _pruned(num_frames, start_state, sf, ss, df, ds, ilabel, olabel, graph, acoustic, final, beam,  # noqa: ANN001, ANN201
            table):
    """The pruned lattice's arrays (WordLattice's fields after num_frames), or None; `table`: _nodes's.

    The forward-backward pass runs over every recorded arc, duplicates included (they change no node's
    cost), on nodes numbered as first seen; only the arcs it keeps (a few percent of a decoder's records)
    are de-duplicated, and only the nodes they touch are sorted into (frame, state) order."""
    m = sf.shape[0]
    in_order = True
    for i in range(1, m):
        if sf[i] < sf[i - 1]:
            in_order = False
            break
    order = np.arange(m) if in_order else _group(sf, num_frames + 1)[1]
    node_frame, node_state, src, dst = _nodes(start_state, sf, ss, df, ds, order, table)
    n = node_frame.shape[0]
    epsilon = df == sf
    eps_start, eps_arcs = _bucket(sf, epsilon, num_frames)
    emit_start, emit_arcs = _bucket(sf, ~epsilon, num_frames)
    sizes = np.zeros(num_frames + 1, dtype=np.int64)
    end_cost = np.full(n, np.inf)
    for i in range(n):
        sizes[node_frame[i]] += 1
        if node_frame[i] == num_frames:
            end_cost[i] = final[node_state[i]]
    cost = graph + acoustic
    init = np.full(n, np.inf)
    init[0] = 0.0
    found, alpha, limit, within = _within_beam(init, end_cost, src, dst, cost, eps_start, eps_arcs,
                                               emit_start, emit_arcs, sizes, beam)
    if not found:
        return None
    kept = _dedup(within, src, dst, ilabel, olabel, graph, acoustic, n)
    return _renumbered(kept, src, dst, ilabel, olabel, graph, acoustic, node_frame, node_state, 0, alpha,
                       end_cost, limit)


@kernel
def _renumbered(kept, src, dst, ilabel, olabel, graph, acoustic, node_frame, node_state, start, alpha,  # noqa: ANN001, ANN201
                end_cost, limit):
    """The WordLattice arrays of the arcs `kept` (indices, no duplicates): their nodes renumbered, the start
    node first, the others in (frame, state) order; arcs sorted by (src, dst, ilabel, olabel)."""
    n = node_frame.shape[0]
    width = 1
    for i in kept:
        width = max(width, node_state[src[i]] + 1, node_state[dst[i]] + 1)
    width = max(width, node_state[start] + 1)
    new = np.full(n, -1, dtype=np.int64)
    new[start] = 0
    for i in kept:
        new[src[i]] = new[dst[i]] = 0
    new[start] = -1
    touched = np.flatnonzero(new == 0)
    new[start] = 0
    old = np.empty(touched.shape[0] + 1, dtype=np.int64)
    old[0] = start
    old[1:] = touched[np.argsort(node_frame[touched] * width + node_state[touched])]
    nodes = old.shape[0]
    for j in range(nodes):
        new[old[j]] = j
    a_src, a_dst = new[src[kept]], new[dst[kept]]
    labels = 1
    for i in kept:
        labels = max(labels, ilabel[i] + 1, olabel[i] + 1)
    key = (a_dst * labels + ilabel[kept]) * labels + olabel[kept]  # unique within a source node
    starts, arc_order = _group(a_src, nodes)
    for g in range(nodes):
        _sort_run(arc_order, starts[g], starts[g + 1], key)
    final_cost = np.full(nodes, np.inf)
    for j in range(nodes):
        end = alpha[old[j]] + end_cost[old[j]]
        if np.isfinite(end) and end <= limit:
            final_cost[j] = end_cost[old[j]]
    arcs = kept[arc_order]
    return (node_frame[old].astype(np.int32), node_state[old].astype(np.int32), final_cost,
            a_src[arc_order].astype(np.int32), a_dst[arc_order].astype(np.int32), ilabel[arcs], olabel[arcs],
            graph[arcs], acoustic[arcs])


@entry("(int64, int64, int32[::1], int32[::1], int32[::1], int32[::1], int32[::1], int32[::1], float64[::1], "
       "float64[::1], float64[::1], float64, int32[:, ::1])")
def _prune(num_frames, start_state, sf, ss, df, ds, ilabel, olabel, graph, acoustic, final, beam, table):  # noqa: ANN001, ANN201
    return _pruned(num_frames, start_state, sf, ss, df, ds, ilabel, olabel, graph, acoustic, final, beam, table)


@kernel
def _raw_of_records(records, costs, emit_dest, emit_ilabel, emit_olabel, emit_weight, eps_dest, eps_olabel,  # noqa: ANN001, ANN201
                    eps_weight):
    """`lattice_paths.records_to_raw`'s arrays from one utterance's records (columns frame, src state,
    code): the emitting records' arcs first, then the epsilon records', each in record order (the emitting
    ones counted first, then both written in one pass)."""
    n = records.shape[0]
    sf, ss = np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int32)
    df, ds = np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int32)
    il, ol = np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int32)
    gc, ac = np.empty(n), np.empty(n)
    k_eps = 0
    for i in range(n):
        if records[i, 2] >= 0:
            k_eps += 1
    k_emit = 0
    for i in range(n):
        f, code = records[i, 0], records[i, 2]
        if code >= 0:
            k = k_emit
            k_emit += 1
            label = emit_ilabel[code]
            df[k], ds[k], il[k], ol[k] = f + 1, emit_dest[code], label, emit_olabel[code]
            gc[k], ac[k] = emit_weight[code], costs[f, label - 1]
        else:
            k = k_eps
            k_eps += 1
            e = -1 - code
            df[k], ds[k], il[k], ol[k] = f, eps_dest[e], 0, eps_olabel[e]
            gc[k], ac[k] = eps_weight[e], 0.0
        sf[k], ss[k] = f, records[i, 1]
    return sf, ss, df, ds, il, ol, gc, ac


@entry("(int32[:, ::1], int64, float32[:, ::1], int32[::1], int32[::1], int32[::1], float32[::1], int32[::1], "
       "int32[::1], float32[::1], float64[::1], float64, int32[:, ::1])")
def _prune_records(records, start_state, costs, emit_dest, emit_ilabel, emit_olabel, emit_weight, eps_dest,  # noqa: ANN001, ANN201
                   eps_olabel, eps_weight, final, beam, table):
    sf, ss, df, ds, il, ol, gc, ac = _raw_of_records(records, costs, emit_dest, emit_ilabel, emit_olabel,
                                                     emit_weight, eps_dest, eps_olabel, eps_weight)
    return _pruned(costs.shape[0], start_state, sf, ss, df, ds, il, ol, gc, ac, final, beam, table)


@entry("(int64[::1], int64[::1], int64, int64[:, ::1], float64[::1], int64[:, ::1], float64[::1], "
       "float32[:, ::1], int32[::1], int32[::1], float32[::1], int32[::1], float32[::1], float64[::1], float64)")
def _prune_links(counts, token_states, start, emit_links, emit_cost, eps_links, eps_cost, costs, emit_ilabel,  # noqa: ANN001, ANN201
                 emit_olabel, emit_weight, eps_olabel, eps_weight, final, beam):
    """_pruned over the compiled frame loop's links: nodes are the tokens (frame f's token i is node
    base[f] + i), arcs the epsilon links then the emitting links; labels and separate graph and acoustic
    costs are looked up only for the arcs kept."""
    frames = counts.shape[0] - 1
    base = np.zeros(frames + 2, dtype=np.int64)
    for f in range(frames + 1):
        base[f + 1] = base[f] + counts[f]
    n = base[frames + 1]
    node_frame = np.empty(n, dtype=np.int64)
    for f in range(frames + 1):
        node_frame[base[f]:base[f + 1]] = f
    q, r = eps_links.shape[0], emit_links.shape[0]
    m = q + r
    src, dst = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64)
    frame, cost = np.empty(m, dtype=np.int64), np.empty(m)
    for i in range(q):
        f = eps_links[i, 0]
        frame[i], src[i], dst[i], cost[i] = f, base[f] + eps_links[i, 1], base[f] + eps_links[i, 2], eps_cost[i]
    for i in range(r):
        f, a = emit_links[i, 0], q + i
        frame[a], src[a], dst[a], cost[a] = f, base[f] + emit_links[i, 1], base[f + 1] + emit_links[i, 2], \
            emit_cost[i]
    epsilon = np.zeros(m, dtype=np.bool_)
    epsilon[:q] = True
    eps_start, eps_arcs = _bucket(frame, epsilon, frames)
    emit_start, emit_arcs = _bucket(frame, ~epsilon, frames)
    end_cost = np.full(n, np.inf)
    for i in range(base[frames], n):
        end_cost[i] = final[token_states[i]]
    init = np.full(n, np.inf)
    init[base[0] + start] = 0.0
    found, alpha, limit, within = _within_beam(init, end_cost, src, dst, cost, eps_start, eps_arcs,
                                               emit_start, emit_arcs, counts, beam)
    if not found:
        return None
    count = within.shape[0]
    ilabel, olabel = np.zeros(count, dtype=np.int32), np.empty(count, dtype=np.int32)
    graph, acoustic = np.empty(count), np.zeros(count)
    k_src, k_dst = np.empty(count, dtype=np.int64), np.empty(count, dtype=np.int64)
    for k in range(count):
        i = within[k]
        k_src[k], k_dst[k] = src[i], dst[i]
        if i < q:
            e = eps_links[i, 3]
            olabel[k], graph[k] = eps_olabel[e], eps_weight[e]
        else:
            arc, f = emit_links[i - q, 3], emit_links[i - q, 0]
            ilabel[k], olabel[k], graph[k] = emit_ilabel[arc], emit_olabel[arc], emit_weight[arc]
            acoustic[k] = costs[f, emit_ilabel[arc] - 1]
    kept = _dedup(np.arange(count), k_src, k_dst, ilabel, olabel, graph, acoustic, n)
    return _renumbered(kept, k_src, k_dst, ilabel, olabel, graph, acoustic, node_frame, token_states,
                       base[0] + start, alpha, end_cost, limit)


_TABLES = threading.local()


def node_table(num_states: int) -> np.ndarray:
    """This thread's table of `_nodes` ((2 S, 2) int32, all -1) for states below `num_states`: made once
    per thread (grown for a larger graph) and reused, since every call leaves it as it found it (16 bytes
    a state: 4 MB for the SLURP TLG)."""
    table = getattr(_TABLES, "table", None)
    if table is None or table.shape[0] < 2 * num_states:
        table = np.full((2 * max(num_states, 1), 2), -1, dtype=np.int32)
        _TABLES.table = table
    return table


_NAMES = ("node_frame", "node_state", "final_cost", "src", "dst", "ilabel", "olabel", "graph_cost",
          "acoustic_cost")


def prune_links(graph: CsrGraph, costs: np.ndarray, counts: np.ndarray, token_states: np.ndarray, start: int,
                links: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], lattice_beam: float,
                final: np.ndarray) -> WordLattice | None:
    """The pruned lattice of one utterance from the compiled frame loop's links: the lattice
    `lattice_paths.lattice_from_records` gives for the same links, array for array. costs: (T, P) float32;
    counts: (T + 1,) tokens per frame; token_states: their states, frame after frame; start: the position
    of the start state among frame 0's tokens; links: (emitting links, their costs, epsilon links, their
    costs) as `compiled_kernels.decode_frames` returns them; final: (S,) float64."""
    emit, eps = graph.emitting, graph.epsilon
    emit_links, emit_cost, eps_links, eps_cost = links
    out = _prune_links(counts, token_states, start, emit_links, emit_cost, eps_links, eps_cost,
                       np.ascontiguousarray(costs, dtype=np.float32), emit.ilabel, emit.olabel, emit.weight,
                       eps.olabel, eps.weight, final, float(lattice_beam))
    return None if out is None else WordLattice(num_frames=costs.shape[0], **dict(zip(_NAMES, out)))


def prune_compiled(raw: RawLattice, final: np.ndarray, lattice_beam: float) -> WordLattice | None:
    """`lattice.prune_lattice(raw, final, lattice_beam)`, compiled (same arrays); None when no final
    frame-T node is reachable."""
    if not float(lattice_beam) >= 0:
        raise ValueError(f"prune_lattice: lattice_beam must be >= 0, got {lattice_beam!r}")
    final = np.asarray(final, dtype=np.float64)
    top = int(max(raw.dst_state[raw.dst_frame == raw.num_frames].max(initial=-1),  # every frame-T node:
                  raw.src_state[raw.src_frame == raw.num_frames].max(initial=-1),  # (epsilon arcs' sources)
                  raw.start_state if raw.num_frames == 0 else -1))
    if top >= len(final):
        raise ValueError(final_too_short(len(final), top))
    ints = (np.require(getattr(raw, name), np.int32, ["C", "W"]) for name in (
        "src_frame", "src_state", "dst_frame", "dst_state", "ilabel", "olabel"))
    costs = (np.require(getattr(raw, name), np.float64, ["C", "W"])
             for name in ("graph_cost", "acoustic_cost"))
    width = max(int(np.max(raw.src_state, initial=0)), int(np.max(raw.dst_state, initial=0)), raw.start_state) + 1
    out = _prune(raw.num_frames, raw.start_state, *ints, *costs, np.require(final, np.float64, ["C", "W"]),
                 float(lattice_beam), node_table(width))
    return None if out is None else WordLattice(num_frames=raw.num_frames, **dict(zip(_NAMES, out)))



def prune_records(graph: CsrGraph, costs: np.ndarray, records: np.ndarray, final: np.ndarray,
                  lattice_beam: float) -> WordLattice | None:
    """`lattice_paths.lattice_from_records(graph, costs, records, lattice_beam)` compiled, from the raw
    lattice to the pruned one in one call that releases the GIL (same arrays as the numpy path).
    records: (K, 3) int32 (frame, src state, code) of one utterance; costs: (T, P) float32; final: (S,)
    float64."""
    if not float(lattice_beam) >= 0:
        raise ValueError(f"prune_lattice: lattice_beam must be >= 0, got {lattice_beam!r}")
    emit, eps = graph.emitting, graph.epsilon
    out = _prune_records(np.ascontiguousarray(records, dtype=np.int32).reshape(-1, 3), int(graph.start),
                         np.ascontiguousarray(costs, dtype=np.float32), emit.dest, emit.ilabel, emit.olabel,
                         emit.weight, eps.dest, eps.olabel, eps.weight, np.ascontiguousarray(final, np.float64),
                         float(lattice_beam), node_table(graph.num_states))
    return None if out is None else WordLattice(num_frames=costs.shape[0], **dict(zip(_NAMES, out)))
