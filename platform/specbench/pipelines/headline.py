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
    "speech.utterances": "utterances in a synthesized corpus",
    "am.best_devel_per": "greedy phone error rate of the acoustic model on devel (held-out voices)",
    "asr.wer": "word error rate on held-out-voice test speech (acoustic model + TLG, Kaldi FasterDecoder)",
    "asr.per_greedy": "greedy CTC phone error rate on the same utterances",
    "asr.real_recordings_wer": "word error rate on the six real recordings (mostly out-of-vocabulary book text)",
}
