"""`specbench bench decoder` on the SLURP TLG and the shipped acoustic model's scores of held-out-voice test
utterances (the evaluation's, or synthesized and scored here when it has not run): a few utterances through
Kaldi, the CPU decoder (with and without lattices) and the twin, in a subprocess (the benchmark pins its
process to one core and sets the thread variables to 1, which must not leak into the test session)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specbench.acoustic.inference import scores_table
from specbench.data import scores as scores_io
from specbench.experiments.graph_recipe import GraphArtifacts

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_bench_decoder_cpu_backends(slurp_graph: GraphArtifacts, real_test_scores: list, tmp_path: Path) -> None:
    items = real_test_scores[:8]
    scores = tmp_path / "scores.parquet"
    scores_io.write_parquet(scores_table(items), scores)
    out = tmp_path / "decoder.json"
    proc = subprocess.run([sys.executable, "-m", "specbench", "bench", "decoder", "--graph", str(slurp_graph.tlg),
                           "--scores", str(scores), "--utterances", "8", "--no-mlflow", "--output", str(out),
                           "--backends", "kaldi,cpu,cpu_lattice,twin,gpu,cpu_partial_posteriors",
                           "--ratio-rounds", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    result = json.loads(out.read_text())
    assert proc.returncode == 0, (proc.stderr[-3000:], result.get("backends"))
    assert result["utterances"] == 8 and result["frame_shift_ms"] == 40.0
    assert result["audio_seconds"] == pytest.approx(result["frames"] * 0.04)
    for name in ("kaldi", "cpu", "cpu_lattice", "twin"):
        assert result["backends"][name] == {"status": "ok"}
        assert result[f"{name}_rtfx"] > 0
    use = result["twin_lane_use"]  # the 8 utterances as one batch: as many frame steps as the longest
    assert use["lane_frames"] == result["frames"] and 0.0 < use["occupancy"] <= 1.0
    refill = result["twin_lane_refill"]  # 8 utterances on 2 lanes, refilled and in batches of 2
    assert refill["max_lanes"] == 2 and refill["identical"]
    assert refill["refill"]["frame_steps"] <= refill["batches"]["frame_steps"]
    # what the GPU's frame loop launches and reads, counted by the twin: a read at most every 16 frame steps
    log = result["twin_kernel_log"]
    assert log["syncs_per_frame"] <= 1 / 16 and log["launches_per_frame"] >= 13 and log["arcs_per_second"] > 0
    assert result["gpu"] in ("available", "unavailable")
    assert result["decoder.cpu_kaldi_identical"] >= 0.75
    # Kaldi's fastest pass, the steadier reference: the timed pass and the alternating round's
    assert len(result["kaldi_round_seconds"]) == 1
    assert result["kaldi_best_seconds"] == min(result["kaldi_seconds"], *result["kaldi_round_seconds"])
    assert result["decoder.onebest_identical"] == 1.0  # the twin's (a GPU's where there is one) equal the CPU's
    assert result["decoder.lattice_density"] >= 1.0  # at least the best path's arc per frame
    assert result["decoder.max_active_bound_utterances"] + result["decoder.max_active_free_utterances"] == 8
    # what partial posteriors cost, side by side: every configuration timed, posteriors defined
    assert result["backends"]["cpu_partial_posteriors"] == {"status": "ok"}
    rounds = result["partial_posteriors_seconds_rounds"]
    assert set(rounds) == {"partials", "partials_lattice", "partial_lattices", "partial_posteriors"}
    assert result["decoder.partial_posterior_overhead_median"] > 1.0 and result["partial_posteriors_partials"] > 0
    assert result["partial_posteriors_undefined_share"] == 0.0
