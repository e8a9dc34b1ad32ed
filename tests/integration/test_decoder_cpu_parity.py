"""The GPU algorithm's numpy twin and the compiled CPU backend against the numpy CPU backend on the SLURP TLG
with real acoustic scores (200 held-out-voice test utterances): identical 1-best, costs, word end frames,
search counters and partial hypotheses, with and without max-active binding, and identical lattices. This
is the check of the GPU algorithm and of the compiled loop that runs on every commit; tests/gpu compares
the GPU itself with the CPU backend on the H200."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

from specbench.decoder.cpu import CpuDecoder
from specbench.decoder.cpu_compiled import CompiledCpuDecoder
from specbench.decoder.lane_tables import HASH_TABLE_SLOTS
from specbench.decoder.options import SearchOptions
from specbench.decoder.twin import TwinDecoder
from specbench.decoder.word_confidence import word_posteriors
from specbench.experiments.graph_recipe import GraphArtifacts
from specbench.wfst.graph import read_graph

pytestmark = pytest.mark.integration
LATTICE_FIELDS = ("node_frame", "node_state", "src", "dst", "ilabel", "olabel", "graph_cost", "acoustic_cost",
                  "final_cost")


def _twin(graph, options: SearchOptions, items: list, partial_every: int | None) -> list:  # noqa: ANN001
    """The twin's results, after checking that its hash-table recombination gives every field the same."""
    dense = TwinDecoder(graph, options, max_lanes=64).decode_batch(items, partial_every=partial_every)
    hashed = TwinDecoder(graph, options, max_lanes=64, table_slots=HASH_TABLE_SLOTS)
    for got, want in zip(hashed.decode_batch(items, partial_every=partial_every), dense, strict=True):
        assert replace(got, lattice=None) == replace(want, lattice=None), want.utt_id
        for name in LATTICE_FIELDS if want.lattice is not None else ():
            assert np.array_equal(getattr(got.lattice, name), getattr(want.lattice, name)), (want.utt_id, name)
    return dense


def _compiled(graph, options: SearchOptions, items: list, partial_every: int | None) -> list:  # noqa: ANN001
    decoder = CompiledCpuDecoder(graph, options)
    return [decoder.decode(loglikes, utt, partial_every=partial_every) for utt, loglikes in items]


BACKENDS: dict[str, Callable] = {"twin": _twin, "compiled": _compiled}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("max_active", [10000, 200])
def test_equals_numpy_cpu_on_real_scores(slurp_graph: GraphArtifacts, real_test_scores: list, max_active: int,
                                         backend: str) -> None:
    graph = read_graph(slurp_graph.tlg)
    options = SearchOptions(beam=15.0, max_active=max_active, min_active=20)
    results = BACKENDS[backend](graph, options, real_test_scores, 3)
    cpu = CpuDecoder(graph, options)
    bound = 0
    for (utt, loglikes), got in zip(real_test_scores, results, strict=True):
        want = cpu.decode(loglikes, utt, partial_every=3)
        assert (got.status, got.word_ids, got.word_end_frames) == (want.status, want.word_ids,
                                                                    want.word_end_frames), utt
        assert (got.graph_cost, got.acoustic_cost) == (want.graph_cost, want.acoustic_cost), utt
        assert got.stats == want.stats and got.partials == want.partials, utt
        bound += want.stats.max_active_binds > 0
    assert len(real_test_scores) >= 200
    if max_active == 200:
        assert bound > 0  # the exact max-active cutoff is exercised


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_lattices_equal_numpy_cpu_on_real_scores(slurp_graph: GraphArtifacts, real_test_scores: list,
                                                 backend: str) -> None:
    graph = read_graph(slurp_graph.tlg)
    items = real_test_scores[:30]
    options = SearchOptions(beam=15.0, max_active=10000, lattice_beam=8.0)
    results = BACKENDS[backend](graph, options, items, None)
    cpu = CpuDecoder(graph, options)
    compared = 0
    for (utt, loglikes), got in zip(items, results, strict=True):
        want = cpu.decode(loglikes, utt)
        assert got.status == want.status, utt
        if not want.ok:
            continue
        compared += 1
        for name in LATTICE_FIELDS:
            assert np.array_equal(getattr(got.lattice, name), getattr(want.lattice, name)), (utt, name)
        _, graph_cost, acoustic_cost = want.lattice.best_path()
        assert graph_cost + acoustic_cost == pytest.approx(want.total_cost, abs=1e-3)
        assert want.lattice.oracle_errors(want.word_ids) == 0
    assert compared >= 25, compared  # real test utterances nearly all reach a final state


