"""The token set of the GPU decoder's arc-rate ceiling (`decoder/gpu/ceiling.py`) and its run: the tokens
our compiled CPU backend holds halfway through each of the workload's first utterances (as many as the GPU
decoder's lanes), each utterance a lane, with that lane's next frame of acoustic costs. The same graph and
the tokens a real frame of the lane decoder expands, so the ceiling is the rate of this work on this GPU."""

from __future__ import annotations

import numpy as np

from specbench.benchmarks.decoder.backends import one_best
from specbench.benchmarks.decoder.workloads import Workload
from specbench.decoder.backends import make_decoder
from specbench.decoder.lane_tables import LaneGraph
from specbench.decoder.options import SearchOptions

CEILING_LANES = 256  # GpuDecoder's default max_lanes


def ceiling_token_set(workload: Workload, options: SearchOptions,
                      lanes: int = CEILING_LANES) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(tok_lane int32, tok_state int32, tok_cost float64, ac (lanes, P) float32): per utterance of the
    first `lanes` with at least two frames, the CPU backend's tokens after the first half of its frames
    and the acoustic costs (-acoustic_scale x loglikes) of the next frame."""
    try:
        decoder = make_decoder("cpu", workload.graph, one_best(options))
    except ImportError:  # no numba: the numpy backend holds the same tokens
        decoder = make_decoder("cpu_numpy", workload.graph, one_best(options))
    chosen = [(u, m) for u, m in workload.items if m.shape[0] >= 2][:lanes]
    if not chosen:
        raise ValueError("the arc-rate ceiling needs an utterance of at least two frames")
    width = max(m.shape[1] for _, m in chosen)
    ac = np.zeros((len(chosen), width), dtype=np.float32)
    parts = []
    for lane, (utt_id, loglikes) in enumerate(chosen):
        half = loglikes.shape[0] // 2
        decoder.init(utt_id)
        decoder.advance(loglikes[:half])
        states, costs = decoder.active_tokens()
        parts.append((np.full(states.shape[0], lane, dtype=np.int32), states.astype(np.int32), costs))
        ac[lane, :loglikes.shape[1]] = loglikes[half] * np.float32(-options.acoustic_scale)
    tok_lane, tok_state, tok_cost = (np.concatenate(column) for column in zip(*parts))
    return tok_lane, tok_state, tok_cost.astype(np.float64), ac


def gpu_arc_ceiling(workload: Workload, options: SearchOptions) -> dict:
    """`arc_rate_ceiling` on this GPU over `ceiling_token_set`."""
    from specbench.decoder.gpu.ceiling import arc_rate_ceiling

    csr = getattr(workload.graph, "csr", workload.graph)
    return arc_rate_ceiling(LaneGraph.build(csr), *ceiling_token_set(workload, options))
