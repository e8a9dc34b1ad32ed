// The arc-rate ceiling of the GPU decoder's expansion (decoder/gpu/ceiling.py): one arc-parallel pass over
// the closed arcs of a token set, each candidate's cost packed with its arc entry into a uint64 and
// atomicMin'ed into a dense per-lane state table, as the decoder's expansion and recombination do, with
// nothing else: no cutoffs, no tie passes, no compaction, one launch.
// float_keys.cuh comes first (gpu/sources.py): u64, u32, i64, to_f32, to_f64, ord32.

// Grid-stride over arc slots j < arcs: the token by binary search in the inclusive prefix sums `cum` of the
// tokens' out-degrees, the arc entry as an offset into its state's closed arcs; ac is (lanes, P) float32.
extern "C" __global__ void ceiling_expand(i64 arcs, int n, int S, int P, const int* tok_lane, const int* tok_state,
                                          const double* tok_cost, const i64* cum, const i64* offsets,
                                          const double* weight, const int* column, const int* dest,
                                          const float* ac, u64* dense_key) {
    for (i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x; j < arcs; j += (i64)gridDim.x * blockDim.x) {
        int lo = 0, hi = n - 1;
        while (lo < hi) {
            int mid = (lo + hi) >> 1;
            if (cum[mid] > j) hi = mid; else lo = mid + 1;
        }
        i64 entry = offsets[tok_state[lo]] + (j - (lo ? cum[lo - 1] : 0));
        int lane = tok_lane[lo];
        double cost = tok_cost[lo] + weight[entry] + to_f64(ac[(i64)lane * P + column[entry]]);
        float cost32 = to_f32(cost);
        atomicMin(&dense_key[(i64)lane * S + dest[entry]], ((u64)ord32(cost32) << 32) | (u64)entry);
    }
}
