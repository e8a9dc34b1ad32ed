"""The compiled frame loop of the CPU backend: Kaldi's `FasterDecoder` over the closed arcs, in numba.

`decode_frames` runs every frame of one utterance (or of one `advance` call) in one compiled call, with the
numpy backend's (`cpu.py`) rules step for step, so that both give the same tokens, in the same order:

1. `get_cutoff`: pruning.py's GetCutoff (float64 costs, float32 order statistics and adaptive beam).
2. Every token below the weight cutoff, in token order, expands its closed arcs in arc order:
   `new = (cost + weight) + ac` in float64; the next cutoff is `min(new) + adaptive beam`, tightened by the
   best token's bare emitting arcs when the best token itself is not expanded (Kaldi's pre-pass).
3. Candidates with `new < next cutoff` recombine: per destination state the lowest cost, then the lowest
   code; the winners become the next tokens in the order of their candidate positions.
4. Statistics as `DecodeStats` counts them; a partial hypothesis every `partial_every` frames (the token of
   lowest cost, then lowest state); with a lattice beam, the links of lattice_paths.py (bare emitting
   candidates within the lattice beam of their destination's token, and the epsilon links among the new
   tokens), each between two tokens named by frame and position, with its cost (graph + acoustic), and
   the states of every frame's tokens: what the compiled pruning needs, with no graph lookups.

Arrays grow by doubling; nothing is allocated per candidate. The loop over the tokens is bound by memory
(each token's arcs lie somewhere in a table of tens of MB), so it asks the CPU to prefetch the arcs of the
token 8 places ahead (LLVM's prefetch intrinsic; about 10% of the frame loop on the SLURP TLG). Compiled on
first use and cached on disk (`compiled_cache.py`).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from specbench.decoder.compiled_cache import entry, kernel

BIND_BEAM, BIND_MAX_ACTIVE, BIND_MIN_ACTIVE = 0, 1, 2
# indices into the stats vector (DecodeStats's field order)
FRAMES, CREATED, PRUNED, MAX_BINDS, MIN_BINDS, NARROWINGS, EPS_ITERATIONS, OVERFLOWS = range(8)
NO_CODE = np.iinfo(np.int64).max


@intrinsic
def prefetch(typingctx, array, index):
    """A hint to the CPU to bring array[index] (1-D) into its caches; no effect on results."""

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        view = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type, view, [args[1]], wraparound=False)
        byte_pointer = builder.bitcast(pointer, ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        hint = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer.type, i32, i32, i32]), "llvm.prefetch.p0i8")
        # a read, kept in every cache level, of data
        builder.call(hint, [byte_pointer, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(array, index), codegen


@kernel
def _kth_smallest32(costs: np.ndarray, n: int, k: int) -> float:
    """The k-th smallest (0-based) of costs[:n] rounded to float32, as a float64."""
    tmp = np.empty(n, dtype=np.float32)
    for i in range(n):
        tmp[i] = np.float32(costs[i])
    return float(np.partition(tmp, k)[k])


@kernel
def get_cutoff(costs: np.ndarray, n: int, beam32: float, max_active: int, min_active: int, beam_delta: float,
               unconstrained: bool) -> tuple[float, float, int, int, bool]:
    """pruning.get_cutoff over costs[:n]: (weight cutoff, adaptive beam, best position, binding,
    every cost below the cutoff)."""
    if n == 0:
        return np.inf, beam32, -1, BIND_BEAM, True
    best, best_cost, worst = 0, costs[0], costs[0]
    for i in range(1, n):
        if costs[i] < best_cost:
            best, best_cost = i, costs[i]
        if costs[i] > worst:
            worst = costs[i]
    beam_cutoff = best_cost + beam32
    if unconstrained:
        return beam_cutoff, beam32, best, BIND_BEAM, worst < beam_cutoff
    if n > max_active:
        max_active_cutoff = _kth_smallest32(costs, n, max_active)
        if max_active_cutoff < beam_cutoff:
            adaptive = float(np.float32(max_active_cutoff - best_cost + beam_delta))
            return max_active_cutoff, adaptive, best, BIND_MAX_ACTIVE, worst < max_active_cutoff
    min_active_cutoff = np.inf
    if n > min_active:
        if min_active == 0:
            min_active_cutoff = best_cost
        elif float(np.float32(worst)) <= beam_cutoff:
            min_active_cutoff = beam_cutoff
        else:
            min_active_cutoff = _kth_smallest32(costs, n, min_active)
    if min_active_cutoff > beam_cutoff:
        adaptive = float(np.float32(min_active_cutoff - best_cost + beam_delta))
        return min_active_cutoff, adaptive, best, BIND_MIN_ACTIVE, worst < min_active_cutoff
    return beam_cutoff, beam32, best, BIND_BEAM, worst < beam_cutoff


@kernel
def _grow(a: np.ndarray, need: int) -> np.ndarray:
    """`a` when it holds `need` items, else a copy at least twice as long (1-D; any dtype)."""
    if need <= a.shape[0]:
        return a
    out = np.empty(max(need, 2 * a.shape[0]), dtype=a.dtype)
    out[:a.shape[0]] = a
    return out


@kernel
def _best_token_bound(state: int, cost: float, row: np.ndarray, emit_offsets: np.ndarray,
                      emit_weight: np.ndarray, emit_column: np.ndarray, beam: float) -> float:
    """min over the best token's emitting arcs of (cost + weight) + ac, plus beam (+inf without arcs)."""
    low = np.inf
    for a in range(emit_offsets[state], emit_offsets[state + 1]):
        new = cost + emit_weight[a] + row[emit_column[a]]
        if new < low:
            low = new
    return low + beam


