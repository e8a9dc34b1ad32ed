"""`specbench bench decoder` on the SLURP TLG and the shipped acoustic model's scores of held-out-voice test
utterances (the evaluation's, or synthesized and scored here when it has not run): a few utterances through
Kaldi, the CPU decoder (with and without lattices) and the twin, in a subprocess (the benchmark pins its
process to one core and sets the thread variables to 1, which must not leak into the test session)."""

from __future__ import annotations

import json
import os
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
    assert (result["gpu"] == "unavailable") == ("note: the gpu backend is unavailable here (" in proc.stderr)
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


def test_a_bench_job_whose_backend_fails_ends_its_run_failed_with_what_was_measured(
        slurp_graph: GraphArtifacts, tmp_path: Path) -> None:
    """A real benchmark job in which one backend fails at run time (the compiled CPU decoder takes at most
    65,536 score columns; Kaldi's decodes a graph whose input labels go beyond): the run ends FAILED naming the
    backend, and what the others measured is logged first (`specbench bench` exits 1 on the same result)."""
    import kaldifst
    import numpy as np
    from mlflow.tracking import MlflowClient

    wide = tmp_path / "wide.fst"  # one word over frames of input label 70,000
    assert kaldifst.StdConstFst(kaldifst.compile("0 1 70000 1 0.5\n1 1 70000 0 0.5\n1 0\n",
                                                 keep_state_numbering=True)).write(str(wide))
    rng = np.random.default_rng(2)
    scores = tmp_path / "wide.npz"  # 70,000 columns; held-out-voice ids
    np.savez(scores, **{f"u{i}-flite-rms-{i}": np.log(rng.dirichlet(np.ones(70_000), size=30)).astype(np.float32)
                        for i in range(2)})
    job = tmp_path / "bench_fails.toml"
    job.write_text(f'kind = "bench_decoder"\nname = "bench_fails"\ngraph_job = "{ROOT / "jobs" / "graph_slurp.toml"}"\n'
                   f'graph = "{wide}"\nscores = "{scores}"\nframe_shift_ms = 40.0\nutterances = 2\n'
                   'backends = ["kaldi", "cpu"]\nratio_rounds = 0\nstream_utterances = 0\nstream_seconds = 0.0\n'
                   'graph_copies = []\n[tracking]\nexperiment = "bench_fails"\n')
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    env = dict(os.environ, SPECBENCH_HOME=str(tmp_path / "home"))
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.run([sys.executable, "-m", "specbench", "--tracking-uri", uri, "run", str(job)], cwd=ROOT,
                          capture_output=True, text=True, encoding="utf-8", timeout=600, env=env)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    err = proc.stderr
    assert ("these backends failed: cpu (ValueError: the compiled CPU backend takes at most 65,536 score columns"
            in err and "input labels go up to 70000" in err), err[-3000:]
    assert f"leave those backends out of `backends` in {job}" in err and "Traceback" not in err
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("bench_fails").experiment_id])
    assert run.info.status == "FAILED"
    assert "BackendsFailed" in run.data.tags["error"] and "these backends failed: cpu" in run.data.tags["error"]
    assert "FAILED: bench decoder: these backends failed: cpu" in run.data.tags["mlflow.note.content"]
    assert run.data.metrics["bench.decoder.kaldi_rtfx"] > 0  # what Kaldi measured is kept
    assert "bench.decoder.cpu_rtfx" not in run.data.metrics
    result = json.loads(Path(client.download_artifacts(run.info.run_id, "bench_decoder.json", str(tmp_path)))
                        .read_text())
    assert result["errors"] == ["cpu"] and result["backends"]["kaldi"] == {"status": "ok"}
    # the `bench decoder` verb on the same workload: exit 1, its own run of the `bench` experiment FAILED
    proc = subprocess.run([sys.executable, "-m", "specbench", "--tracking-uri", uri, "bench", "decoder", "--graph",
                           str(wide), "--scores", str(scores), "--frame-shift-ms", "40", "--utterances",
                           "2", "--backends", "kaldi,cpu", "--ratio-rounds", "0", "--stream-utterances", "0",
                           "--stream-seconds", "0", "--graph-copies", "1", "--output", str(tmp_path / "verb.json")],
                          cwd=ROOT, capture_output=True, text=True, encoding="utf-8", timeout=600, env=env)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "these backends failed: cpu" in proc.stderr and "leave those backends out of --backends" in proc.stderr
    (verb,) = client.search_runs([client.get_experiment_by_name("bench").experiment_id])
    assert verb.info.status == "FAILED" and "these backends failed: cpu" in verb.data.tags["error"]
    assert verb.data.metrics["bench.decoder.kaldi_rtfx"] > 0
