"""N-best completion of partial ASR hypotheses with the word LSTM LM, batched across many prefixes.

Search definition (shared by `Completer.complete` and its single-prefix reference `Completer.complete_one`):

- The prefix words are encoded with the LM's vocabulary (out-of-vocabulary words become `<unk>`) after `<s>`;
  an empty prefix is allowed and means predicting from `<s>` alone.
- Beam search over continuations, scored by the natural-log probability under the LM. At step t (t = 0, 1, ..)
  every live hypothesis (t words after the prefix; at t = 0 the prefix alone) is extended by every token
  except `<pad>`, `<s>` and `<unk>`. Its extension by `</s>` becomes a finished hypothesis; of the extensions
  by words, the `beam` best over all live hypotheses of the prefix continue.
- The search of a prefix stops as soon as `n_best` finished hypotheses exist whose worst log-prob is >= the
  best live one (log-probs only fall, so no live hypothesis can beat them), or at step t = `max_new_words`,
  where the live hypotheses are extended by `</s>` only (a forced end: every continuation has at most
  `max_new_words` words, and at least one finished hypothesis always exists).
- The result is the `n_best` best finished hypotheses (fewer if fewer finished), sorted by log-prob
  descending, ties by their words; `Completion.words` excludes `</s>`, `Completion.log_prob` is
  log P(words, `</s>` | `<s>`, prefix). The caller forms the full prediction as `prefix + words`, with the
  prefix words verbatim (even when out of vocabulary).

The batched search encodes all prefixes of a batch with one packed LSTM pass, then searches the
(prefixes x beam) rows together with `torch.topk`, dropping a prefix's rows once its search has stopped.
Scores are float32 sums of float32 log-probs, so the two implementations agree to about 1e-5.
`CompletionSettings` (n_best, beam, max_new_words, batch_size) is defined in `specbench.prediction.settings`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specbench.errors import DataError
from specbench.prediction.lm import LoadedLm, resolve_device
from specbench.prediction.lm_training import collate
from specbench.prediction.settings import CompletionSettings
from specbench.prediction.vocab import BOS, EOS, PAD, UNK

NEG_INF = float("-inf")


@dataclass(frozen=True)
class Completion:
    """One predicted continuation: the words after the prefix (no `</s>`; empty when the LM ends the
    sentence at once), log P(words, `</s>` | `<s>`, prefix) in nats, and the 0-based rank in the n-best."""

    words: tuple[str, ...]
    log_prob: float
    rank: int


def _words_of(prefix: Sequence[str], where: str) -> tuple[str, ...]:
    if isinstance(prefix, str) or not all(isinstance(w, str) for w in prefix):
        raise DataError(f"{where} must be a list of words (strings), got {prefix!r:.60}. "
                        "Fix: pass text.split().")
    return tuple(prefix)


class _Finished:
    """The n_best best finished hypotheses of every prefix of a batch: scores `(P, n_best)` float32 (-inf:
    none), word ids `(P, n_best, max_new_words)` int64 (PAD-padded) and lengths `(P, n_best)` int64."""

    def __init__(self, prefixes: int, n_best: int, max_words: int, device: torch.device) -> None:
        self.scores = torch.full((prefixes, n_best), NEG_INF, device=device)
        self.tokens = torch.full((prefixes, n_best, max_words), PAD, dtype=torch.long, device=device)
        self.lengths = torch.zeros((prefixes, n_best), dtype=torch.long, device=device)

    def add(self, active: torch.Tensor, scores: torch.Tensor, tokens: torch.Tensor) -> None:
        """Merge the candidates `scores` `(A, beam)` with words `tokens` `(A, beam, t)` of the prefixes
        `active` `(A,)` into their n-best."""
        n_best, width = self.scores.shape[1], self.tokens.shape[2]
        padded = F.pad(tokens, (0, width - tokens.shape[2]), value=PAD)
        all_scores = torch.cat([self.scores[active], scores], dim=1)
        all_tokens = torch.cat([self.tokens[active], padded], dim=1)
        new_lengths = torch.full_like(scores, tokens.shape[2], dtype=torch.long)
        all_lengths = torch.cat([self.lengths[active], new_lengths], dim=1)
        top, idx = all_scores.topk(n_best, dim=1)
        self.scores[active] = top
        self.tokens[active] = all_tokens.gather(1, idx[:, :, None].expand(-1, -1, width))
        self.lengths[active] = all_lengths.gather(1, idx)

    def worst(self, active: torch.Tensor) -> torch.Tensor:
        """`(A,)` the n_best-th best score of each prefix in `active` (-inf while fewer are finished)."""
        return self.scores[active, -1]


class Completer:
    """N-best completion of word prefixes with a loaded LM on `device` ("cpu", "cuda", "cuda:1", ..; the
    LM's model is moved there and put in eval mode). Results of `complete` are memoized by prefix."""

    def __init__(self, lm: LoadedLm, settings: CompletionSettings | None = None, device: str = "cpu") -> None:
        self.settings = settings or CompletionSettings()
        self.device = resolve_device(device)
        self.vocab = lm.vocab
        self.model = lm.model.to(self.device).eval()
        self.cache_hits = 0
        self.cache_misses = 0
        self._cache: dict[tuple[str, ...], tuple[Completion, ...]] = {}
        self._banned = torch.zeros(len(self.vocab), dtype=torch.bool, device=self.device)
        self._banned[[PAD, BOS, EOS, UNK]] = True

    def clear_cache(self) -> None:
        """Forget the memoized results (the counters are kept)."""
        self._cache.clear()

    def complete(self, prefixes: Sequence[Sequence[str]]) -> list[list[Completion]]:
        """One n-best list per prefix, in input order. Each distinct prefix not seen before is searched once
        (counted in `cache_misses`); every other request, also a repeat within this call, counts in
        `cache_hits`. The lists are fresh; the `Completion`s are shared (frozen)."""
        keys = [_words_of(p, f"prefix {i}") for i, p in enumerate(prefixes)]
        todo = sorted({k for k in keys if k not in self._cache}, key=lambda k: (len(k), k))
        self.cache_misses += len(todo)
        self.cache_hits += len(keys) - len(todo)
        size = self.settings.batch_size
        for start in range(0, len(todo), size):
            chunk = todo[start:start + size]
            self._cache.update(zip(chunk, self._search_batch(chunk)))
        return [list(self._cache[k]) for k in keys]

    def _encode_batch(self, keys: Sequence[tuple[str, ...]]) -> tuple[torch.Tensor, torch.Tensor]:
        """`<s>` + prefix ids, PAD-padded: `(P, T)` int64 and lengths `(P,)` int64 (>= 1), on the device."""
        seqs = [[BOS, *self.vocab.encode(k)] for k in keys]
        ids = torch.full((len(seqs), max(map(len, seqs))), PAD, dtype=torch.long)
        for row, s in enumerate(seqs):
            ids[row, :len(s)] = torch.tensor(s)
        return ids.to(self.device), torch.tensor([len(s) for s in seqs], dtype=torch.long)

    @torch.inference_mode()
    def _search_batch(self, keys: Sequence[tuple[str, ...]]) -> list[tuple[Completion, ...]]:
        """The search of the module docstring for up to `batch_size` prefixes at once."""
        beam, n_best, max_words = self.settings.beam, self.settings.n_best, self.settings.max_new_words
        log_probs, (h, c) = self.model.last_log_probs(*self._encode_batch(keys))
        count, vocab_size = log_probs.shape
        rows = torch.arange(count, device=self.device).repeat_interleave(beam)
        log_probs, h, c = log_probs[rows], h[:, rows], c[:, rows]
        live = torch.full((count, beam), NEG_INF, device=self.device)
        live[:, 0] = 0.0  # one live hypothesis (the prefix) per prefix; the other slots are empty
        paths = torch.zeros((count, beam, 0), dtype=torch.long, device=self.device)
        finished = _Finished(count, n_best, max_words, self.device)
        active = torch.arange(count, device=self.device)
        for t in range(max_words + 1):
            cand = live[:, :, None] + log_probs.view(-1, beam, vocab_size)
            finished.add(active, cand[:, :, EOS], paths)
            if t == max_words:
                break
            cand.masked_fill_(self._banned, NEG_INF)
            live, flat = cand.view(len(active), -1).topk(beam, dim=1)
            source, word = flat // vocab_size, flat % vocab_size
            kept = paths.gather(1, source[:, :, None].expand(-1, -1, t))
            paths = torch.cat([kept, word[:, :, None]], dim=2)
            going = (finished.worst(active) < live.max(dim=1).values).nonzero()[:, 0]
            if len(going) == 0:
                break
            src_rows = (going[:, None] * beam + source[going]).reshape(-1)
            active, live, paths = active[going], live[going], paths[going]
            log_probs, (h, c) = self.model.step(word[going].reshape(-1), (h[:, src_rows], c[:, src_rows]))
        return self._collect(finished)

    def _collect(self, finished: _Finished) -> list[tuple[Completion, ...]]:
        scores, tokens, lengths = (x.cpu().tolist()
                                   for x in (finished.scores, finished.tokens, finished.lengths))
        out = []
        for row_scores, row_tokens, row_lengths in zip(scores, tokens, lengths):
            found = [(tuple(self.vocab.decode(ids[:n])), s)
                     for s, ids, n in zip(row_scores, row_tokens, row_lengths) if s > NEG_INF]
            out.append(self._ranked(found))
        return out

    @staticmethod
    def _ranked(found: Sequence[tuple[tuple[str, ...], float]]) -> tuple[Completion, ...]:
        ordered = sorted(found, key=lambda f: (-f[1], f[0]))
        return tuple(Completion(words, float(s), rank) for rank, (words, s) in enumerate(ordered))

    @torch.inference_mode()
    def complete_one(self, prefix: Sequence[str]) -> list[Completion]:
        """The same search for one prefix, token by token with `step`, without batching across prefixes and
        without the cache: the reference implementation (and the unbatched baseline of the benchmark)."""
        beam, n_best, max_words = self.settings.beam, self.settings.n_best, self.settings.max_new_words
        state = None
        for token in [BOS, *self.vocab.encode(_words_of(prefix, "prefix"))]:
            log_probs, state = self.model.step(torch.tensor([token], device=self.device), state)
        live, paths = torch.zeros(1, device=self.device), [()]
        finished: list[tuple[tuple[str, ...], float]] = []
        for t in range(max_words + 1):
            cand = live[:, None] + log_probs
            ends = cand[:, EOS].tolist()
            finished += [(tuple(self.vocab.decode(p)), s) for p, s in zip(paths, ends)]
            finished = sorted(finished, key=lambda f: (-f[1], f[0]))[:n_best]
            if t == max_words:
                break
            cand[:, self._banned] = NEG_INF
            flat = cand.reshape(-1)
            live, idx = flat.topk(min(beam, int(torch.isfinite(flat).sum())))
            if len(idx) == 0:
                break
            source, word = idx // len(self.vocab), idx % len(self.vocab)
            paths = [paths[s] + (w,) for s, w in zip(source.tolist(), word.tolist())]
            if len(finished) == n_best and finished[-1][1] >= float(live.max()):
                break
            log_probs, state = self.model.step(word, (state[0][:, source], state[1][:, source]))
        return list(self._ranked(finished))

    @torch.inference_mode()
    def score(self, pairs: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[float]:
        """Teacher-forced log P(continuation + `</s>` | `<s>` + prefix) in nats for each (prefix,
        continuation) pair, batched; words outside the vocabulary (prefix or continuation) score as
        `<unk>`."""
        out: list[float] = []
        size = self.settings.batch_size
        for start in range(0, len(pairs), size):
            seqs, starts = [], []
            for i, (prefix, continuation) in enumerate(pairs[start:start + size], start):
                words = _words_of(prefix, f"prefix of pair {i}")
                more = _words_of(continuation, f"continuation of pair {i}")
                seqs.append([BOS, *self.vocab.encode(words + more), EOS])
                starts.append(len(words))
            out.extend(self._score_batch(seqs, starts))
        return out

    def _score_batch(self, seqs: list[list[int]], starts: list[int]) -> list[float]:
        """Sum of the log-probs of the targets from index `starts[row]` on, per sequence."""
        inputs, targets = collate(seqs, self.device)
        features, _ = self.model.features(inputs)
        first = torch.tensor(starts, device=self.device)[:, None]
        positions = torch.arange(targets.shape[1], device=self.device)[None, :]
        mask = (positions >= first) & (targets != PAD)
        log_probs = F.log_softmax(self.model.output(features[mask]).float(), dim=-1)
        picked = log_probs.gather(1, targets[mask][:, None])[:, 0]
        rows = torch.arange(len(seqs), device=self.device)[:, None].expand_as(mask)[mask]
        totals = torch.zeros(len(seqs), dtype=torch.float64, device=self.device)
        return totals.index_add_(0, rows, picked.double()).tolist()