@kernel
def _epsilon_links(states: np.ndarray, costs: np.ndarray, n: int, dense_cost: np.ndarray, dense_pos: np.ndarray,
                   eps_offsets: np.ndarray, eps_dest: np.ndarray, eps_weight: np.ndarray, link_beam: float,
                   frame: int, links: np.ndarray, link_cost: np.ndarray, count: int) -> tuple:
    """lattice_paths.epsilon_links for tokens (states, costs)[:n], appended to links[count:] as (frame,
    source token, destination token, epsilon arc) with the arc's cost in link_cost; dense_cost and dense_pos
    must hold the tokens' costs and positions (+inf elsewhere)."""
    for i in range(n):
        if i + 16 < n:  # as in the frame loop: the epsilon arcs of the token 8 places ahead
            prefetch(eps_offsets, states[i + 16])
        if i + 8 < n:
            ahead = eps_offsets[states[i + 8]]
            prefetch(eps_dest, ahead)
            prefetch(eps_weight, ahead)
        s = states[i]
        for e in range(eps_offsets[s], eps_offsets[s + 1]):
            target = dense_cost[eps_dest[e]]
            if np.isfinite(target) and costs[i] + eps_weight[e] <= target + link_beam:
                if count == links.shape[0]:
                    links = _grow(links.ravel(), 4 * (count + 1)).reshape(-1, 4)
                    link_cost = _grow(link_cost, count + 1)
                links[count, 0], links[count, 1], links[count, 2], links[count, 3] = frame, i, dense_pos[
                    eps_dest[e]], e
                link_cost[count] = eps_weight[e] + 0.0
                count += 1
    return links, link_cost, count


@entry("(float64[:, ::1], int64[::1], float64[::1], int64[::1], int64, int64, int64[::1], float64[::1], "
       "int64[::1], int64[::1], int64, int64[::1], float64[::1], int64[::1], float64, int64, int64, float64, "
       "boolean, int64, float64, int64[::1], int64[::1], float64[::1], float64[::1], int64[::1], int64[::1])",
       returns="Tuple((int64[::1], float64[::1], int64[::1], int64[::1], int64[::1], int64[:, ::1], "
               "int64[:, ::1], float64[::1], int64[:, ::1], float64[::1], int64[::1], int64[::1]))")
