"""`specbench bench simultrans`: speculative beam search speed on test_2016_flickr, measured side by side in
one run: the whole test set decoded batched (all sentences together, as one call), and the same first
`single` sentences decoded batched and one sentence at a time (the speedup of batching)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from specbench.benchmarks.harness import runner
from specbench.config import BenchSimultransConfig
from specbench.data.multi30k import read_pairs
from specbench.hardware import describe
from specbench.paths import from_root
from specbench.simultrans.checkpoint import load_mt
from specbench.simultrans.search import wait_k
from specbench.simultrans.tokenizer import EOS


def bench_simultrans(model_path: Path, bpe_path: Path, k: int = 3, beam: int = 5, window: int = 2,
                     sentences: int = 1000, single: int = 100, batch: int = 1000) -> dict[str, Any]:
    """SBS (beam, window) with the wait-k model at k over the first `sentences` of test_2016_flickr."""
    if sentences < 1 or single < 1:
        raise ValueError(f"sentences and single must be >= 1 (the batching speedup needs a sentence decoded "
                         f"both ways), got {sentences} and {single}")
    ckpt = load_mt(model_path, bpe_path)
    pairs = read_pairs("test_2016_flickr")[:sentences]
    sources = [ckpt.tokenizer.encode(s) + [EOS] for s, _ in pairs]
    sources = [s for s in sources if len(s) > 1]

    def run(items: list[list[int]], size: int) -> float:
        t0 = time.perf_counter()
        for i in range(0, len(items), size):
            wait_k(ckpt.model, items[i:i + size], k, "sbs", beam, window)
        return time.perf_counter() - t0

    run(sources[:8], 8)  # warm-up
    few = sources[:single]
    one_at_a_time, batched_few = run(few, 1), run(few, len(few))
    total = run(sources, batch)
    return {"bench": "simultrans", "hardware": describe(), "torch_threads": torch.get_num_threads(), "k": k,
            "beam": beam, "window": window, "sentences": len(sources), "batch_size": batch,
            "sbs_seconds": total, "sbs_sentences_per_second": len(sources) / total,
            "single_sentences": len(few), "one_at_a_time_seconds": one_at_a_time,
            "batched_seconds_same_sentences": batched_few,
            "simul.batched_speedup": one_at_a_time / batched_few,
            "target_seconds": 60.0, "meets_target": total <= 60.0}


def measure(config: BenchSimultransConfig, job_path: Path) -> dict[str, Any]:
    """The benchmark of a `bench_simultrans` config (see `benchmarks.harness`)."""
    return bench_simultrans(from_root(config.model), from_root(config.bpe), config.k, config.beam,
                            config.window, config.sentences, config.single)


def summary(result: dict[str, Any]) -> list[str]:
    return [f"simultrans benchmark: SBS on {result['sentences']} sentences in {result['sbs_seconds']:.1f} s, "
            f"batched {result['simul.batched_speedup']:.1f}x one sentence at a time"]


execute = runner(measure, summary)
