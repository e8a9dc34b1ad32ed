"""The data side of the simultrans job: one Multi30k split decoded with any `Method` through Ray tasks and
scored (`SplitEvaluator`), several splits scored as one pooled set (`PooledEvaluator`), and the
decomposition of speculative beam search's gain at one k into what speculation buys (SBS minus the same
model's tail-beam-only search), what the tail beam buys (tail minus greedy) and the total (SBS minus
greedy), each with its paired-bootstrap interval and the latency difference."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from specbench.config import SimultransConfig
from specbench.data.multi30k import read_pairs
from specbench.errors import DataError
from specbench.metrics.bleu_bootstrap import BleuGain, paired_bootstrap
from specbench.simultrans.experiment import Method, Shard, decode_shard, score
from specbench.simultrans.tokenizer import Tokenizer

# (name, better search, baseline search) at one k, for one model
COMPARISONS = (("speculation", "sbs", "tail"), ("sbs_vs_greedy", "sbs", "greedy"), ("tail_vs_greedy", "tail", "greedy"))
# the latency differences reported with each comparison (better minus baseline), in source words
LATENCY_DIFFERENCES = {"laal_increase": "laal_words", "al_ref_increase": "al_ref_words", "al_increase": "al_words"}


class ScoredSet:
    """Scores (memoized) and paired bootstraps over whatever `decoded` returns for a method."""

    split: str
    references: list[str]
    reference_tokens: list[int]

    def __init__(self) -> None:
        self.results: dict[Method, dict[str, float]] = {}  # keyed by the method (labels name only file stems)

    def decoded(self, method: Method) -> list[dict[str, Any]]:
        raise NotImplementedError

    def __call__(self, method: Method) -> dict[str, float]:
        if method not in self.results:
            self.results[method] = score(self.decoded(method), self.references, self.reference_tokens)
            print(f"{self.split} {method.label}: " + ", ".join(
                f"{k} {v:.3g}" for k, v in self.results[method].items()), file=sys.stderr, flush=True)
        return self.results[method]

    def hypotheses(self, method: Method) -> list[str]:
        return [r["hypothesis"] for r in self.decoded(method)]

    def gain(self, better: Method, baseline: Method, samples: int) -> BleuGain:
        """Paired bootstrap of BLEU(better) − BLEU(baseline) on this set's sentences."""
        return paired_bootstrap(self.hypotheses(better), self.hypotheses(baseline), self.references, samples=samples)

    def compare(self, better: Method, baseline: Method, samples: int) -> dict[str, float]:
        """The BLEU gain with its interval, and the latency differences (better minus baseline), paired: over
        the `latency_sentences` where both outputs have a word (a mean over each system's own would credit
        one that left its slow sentences empty)."""
        rows = self.decoded(better), self.decoded(baseline)
        both = [i for i, (x, y) in enumerate(zip(*rows, strict=True))
                if x["source_tokens"] and y["source_tokens"] and x["word_delays"] and y["word_delays"]]
        if len(both) == len(self.references):
            a, b = self(better), self(baseline)
        elif not both:  # no sentence to pair: no latency difference
            a = b = {metric: float("nan") for metric in LATENCY_DIFFERENCES.values()}
        else:
            a, b = (score([r[i] for i in both], [self.references[i] for i in both],
                          [self.reference_tokens[i] for i in both]) for r in rows)
        return {**asdict(self.gain(better, baseline, samples)), "latency_sentences": float(len(both)),
                **{name: a[metric] - b[metric] for name, metric in LATENCY_DIFFERENCES.items()}}

    def decomposition(self, methods: dict[str, Method], samples: int) -> dict[str, dict[str, float]]:
        """Every comparison of `COMPARISONS` between the searches of `methods` (greedy, tail, sbs)."""
        return {name: self.compare(methods[better], methods[baseline], samples)
                for name, better, baseline in COMPARISONS}


class SplitEvaluator(ScoredSet):
    """One split (its first `limit` sentences; 0: all), each method decoded once as Ray tasks over shards."""

    def __init__(self, config: SimultransConfig, split: str, limit: int, bpe: Path,
                 longest_source: int | None = None) -> None:
        """`longest_source`: the most source tokens (</s> counted) the models translate; a longer sentence is
        a DataError naming its line, before anything is decoded."""
        super().__init__()
        pairs = read_pairs(split, config.source, config.target)
        self.pairs = pairs[:limit] if limit else pairs
        self.split, self.bpe, self.shard_size = split, str(bpe), config.shard_size
        tok = Tokenizer(bpe)
        if longest_source is not None:
            for line, (source, _) in enumerate(self.pairs, 1):
                if len(tok.encode(source)) + 1 > longest_source:
                    raise DataError(f"{split} ({config.source}), line {line}: {len(tok.encode(source)) + 1} "
                                    f"source tokens (BPE pieces and </s>), more than the {longest_source} the "
                                    "translation models take (their positions must hold the source and the "
                                    "longest output). Fix: split that sentence in the data, or stop the set "
                                    "before it (val_sentences / test_sentences)")
        self.references = [t for _, t in self.pairs]
        self.reference_tokens = [len(tok.encode(t)) for t in self.references]
        self.rows: dict[Method, list[dict[str, Any]]] = {}

    def shards(self, method: Method) -> list[Shard]:
        sources = [s for s, _ in self.pairs]
        return [Shard(method, self.bpe, sources[i:i + self.shard_size])
                for i in range(0, len(sources), self.shard_size)]

    def decoded(self, method: Method) -> list[dict[str, Any]]:
        if method not in self.rows:
            decode_splits([self], method)
        return self.rows[method]


def decode_splits(splits: list[SplitEvaluator], method: Method) -> None:
    """Decode `method` on several splits as one set of Ray tasks (every core stays busy however small each
    split is); each split's shards are its own, so its rows are what decoding it alone gives."""
    from specbench.runtime import run_tasks

    shards = [split.shards(method) for split in splits]
    names = "+".join(split.split for split in splits)
    parts = run_tasks(decode_shard, [s for some in shards for s in some], progress=f"{names} {method.label}",
                      metrics=_translated)
    start = 0
    for split, some in zip(splits, shards, strict=True):
        split.rows[method] = [r for part in parts[start:start + len(some)] for r in part]
        start += len(some)


class PooledEvaluator(ScoredSet):
    """The sentences of several splits as one test set (corpus BLEU over all of them; latencies averaged
    over all sentences with an output, as `score` does for one split); decoding is the splits' own, so
    nothing is decoded twice."""

    def __init__(self, parts: list[SplitEvaluator], name: str = "pooled") -> None:
        super().__init__()
        self.parts, self.split = parts, name
        self.references = [r for p in parts for r in p.references]
        self.reference_tokens = [n for p in parts for n in p.reference_tokens]

    def decoded(self, method: Method) -> list[dict[str, Any]]:
        missing = [p for p in self.parts if method not in p.rows]
        if missing:
            decode_splits(missing, method)
        return [r for p in self.parts for r in p.decoded(method)]


def _translated(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The Prometheus numbers of one decoded shard."""
    return {"sentences_translated": float(len(rows))}
