"""`specbench bench completion`: n-best completion (beam search to </s>) of many partial hypotheses batched
across prefixes, against the same search one prefix at a time, on the prefixes of SLURP test sentences.
Both run side by side in one process with the memo off; the batched results must equal the single ones."""

from __future__ import annotations

import platform as host_platform
import random
import time
from pathlib import Path
from typing import Any

import torch

from specbench.data.slurp import read_split
from specbench.data.text_norm import normalize
from specbench.prediction.completion import Completer
from specbench.prediction.lm import load_lm
from specbench.prediction.lm_stage import resolve_device
from specbench.prediction.settings import CompletionSettings


def bench_prefixes(count: int, seed: int = 0) -> list[list[str]]:
    """`count` prefixes (every length from empty to all but the last word) of SLURP test sentences, shuffled."""
    prefixes = []
    for u in read_split("test"):
        words = normalize(u.sentence).split()
        prefixes += [words[:i] for i in range(len(words))]
    random.Random(seed).shuffle(prefixes)
    return prefixes[:count]


def _timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def bench_completion(lm_path: Path, prefixes: int = 2000, single: int = 200, device: str = "auto",
                     settings: CompletionSettings = CompletionSettings()) -> dict[str, Any]:
    """Seconds per prefix batched and one at a time (same device), their ratio, and agreement."""
    device = resolve_device(device)
    work = bench_prefixes(prefixes)
    single = min(single, len(work))
    result: dict[str, Any] = {"bench": "completion", "device": device, "prefixes": len(work),
                              "single_prefixes": single, "n_best": settings.n_best, "beam": settings.beam,
                              "max_new_words": settings.max_new_words, "batch_size": settings.batch_size,
                              "threads": torch.get_num_threads(), "cpu": host_platform.processor() or "unknown"}
    if device == "cuda":
        result["gpu"] = torch.cuda.get_device_name(0)
    lm = load_lm(lm_path, device=device)
    batched, t_batched = _timed(lambda: Completer(lm, settings, device=device).complete(work))
    one = Completer(lm, settings, device=device)
    singles, t_single = _timed(lambda: [one.complete_one(p) for p in work[:single]])
    same = sum([c.words for c in a] == [c.words for c in b] for a, b in zip(batched, singles))
    result.update({"batched_seconds": t_batched, "single_seconds": t_single,
                   "batched_ms_per_prefix": 1000 * t_batched / len(work),
                   "single_ms_per_prefix": 1000 * t_single / single,
                   "speedup_batched_vs_single": (t_single / single) / (t_batched / len(work)),
                   "nbest_identical": same / single})
    if device == "cuda":
        cpu_lm = load_lm(lm_path, device="cpu")
        _, t_cpu = _timed(lambda: Completer(cpu_lm, settings, device="cpu").complete(work))
        result["cpu_batched_seconds"] = t_cpu
        result["speedup_gpu_vs_cpu_batched"] = t_cpu / t_batched
    return result
