// CUDA kernels of the lane decoder (specbench/decoder/lanes.py). Each kernel does what the method of the
// same name in specbench/decoder/twin.py does in numpy; the host loop in gpu/backend.py calls them in the order of
// lanes.py's module docstring. Costs: float64 token costs, float32 arc weights and acoustic costs (as in
// Kaldi). Keys: order-preserving bits (ord32/ord64), so unsigned atomicMin/atomicMax order floats.

typedef unsigned long long u64;
typedef unsigned int u32;
typedef long long i64;

#define NSTAT 8
#define INF64 __longlong_as_double(0x7ff0000000000000LL)
#define S_CREATED 1
#define S_PRUNED 2
#define S_MAXB 3
#define S_MINB 4
#define S_NARROW 5
#define S_OVER 7

// Exact IEEE conversions between float and double, also under cupy's -ftz=true (which would flush
// subnormals to zero in plain casts, unlike numpy): inline PTX without the .ftz modifier.
__device__ __forceinline__ float to_f32(double x) {
    float r;
    asm("cvt.rn.f32.f64 %0, %1;" : "=f"(r) : "d"(x));
    return r;
}
__device__ __forceinline__ double to_f64(float x) {
    double r;
    asm("cvt.f64.f32 %0, %1;" : "=d"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ u64 ord64(double x) {
    u64 b = (u64)__double_as_longlong(x);
    return (b >> 63) ? ~b : (b | 0x8000000000000000ULL);
}
__device__ __forceinline__ double unord64(u64 k) {
    u64 b = (k >> 63) ? (k & 0x7fffffffffffffffULL) : ~k;
    return __longlong_as_double((i64)b);
}
__device__ __forceinline__ u32 ord32(float x) {
    u32 b = __float_as_uint(x);
    return (b >> 31) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float unord32(u32 k) {
    u32 b = (k >> 31) ? (k & 0x7fffffffu) : ~k;
    return __uint_as_float(b);
}
__device__ __forceinline__ i64 thread_index() { return (i64)blockIdx.x * blockDim.x + threadIdx.x; }

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

// Per-lane scratch reset.
extern "C" __global__ void lane_reset(int L, u64* best, u64* worst, u64* count, u64* min_new, u64* first) {
    i64 t = thread_index();
    if (t < L) { best[t] = ~0ULL; worst[t] = 0ULL; count[t] = 0ULL; min_new[t] = ~0ULL; first[t] = ~0ULL; }
}

// Per running lane: best and worst cost, token count, and the queue index of its first token.
extern "C" __global__ void lane_reduce(int n, int f, const int* tok_lane, const double* tok_cost,
                                       const int* lane_end, u64* best, u64* worst, u64* count, u64* first) {
    i64 i = thread_index();
    if (i >= n) return;
    int l = tok_lane[i];
    if (lane_end[l] <= f) return;
    u64 k = ord64(tok_cost[i]);
    atomicMin(&best[l], k);
    atomicMax(&worst[l], k);
    atomicAdd(&count[l], 1ULL);
    atomicMin(&first[l], (u64)i);
}

extern "C" __global__ void select_setup(int L, i64 max_active, i64 min_active, double beam32, const u64* best,
                                        const u64* worst, const u64* count, u32* need, i64* remaining,
                                        u32* prefix) {
    i64 l = thread_index();
    if (l >= L) return;
    i64 c = (i64)count[l];
    double beam_cutoff = unord64(best[l]) + beam32;
    double worst32 = to_f64(to_f32(unord64(worst[l])));
    need[2 * l] = c > max_active;
    need[2 * l + 1] = c > min_active && min_active > 0 && worst32 > beam_cutoff;
    remaining[2 * l] = max_active;
    remaining[2 * l + 1] = min_active;
    prefix[2 * l] = 0u;
    prefix[2 * l + 1] = 0u;
}

// Kaldi's nth_element cutoffs where select_setup says they are needed: one block per lane over its tokens,
// which are contiguous in the queue (a frame's winners come in the order of their source tokens, and a
// refilled lane's frame-0 tokens are appended together; the twin checks this on every frame), from `first`
// for `count`. Four passes of a 256-bin shared-memory histogram of the order-preserving float32 bits, 8 bits
// a pass; after each, the digit whose bins hold the k-th smallest. A lane that needs none returns at once.
extern "C" __global__ void radix_select(int L, const u64* first, const u64* count, const double* tok_cost,
                                        const u32* need, i64* remaining, u32* prefix) {
    __shared__ u32 hist[256];
    __shared__ u32 digit;
    __shared__ i64 below;
    int l = blockIdx.x;
    if (l >= L) return;
    i64 begin = (i64)first[l], end = begin + (i64)count[l];
    for (int s = 0; s < 2; ++s) {
        i64 t = 2 * (i64)l + s;
        if (!need[t]) continue;  // the same for every thread of the block
        i64 rem = remaining[t];
        u32 pre = prefix[t];
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0u;
            __syncthreads();
            for (i64 i = begin + threadIdx.x; i < end; i += blockDim.x) {
                u32 key = ord32(to_f32(tok_cost[i]));
                if (shift == 24 || (key >> (shift + 8)) == pre) atomicAdd(&hist[(key >> shift) & 255u], 1u);
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
            pre = (pre << 8) | digit;
            __syncthreads();  // the next pass rewrites hist, digit and below
        }
        if (threadIdx.x == 0) {
            remaining[t] = rem;
            prefix[t] = pre;
        }
    }
}

extern "C" __global__ void lane_cutoff(int L, i64 max_active, i64 min_active, double beam32, double beam_delta,
                                       const u64* best, const u64* worst, const u64* count, const u32* need,
                                       const u32* prefix, double* cutoff, double* adaptive, u64* stats) {
    i64 l = thread_index();
    bool valid = l < L && count[l] > 0;
    bool maxb = false, minb = false;
    double cut = INF64, ad = beam32;
    if (valid) {
        i64 c = (i64)count[l];
        double b = unord64(best[l]);
        double beam_cutoff = b + beam32;
        double sel0 = need[2 * l] ? to_f64(unord32(prefix[2 * l])) : INF64;
        double sel1 = need[2 * l + 1] ? to_f64(unord32(prefix[2 * l + 1])) : INF64;
        maxb = c > max_active && sel0 < beam_cutoff;
        double min_cut = INF64;
        if (c > min_active) {
            if (min_active == 0) min_cut = b;
            else if (to_f64(to_f32(unord64(worst[l]))) <= beam_cutoff) min_cut = beam_cutoff;
            else min_cut = sel1;
        }
        minb = !maxb && min_cut > beam_cutoff;
        cut = maxb ? sel0 : (minb ? min_cut : beam_cutoff);
        if (maxb || minb) ad = to_f64(to_f32((cut - b) + beam_delta));
    }
    if (l < L) { cutoff[l] = cut; adaptive[l] = ad; }
    if (valid) {
        stats[l * NSTAT + S_MAXB] += maxb;
        stats[l * NSTAT + S_MINB] += minb;
        stats[l * NSTAT + S_NARROW] += ad < beam32;
    }
}

extern "C" __global__ void token_degree(int n, int f, const int* tok_lane, const int* tok_state,
                                        const double* tok_cost, const int* lane_end, const double* cutoff,
                                        const int* degree, i64* deg, u64* stats) {
    i64 i = thread_index();
    bool inside = i < n;
    int l = inside ? tok_lane[i] : 0;
    bool active = inside && lane_end[l] > f;
    bool expand = active && tok_cost[i] < cutoff[l];
    if (inside) deg[i] = expand ? degree[tok_state[i]] : 0;
    lane_count(stats, l, S_PRUNED, active && !expand);
}

// Arc slots past the capacity are dropped: count them per lane.
extern "C" __global__ void count_lost(int n, i64 slots, const int* tok_lane, const i64* deg, const i64* cum,
                                      u64* stats) {
    i64 i = thread_index();
    if (i >= n) return;
    i64 first = cum[i] - deg[i];
    i64 lost = cum[i] - (first > slots ? first : slots);
    if (lost > 0) atomicAdd(&stats[(i64)tok_lane[i] * NSTAT + S_OVER], (u64)lost);
}

// One thread per arc slot: its token by binary search over the inclusive prefix sums of the degrees.
extern "C" __global__ void expand_min(i64 slots, int n, int f, const i64* lane_row, int P, const int* tok_lane,
                                      const int* tok_state, const double* tok_cost, const i64* deg,
                                      const i64* cum, const i64* offsets, const double* weight,
                                      const int* column, const float* costs, u64* min_new, int* c_tok,
                                      u32* c_entry, double* c_cost) {
    i64 j = thread_index();
    if (j >= slots) return;
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

extern "C" __global__ void expand_recombine(i64 slots, int S, const int* tok_lane, const int* c_tok,
                                            const u32* c_entry, const double* c_cost, const u64* min_new,
                                            const double* adaptive, const int* dest, u64* dense_key,
                                            i64* c_index, u64* c_key, unsigned char* c_keep, u64* stats,
                                            int cap, int* hash_state) {
    i64 j = thread_index();
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

extern "C" __global__ void resolve_cost(i64 slots, const unsigned char* c_keep, const u64* c_key,
                                        const i64* c_index, const double* c_cost, const u64* dense_key,
                                        u64* dense_cost) {
    i64 j = thread_index();
    if (j >= slots || !c_keep[j]) return;
    i64 index = c_index[j];
    if ((c_key[j] >> 32) == (dense_key[index] >> 32)) atomicMin(&dense_cost[index], ord64(c_cost[j]));
}

extern "C" __global__ void resolve_index(i64 slots, const unsigned char* c_keep, const u64* c_key,
                                         const i64* c_index, const double* c_cost, const u32* c_entry,
                                         const u64* dense_key, const u64* dense_cost, u32* dense_entry) {
    i64 j = thread_index();
    if (j >= slots || !c_keep[j]) return;
    i64 index = c_index[j];
    if ((c_key[j] >> 32) == (dense_key[index] >> 32) && ord64(c_cost[j]) == dense_cost[index])
        atomicMin(&dense_entry[index], c_entry[j]);
}

extern "C" __global__ void mark(i64 slots, int with_lattice, double lattice_beam, const unsigned char* c_keep,
                                const u64* c_key, const i64* c_index, const double* c_cost, const u32* c_entry,
                                const i64* bare_arc, const u64* dense_key, const u64* dense_cost,
                                const u32* dense_entry, i64* win, i64* lat) {
    i64 j = thread_index();
    if (j >= slots) return;
    bool keep = c_keep[j];
    i64 index = c_index[j];
    bool tie = keep && (c_key[j] >> 32) == (dense_key[index] >> 32) && ord64(c_cost[j]) == dense_cost[index];
    win[j] = tie && c_entry[j] == dense_entry[index];
    lat[j] = with_lattice && keep && bare_arc[c_entry[j]] >= 0
             && c_cost[j] <= unord64(dense_cost[index]) + lattice_beam;
}

// Winners into the next token queue and the arena (prefix-sum positions), lattice records, dense reset.
extern "C" __global__ void emit_winners(i64 slots, int f, i64 room, i64 arena_base, i64 lattice_room,
                                        const i64* win, const i64* cum_win, const i64* lat, const i64* cum_lat,
                                        const int* c_tok, const u32* c_entry, const double* c_cost,
                                        const i64* c_index, const int* tok_lane, const int* tok_state,
                                        const i64* tok_id, const int* dest, const i64* code,
                                        const i64* bare_arc, int* out_lane,
                                        int* out_state, double* out_cost, i64* out_id, i64* arena_prev,
                                        i64* arena_code, i64* records, u64* dense_key, u64* dense_cost,
                                        u32* dense_entry, u64* stats, int cap, int* hash_state) {
    i64 j = thread_index();
    bool inside = j < slots;
    bool is_win = inside && win[j];
    bool is_lat = inside && lat[j];
    int t = inside ? c_tok[j] : 0;
    int l = inside ? tok_lane[t] : 0;
    bool lost_win = false, lost_lat = false;
    if (is_win) {
        i64 p = cum_win[j] - 1;
        u32 entry = c_entry[j];
        i64 index = c_index[j];
        dense_key[index] = ~0ULL;
        dense_cost[index] = ~0ULL;
        dense_entry[index] = ~0u;
        if (cap) hash_state[index] = -1;  // each claimed slot has one winner, which frees it
        if (p < room) {
            out_lane[p] = l;
            out_state[p] = dest[entry];
            out_cost[p] = c_cost[j];
            out_id[p] = arena_base + p;
            arena_prev[p] = tok_id[t];
            arena_code[p] = code[entry];
        } else {
            lost_win = true;
        }
    }
    if (is_lat) {
        i64 q = cum_lat[j] - 1;
        if (q < lattice_room) {
            records[4 * q] = l;
            records[4 * q + 1] = f;
            records[4 * q + 2] = tok_state[t];
            records[4 * q + 3] = bare_arc[c_entry[j]];
        } else {
            lost_lat = true;
        }
    }
    lane_count(stats, l, S_OVER, lost_win);
    lane_count(stats, l, S_OVER, lost_lat);
}

// Lanes released and placed between two frame steps, in one launch (twin.NumpyLaneKernels.refill). Thread t:
// moves the counts of released lane o_lane[t] to utterance o_utt[t] and zeroes the lane's; places utterance
// i_utt[t] on lane i_lane[t] from frame step `step` (end step, cost row offset); and writes token t of the new
// queue: the n old tokens copied, then the placed lanes' n_new frame-0 tokens (per_lane a lane, their costs
// init_cost by position, their lanes, states and arena ids uploaded).
extern "C" __global__ void refill_lanes(int n_out, const i64* o_lane, const i64* o_utt, u64* stats, u64* utt_stats,
                                        int n_in, const i64* i_lane, const i64* i_utt, const i64* i_end,
                                        const i64* i_row, int step, int* lane_end, int* lane_start, i64* lane_row,
                                        i64* lane_utt, int n, int n_new, const i64* t_lane, const i64* t_state,
                                        const i64* t_id, const double* init_cost, int per_lane,
                                        const int* old_lane, const int* old_state, const double* old_cost,
                                        const i64* old_id, int* tok_lane, int* tok_state, double* tok_cost,
                                        i64* tok_id) {
    i64 t = thread_index();
    if (t < n_out) {
        for (int c = 0; c < NSTAT; ++c) {
            utt_stats[o_utt[t] * NSTAT + c] = stats[o_lane[t] * NSTAT + c];
            stats[o_lane[t] * NSTAT + c] = 0ULL;
        }
    }
    if (t < n_in) {
        i64 l = i_lane[t];
        lane_end[l] = (int)i_end[t];
        lane_start[l] = step;
        lane_row[l] = i_row[t];
        lane_utt[l] = i_utt[t];
    }
    if (t < n) {
        tok_lane[t] = old_lane[t];
        tok_state[t] = old_state[t];
        tok_cost[t] = old_cost[t];
        tok_id[t] = old_id[t];
    } else if (t < (i64)n + n_new) {
        i64 j = t - n;
        tok_lane[t] = (int)t_lane[j];
        tok_state[t] = (int)t_state[j];
        tok_cost[t] = init_cost[j % per_lane];
        tok_id[t] = t_id[j];
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

#define LANE_PLACEMENT int f, int finals, int every, int slots, const int* lane_end, const int* lane_start, \
    const i64* lane_utt
#define TARGET(l) lane_target((l), f, finals, every, slots, lane_end, lane_start, lane_utt)

// Best token of the lanes with an output slot at this step (lane_target): lowest cost (+ final weight), then
// lowest state; three passes; written to out_id / out_state at the slot.
extern "C" __global__ void best_cost(int n, LANE_PLACEMENT, const int* tok_lane, const int* tok_state,
                                     const double* tok_cost, const double* final_w, u64* best) {
    i64 i = thread_index();
    if (i >= n || TARGET(tok_lane[i]) < 0) return;
    double c = tok_cost[i] + (finals ? final_w[tok_state[i]] : 0.0);
    if (isfinite(c)) atomicMin(&best[tok_lane[i]], ord64(c));
}

extern "C" __global__ void best_state(int n, LANE_PLACEMENT, const int* tok_lane, const int* tok_state,
                                      const double* tok_cost, const double* final_w, const u64* best, u64* low) {
    i64 i = thread_index();
    if (i >= n || TARGET(tok_lane[i]) < 0) return;
    double c = tok_cost[i] + (finals ? final_w[tok_state[i]] : 0.0);
    if (isfinite(c) && ord64(c) == best[tok_lane[i]]) atomicMin(&low[tok_lane[i]], (u64)tok_state[i]);
}

extern "C" __global__ void best_pick(int n, LANE_PLACEMENT, const int* tok_lane, const int* tok_state,
                                     const double* tok_cost, const double* final_w, const u64* best,
                                     const u64* low, const i64* tok_id, i64* out_id, i64* out_state) {
    i64 i = thread_index();
    if (i >= n) return;
    int l = tok_lane[i];
    i64 slot = TARGET(l);
    if (slot < 0) return;
    double c = tok_cost[i] + (finals ? final_w[tok_state[i]] : 0.0);
    if (isfinite(c) && ord64(c) == best[l] && (u64)tok_state[i] == low[l]) {
        out_id[slot] = tok_id[i];
        out_state[slot] = tok_state[i];
    }
}

// Epsilon lattice links among the tokens of one frame: token costs by state (a dense table, or with cap > 0 a
// hash table like the recombination's: tok_hash holds each slot's state, tok_slot each token's slot), per-token
// link counts, prefix sums (host), records, clear.
extern "C" __global__ void dense_tok_set(int n, int S, const int* tok_lane, const int* tok_state,
                                         const double* tok_cost, double* dense_tok, int clear, int cap,
                                         int* tok_hash, i64* tok_slot, u64* stats) {
    i64 i = thread_index();
    if (i >= n) return;
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

extern "C" __global__ void eps_link_count(int n, int S, double lattice_beam, const int* tok_lane,
                                          const int* tok_state, const double* tok_cost, const i64* eps_offsets,
                                          const int* eps_dest, const double* eps_weight, const double* dense_tok,
                                          i64* links, int cap, const int* tok_hash) {
    i64 i = thread_index();
    if (i >= n) return;
    i64 count = 0;
    for (i64 e = eps_offsets[tok_state[i]]; e < eps_offsets[tok_state[i] + 1]; ++e) {
        double held = held_cost(tok_lane[i], eps_dest[e], S, cap, tok_hash, dense_tok);  // +inf: no token
        count += isfinite(held) && __dadd_rn(tok_cost[i], eps_weight[e]) <= held + lattice_beam;
    }
    links[i] = count;
}

extern "C" __global__ void eps_link_write(int n, int S, int frame, double lattice_beam, i64 room,
                                          const int* tok_lane, const int* tok_state, const double* tok_cost,
                                          const i64* eps_offsets, const int* eps_dest, const double* eps_weight,
                                          const double* dense_tok, const i64* links, const i64* cum_links,
                                          i64* records, u64* stats, int cap, const int* tok_hash) {
    i64 i = thread_index();
    bool inside = i < n;
    i64 lost = 0;
    int l = inside ? tok_lane[i] : 0;
    if (inside) {
        i64 q = cum_links[i] - links[i];
        for (i64 e = eps_offsets[tok_state[i]]; e < eps_offsets[tok_state[i] + 1]; ++e) {
            double held = held_cost(l, eps_dest[e], S, cap, tok_hash, dense_tok);
            if (isfinite(held) && __dadd_rn(tok_cost[i], eps_weight[e]) <= held + lattice_beam) {
                if (q < room) {
                    records[4 * q] = l;
                    records[4 * q + 1] = frame;
                    records[4 * q + 2] = tok_state[i];
                    records[4 * q + 3] = -1 - e;
                } else {
                    ++lost;
                }
                ++q;
            }
        }
    }
    if (lost) atomicAdd(&stats[(i64)l * NSTAT + S_OVER], (u64)lost);
}
