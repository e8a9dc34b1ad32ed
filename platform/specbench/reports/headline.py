"""Headline scalars: the few metrics per job that `specbench runs` shows, the nightly compares and a suite's
parent run carries (so that two suites compare in one row each).

Each entry: metric name -> one-line definition (the README lists the same table). Which job kind logs which
of them, and which the nightly compares, is in the experiment registry (`experiments/registry.py`).
`BETTER` says which way each one improves, for `specbench compare`.
"""

from __future__ import annotations

HEADLINE_METRICS: dict[str, str] = {
    "graph.states": "states of the TLG decoding graph",
    "graph.arcs": "arcs of the TLG decoding graph",
    "graph.ppl_test": "trigram perplexity on SLURP test text (tokens and </s>, OOVs left out)",
    "graph.test_unseen_rate": "fraction of SLURP test tokens never seen in the LM's training text",
    "graph.build_seconds": "wall time of the graph build, in seconds",
    "speech.utterances": "utterances in a synthesized corpus",
    "am.best_devel_per": "greedy phone error rate of the acoustic model on devel (held-out voices)",
    "asr.wer": "word error rate on held-out-voice test speech (acoustic model + TLG, Kaldi FasterDecoder)",
    "asr.per_greedy": "greedy CTC phone error rate on the same utterances",
    "asr.real_recordings_wer": "word error rate on the six real recordings (mostly out-of-vocabulary book text)",
    "asr.real.wer": "word error rate on the recorded Asterisk prompts' test half: CMU Sphinx's en-us model, its HCLG, "
                    "our CPU decoder",
    "asr.real.oov_rate": "share of the Asterisk test half's reference words outside the HCLG's vocabulary (a floor "
                         "under every system's WER there)",
    "confidence.nce": "normalized cross entropy of the 1-best words' lattice posteriors (our CPU backend) on the "
                      "held-out-voice test set: above 0 is better than a constant confidence",
    "decoder.rtfx": "audio seconds decoded per second by the fastest GPU configuration (the CPU backend without "
                    "a GPU)",
    "decoder.speedup_vs_kaldi": "Kaldi FasterDecoder seconds on one core / fastest GPU configuration seconds, same "
                                "utterances, graph and beams, one run",
    "decoder.stream_speedup_vs_kaldi": "GPU frames per second in steady state (the fastest 1-best configuration's "
                                       "stream) / Kaldi FasterDecoder's frames per second on one core, one run",
    "decoder.stream_speedup_vs_kaldi_best_pass": "the same over Kaldi's fastest pass of the run (--ratio-rounds)",
    "decoder.gpu_lane_refill_speedup": "one GPU decoder's seconds in length-sorted batches / its seconds with lanes "
                                       "refilled as utterances end, side by side",
    "decoder.gpu_cuda_graphs_speedup_lanes_16": "one GPU decoder's seconds launching each frame step's kernels / "
                                                "replaying them as a CUDA graph, on 16 lanes, side by side",
    "decoder.gpu_cuda_graphs_speedup_lanes_256": "the same on 256 lanes",
    "decoder.cpu_vs_kaldi": "Kaldi FasterDecoder seconds / our CPU backend seconds, both on one core, one run",
    "decoder.cpu_vs_kaldi_median": "the same ratio as the median over rounds of the two decoders timed "
                                   "alternately (steadier on a busy machine)",
    "decoder.cpu_lattice_vs_kaldi_median": "Kaldi's 1-best seconds / our CPU backend's seconds with lattices "
                                           "(beam 8), median over the alternating rounds",
    "decoder.onebest_identical": "fraction of utterances whose GPU (without a GPU: twin) 1-best words equal the "
                                 "CPU backend's, total cost within 1e-3",
    "decoder.lattice_density": "lattice arcs per frame at lattice beam 8",
    "simul.bleu_full_pooled": "sacreBLEU of full-sentence beam search over the Multi30k test sets pooled "
                              "(De->En)",
    "simul.speculation_gain_bleu": "speculation-only gain: BLEU of speculative beam search minus the same wait-k "
                                   "model's tail-beam-only search, at the grid's k, over the test sets pooled",
    "lm.test_perplexity": "word LSTM perplexity on the SLURP test texts, one per text id (words and </s>)",
    "prefetch.success_at_fail10": "LM + personal predictions, confidence with the personal feature: successful "
                                  "prefetches over evaluated test requests at the threshold chosen on devel users "
                                  "for at most 10% failed",
    "prefetch.failed_at_fail10": "failed prefetches (a wrong prediction prefetched) over evaluated test requests, "
                                 "same configuration and threshold",
    "prefetch.gain_ms_all_at_fail10": "mean prediction gain (end of speech minus the partial's last frame, ms) "
                                      "over all evaluated test requests (0 without success), same threshold",
    "prefetch.oracle_rate": "test requests for which some prediction (LM or personal), at some partial, adds a "
                            "word and equals the final hypothesis",
    "prefetch.personalization_gain": "success_at_fail10 minus that of LM-only predictions with the "
                                     "confidence model without the personal feature",
    "prefetch.gain_over_personal_only": "success_at_fail10 minus that of personal-only predictions with the "
                                        "confidence model with the personal feature",
    "prefetch.cache_lm_gain": "success at 10% failed of LM + personal decided by the personal cache model "
                              "(weight chosen on devel) minus success_at_fail10",
    "prefetch.context_gain": "success at 10% failed of LM + personal decided by the confidence model with the "
                             "context features minus success_at_fail10",
    "prefetch.posterior_gain": "success at 10% failed of LM + personal decided by the confidence model with the "
                               "partial's lattice word posteriors minus success_at_fail10 (jobs with "
                               "confidence_posterior)",
    "prefetch.by_source_gain_over_personal_only": "success at 10% failed of LM + personal decided by the "
                                                  "confidence model with the personal feature at per-source "
                                                  "thresholds (the LM-only candidates' lower by an offset chosen "
                                                  "on devel) minus that of personal only",
}

