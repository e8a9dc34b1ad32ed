"""Fixtures for integration tests: the full SLURP graph, built once per session (or reused from
`.specbench/graphs/` when its input hash matches)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.config import load_config
from specbench.wfst.build import GraphArtifacts, build_graph

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def slurp_graph() -> GraphArtifacts:
    """The graph of `jobs/graph_slurp.toml` (builds KenLM first on a fresh machine: about a minute)."""
    return build_graph(load_config(ROOT / "jobs" / "graph_slurp.toml"))
