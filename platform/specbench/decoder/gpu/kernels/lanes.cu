// CUDA kernels of the lane decoder (specbench/decoder/lanes.py). Each kernel does what the method of the
// same name in specbench/decoder/twin.py does in numpy; the host loop in gpu/backend.py calls them in the order of
// lanes.py's module docstring. Costs: float64 token costs, float32 arc weights and acoustic costs (as in
// Kaldi). Keys: order-preserving bits (ord32/ord64), so unsigned atomicMin/atomicMax order floats.
//
// The frame loop never waits for the host: the counts (live tokens, candidate arcs, winners, the fill of the
// arena and of the lattice records) live in the device array `ctr` (C_* below), written by the one-block
// kernel scan_partials and read by the others, which run on fixed grids: over tokens or arc slots with
// grid-stride loops, or (where they feed a prefix sum) over one contiguous chunk of the items per block
// (chunk_size), whose sums scan_partials turns into the blocks' offsets. The arena entries go into a ring
// buffer that holds every entry of the utterances in the lanes: at each status point, trace_paths follows the
// backpointers of the utterances released since the last one into their rooms of the path buffer, which the
// host downloads, and set_taken frees the entries that no utterance in a lane needs. The lattice records
// (4 ints: lane, frame step, source state, code) go into a ring buffer that the host empties at status points.

// float_keys.cuh comes first (gpu/sources.py): u64, u32, i64; to_f32, to_f64; ord64, unord64, ord32, unord32.

#define NSTAT 8
#define INF64 __longlong_as_double(0x7ff0000000000000LL)
#define S_CREATED 1
#define S_PRUNED 2
#define S_MAXB 3
#define S_MINB 4
#define S_NARROW 5
#define S_OVER 7

#define C_LIVE 0          // tokens in the current queue
#define C_ARENA 1         // arena entries made in the wave
#define C_LATTICE 2       // lattice records made in the wave
#define C_ARCS 3          // candidate arcs of this frame step (before the capacity)
#define C_SLOTS 4         // ... within the arc capacity
#define C_ARCS_SUM 5      // C_SLOTS summed over the wave
#define C_EMIT 6          // winners that go into the next queue
#define C_ARENA_BASE 7    // the arena index of this step's first winner
#define C_RECORDS 8       // lattice records this step's emit or epsilon links keep
#define C_LATTICE_BASE 9  // the index of their first
#define C_STEP 10         // frame steps begun in the wave (frame_begin counts them): step f runs while it is f + 1
#define C_ARENA_TAKEN 11  // arena entries freed (set_taken, at status points)
#define C_LATTICE_TAKEN 12
#define NCTR 16
#define SCAN_BLOCK 256    // threads per block of the chunked kernels