# The headline metrics read off a clock. Even a ratio of two decoders timed side by side in one run depends on
# the machine (its cores, caches and GPU), so the nightly compares each only with a baseline measured on the
# same hardware (the runs' `hardware` tag) and `compare` warns when runs of different hardware show them.
TIMED_METRICS: frozenset[str] = frozenset({
    "graph.build_seconds", "decoder.rtfx", "decoder.speedup_vs_kaldi", "decoder.stream_speedup_vs_kaldi",
    "decoder.stream_speedup_vs_kaldi_best_pass", "decoder.gpu_lane_refill_speedup",
    "decoder.gpu_cuda_graphs_speedup_lanes_16", "decoder.gpu_cuda_graphs_speedup_lanes_256", "decoder.cpu_vs_kaldi",
    "decoder.cpu_vs_kaldi_median", "decoder.cpu_lattice_vs_kaldi_median",
})

_HIGHER_IS_BETTER = frozenset({
    "confidence.nce", "decoder.rtfx", "decoder.speedup_vs_kaldi", "decoder.stream_speedup_vs_kaldi",
    "decoder.stream_speedup_vs_kaldi_best_pass", "decoder.gpu_lane_refill_speedup",
    "decoder.gpu_cuda_graphs_speedup_lanes_16", "decoder.gpu_cuda_graphs_speedup_lanes_256", "decoder.cpu_vs_kaldi",
    "decoder.cpu_vs_kaldi_median", "decoder.cpu_lattice_vs_kaldi_median", "decoder.onebest_identical",
    "simul.bleu_full_pooled", "simul.speculation_gain_bleu", "prefetch.success_at_fail10",
    "prefetch.gain_ms_all_at_fail10", "prefetch.oracle_rate", "prefetch.personalization_gain",
    "prefetch.gain_over_personal_only", "prefetch.cache_lm_gain", "prefetch.context_gain", "prefetch.posterior_gain",
    "prefetch.by_source_gain_over_personal_only",
})
_LOWER_IS_BETTER = frozenset({
    "graph.ppl_test", "graph.test_unseen_rate", "graph.build_seconds", "am.best_devel_per", "asr.wer",
    "asr.per_greedy", "asr.real_recordings_wer", "asr.real.wer", "asr.real.oov_rate", "lm.test_perplexity",
    "prefetch.failed_at_fail10",
})
_NEITHER = frozenset({"graph.states", "graph.arcs", "speech.utterances", "decoder.lattice_density"})

BETTER: dict[str, str | None] = {
    name: "higher" if name in _HIGHER_IS_BETTER else "lower" if name in _LOWER_IS_BETTER else None
    for name in _HIGHER_IS_BETTER | _LOWER_IS_BETTER | _NEITHER
}
"""Which way each headline metric improves: "higher", "lower", or None for a size or a count that describes a
run rather than grades it (graph states, utterances, lattice density). Every headline metric is in exactly one
of the three sets (a test keeps it so): a new one must be placed by hand."""
