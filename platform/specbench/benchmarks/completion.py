"""`specbench bench completion`: n-best completion (beam search to </s>) of many partial hypotheses batched
across prefixes, against the same search one prefix at a time, on the prefixes of SLURP test sentences.

One prefix at a time is measured two ways: the reference search (`Completer.complete_one`, token by token)
and the batched search with a batch of one; the headline speedup is against the faster of the two. All run
side by side in one process with the memo off, alternating in rounds (the median of the per-round ratios is
reported), and the batched n-best must equal the reference's. One more, untimed pass of the batched search and
of the reference over the same `single` prefixes splits their time into the LM's prefix encoding, its steps
and the search's own bookkeeping (`profile_seconds`)."""

from __future__ import annotations

import dataclasses
import random
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from specbench.benchmarks.harness import profiled, runner
from specbench.config import BenchCompletionConfig
from specbench.data.slurp import read_split
from specbench.data.text_norm import normalize
from specbench.errors import DataError
from specbench.hardware import cpu_model
from specbench.paths import from_root
from specbench.prediction.completion import Completer
from specbench.prediction.lm import load_lm, resolve_device
from specbench.prediction.lm_stage import choose_device
from specbench.prediction.settings import CompletionSettings

# the LM's methods the searches call, by the stage of `profile_seconds` they count towards
LM_STAGES = {"last_log_probs": "lm_prefix_encoding", "step": "lm_step"}


def bench_prefixes(count: int, seed: int = 0) -> list[list[str]]:
    """`count` distinct prefixes (every length from empty to all but the last word) of SLURP test sentences,
    shuffled: distinct, so the batched search (which completes a repeated prefix once) does no less work."""
    prefixes: dict[tuple[str, ...], None] = {}
    for u in read_split("test"):
        words = normalize(u.sentence).split()
        prefixes |= dict.fromkeys(tuple(words[:i]) for i in range(len(words)))
    out = [list(p) for p in prefixes]
    random.Random(seed).shuffle(out)
    return out[:count]


def _timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def bench_completion(lm_path: Path, prefixes: int = 2000, single: int = 200, device: str = "auto",
                     settings: CompletionSettings | None = None, rounds: int = 3) -> dict[str, Any]:
    """Seconds per prefix batched and one at a time (same device), their ratio, and agreement. The searches
    (and, on a GPU, the same batched search on the CPU) run one after the other in each of `rounds` rounds,
    after a warm-up of each, so that a busy machine slows them alike: every round's seconds are kept
    (`seconds_rounds`), the times are the medians over rounds and each speedup the median of its per-round
    ratios (`*_rounds`)."""
    settings = settings or CompletionSettings()
    if prefixes < 1 or single < 1 or rounds < 1:
        raise DataError(f"--prefixes, --single and --rounds must be >= 1, got {prefixes}, {single} and "
                        f"{rounds}")
    device = choose_device(device)
    resolve_device(device)  # a ConfigError, before any work, for cuda on a machine without a usable GPU
    work = bench_prefixes(prefixes)
    single = min(single, len(work))
    result: dict[str, Any] = {"bench": "completion", "device": device, "prefixes": len(work),
                              "single_prefixes": single, "n_best": settings.n_best, "beam": settings.beam,
                              "max_new_words": settings.max_new_words, "batch_size": settings.batch_size,
                              "threads": torch.get_num_threads(), "cpu": cpu_model(), "rounds": rounds}
    if device == "cuda":
        result["gpu"] = torch.cuda.get_device_name(0)
    lms = {device: load_lm(lm_path, device=device)}
    if device == "cuda":
        lms["cpu"] = load_lm(lm_path, device="cpu")
    for on, lm in lms.items():  # first calls pay for allocation and kernel selection
        warm = Completer(lm, settings, device=on)
        warm.complete(work[:settings.batch_size])
        warm.complete_one(work[0])
    lm = lms[device]
    seconds: dict[str, list[float]] = {"batched": [], "reference": [], "batch1": []}
    for _ in range(rounds):  # a fresh Completer per search: its memo starts empty
        batched, took = _timed(lambda: Completer(lm, settings, device=device).complete(work))
        seconds["batched"].append(took)
        one = Completer(lm, settings, device=device)
        singles, took = _timed(lambda o=one: [o.complete_one(p) for p in work[:single]])
        seconds["reference"].append(took)
        unbatched = Completer(lm, dataclasses.replace(settings, batch_size=1), device=device)
        seconds["batch1"].append(_timed(lambda u=unbatched: u.complete(work[:single]))[1])
        if device == "cuda":
            seconds.setdefault("cpu_batched", []).append(
                _timed(lambda: Completer(lms["cpu"], settings, device="cpu").complete(work))[1])
    same = sum([c.words for c in a] == [c.words for c in b] for a, b in zip(batched, singles, strict=False))
    per_prefix = [t / len(work) for t in seconds["batched"]]
    ratios = {f"speedup_vs_{name}": [t / single / b for t, b in zip(seconds[name], per_prefix, strict=True)]
              for name in ("reference", "batch1")}
    # the headline ratio is against the faster of the two one-prefix-at-a-time searches, round by round
    ratios["speedup_batched_vs_single"] = [min(r, b) for r, b in zip(*ratios.values(), strict=True)]
    if "cpu_batched" in seconds:
        ratios["speedup_gpu_vs_cpu_batched"] = [
            c / b for c, b in zip(seconds["cpu_batched"], seconds["batched"], strict=True)]
    median = statistics.median
    result.update({"batched_seconds": median(seconds["batched"]),
                   "batched_ms_per_prefix": 1000 * median(per_prefix),
                   "reference_ms_per_prefix": 1000 * median(seconds["reference"]) / single,
                   "batch1_ms_per_prefix": 1000 * median(seconds["batch1"]) / single,
                   "nbest_identical": same / single, "seconds_rounds": seconds})
    if "cpu_batched" in seconds:
        result["cpu_batched_seconds"] = median(seconds["cpu_batched"])
    sync = torch.cuda.synchronize if device == "cuda" else None  # one more, untimed pass of each way
    result["profile_seconds"] = {
        "batched_same_prefixes": profiled(lm.model, LM_STAGES, lambda: Completer(lm, settings, device=device).complete(
            work[:single]), sync),
        "one_at_a_time": profiled(lm.model, LM_STAGES, lambda o=Completer(lm, settings, device=device): [
            o.complete_one(p) for p in work[:single]], sync)}
    for name, values in ratios.items():
        result[name] = median(values)
        result[f"{name}_rounds"] = values
    return result


def measure(config: BenchCompletionConfig, job_path: Path) -> dict[str, Any]:
    """The benchmark of a `bench_completion` config (see `benchmarks.harness`)."""
    return bench_completion(from_root(config.lm), config.prefixes, config.single, config.device,
                            rounds=config.rounds)


def summary(result: dict[str, Any]) -> list[str]:
    return [f"completion benchmark on {result['prefixes']} prefixes ({result['device']}): batched "
            f"{result['speedup_batched_vs_single']:.1f}x one prefix at a time, n-best identical "
            f"{result['nbest_identical']:.3f}"]


execute = runner(measure, summary)