def test_partial_lattices_on_real_scores(slurp_graph: GraphArtifacts, real_test_scores: list) -> None:
    """Partial lattices on real scores: each equals the lattice of decoding its frames alone with every state
    final at cost 0, and its best path carries the partial hypothesis's words with posteriors in [0, 1]."""
    graph = read_graph(slurp_graph.tlg)
    plain = SearchOptions(beam=15.0, max_active=10000, acoustic_scale=1.2, lattice_beam=8.0)
    decoder = CompiledCpuDecoder(graph, replace(plain, partial_lattices=True))
    prefix_decoder = CompiledCpuDecoder(replace(graph, final=np.zeros(graph.num_states, np.float32)), plain)
    checked = 0
    for utt, loglikes in real_test_scores[:6]:
        for partial in decoder.decode(loglikes, utt, partial_every=3).partials[::4]:
            prefix = prefix_decoder.decode(loglikes[:partial.frame + 1], utt).lattice
            for name in LATTICE_FIELDS:
                assert np.array_equal(getattr(partial.lattice, name), getattr(prefix, name)), (utt, name)
            post = word_posteriors(partial.lattice, 0.5)
            assert post.ok and post.word_ids[:len(partial.word_ids)] == partial.word_ids, utt
            assert all(0.0 <= p <= 1.0 + 1e-9 for p in post.posteriors)
            checked += 1
    assert checked >= 20


def test_decoder_stage_gives_each_partial_its_words_posteriors(ray_cluster: object, slurp_graph: GraphArtifacts,
                                                                real_test_scores: list) -> None:
    """`DecoderStage(partial_posterior_scale=...)` (the predictive-ASR job's partial posteriors): each
    partial's posteriors are those of its words in the lattice of decoding its frames alone with every state
    final at cost 0, computed independently here; the same rows through Ray actors; refused by the twin."""
    from specbench.decoder.stage import DecoderStage
    from specbench.runtime import run_local, run_ray

    items = real_test_scores[:4]
    table = pa.table({"utt_id": [u for u, _ in items], "num_frames": [len(m) for _, m in items],
                      "num_classes": [m.shape[1] for _, m in items], "loglikes": [m.reshape(-1) for _, m in items],
                      "frame_shift_ms": [40.0] * len(items)})
    stage = DecoderStage(slurp_graph.tlg, "cpu", beam=15.0, max_active=10000, lattice_beam=8.0,
                         partial_every_ms=120.0, partial_posterior_scale=0.5)
    rows = run_local(stage, table, batch_size=2)
    assert rows.equals(run_ray(stage, table, batch_size=2, mode="actors", num_actors=2))
    graph = read_graph(slurp_graph.tlg)
    prefix_decoder = CompiledCpuDecoder(replace(graph, final=np.zeros(graph.num_states, np.float32)),
                                        SearchOptions(beam=15.0, max_active=10000, lattice_beam=8.0))
    checked = 0
    for (utt, loglikes), row in zip(items, rows.to_pylist(), strict=True):
        assert row["status"] == "ok" and row["partials"]
        for partial in row["partials"]:
            assert partial["time_ms"] == pytest.approx(40.0 * (partial["frame"] + 1))
            want = word_posteriors(prefix_decoder.decode(loglikes[:partial["frame"] + 1], utt).lattice, 0.5)
            assert want.ok and want.word_ids[:len(partial["word_ids"])] == tuple(partial["word_ids"])
            np.testing.assert_allclose(partial["posteriors"], want.posteriors[:len(partial["word_ids"])],
                                       rtol=0, atol=1e-6)
            checked += len(partial["word_ids"])
    assert checked >= 20
    plain = run_local(DecoderStage(slurp_graph.tlg, "cpu", partial_every_ms=120.0), table, batch_size=2)
    assert all(p["posteriors"] is None for r in plain.to_pylist() for p in r["partials"])
    assert plain.column("word_ids").equals(rows.column("word_ids"))  # lattices do not change the 1-best
    with pytest.raises(ValueError, match="partial lattices"):
        DecoderStage(slurp_graph.tlg, "twin", lattice_beam=8.0, partial_every_ms=120.0, partial_posterior_scale=0.5)
