"""The GPU decoder's arc-rate ceiling: how many candidate arcs a second this GPU expands and recombines when
that is all it does (`kernels/ceiling.cu`: one grid-stride launch over a token set's closed arcs, packed-key
`atomicMin` into a dense per-lane state table). The decoder benchmark divides the decoder's own rate (its
candidate arcs over its time) by this figure: the fraction of the hardware's arc rate the decoder reaches."""

from __future__ import annotations

import statistics

import numpy as np

from specbench.decoder.gpu.backend import BLOCK, _cupy
from specbench.decoder.gpu.nvrtc import thread_locale_kept
from specbench.decoder.gpu.sources import CEILING, kernel_source
from specbench.decoder.lane_tables import LaneGraph


def arc_rate_ceiling(lg: LaneGraph, tok_lane: np.ndarray, tok_state: np.ndarray, tok_cost: np.ndarray,
                     ac: np.ndarray, repeats: int = 20, return_table: bool = False):
    """Candidate arcs per second of `ceiling_expand` over the closed arcs of a token set: tokens (lane, state,
    cost) with `ac` (lanes, P) float32 acoustic costs of each lane's next frame. The median of `repeats`
    launches timed by CUDA events after one warm-up (the table's reset between launches not timed). With
    `return_table`, also the dense (lanes x states) uint64 key table the last launch left (for its check)."""
    cp = _cupy()
    if tok_state.shape[0] == 0:
        raise ValueError("arc_rate_ceiling needs at least one token")
    cum = np.cumsum(lg.degree[tok_state].astype(np.int64))
    arcs, lanes, width = int(cum[-1]), int(ac.shape[0]), int(ac.shape[1])
    with thread_locale_kept():  # compiled by NVRTC here (unless cupy's cache has it)
        fn = cp.RawModule(code=kernel_source(CEILING), options=("--std=c++14",)).get_function(
            "ceiling_expand")
    args = [np.int64(arcs), np.int32(tok_state.shape[0]), np.int32(lg.num_states), np.int32(width)]
    args += [cp.asarray(np.ascontiguousarray(a, dtype=t)) for a, t in (
        (tok_lane, np.int32), (tok_state, np.int32), (tok_cost, np.float64), (cum, np.int64),
        (lg.offsets, np.int64), (lg.weight, np.float64), (lg.column, np.int32), (lg.dest, np.int32),
        (ac, np.float32))]
    dense = cp.empty(lanes * lg.num_states, cp.uint64)
    grid = (cp.cuda.Device().attributes["MultiProcessorCount"] * 32,)  # enough blocks to fill the GPU
    times = []
    for r in range(repeats + 1):
        dense.fill(np.uint64(2**64 - 1))
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn(grid, (BLOCK,), (*args, dense))
        end.record()
        end.synchronize()
        if r:
            times.append(cp.cuda.get_elapsed_time(start, end))
    ms = statistics.median(times)
    report = {"tokens": int(tok_state.shape[0]), "lanes": lanes, "arcs": arcs, "repeats": repeats,
              "ms_median": ms, "ms_min": min(times), "arcs_per_second": arcs / (ms / 1000.0)}
    return (report, dense.get()) if return_table else report
