"""Fixtures for integration tests: the full SLURP graph, built once per session (or reused from
`.specbench/graphs/` when its input hash matches)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.experiments.graph_recipe import GraphArtifacts, build_graph
from specbench.experiments.registry import load_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def slurp_graph() -> GraphArtifacts:
    """The graph of `jobs/graph_slurp.toml` (builds KenLM first on a fresh machine: about a minute)."""
    return build_graph(load_config(ROOT / "jobs" / "graph_slurp.toml"))


SHIPPED_MODEL = ROOT / "models" / "am_slurp.pt"


@pytest.fixture(scope="session")
def real_test_scores(slurp_graph: GraphArtifacts) -> list:
    """Acoustic scores of the shipped model for 200 held-out-voice SLURP test utterances, as
    [(utt_id, (T, 40) float32)] sorted by id: the evaluation's own scores when `specbench run
    jobs/am_eval.toml` has written them, else a 200-sentence test corpus synthesized and scored here."""
    from specbench.data.scores import read_parquet_scores

    existing = ROOT / ".specbench" / "scores" / "am_slurp" / "test.parquet"
    if existing.is_file():
        return sorted(read_parquet_scores(existing).items())[:200]
    if not SHIPPED_MODEL.is_file():
        pytest.skip(f"no acoustic model at {SHIPPED_MODEL}")
    import pyarrow as pa

    from specbench.acoustic.inference import AcousticScorer
    from specbench.config import CorpusSection, SpeechConfig
    from specbench.data.scores import iter_matrices
    from specbench.experiments.speech import build_corpus
    from specbench.runtime import run_local
    from specbench.wfst.lexicon import PHONES

    config = SpeechConfig(name="parity", align_checkpoint=Path("none"),
                          corpus=CorpusSection(train_sentences=8, train_copies=1, devel_sentences=8,
                                               test_sentences=200))
    corpus = build_corpus(config)
    rows = corpus.rows("test")
    table = pa.table({"utt_id": [r["utt_id"] for r in rows], "audio_path": [r["audio_path"] for r in rows]})
    scores = run_local(AcousticScorer(SHIPPED_MODEL, corpus.root, expected_phones=PHONES), table, batch_size=32)
    return sorted(iter_matrices(scores))[:200]
