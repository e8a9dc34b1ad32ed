"""Headline scalars: the few metrics per job that `specbench runs` shows and the nightly compares.

Each entry: metric name -> one-line definition (the README lists the same table).
"""

from __future__ import annotations

HEADLINE_METRICS: dict[str, str] = {
    "graph.states": "states of the TLG decoding graph",
    "graph.arcs": "arcs of the TLG decoding graph",
    "graph.ppl_test": "trigram perplexity on SLURP test text (tokens and </s>)",
    "graph.test_unseen_rate": "fraction of SLURP test tokens never seen in the LM's training text",
    "graph.build_seconds": "wall time of the graph build",
}
