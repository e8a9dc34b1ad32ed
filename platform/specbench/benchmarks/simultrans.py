"""`specbench bench simultrans`: speculative beam search speed on test_2016_flickr, measured side by side in
one run: the whole test set decoded batched (all sentences together, as one call), and the same first
`single` sentences decoded batched and one sentence at a time (the speedup of batching). The three runs
alternate in `rounds` rounds, after a warm-up, so that a busy machine slows them alike: every round's seconds
are kept (`seconds_rounds`), the times are medians over rounds and the speedup the median of its per-round
ratios (`simul.batched_speedup_rounds`). One more, untimed pass of each way over the `single` sentences
profiles where the time goes (`profile_seconds`)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import torch

from specbench.benchmarks.harness import profiled, runner
from specbench.config import BenchSimultransConfig
from specbench.data.multi30k import read_pairs
from specbench.errors import DataError
from specbench.hardware import describe
from specbench.paths import from_root
from specbench.simultrans.checkpoint import load_mt
from specbench.simultrans.search import wait_k
from specbench.simultrans.tokenizer import EOS

# the model's methods the search calls, by the stage of `profile_seconds` they count towards
STAGES = {"encode": "encoder", "cross_kv": "encoder", "decoder_step": "decoder",
          "decoder_positions": "decoder"}


def bench_simultrans(model_path: Path, bpe_path: Path, k: int = 3, beam: int = 5, window: int = 2,
                     sentences: int = 1000, single: int = 100, batch: int = 1000,
                     rounds: int = 3) -> dict[str, Any]:
    """SBS (beam, window) with the wait-k model at k over the first `sentences` of test_2016_flickr."""
    if sentences < 1 or single < 1 or rounds < 1:
        raise DataError(f"--sentences, --single and --rounds must be >= 1 (the batching speedup needs a "
                        f"sentence decoded both ways), got {sentences}, {single} and {rounds}")
    ckpt = load_mt(model_path, bpe_path)
    pairs = read_pairs("test_2016_flickr")[:sentences]
    start = time.perf_counter()
    sources = [ckpt.tokenizer.encode(s) + [EOS] for s, _ in pairs]
    tokenization = time.perf_counter() - start
    sources = [s for s in sources if len(s) > 1]

    def decode(items: list[list[int]], size: int) -> None:
        for i in range(0, len(items), size):
            wait_k(ckpt.model, items[i:i + size], k, "sbs", beam, window)

    def run(items: list[list[int]], size: int) -> float:
        t0 = time.perf_counter()
        decode(items, size)
        return time.perf_counter() - t0

    run(sources[:8], 8)  # warm-up
    few = sources[:single]
    seconds: dict[str, list[float]] = {"one_at_a_time": [], "batched_same_sentences": [], "sbs": []}
    for _ in range(rounds):
        seconds["one_at_a_time"].append(run(few, 1))
        seconds["batched_same_sentences"].append(run(few, len(few)))
        seconds["sbs"].append(run(sources, batch))
    ratios = [o / b for o, b in zip(seconds["one_at_a_time"], seconds["batched_same_sentences"], strict=True)]
    profile = {"tokenization": tokenization,
               "one_at_a_time": profiled(ckpt.model, STAGES, lambda: decode(few, 1)),
               "batched_same_sentences": profiled(ckpt.model, STAGES, lambda: decode(few, len(few)))}
    median = statistics.median
    total = median(seconds["sbs"])
    return {"bench": "simultrans", "hardware": describe(), "torch_threads": torch.get_num_threads(), "k": k,
            "beam": beam, "window": window, "sentences": len(sources), "batch_size": batch, "rounds": rounds,
            "sbs_seconds": total, "sbs_sentences_per_second": len(sources) / total,
            "single_sentences": len(few), "one_at_a_time_seconds": median(seconds["one_at_a_time"]),
            "batched_seconds_same_sentences": median(seconds["batched_same_sentences"]),
            "simul.batched_speedup": median(ratios), "simul.batched_speedup_rounds": ratios,
            "seconds_rounds": seconds, "profile_seconds": profile,
            "target_seconds": 60.0, "meets_target": total <= 60.0}


def measure(config: BenchSimultransConfig, job_path: Path) -> dict[str, Any]:
    """The benchmark of a `bench_simultrans` config (see `benchmarks.harness`)."""
    return bench_simultrans(from_root(config.model), from_root(config.bpe), config.k, config.beam,
                            config.window, config.sentences, config.single, rounds=config.rounds)


def summary(result: dict[str, Any]) -> list[str]:
    return [f"simultrans benchmark: SBS on {result['sentences']} sentences in {result['sbs_seconds']:.1f} s, "
            f"batched {result['simul.batched_speedup']:.1f}x one sentence at a time (median of "
            f"{result['rounds']} rounds)"]


execute = runner(measure, summary)