__device__ __forceinline__ i64 thread_index() { return (i64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ i64 grid_stride() { return (i64)gridDim.x * blockDim.x; }
__device__ __forceinline__ i64 min64(i64 a, i64 b) { return a < b ? a : b; }
__device__ __forceinline__ i64 max64(i64 a, i64 b) { return a > b ? a : b; }

// Items per block of a chunked kernel over n items: a multiple of blockDim.x, so that block b covers
// [b * chunk, min((b + 1) * chunk, n)) in tiles of blockDim.x (the same loop bounds for every thread of a block).
__device__ __forceinline__ i64 chunk_size(i64 n) {
    i64 per = (n + gridDim.x - 1) / gridDim.x;
    return (per + blockDim.x - 1) / blockDim.x * blockDim.x;
}

// Inclusive prefix sum of v over the threads of the block (Hillis-Steele in shared memory `buf` of blockDim.x
// entries); `total` gets the block's sum. Every thread of the block must call it.
__device__ u64 block_scan(u64 v, u64* buf, u64* total) {
    int t = threadIdx.x;
    buf[t] = v;
    __syncthreads();
    for (int d = 1; d < (int)blockDim.x; d <<= 1) {
        u64 add = t >= d ? buf[t - d] : 0ULL;
        __syncthreads();
        buf[t] += add;
        __syncthreads();
    }
    u64 r = buf[t];
    *total = buf[blockDim.x - 1];
    __syncthreads();
    return r;
}

// Entries that may still be made in a ring of `ring` entries within a wave's `capacity`: `made` so far, the
// host holding the first `taken` (lane_tables.LaneSettings.arena_room).
__device__ __forceinline__ i64 ring_room(i64 capacity, i64 ring, i64 made, i64 taken) {
    return max64(0, min64(capacity - made, ring - (made - taken)));
}

// The entry of `state` in a lane's recombination table: dense (cap 0), the state itself; else a slot of a
// hash table of `cap` (a power of two) slots, open addressing with linear probing, claimed by atomicCAS on
// the slot's state (-1: free). -1 when all `cap` slots hold other states (the candidate overflows).
__device__ __forceinline__ i64 table_entry(int lane, int state, int S, int cap, int* hash_state) {
    if (cap == 0) return (i64)lane * S + state;
    u32 h = (u32)state;
    h ^= h >> 16; h *= 0x85ebca6bu; h ^= h >> 13; h *= 0xc2b2ae35u; h ^= h >> 16;
    i64 base = (i64)lane * cap;
    for (int probe = 0; probe < cap; ++probe) {
        u32 slot = (h + (u32)probe) & (u32)(cap - 1);
        int held = atomicCAS(&hash_state[base + slot], -1, state);
        if (held == -1 || held == state) return base + slot;
    }
    return -1;
}

// stats[lane * NSTAT + col] += 1 for every thread of the warp with `valid`, one atomicAdd per lane value
// present in the warp (warp-aggregated). Every thread of the warp that reaches the call must make it.
__device__ __forceinline__ void lane_count(u64* stats, int lane, int col, bool valid) {
    unsigned active = __activemask();
    unsigned want = __ballot_sync(active, valid);
    if (!valid) return;
    unsigned peers = __match_any_sync(want, lane);
    if ((int)(threadIdx.x & 31) == __ffs(peers) - 1)
        atomicAdd(&stats[(i64)lane * NSTAT + col], (u64)__popc(peers));
}

// The frame step that the kernels of a step run (frame_begin has counted it), and the step that the next
// begins at (refills and epsilon links between steps): read from the device, so that a frame's launches have
// the same arguments at every step (a CUDA graph replays them).
__device__ __forceinline__ int step_running(const i64* ctr) { return (int)ctr[C_STEP] - 1; }
__device__ __forceinline__ int step_next(const i64* ctr) { return (int)ctr[C_STEP]; }

// At a status point, in one block: the arena is freed up to the first entry of the oldest utterance still in a
// lane and not released (lane_first; the released ones' paths are traced: trace_paths runs first), and the
// lattice records up to the host's take.
extern "C" __global__ void set_taken(i64* ctr, i64 lattice_taken, int L, const i64* lane_utt,
                                     const i64* lane_first, const i64* utt_done) {
    __shared__ u64 oldest;
    if (threadIdx.x == 0) oldest = ~0ULL;
    __syncthreads();
    for (int l = threadIdx.x; l < L; l += blockDim.x) {
        i64 u = lane_utt[l];
        if (u >= 0 && utt_done[u] < 0) atomicMin(&oldest, (u64)lane_first[l]);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        ctr[C_ARENA_TAKEN] = oldest < (u64)ctr[C_ARENA] ? (i64)oldest : ctr[C_ARENA];
        ctr[C_LATTICE_TAKEN] = lattice_taken;
    }
}

// At a status point (and the wave's end), over utterances lo..hi - 1: each released at a refill from step
// `since` on (with `unreleased`, also each never released) gets its best paths (path 0 to its final token,
// path k to partial slot k - 1's) traced back through the arena, one thread a path: the codes of the entries
// with a backpointer, written right-aligned into the path's room (path_base[u] + k * (length + 1), length + 1
// entries: one entry a frame, at most one frame-0 epsilon move), its length into path_len (-1: longer).
extern "C" __global__ void trace_paths(int lo, int hi, int W, i64 since, int unreleased, const i64* utt_done,
                                       const i64* path_base, const int* lengths, const i64* final_id,
                                       const i64* partial_id, const i64* arena_prev, const i64* arena_code,
                                       i64 arena_ring, i64* paths, i64* path_len) {
    i64 n = (i64)(hi - lo) * (1 + W);
    for (i64 t = thread_index(); t < n; t += grid_stride()) {
        i64 u = lo + t / (1 + W), k = t % (1 + W);
        i64 done = utt_done[u];
        if (!(done >= since || (unreleased && done < 0))) continue;
        i64 room = (i64)lengths[u] + 1;
        if (k >= (path_base[u + 1] - path_base[u]) / room) continue;
        i64 cur = k == 0 ? final_id[u] : partial_id[u * W + k - 1];
        i64 end = path_base[u] + (k + 1) * room, made = 0;
        while (cur >= 0 && arena_prev[cur % arena_ring] >= 0) {
            if (made == room) { made = -1; break; }
            paths[end - 1 - made] = arena_code[cur % arena_ring];
            cur = arena_prev[cur % arena_ring];
            ++made;
        }
        path_len[u * (1 + W) + k] = made;
    }
}

// A frame step begins: counted in ctr; per-lane scratch of reductions, selection, and the best tokens of lanes
// that end (fin_*) or take a partial (par_*).
extern "C" __global__ void frame_begin(int L, i64* ctr, u64* best, u64* worst, u64* count, u64* min_new,
                                       u64* first, u64* fin_best, u64* fin_low, u64* par_best, u64* par_low) {
    i64 t = thread_index();
    if (t == 0) ctr[C_STEP] += 1;
    if (t < L) {
        best[t] = ~0ULL; worst[t] = 0ULL; count[t] = 0ULL; min_new[t] = ~0ULL; first[t] = ~0ULL;
        fin_best[t] = ~0ULL; fin_low[t] = ~0ULL; par_best[t] = ~0ULL; par_low[t] = ~0ULL;
    }
}

// Per running lane: best and worst cost, token count, and the queue index of its first token.
extern "C" __global__ void lane_reduce(const i64* ctr, const int* tok_lane, const double* tok_cost,
                                       const int* lane_end, u64* best, u64* worst, u64* count, u64* first) {
    i64 n = ctr[C_LIVE];
    int f = step_running(ctr);
    for (i64 i = thread_index(); i < n; i += grid_stride()) {
        int l = tok_lane[i];
        if (lane_end[l] <= f) continue;
        u64 k = ord64(tok_cost[i]);
        atomicMin(&best[l], k);
        atomicMax(&worst[l], k);
        atomicAdd(&count[l], 1ULL);
        atomicMin(&first[l], (u64)i);
    }
}

// One block per lane: Kaldi's GetCutoff (pruning.py's rules and float types). Where max_active or min_active
// may bind, the exact k-th smallest float32 cost (Kaldi's nth_element) by radix selection over the lane's
// tokens, which are contiguous in the queue (a frame's winners come in the order of their source tokens, and a
// refilled lane's frame-0 tokens are appended together; the twin checks this on every frame), from `first` for
// `count`: four passes of a 256-bin shared-memory histogram of the order-preserving float32 bits, 8 bits a pass;
// after each, the digit whose bins hold the k-th smallest. A lane that needs no selection does no pass. Then
// the weight cutoff and adaptive beam; max-active and min-active binds and beam narrowings counted.
extern "C" __global__ void lane_select(int L, i64 max_active, i64 min_active, double beam32, double beam_delta,
                                       const u64* best, const u64* worst, const u64* count, const u64* first,
                                       const double* tok_cost, double* cutoff, double* adaptive, u64* stats) {
    __shared__ u32 hist[256];
    __shared__ u32 digit;
    __shared__ i64 below;
    int l = blockIdx.x;
    if (l >= L) return;
    i64 c = (i64)count[l];
    double b = unord64(best[l]);
    double beam_cutoff = b + beam32;
    double worst32 = to_f64(to_f32(unord64(worst[l])));
    bool need[2] = {c > max_active, c > min_active && min_active > 0 && worst32 > beam_cutoff};
    i64 k[2] = {max_active, min_active};
    u32 pre[2] = {0u, 0u};
    i64 begin = (i64)first[l], end = begin + c;
    for (int s = 0; s < 2; ++s) {
        if (!need[s]) continue;  // the same for every thread of the block
        i64 rem = k[s];
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0u;
            __syncthreads();
            for (i64 i = begin + threadIdx.x; i < end; i += blockDim.x) {
                u32 key = ord32(to_f32(tok_cost[i]));
                if (shift == 24 || (key >> (shift + 8)) == pre[s]) atomicAdd(&hist[(key >> shift) & 255u], 1u);
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                i64 cum = 0;
                u32 d = 0;
                for (; d < 256; ++d) {
                    i64 h = hist[d];
                    if (cum + h > rem) break;
                    cum += h;
                }
                digit = d > 255u ? 255u : d;
                below = cum;
            }
            __syncthreads();
            rem -= below;
            pre[s] = (pre[s] << 8) | digit;
            __syncthreads();  // the next pass rewrites hist, digit and below
        }
    }
    if (threadIdx.x != 0) return;
    bool maxb = false, minb = false;
    double cut = INF64, ad = beam32;
    if (c > 0) {
        double sel0 = need[0] ? to_f64(unord32(pre[0])) : INF64;
        double sel1 = need[1] ? to_f64(unord32(pre[1])) : INF64;
        maxb = c > max_active && sel0 < beam_cutoff;
        double min_cut = INF64;
        if (c > min_active) {
            if (min_active == 0) min_cut = b;
            else if (worst32 <= beam_cutoff) min_cut = beam_cutoff;
            else min_cut = sel1;
        }
        minb = !maxb && min_cut > beam_cutoff;
        cut = maxb ? sel0 : (minb ? min_cut : beam_cutoff);
        if (maxb || minb) ad = to_f64(to_f32((cut - b) + beam_delta));
        stats[(i64)l * NSTAT + S_MAXB] += maxb;
        stats[(i64)l * NSTAT + S_MINB] += minb;
        stats[(i64)l * NSTAT + S_NARROW] += ad < beam32;
    }
    cutoff[l] = cut;
    adaptive[l] = ad;
}

// Chunked over the live tokens: the closed-arc out-degree of each token below its lane's cutoff (0 otherwise),
// and each block's sum (partial[block]) for scan_partials.
extern "C" __global__ void token_degree(const i64* ctr, const int* tok_lane, const int* tok_state,
                                        const double* tok_cost, const int* lane_end, const double* cutoff,
                                        const int* degree, i64* deg, u64* partial, u64* stats) {
    __shared__ u64 sum;
    i64 n = ctr[C_LIVE], chunk = chunk_size(n);
    int f = step_running(ctr);
    i64 begin = blockIdx.x * chunk, end = min64(begin + chunk, n);
    if (threadIdx.x == 0) sum = 0ULL;
    __syncthreads();
    u64 mine = 0;
    for (i64 base = begin; base < end; base += blockDim.x) {
        i64 i = base + threadIdx.x;
        bool inside = i < end;
        int l = inside ? tok_lane[i] : 0;
        bool active = inside && lane_end[l] > f;
        bool expand = active && tok_cost[i] < cutoff[l];
        i64 d = expand ? degree[tok_state[i]] : 0;
        if (inside) deg[i] = d;
        mine += (u64)d;
        lane_count(stats, l, S_PRUNED, active && !expand);
    }
    if (mine) atomicAdd(&sum, mine);
    __syncthreads();
    if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// One block: the blocks' sums (`cols` interleaved columns of G blocks) into exclusive offsets, in place; then the
// counts that follow from the totals. which 0: candidate arcs (C_ARCS, C_SLOTS within arc_capacity, C_ARCS_SUM);
// 1: winners and lattice links (the winners that fit the token capacity and the arena: C_EMIT from
// C_ARENA_BASE, which become the live tokens; the links that fit the lattice records: C_RECORDS from
// C_LATTICE_BASE); 2: epsilon links (C_RECORDS from C_LATTICE_BASE).
extern "C" __global__ void scan_partials(i64* ctr, int G, int cols, u64* partial, int which, i64 arc_capacity,
                                         i64 token_capacity, i64 arena_capacity, i64 arena_ring,
                                         i64 lattice_capacity, i64 lattice_ring) {
    __shared__ u64 buf[1024];
    __shared__ u64 tile_total;
    __shared__ u64 totals[2];
    for (int c = 0; c < cols; ++c) {
        u64 carry = 0;
        for (int base = 0; base < G; base += blockDim.x) {
            int b = base + threadIdx.x;
            u64 v = b < G ? partial[(i64)b * cols + c] : 0ULL;
            u64 inclusive = block_scan(v, buf, &tile_total);
            if (b < G) partial[(i64)b * cols + c] = carry + inclusive - v;
            carry += tile_total;
        }
        if (threadIdx.x == 0) totals[c] = carry;
        __syncthreads();
    }
    if (threadIdx.x != 0) return;
    i64 arena_taken = ctr[C_ARENA_TAKEN], lattice_taken = ctr[C_LATTICE_TAKEN];
    if (which == 0) {
        i64 arcs = (i64)totals[0];
        ctr[C_ARCS] = arcs;
        ctr[C_SLOTS] = min64(arcs, arc_capacity);
        ctr[C_ARCS_SUM] += ctr[C_SLOTS];
        return;
    }
    i64 links = (i64)totals[which == 1 ? 1 : 0];
    if (which == 1) {
        i64 emit = min64((i64)totals[0],
                         min64(token_capacity, ring_room(arena_capacity, arena_ring, ctr[C_ARENA], arena_taken)));
        ctr[C_EMIT] = emit;
        ctr[C_ARENA_BASE] = ctr[C_ARENA];
        ctr[C_ARENA] += emit;
        ctr[C_LIVE] = emit;
    }
    i64 kept = min64(links, ring_room(lattice_capacity, lattice_ring, ctr[C_LATTICE], lattice_taken));
    ctr[C_RECORDS] = kept;
    ctr[C_LATTICE_BASE] = ctr[C_LATTICE];
    ctr[C_LATTICE] += kept;
}

// Chunked over the live tokens (the grid of token_degree): inclusive prefix sums of the degrees from the block
// offsets; arc slots past the capacity are dropped, counted per lane.
extern "C" __global__ void scan_apply(const i64* ctr, const int* tok_lane, const i64* deg, const u64* partial,
                                      i64* cum, u64* stats) {
    __shared__ u64 buf[SCAN_BLOCK];
    __shared__ u64 tile_total;
    i64 n = ctr[C_LIVE], chunk = chunk_size(n), slots = ctr[C_SLOTS];
    i64 begin = blockIdx.x * chunk, end = min64(begin + chunk, n);
    i64 carry = (i64)partial[blockIdx.x];
    for (i64 base = begin; base < end; base += blockDim.x) {
        i64 i = base + threadIdx.x;
        bool inside = i < end;
        i64 d = inside ? deg[i] : 0;
        i64 at = carry + (i64)block_scan((u64)d, buf, &tile_total);
        if (inside) {
            cum[i] = at;
            i64 lost = at - max64(at - d, slots);
            if (lost > 0) atomicAdd(&stats[(i64)tok_lane[i] * NSTAT + S_OVER], (u64)lost);
        }
        carry += (i64)tile_total;
    }
}

// One thread per arc slot (grid-stride): its token by binary search over the inclusive prefix sums of the
// degrees, its closed arc, the new cost; the per-lane minimum of the new costs.
extern "C" __global__ void expand_min(const i64* ctr, const i64* lane_row, int P, const int* tok_lane,
                                      const int* tok_state, const double* tok_cost, const i64* deg,
                                      const i64* cum, const i64* offsets, const double* weight,
                                      const int* column, const float* costs, u64* min_new, int* c_tok,
                                      u32* c_entry, double* c_cost) {
    i64 slots = ctr[C_SLOTS];
    int n = (int)ctr[C_LIVE], f = step_running(ctr);
    for (i64 j = thread_index(); j < slots; j += grid_stride()) {
        int lo = 0, hi = n - 1;
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if (cum[mid] > j) hi = mid; else lo = mid + 1;
        }
        int l = tok_lane[lo];
        i64 entry = offsets[tok_state[lo]] + (j - (cum[lo] - deg[lo]));
        double ac = to_f64(costs[(lane_row[l] + f) * P + column[entry]]);
        double nw = __dadd_rn(__dadd_rn(tok_cost[lo], weight[entry]), ac);
        atomicMin(&min_new[l], ord64(nw));
        c_tok[j] = lo;
        c_entry[j] = (u32)entry;
        c_cost[j] = nw;
    }
}

// Candidates below the next cutoff pack (float32 cost, arc entry) and atomicMin it into their destination's
// entry of the lane's table. The loop's bounds are the same for a whole block (lane_count's warp vote).
extern "C" __global__ void expand_recombine(const i64* ctr, int S, const int* tok_lane, const int* c_tok,
                                            const u32* c_entry, const double* c_cost, const u64* min_new,
                                            const double* adaptive, const int* dest, u64* dense_key,
                                            i64* c_index, u64* c_key, unsigned char* c_keep, u64* stats,
                                            int cap, int* hash_state) {
    i64 slots = ctr[C_SLOTS];
    for (i64 base = (i64)blockIdx.x * blockDim.x; base < slots; base += grid_stride()) {
        i64 j = base + threadIdx.x;
        bool inside = j < slots;
        int l = inside ? tok_lane[c_tok[j]] : 0;
        bool below = false, keep = false;
        if (inside) {
            double next_cutoff = unord64(min_new[l]) + adaptive[l];
            double nw = c_cost[j];
            below = nw < next_cutoff;
            u32 entry = c_entry[j];
            i64 index = below ? table_entry(l, dest[entry], S, cap, hash_state) : 0;
            keep = below && index >= 0;
            index = keep ? index : 0;
            u64 key = ((u64)ord32(to_f32(nw)) << 32) | (u64)entry;
            c_index[j] = index;
            c_key[j] = key;
            c_keep[j] = keep;
            if (keep) atomicMin(&dense_key[index], key);
        }
        lane_count(stats, l, S_CREATED, keep);
        lane_count(stats, l, S_PRUNED, inside && !below);
        lane_count(stats, l, S_OVER, below && !keep);
    }
}

extern "C" __global__ void resolve_cost(const i64* ctr, const unsigned char* c_keep, const u64* c_key,
                                        const i64* c_index, const double* c_cost, const u64* dense_key,
                                        u64* dense_cost) {
    i64 slots = ctr[C_SLOTS];
    for (i64 j = thread_index(); j < slots; j += grid_stride()) {
        if (!c_keep[j]) continue;
        i64 index = c_index[j];
        if ((c_key[j] >> 32) == (dense_key[index] >> 32)) atomicMin(&dense_cost[index], ord64(c_cost[j]));
    }
}

extern "C" __global__ void resolve_index(const i64* ctr, const unsigned char* c_keep, const u64* c_key,
                                         const i64* c_index, const double* c_cost, const u32* c_entry,
                                         const u64* dense_key, const u64* dense_cost, u32* dense_entry) {
    i64 slots = ctr[C_SLOTS];
    for (i64 j = thread_index(); j < slots; j += grid_stride()) {
        if (!c_keep[j]) continue;
        i64 index = c_index[j];
        if ((c_key[j] >> 32) == (dense_key[index] >> 32) && ord64(c_cost[j]) == dense_cost[index])
            atomicMin(&dense_entry[index], c_entry[j]);
    }
}

// Chunked over the arc slots: flags (1: the winner of its destination; 2: a bare emitting arc within the
// lattice beam of the winner), and each block's counts of both (partial[2 * block + 0 / 1]).
extern "C" __global__ void mark(const i64* ctr, int with_lattice, double lattice_beam, const unsigned char* c_keep,
                                const u64* c_key, const i64* c_index, const double* c_cost, const u32* c_entry,
                                const i64* bare_arc, const u64* dense_key, const u64* dense_cost,
                                const u32* dense_entry, unsigned char* flags, u64* partial) {
    __shared__ u64 sums[2];
    i64 slots = ctr[C_SLOTS], chunk = chunk_size(slots);
    i64 begin = blockIdx.x * chunk, end = min64(begin + chunk, slots);
    if (threadIdx.x < 2) sums[threadIdx.x] = 0ULL;
    __syncthreads();
    u64 wins = 0, links = 0;
    for (i64 j = begin + threadIdx.x; j < end; j += blockDim.x) {
        bool keep = c_keep[j];
        i64 index = c_index[j];
        bool tie = keep && (c_key[j] >> 32) == (dense_key[index] >> 32) && ord64(c_cost[j]) == dense_cost[index];
        bool win = tie && c_entry[j] == dense_entry[index];
        bool lat = with_lattice && keep && bare_arc[c_entry[j]] >= 0
                   && c_cost[j] <= unord64(dense_cost[index]) + lattice_beam;
        flags[j] = (unsigned char)(win | (lat << 1));
        wins += win;
        links += lat;
    }
    if (wins) atomicAdd(&sums[0], wins);
    if (links) atomicAdd(&sums[1], links);
    __syncthreads();
    if (threadIdx.x < 2) partial[2 * (i64)blockIdx.x + threadIdx.x] = sums[threadIdx.x];
}

// Chunked over the arc slots (the grid of mark): winners into the next token queue and the arena ring at their
// positions (block offset + prefix within the block), lattice records into their ring, table entries reset.
// Winners past C_EMIT and links past C_RECORDS are dropped, counted per lane.
extern "C" __global__ void emit_winners(const i64* ctr, i64 arena_ring, i64 lattice_ring,
                                        const unsigned char* flags, const u64* partial, const int* c_tok,
                                        const u32* c_entry, const double* c_cost, const i64* c_index,
                                        const int* tok_lane, const int* tok_state, const i64* tok_id,
                                        const int* dest, const i64* code, const i64* bare_arc, int* out_lane,
                                        int* out_state, double* out_cost, i64* out_id, i64* arena_prev,
                                        i64* arena_code, int* records, u64* dense_key, u64* dense_cost,
                                        u32* dense_entry, u64* stats, int cap, int* hash_state) {
    __shared__ u64 buf[SCAN_BLOCK];
    __shared__ u64 tile_total;
    i64 slots = ctr[C_SLOTS], chunk = chunk_size(slots);
    i64 begin = blockIdx.x * chunk, end = min64(begin + chunk, slots);
    i64 emit = ctr[C_EMIT], arena_base = ctr[C_ARENA_BASE];
    i64 kept = ctr[C_RECORDS], lattice_base = ctr[C_LATTICE_BASE];
    int f = step_running(ctr);
    i64 win_at = (i64)partial[2 * (i64)blockIdx.x], lat_at = (i64)partial[2 * (i64)blockIdx.x + 1];
    for (i64 base = begin; base < end; base += blockDim.x) {
        i64 j = base + threadIdx.x;
        bool inside = j < end;
        unsigned char flag = inside ? flags[j] : 0;
        bool is_win = flag & 1, is_lat = (flag >> 1) & 1;
        u64 packed = block_scan(((u64)is_win << 32) | (u64)is_lat, buf, &tile_total);
        i64 p = win_at + (i64)(packed >> 32) - 1, q = lat_at + (i64)(packed & 0xffffffffULL) - 1;
        win_at += (i64)(tile_total >> 32);
        lat_at += (i64)(tile_total & 0xffffffffULL);
        int t = inside ? c_tok[j] : 0;
        int l = inside ? tok_lane[t] : 0;
        bool lost_win = false, lost_lat = false;
        if (is_win) {
            u32 entry = c_entry[j];
            i64 index = c_index[j];
            dense_key[index] = ~0ULL;
            dense_cost[index] = ~0ULL;
            dense_entry[index] = ~0u;
            if (cap) hash_state[index] = -1;  // each claimed slot has one winner, which frees it
            if (p < emit) {
                i64 id = arena_base + p;
                out_lane[p] = l;
                out_state[p] = dest[entry];
                out_cost[p] = c_cost[j];
                out_id[p] = id;
                arena_prev[id % arena_ring] = tok_id[t];
                arena_code[id % arena_ring] = code[entry];
            } else {
                lost_win = true;
            }
        }
        if (is_lat) {
            if (q < kept) {
                i64 r = 4 * ((lattice_base + q) % lattice_ring);
                records[r] = l;
                records[r + 1] = f;
                records[r + 2] = tok_state[t];
                records[r + 3] = (int)bare_arc[c_entry[j]];  // < 2^31 (LaneDecoder checks the graph)
            } else {
                lost_lat = true;
            }
        }
        lane_count(stats, l, S_OVER, lost_win);
        lane_count(stats, l, S_OVER, lost_lat);
    }
}

// The planned refill of a step between two frame steps, in one block (twin.NumpyLaneKernels.refill). From `plan`:
// n_out released lanes and their utterances, whose counts move to the utterances (the lanes' zeroed); then n_in
// placed lanes, utterances, end steps and cost-row offsets. The placed lanes' frame-0 tokens (per_lane each: the
// start state and its closure moves, init_*) are appended to the queue after the live tokens and to the arena,
// as many lanes' as the arena has room for (the others' dropped, counted). The released utterances get the
// step in utt_done, the placed lanes their first arena entry in lane_first (which set_taken keeps).
extern "C" __global__ void refill_lanes(i64* ctr, const i64* plan, int n_out, int n_in, int per_lane,
                                        const int* init_state, const double* init_cost, const i64* init_code,
                                        i64 arena_capacity, i64 arena_ring, u64* stats,
                                        u64* utt_stats, int* lane_end, int* lane_start, i64* lane_row,
                                        i64* lane_utt, int* tok_lane, int* tok_state, double* tok_cost,
                                        i64* tok_id, i64* arena_prev, i64* arena_code, i64* lane_first,
                                        i64* utt_done) {
    const i64* o_lane = plan;
    const i64* o_utt = plan + n_out;
    const i64* i_lane = plan + 2 * (i64)n_out;
    const i64* i_utt = i_lane + n_in;
    const i64* i_end = i_utt + n_in;
    const i64* i_row = i_end + n_in;
    i64 live = ctr[C_LIVE], made = ctr[C_ARENA];
    int step = step_next(ctr);
    i64 fit = min64(n_in, ring_room(arena_capacity, arena_ring, made, ctr[C_ARENA_TAKEN]) / per_lane);
    for (i64 t = threadIdx.x; t < (i64)n_out * NSTAT; t += blockDim.x) {
        i64 o = t / NSTAT, c = t % NSTAT;
        utt_stats[o_utt[o] * NSTAT + c] = stats[o_lane[o] * NSTAT + c];
        stats[o_lane[o] * NSTAT + c] = 0ULL;
        if (c == 0) utt_done[o_utt[o]] = step;
    }
    __syncthreads();  // the released counts moved before a placed lane's are written
    for (i64 t = threadIdx.x; t < n_in; t += blockDim.x) {
        i64 l = i_lane[t];
        lane_end[l] = (int)i_end[t];
        lane_start[l] = step;
        lane_row[l] = i_row[t];
        lane_utt[l] = i_utt[t];
        lane_first[l] = t < fit ? made + t * per_lane : 0x7fffffffffffffffLL;  // overflowed: no entries
        if (t >= fit) stats[l * NSTAT + S_OVER] += (u64)per_lane;
    }
    for (i64 k = threadIdx.x; k < fit * per_lane; k += blockDim.x) {
        i64 placed = k / per_lane, pos = k % per_lane, id = made + k;
        tok_lane[live + k] = (int)i_lane[placed];
        tok_state[live + k] = init_state[pos];
        tok_cost[live + k] = init_cost[pos];
        tok_id[live + k] = id;
        arena_prev[id % arena_ring] = pos == 0 ? -1 : made + placed * per_lane;
        arena_code[id % arena_ring] = init_code[pos];
    }
    __syncthreads();  // every thread has read the counts
    if (threadIdx.x == 0) {
        ctr[C_LIVE] = live + fit * per_lane;
        ctr[C_ARENA] = made + fit * per_lane;
    }
}

// The output slot of lane l's best token after frame step f (-1: none): with `finals`, the lane's utterance's
// (lane_utt) where its last step is f; else where the utterance takes a partial after its frame f - start
// (every `every` frames: slot utt * slots + k). Lanes carry their placement, so no step uploads a mask.
__device__ __forceinline__ i64 lane_target(int l, int f, int finals, int every, int slots, const int* lane_end,
                                           const int* lane_start, const i64* lane_utt) {
    if (lane_utt[l] < 0 || lane_end[l] <= f) return -1;
    if (finals) return lane_end[l] == f + 1 ? lane_utt[l] : -1;
    int done = f - lane_start[l] + 1;
    return (every > 0 && done % every == 0) ? lane_utt[l] * slots + done / every - 1 : -1;
}

#define LANE_PLACEMENT const i64* ctr, int finals, int every, int slots, const int* lane_end, \
    const int* lane_start, const i64* lane_utt
#define TARGET(l) lane_target((l), step_running(ctr), finals, every, slots, lane_end, lane_start, lane_utt)

// Best token of the lanes with an output slot at this step (lane_target): lowest cost (+ final weight), then
// lowest state; three passes over the live tokens; written to out_id / out_state at the slot.
extern "C" __global__ void best_cost(LANE_PLACEMENT, const int* tok_lane, const int* tok_state,
                                     const double* tok_cost, const double* final_w, u64* best) {
    i64 n = ctr[C_LIVE];
    for (i64 i = thread_index(); i < n; i += grid_stride()) {
        if (TARGET(tok_lane[i]) < 0) continue;
        double c = tok_cost[i] + (finals ? final_w[tok_state[i]] : 0.0);
        if (isfinite(c)) atomicMin(&best[tok_lane[i]], ord64(c));
    }
}

extern "C" __global__ void best_state(LANE_PLACEMENT, const int* tok_lane, const int* tok_state,
                                      const double* tok_cost, const double* final_w, const u64* best, u64* low) {
    i64 n = ctr[C_LIVE];
    for (i64 i = thread_index(); i < n; i += grid_stride()) {
        if (TARGET(tok_lane[i]) < 0) continue;
        double c = tok_cost[i] + (finals ? final_w[tok_state[i]] : 0.0);
        if (isfinite(c) && ord64(c) == best[tok_lane[i]]) atomicMin(&low[tok_lane[i]], (u64)tok_state[i]);
    }
}

extern "C" __global__ void best_pick(LANE_PLACEMENT, const int* tok_lane, const int* tok_state,
                                     const double* tok_cost, const double* final_w, const u64* best,
                                     const u64* low, const i64* tok_id, i64* out_id, i64* out_state) {
    i64 n = ctr[C_LIVE];
    for (i64 i = thread_index(); i < n; i += grid_stride()) {
        int l = tok_lane[i];
        i64 slot = TARGET(l);
        if (slot < 0) continue;
        double c = tok_cost[i] + (finals ? final_w[tok_state[i]] : 0.0);
        if (isfinite(c) && ord64(c) == best[l] && (u64)tok_state[i] == low[l]) {
            out_id[slot] = tok_id[i];
            out_state[slot] = tok_state[i];
        }
    }
}

// Epsilon lattice links among the live tokens: token costs by state (a dense table, or with cap > 0 a hash table
// like the recombination's: tok_hash holds each slot's state, tok_slot each token's slot), per-token link counts
// (chunked, with block sums), scan_partials, records (chunked), clear.
extern "C" __global__ void dense_tok_set(const i64* ctr, int S, const int* tok_lane, const int* tok_state,
                                         const double* tok_cost, double* dense_tok, int clear, int cap,
                                         int* tok_hash, i64* tok_slot, u64* stats) {
    i64 n = ctr[C_LIVE];
    for (i64 i = thread_index(); i < n; i += grid_stride()) {
        if (cap == 0) {
            dense_tok[(i64)tok_lane[i] * S + tok_state[i]] = clear ? INF64 : tok_cost[i];
        } else if (clear) {
            if (tok_slot[i] >= 0) {
                dense_tok[tok_slot[i]] = INF64;
                tok_hash[tok_slot[i]] = -1;
            }
        } else {  // a lane's tokens are distinct states, no more than its recombination table held: a slot each
            i64 slot = table_entry(tok_lane[i], tok_state[i], S, cap, tok_hash);
            tok_slot[i] = slot;
            if (slot >= 0) dense_tok[slot] = tok_cost[i];
            else atomicAdd(&stats[(i64)tok_lane[i] * NSTAT + S_OVER], 1ULL);  // never silent
        }
    }
}

// The cost of the token of `state` in `lane` (+inf: none), from dense_tok_set's table.
__device__ __forceinline__ double held_cost(int lane, int state, int S, int cap, const int* tok_hash,
                                            const double* dense_tok) {
    if (cap == 0) return dense_tok[(i64)lane * S + state];
    u32 h = (u32)state;
    h ^= h >> 16; h *= 0x85ebca6bu; h ^= h >> 13; h *= 0xc2b2ae35u; h ^= h >> 16;
    i64 base = (i64)lane * cap;
    for (int probe = 0; probe < cap; ++probe) {
        i64 slot = base + ((h + (u32)probe) & (u32)(cap - 1));
        int held = tok_hash[slot];
        if (held == state) return dense_tok[slot];
        if (held == -1) return INF64;
    }
    return INF64;
}


extern "C" __global__ void eps_link_count(const i64* ctr, int S, double lattice_beam, const int* tok_lane,
                                          const int* tok_state, const double* tok_cost, const i64* eps_offsets,
                                          const int* eps_dest, const double* eps_weight, const double* dense_tok,
                                          i64* links, u64* partial, int cap, const int* tok_hash) {
    __shared__ u64 sum;
    i64 n = ctr[C_LIVE], chunk = chunk_size(n);
    i64 begin = blockIdx.x * chunk, end = min64(begin + chunk, n);
    if (threadIdx.x == 0) sum = 0ULL;
    __syncthreads();
    u64 mine = 0;
    for (i64 i = begin + threadIdx.x; i < end; i += blockDim.x) {
        i64 count = 0;
        for (i64 e = eps_offsets[tok_state[i]]; e < eps_offsets[tok_state[i] + 1]; ++e) {
            double held = held_cost(tok_lane[i], eps_dest[e], S, cap, tok_hash, dense_tok);  // +inf: no token
            count += isfinite(held) && __dadd_rn(tok_cost[i], eps_weight[e]) <= held + lattice_beam;
        }
        links[i] = count;
        mine += (u64)count;
    }
    if (mine) atomicAdd(&sum, mine);
    __syncthreads();
    if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

extern "C" __global__ void eps_link_write(const i64* ctr, int S, double lattice_beam, i64 lattice_ring,
                                          const int* tok_lane, const int* tok_state, const double* tok_cost,
                                          const i64* eps_offsets, const int* eps_dest, const double* eps_weight,
                                          const double* dense_tok, const i64* links, const u64* partial,
                                          int* records, u64* stats, int cap, const int* tok_hash) {
    __shared__ u64 buf[SCAN_BLOCK];
    __shared__ u64 tile_total;
    i64 n = ctr[C_LIVE], chunk = chunk_size(n);
    i64 begin = blockIdx.x * chunk, end = min64(begin + chunk, n);
    i64 kept = ctr[C_RECORDS], lattice_base = ctr[C_LATTICE_BASE];
    int frame = step_next(ctr);
    i64 carry = (i64)partial[blockIdx.x];
    for (i64 base = begin; base < end; base += blockDim.x) {
        i64 i = base + threadIdx.x;
        bool inside = i < end;
        i64 mine = inside ? links[i] : 0;
        i64 q = carry + (i64)block_scan((u64)mine, buf, &tile_total) - mine;
        carry += (i64)tile_total;
        if (!inside || !mine) continue;
        i64 lost = 0;
        int l = tok_lane[i];
        for (i64 e = eps_offsets[tok_state[i]]; e < eps_offsets[tok_state[i] + 1]; ++e) {
            double held = held_cost(l, eps_dest[e], S, cap, tok_hash, dense_tok);
            if (isfinite(held) && __dadd_rn(tok_cost[i], eps_weight[e]) <= held + lattice_beam) {
                if (q < kept) {
                    i64 r = 4 * ((lattice_base + q) % lattice_ring);
                    records[r] = l;
                    records[r + 1] = frame;
                    records[r + 2] = tok_state[i];
                    records[r + 3] = (int)(-1 - e);
                } else {
                    ++lost;
                }
                ++q;
            }
        }
        if (lost) atomicAdd(&stats[(i64)l * NSTAT + S_OVER], (u64)lost);
    }
}