def decode_frames(rows, states, costs, ids, arena_start, first_frame, offsets, arc_weight, arc_packed, code,
                  code_base, emit_offsets, emit_weight, emit_column, beam32, max_active, min_active,
                  beam_delta, unconstrained, partial_every, link_beam, eps_offsets, eps_dest, eps_weight,
                  dense_cost, dense_code, stats):
    """Decode the frames `rows` ((t, P) float64 acoustic costs) from the tokens (states (N,) int64, costs
    (N,) float64, arena ids (N,) int64); new arena entries are numbered from `arena_start`, frames from
    `first_frame`. The closed arcs of state s are entries offsets[s]..offsets[s + 1] (offsets (S + 1,) int64);
    entry e has its weight at arc_weight[2 e] (float64) and `dest << 16 | column` at arc_packed[2 e + 1]
    (int64; the two are views of one buffer, so an arc is one 16-byte record), its code at code[e].
    dense_cost (S,) float64 all +inf and dense_code (S,) int64 all NO_CODE are scratch,
    restored on return; stats (8,) int64 is updated in place. link_beam < 0: no lattice records.

    Returns (states, costs, ids, arena prev (E,), arena code (E,), partials (K, 3) (frame, arena id,
    state), then the lattice links (see lattice_kernels.prune_links): emitting links (R, 4) (frame, source
    token, destination token at frame + 1, emitting arc) and their costs (R,), epsilon links (Q, 4) (frame,
    source token, destination token, epsilon arc) and their costs (Q,), the states of each new frame's
    tokens, frame after frame, and their number per frame (t,); a token is numbered by its position in its
    frame's token list).
    """
    n = states.shape[0]
    lattice = link_beam >= 0
    cand_new = np.empty(4096, dtype=np.float64)
    cand_src = np.empty(4096, dtype=np.int64)
    cand_dest = np.empty(4096, dtype=np.int64)
    cand_code = np.empty(4096, dtype=np.int64)
    cand_link = np.empty(4096 if link_beam >= 0 else 0, dtype=np.float64)  # arc weight + acoustic cost
    arena_prev = np.empty(1024, dtype=np.int64)
    arena_code = np.empty(1024, dtype=np.int64)
    partials = np.empty((16, 3), dtype=np.int64)
    emit_links = np.empty((1024 if lattice else 0, 4), dtype=np.int64)
    emit_cost = np.empty(1024 if lattice else 0, dtype=np.float64)
    eps_links = np.empty((256 if lattice else 0, 4), dtype=np.int64)
    eps_cost = np.empty(256 if lattice else 0, dtype=np.float64)
    token_states = np.empty(1024 if lattice else 0, dtype=np.int64)
    token_counts = np.zeros(rows.shape[0] if lattice else 0, dtype=np.int64)
    arena_count = partial_count = emit_count = eps_count = state_count = 0
    next_states = np.empty(max(n, 16), dtype=np.int64)
    next_costs = np.empty(max(n, 16), dtype=np.float64)
    next_ids = np.empty(max(n, 16), dtype=np.int64)
    for t in range(rows.shape[0]):
        row = rows[t]
        frame = first_frame + t
        wc, adaptive, best, binding, all_below = get_cutoff(costs, n, beam32, max_active, min_active,
                                                            beam_delta, unconstrained)
        stats[MAX_BINDS] += binding == BIND_MAX_ACTIVE
        stats[MIN_BINDS] += binding == BIND_MIN_ACTIVE
        stats[NARROWINGS] += adaptive < beam32
        # candidates are recombined as they come; one that cannot beat the running cutoff (the lowest new
        # cost so far plus the adaptive beam, never below the final cutoff) is counted and dropped
        run_cut = np.inf
        if best >= 0 and not costs[best] < wc:  # Kaldi's pre-pass over the unexpanded best token
            run_cut = _best_token_bound(states[best], costs[best], row, emit_offsets, emit_weight,
                                        emit_column, adaptive)
        bound = run_cut
        if best >= 0 and (all_below or costs[best] < wc):  # a tight running cutoff from the start
            s = states[best]
            for e in range(offsets[s], offsets[s + 1]):
                column = arc_packed[2 * e + 1] & 0xFFFF
                run_cut = min(run_cut, costs[best] + arc_weight[2 * e] + row[column] + adaptive)
        total, stored, expanded, low = 0, 0, 0, np.inf
        for i in range(n):
            if i + 16 < n:  # the arcs of the token 8 places ahead, and where those of 16 ahead begin
                prefetch(offsets, states[i + 16])
            if i + 8 < n and (all_below or costs[i + 8] < wc):
                ahead, stop = offsets[states[i + 8]], offsets[states[i + 8] + 1]
                for q in range(2 * ahead, 2 * stop, 8):  # 64-byte lines of 16-byte arcs
                    prefetch(arc_packed, q)
                for q in range(ahead, stop, 8):
                    prefetch(code, q)
            c = costs[i]
            if not (all_below or c < wc):
                continue
            expanded += 1
            s = states[i]
            first, last = offsets[s], offsets[s + 1]
            total += last - first
            if stored + (last - first) > cand_new.shape[0]:
                need = stored + (last - first)
                cand_new = _grow(cand_new, need)
                cand_src = _grow(cand_src, need)
                cand_dest = _grow(cand_dest, need)
                cand_code = _grow(cand_code, need)
                if lattice:
                    cand_link = _grow(cand_link, need)
            for e in range(first, last):
                packed = arc_packed[2 * e + 1]
                new = c + arc_weight[2 * e] + row[packed & 0xFFFF]
                if new < low:
                    low = new
                    run_cut = min(run_cut, low + adaptive)
                if not new < run_cut:
                    continue
                d, k = packed >> 16, code[e]
                cand_new[stored], cand_src[stored] = new, i
                cand_dest[stored], cand_code[stored] = d, k
                if lattice:  # a bare emitting arc's closed weight is its own: the link's graph + acoustic cost
                    cand_link[stored] = arc_weight[2 * e] + row[packed & 0xFFFF]
                stored += 1
                if new < dense_cost[d] or (new == dense_cost[d] and k < dense_code[d]):
                    dense_cost[d], dense_code[d] = new, k
        cutoff = min(low + adaptive, bound) if total else bound
        if stored > next_states.shape[0]:
            next_states = _grow(next_states, stored)
            next_costs = _grow(next_costs, stored)
            next_ids = _grow(next_ids, stored)
        if arena_count + stored > arena_prev.shape[0]:
            arena_prev = _grow(arena_prev, arena_count + stored)
            arena_code = _grow(arena_code, arena_count + stored)
        kept = m = 0
        for j in range(stored):  # the winners, in candidate order; destinations whose best candidate was
            new, d, k = cand_new[j], cand_dest[j], cand_code[j]  # pruned hold no token
            if new < cutoff:
                kept += 1
                if new == dense_cost[d] and k == dense_code[d]:
                    next_states[m], next_costs[m] = d, new
                    next_ids[m] = arena_start + arena_count
                    arena_prev[arena_count], arena_code[arena_count] = ids[cand_src[j]], k
                    arena_count += 1
                    m += 1
            elif not dense_cost[d] < cutoff:
                dense_cost[d], dense_code[d] = np.inf, NO_CODE
        stats[CREATED] += kept
        stats[PRUNED] += (n - expanded) + (total - kept)
        stats[EPS_ITERATIONS] += 1
        if lattice:  # dense_code holds the winners' positions from here until the epsilon links are made
            for j in range(m):
                dense_code[next_states[j]] = j
            if emit_count + stored > emit_links.shape[0]:
                emit_links = _grow(emit_links.ravel(), 4 * (emit_count + stored)).reshape(-1, 4)
                emit_cost = _grow(emit_cost, emit_count + stored)
            for j in range(stored):  # bare emitting candidates within the beam of their destination's winner
                new = cand_new[j]
                if new < cutoff and new <= dense_cost[cand_dest[j]] + link_beam:
                    arc, rest = divmod(cand_code[j], code_base)
                    if rest == 0:
                        emit_links[emit_count, 0], emit_links[emit_count, 1] = frame, cand_src[j]
                        emit_links[emit_count, 2], emit_links[emit_count, 3] = dense_code[cand_dest[j]], arc
                        emit_cost[emit_count] = cand_link[j]
                        emit_count += 1
        else:
            for j in range(m):
                dense_code[next_states[j]] = NO_CODE
        states, next_states = next_states, states
        costs, next_costs = next_costs, costs
        ids, next_ids = next_ids, ids
        n = m
        if lattice:  # dense_cost holds exactly the new tokens' costs here, dense_code their positions
            eps_links, eps_cost, eps_count = _epsilon_links(
                states, costs, n, dense_cost, dense_code, eps_offsets, eps_dest, eps_weight, link_beam,
                frame + 1, eps_links, eps_cost, eps_count)
            token_states = _grow(token_states, state_count + n)
            token_states[state_count:state_count + n] = states[:n]
            token_counts[t] = n
            state_count += n
            for j in range(n):
                dense_code[states[j]] = NO_CODE
        for j in range(n):
            dense_cost[states[j]] = np.inf
        stats[FRAMES] += 1
        if partial_every > 0 and stats[FRAMES] % partial_every == 0 and n > 0:
            pick = 0
            for j in range(1, n):
                if costs[j] < costs[pick] or (costs[j] == costs[pick] and states[j] < states[pick]):
                    pick = j
            if partial_count == partials.shape[0]:
                partials = _grow(partials.ravel(), 6 * partial_count).reshape(-1, 3)
            partials[partial_count, 0], partials[partial_count, 1] = stats[FRAMES] - 1, ids[pick]
            partials[partial_count, 2] = states[pick]
            partial_count += 1
    return (states[:n].copy(), costs[:n].copy(), ids[:n].copy(), arena_prev[:arena_count].copy(),
            arena_code[:arena_count].copy(), partials[:partial_count].copy(), emit_links[:emit_count].copy(),
            emit_cost[:emit_count].copy(), eps_links[:eps_count].copy(), eps_cost[:eps_count].copy(),
            token_states[:state_count].copy(), token_counts)
