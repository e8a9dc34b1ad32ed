"""Simultaneous and full-sentence decoding, batched across sentences, with incremental caches on both sides.

Every function takes source id lists ending in </s> and returns one `Translation` per sentence: target ids
(without </s>) and, per target token, its delay (source tokens read when it was written). Source visibility:
the wait-k model's causal encoder states never change as the source grows, so encoding the whole source once
and letting row r see its first g states is the same computation as encoding incrementally
(`MtTransformer.encode_step`; a test checks it); the bidirectional full-sentence model re-encodes the
visible prefix (test-time wait-k), and since that changes every source state, every state the decoder computed
from them too: after each source token read, the committed target prefix is decoded again over the new
states (`next_token`), so each step is the model's own whole-sequence pass over (source prefix, target
prefix). Earlier versions kept the decoder's cache across reads, an approximation that changed 44 of 200 val
outputs of the shipped full-sentence model at k = 3 with greedy search.

Methods (the seed's notation: next_i^b is i steps of beam search with beam b):
- `wait_k(..., method="greedy")`: after k source tokens, one target token per source token, argmax;
- `"tail"`: greedy until the source has ended, then beam search b for the rest (the tail);
- `"sbs"`: speculative beam search: at each step, beam-search 1 + w steps from the committed prefix with the
  source read so far, commit the first token of the best hypothesis, drop the speculation (eqs. 4-5); the
  tail is beam search b;
- `full_sentence(..., beam)`: the whole source, greedy (beam 1) or beam search;
- `adaptive(...)`: READ/WRITE by the model's confidence (WRITE when the most probable next token has
  probability >= threshold, or the source has ended); a run of WRITEs is a chunk of n tokens (at most
  MAX_CHUNK = 30: a longer run, such as the rest of the output once the source has ended, is several), committed by
  greedy search, by beam search over the chunk (w = 0), or by chunk SBS (beam-search n + w steps, commit
  the first n: eqs. 6-7).

Ending before the source is read: left alone, every search may write </s> (ending the translation) while
part of the source is still unread, whenever argmax or the best speculation picks it; such a truncated output
never waits for the rest of the source, so its latency looks low. With `force_finish` (off by default) </s>
cannot be chosen while fewer than |x| source tokens (</s> counted) are visible: greedy and the greedy chunks
take the best other token, the adaptive policy judges its confidence without </s> (so it READs where only
</s> was likely), and a speculation may end only at the steps whose token would be written with the whole
source read (wait-k: step j of a speculation made with g tokens visible is written with min(g + j, |x|); the
adaptive policy's chunk and window: at the current g). An output that reaches the length limit first reads
the rest of the source before its </s> (`end_delay` = |x|).

Ranking the speculations: a hypothesis that reaches </s> within the 1 + w (or n + w) steps keeps its score
while its rivals pay for every remaining step, so ranking by the summed log-probability (eq. 4 read
literally) favours early endings: on Multi30k val at k = 3 SBS then writes 3-15% fewer tokens than greedy and
loses to BLEU's brevity penalty much of what it gains in precision. With `length_normalized` (the default),
hypotheses are ranked by log-probability per token (</s> counted), the normalization our full-sentence and
tail beam searches use; hypotheses that ran every step rank exactly as by the sum.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import overload

import torch

from specbench.simultrans.model import DecoderCache, MtTransformer
from specbench.simultrans.tokenizer import BOS, EOS, PAD

NEG_INF = float("-inf")


@dataclass(frozen=True)
class Translation:
    """The committed target tokens (</s> left out), the source tokens read when each was written, and
    `end_delay`: the source tokens read when the output ended (</s> written, or the length limit reached)."""

    tokens: tuple[int, ...]
    delays: tuple[int, ...]
    end_delay: int


def max_target_len(source_len: int) -> int:
    return 2 * source_len + 10


def longest_source(max_positions: int) -> int:
    """The most source tokens (</s> counted) a model with `max_positions` positions translates: the source's
    and the longest output's positions (<s> and max_target_len tokens) must both fit."""
    return (max_positions - 11) // 2


class SourceView:
    """Cross-attention keys and values of the source for a batch of sentences, for given visible lengths.

    The causal encoder's are computed once over the whole source. The bidirectional encoder's are kept for the
    visible lengths of the last call, and a call re-encodes only the sentences whose visible length changed,
    over the longest of their views (not the batch's full width: the padding past a view is masked), writing
    their rows into the kept tensors in place: a sentence whose output has ended, or whose source is read
    whole, is not encoded again. The tensors a call returns therefore hold only until the next call with
    other lengths. Positions past a sentence's view hold zeros, the padding's states or an older view's; the
    decoder never attends to them (`MtTransformer.decoder_positions` masks them)."""

    def __init__(self, model: MtTransformer, sources: list[list[int]]) -> None:
        self.model = model
        width = max(len(s) for s in sources)
        self.src = torch.full((len(sources), width), PAD, dtype=torch.long)
        for i, s in enumerate(sources):
            self.src[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        self.lengths = torch.tensor([len(s) for s in sources], dtype=torch.long)
        self.causal = model.config.causal_encoder
        self._full = model.cross_kv(model.encode(self.src)) if self.causal else None
        self._visible: torch.Tensor | None = None  # the visible lengths `_cached` was encoded at
        self._cached: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.encoded_rows = 0  # sentences encoded so far (each re-encoding of one counts)

    def cross(self, visible: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per decoder layer (K, V) over all sentences when each sees `visible` (B,) source states."""
        if self._full is not None:
            return self._full
        if self._visible is None:
            changed = torch.arange(self.src.shape[0])
        else:
            changed = (visible != self._visible).nonzero()[:, 0]
        if changed.numel():
            seen = visible.index_select(0, changed)
            width = int(seen.max())  # the positions past every changed row's view are not encoded
            src = self.src.index_select(0, changed)[:, :width]
            fresh = self.model.cross_kv(self.model.encode(
                torch.where(torch.arange(width)[None] < seen[:, None], src, PAD)))
            if self._visible is None:  # the full width, zero past each view (never attended: masked)
                shape = (self.src.shape[0], *fresh[0][0].shape[1:2], self.src.shape[1], fresh[0][0].shape[3])
                self._cached = [(torch.zeros(shape, dtype=k.dtype), torch.zeros(shape, dtype=v.dtype))
                                for k, v in fresh]
            for (keys, values), (new_keys, new_values) in zip(self._cached, fresh, strict=True):
                keys[:, :, :width].index_copy_(0, changed, new_keys)
                values[:, :, :width].index_copy_(0, changed, new_values)
            self._visible = visible.clone()
            self.encoded_rows += int(changed.numel())
        return self._cached


def _check(model: MtTransformer, sources: list[list[int]]) -> None:
    limit = longest_source(model.config.max_positions)
    for i, s in enumerate(sources):
        if not s or s[-1] != EOS:
            raise ValueError(f"source {i} must be a non-empty id list ending in </s> ({EOS})")
        if len(s) > limit:
            raise ValueError(f"source {i} has {len(s)} tokens (</s> counted), more than the {limit} a model with "
                             f"{model.config.max_positions} positions translates (its output may run to "
                             f"{max_target_len(len(s))} tokens). Fix: split the sentence")


def next_token(model: MtTransformer, view: SourceView, prev: torch.Tensor, cache: DecoderCache | None,
               committed: list[list[int]], cross, visible: torch.Tensor,
               rows: torch.Tensor) -> tuple[torch.Tensor, DecoderCache]:
    """The next-token log-probabilities (N, V) of `rows`, whose committed target prefixes `committed` (one
    per row, of one length) end in `prev`, and their cache. The causal encoder's states never change, so the
    cache of the prefix extends by one position; the bidirectional encoder's all change with the source view,
    so the prefix (after <s>) is decoded again over it."""
    if view.causal:
        return model.decoder_step(prev, cache, cross, visible, rows)
    prefixes = torch.tensor([[BOS, *tokens] for tokens in committed], dtype=torch.long)
    return model.decoder_positions(prefixes, None, cross, visible, rows)


# ---- beam search over a fixed source view (the building block) ---------------------------------------------


@dataclass
class Beam:
    """b hypotheses for each of B sentences (rows b * sentence + j)."""

    tokens: torch.Tensor  # (B*b, n) tokens after the committed prefix
    scores: torch.Tensor  # (B*b,) summed log-probabilities
    finished: torch.Tensor  # (B*b,) bool: ended with </s>
    cache: DecoderCache  # with room for the search's steps (DecoderCache.with_room)
    logp: torch.Tensor  # (B*b, V) next-token log-probabilities; (B, V), each sentence's, before the first step
    shared: int = 0  # the cache's first positions, the prefix the search started from: alike in a sentence's rows


def lookahead_room(model: MtTransformer, cache: DecoderCache) -> torch.Tensor:
    """(N,) per row, how many tokens may follow the prefix in `cache` before the model runs out of positions:
    a speculation or a chunk near the length limit of a long source looks no further (the tokens written
    stay within `max_target_len`, which `longest_source` keeps inside the positions)."""
    return model.config.max_positions + 1 - cache.lengths()


def mask_eos(logp: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """`logp` (N, V) with </s> at -inf in the rows where `masked` (N,) is true (a copy)."""
    logp = logp.clone()
    logp[:, EOS] = torch.where(masked, torch.full_like(logp[:, EOS], NEG_INF), logp[:, EOS])
    return logp


def top_lowest(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`x.topk(k, -1)` of a 2-D `x` as (values, indices), exact ties to the lowest index (topk's own order
    of ties is arbitrary), as greedy's argmax breaks them."""
    values, indices = x.topk(k, -1)
    crowded = (x >= values[:, -1:]).sum(-1) > k  # rows where a tie reaches past the k-th place
    if bool(crowded.any()):
        rows, edge = x[crowded], values[crowded][:, -1:]
        above, tied = rows > edge, rows == edge
        keep = above | (tied & (tied.cumsum(-1) <= k - above.sum(-1, keepdim=True)))
        indices = indices.masked_scatter(crowded[:, None], keep.nonzero()[:, 1])
    indices = indices.sort(-1).values
    values = x.gather(-1, indices)
    order = values.sort(dim=-1, descending=True, stable=True).indices
    return values.gather(-1, order), indices.gather(-1, order)


def best_rows(scores: torch.Tensor, tokens: torch.Tensor, beam: int) -> torch.Tensor:
    """Per sentence, the row of its highest score (B*b,); exact ties to the lowest token ids (the first of
    the tied hypotheses `tokens` (B*b, n) in lexicographic order)."""
    best = scores.reshape(-1, beam)
    best = best == best.max(-1, keepdim=True).values
    for column in tokens.T:
        if not bool((best.sum(-1) > 1).any()):
            break
        ids = torch.where(best, column.reshape(-1, beam), column.max() + 1)
        best &= ids == ids.min(-1, keepdim=True).values
    return best.int().argmax(-1) + torch.arange(best.shape[0]) * beam


def hypothesis_sources(cross, sentence: torch.Tensor, visible: torch.Tensor,
                       beam: int) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """The cross-attention keys and values (per decoder layer) of the sentences `sentence` (B,) of the source
    view, and the visible source length of each hypothesis row of their beam: rows b * i .. b * i + b - 1
    belong to sentence i (the decoder's `group`). Beam search only reorders hypotheses within their
    sentence's block, so the keys are selected once per search, one copy per sentence: a sentence's
    hypotheses attend to them as one block of queries (`MtTransformer.decoder_step`, group = b)."""
    return [(k.index_select(0, sentence), v.index_select(0, sentence)) for k, v in cross], \
        visible.repeat_interleave(beam)


@overload
def beam_steps(model: MtTransformer, cross, sentence: torch.Tensor, visible: torch.Tensor, logp: torch.Tensor,
               cache: DecoderCache, beam: int, steps: int, eos_masked_steps: torch.Tensor | None = None) -> Beam: ...


@overload
def beam_steps(model: MtTransformer, cross, sentence: torch.Tensor, visible: torch.Tensor, logp: torch.Tensor,
               cache: DecoderCache, beam: int, steps: torch.Tensor, eos_masked_steps: torch.Tensor | None,
               retire: Callable[[torch.Tensor, Beam], None]) -> None: ...


def beam_steps(model: MtTransformer, cross, sentence: torch.Tensor, visible: torch.Tensor, logp: torch.Tensor,
               cache: DecoderCache, beam: int, steps: int | torch.Tensor,
               eos_masked_steps: torch.Tensor | None = None,
               retire: Callable[[torch.Tensor, Beam], None] | None = None, reserve: int | None = None) -> Beam | None:
    """`steps` steps of beam search from one state per sentence (logp (B, V) of the next token, cache of
    the committed prefix, rows of `sentence` (B,) in the source view): next^b_steps. Hypotheses that end in
    </s> stay (their score fixed) and are not extended. `eos_masked_steps` (B,), optional: per sentence, how
    many first steps may not choose </s> (`force_finish`). Steps past the model's positions are not taken
    (`lookahead_room`: with one `steps` for all, the batch stops at the least room of its sentences).

    `steps` (B,) per sentence, with `retire`: each sentence leaves the search after its own steps (or when
    every hypothesis of the search has ended), and `retire(sentences, beam)` gets the positions (in 0..B-1)
    of the sentences leaving and their beam (a sentence's beam after n steps does not depend on the others
    or on the steps after); returns None.

    The hypotheses' cache gets room for `reserve` more positions (default: as many as the steps take), so
    that a step writes its position in place and moves only the positions after the prefix the search
    starts from, which a sentence's hypotheses share (`DecoderCache.with_room`); `cache` is left as it is."""
    b_count = logp.shape[0]
    room = lookahead_room(model, cache)
    ragged = isinstance(steps, torch.Tensor)
    if ragged and retire is None:
        raise ValueError("beam_steps: steps per sentence need `retire`, which receives each sentence's beam")
    steps = torch.minimum(steps, room) if ragged else min(steps, int(room.min()))
    if eos_masked_steps is not None:
        logp = mask_eos(logp, eos_masked_steps > 0)
    values, indices = top_lowest(logp, beam)
    scores, tokens = values.reshape(-1), indices.reshape(-1, 1)
    rows = torch.arange(b_count).repeat_interleave(beam)
    longest = int(steps.max()) if ragged else steps
    extra = max(longest - 1, 0) if reserve is None else reserve
    state = Beam(tokens, scores, tokens[:, 0] == EOS, cache.with_room(rows, extra), logp, cache.width)
    row_cross, row_visible = hypothesis_sources(cross, sentence, visible, beam) if longest > 1 else ([], visible)
    masked_steps = None if eos_masked_steps is None else eos_masked_steps.repeat_interleave(beam)
    alive = torch.arange(b_count)  # positions of the sentences still searching
    for step in range(1, longest):
        if ragged and bool((leaving := steps.index_select(0, alive) <= step).any()):
            retire(alive[leaving], _sentences(state, leaving.nonzero()[:, 0], beam))
            stay = (~leaving).nonzero()[:, 0]
            alive, hypotheses = alive.index_select(0, stay), _hypotheses(stay, beam)
            state = _sentences(state, stay, beam)
            row_cross = [(k.index_select(0, stay), v.index_select(0, stay)) for k, v in row_cross]
            row_visible = row_visible.index_select(0, hypotheses)
            masked_steps = None if masked_steps is None else masked_steps.index_select(0, hypotheses)
        if bool(state.finished.all()):
            break
        state = _extend(model, row_cross, row_visible, state, beam,
                        None if masked_steps is None else masked_steps > step)
    if not ragged:
        return state
    if alive.numel():
        retire(alive, state)
    return None


def _hypotheses(sentences: torch.Tensor, beam: int) -> torch.Tensor:
    """The hypothesis rows of the beam's sentences at positions `sentences`."""
    return (sentences[:, None] * beam + torch.arange(beam)[None]).reshape(-1)


def _sentences(state: Beam, sentences: torch.Tensor, beam: int) -> Beam:
    """The beam of the sentences at positions `sentences` only."""
    rows = _hypotheses(sentences, beam)
    logp = state.logp.index_select(0, rows if state.logp.shape[0] == state.tokens.shape[0] else sentences)
    return Beam(state.tokens.index_select(0, rows), state.scores.index_select(0, rows),
                state.finished.index_select(0, rows), state.cache.select(rows), logp, state.shared)


def best_speculation(state: Beam, beam: int, length_normalized: bool) -> torch.Tensor:
    """Per sentence, the row of its best hypothesis: by summed log-probability (the seed's eq. 4), or by
    log-probability per token (</s> counted), which ranks the hypotheses that ran all the steps exactly as
    the sum does but no longer lets one that ended early win because it paid for fewer tokens."""
    scores = state.scores
    if length_normalized:
        steps = state.tokens.shape[1]
        first_eos = (state.tokens == EOS).int().argmax(1)
        lengths = torch.where(state.finished, first_eos + 1, torch.full_like(first_eos, steps))
        scores = scores / lengths.to(scores.dtype)
    return best_rows(scores, state.tokens, beam)


# ---- wait-k -------------------------------------------------------------------------------------------------


def _check_beam(model: MtTransformer, beam: int, window: int) -> None:
    """A beam keeps distinct tokens, so it is at most the vocabulary; the window is >= 0."""
    vocabulary = model.config.vocab_size
    if not 1 <= beam <= vocabulary or window < 0:
        raise ValueError(f"beam must be 1..{vocabulary} (the model's vocabulary) and window >= 0, got beam "
                         f"{beam}, window {window}")


@torch.no_grad()
def wait_k(model: MtTransformer, sources: list[list[int]], k: int, method: str = "greedy", beam: int = 5,
           window: int = 2, length_normalized: bool = True, force_finish: bool = False) -> list[Translation]:
    """Wait-k decoding (see the module docstring); k >= 1 (k larger than a source reads it all first).
    `force_finish`: no </s> before the whole source is visible (the module docstring)."""
    _check(model, sources)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if method not in ("greedy", "tail", "sbs"):
        raise ValueError(f"method must be greedy, tail or sbs, got {method!r}")
    _check_beam(model, beam if method != "greedy" else 1, window)
    view = SourceView(model, sources)
    n = len(sources)
    out_tokens: list[list[int]] = [[] for _ in range(n)]
    out_delays: list[list[int]] = [[] for _ in range(n)]
    out_end = [int(x) for x in view.lengths]  # rows that finish over the whole source end there
    active = torch.arange(n)
    prev = torch.full((n,), BOS, dtype=torch.long)
    cache: DecoderCache | None = None
    tail_rows: list[int] = []
    tail_cache: dict[int, tuple[DecoderCache, torch.Tensor]] = {}
    full_visible = torch.minimum(torch.full((n,), k), view.lengths)
    t = 0
    while active.numel():
        visible = torch.minimum(torch.full_like(active, k + t), view.lengths.index_select(0, active))
        full_visible = full_visible.index_copy(0, active, visible)  # rows that have ended keep their view
        cross = view.cross(full_visible)
        logp, cache = next_token(model, view, prev, cache, [out_tokens[r] for r in active.tolist()], cross,
                                 visible, active)
        in_tail = visible == view.lengths.index_select(0, active)
        if method != "greedy" and bool(in_tail.any()):
            for i in in_tail.nonzero()[:, 0].tolist():  # these rows finish by beam search over the full source
                row = int(active[i])
                tail_rows.append(row)
                tail_cache[row] = (cache.select(torch.tensor([i])), logp[i:i + 1])
            keep = (~in_tail).nonzero()[:, 0]
            active, visible, logp, cache = (active.index_select(0, keep), visible.index_select(0, keep),
                                            logp.index_select(0, keep), cache.select(keep))
            if not active.numel():
                break
        lengths = view.lengths.index_select(0, active)
        if force_finish:  # step j of a speculation is written with min(visible + j, |x|) tokens read
            logp = mask_eos(logp, visible < lengths)
        if method == "sbs" and window > 0:
            spec = beam_steps(model, view.cross(full_visible), active, visible, logp, cache, beam, 1 + window,
                              (lengths - visible) if force_finish else None)
            best = best_speculation(spec, beam, length_normalized)
            choice = spec.tokens.index_select(0, best)[:, 0]
        else:
            choice = logp.argmax(-1)
        done = []
        for i, (row, token) in enumerate(zip(active.tolist(), choice.tolist(), strict=True)):
            if token == EOS or len(out_tokens[row]) >= max_target_len(int(view.lengths[row])):
                done.append(i)
                # at the length limit, force_finish reads the rest of the source before </s>
                out_end[row] = int(view.lengths[row]) if force_finish else int(visible[i])
                continue
            out_tokens[row].append(token)
            out_delays[row].append(int(visible[i]))
        keep = torch.tensor([i for i in range(active.numel()) if i not in set(done)], dtype=torch.long)
        active, prev, cache = active.index_select(0, keep), choice.index_select(0, keep), cache.select(keep)
        t += 1
    if tail_rows:  # the view as left (the tail rows see their whole source): ended rows are not encoded again
        _finish_tail(model, view, full_visible, tail_rows, tail_cache, out_tokens, out_delays, beam)
    return [Translation(tuple(a), tuple(d), e) for a, d, e in zip(out_tokens, out_delays, out_end, strict=True)]


def _finish_tail(model: MtTransformer, view: SourceView, view_visible: torch.Tensor, rows: list[int],
                 caches: dict[int, tuple[DecoderCache, torch.Tensor]], out_tokens: list[list[int]],
                 out_delays: list[list[int]], beam: int) -> None:
    """Beam search over the whole source from each row's committed prefix, until </s> or the length limit
    (rows batched by prefix length, whose caches have one shape). `view_visible` (B,): what every sentence
    of the view sees, the whole source for `rows`."""
    groups: dict[int, list[int]] = {}
    for r in rows:
        groups.setdefault(int(caches[r][0].keys[0].shape[2]), []).append(r)
    for group in groups.values():
        _finish_tail_group(model, view, view_visible, group, caches, out_tokens, out_delays, beam)


def _finish_tail_group(model: MtTransformer, view: SourceView, view_visible: torch.Tensor, rows: list[int],
                       caches: dict[int, tuple[DecoderCache, torch.Tensor]], out_tokens: list[list[int]],
                       out_delays: list[list[int]], beam: int) -> None:
    order = torch.tensor(rows, dtype=torch.long)
    cache = DecoderCache.stack([caches[r][0] for r in rows])  # one prefix length: no padding
    logp = torch.cat([caches[r][1] for r in rows])
    visible = view.lengths.index_select(0, order)
    rooms = [max_target_len(int(view.lengths[r])) - len(out_tokens[r]) for r in rows]
    tokens = beam_search(model, view.cross(view_visible), order, visible, logp, cache, beam, rooms)
    for r, toks in zip(rows, tokens, strict=True):
        out_tokens[r].extend(toks)
        out_delays[r].extend([int(view.lengths[r])] * len(toks))


def beam_search(model: MtTransformer, cross, sentence: torch.Tensor, visible: torch.Tensor, logp: torch.Tensor,
                cache: DecoderCache, beam: int, limits: list[int]) -> list[list[int]]:
    """Beam search to </s> from one state per row, at most `limits[row]` tokens; the best finished hypothesis
    by log-probability per token (length-normalized, </s> counted); tokens without </s>. A row's hypotheses
    count as finished at its own limit (ending there, their forced </s> counted at no cost), so that its
    output is the one it would get decoded alone (greedy search, beam 1, is the same cut at the limit either
    way)."""
    if min(limits) < 1:
        raise ValueError(f"beam_search: every length limit must be >= 1, got {min(limits)}")
    max_steps = max(limits)
    if beam == 1:
        state = beam_steps(model, cross, sentence, visible, logp, cache, 1, max_steps)
        return [_strip(state.tokens[i].tolist())[:limits[i]] for i in range(state.tokens.shape[0])]
    at_limit = torch.tensor(limits).repeat_interleave(beam)
    state = beam_steps(model, cross, sentence, visible, logp, cache, beam, 1, reserve=max_steps - 1)
    row_cross, row_visible = hypothesis_sources(cross, sentence, visible, beam)
    steps = 1
    while True:
        state = replace(state, finished=state.finished | (at_limit <= steps))
        if steps >= max_steps or bool(state.finished.all()):
            break
        state = _extend(model, row_cross, row_visible, state, beam)
        steps += 1
    lengths = torch.tensor([len(_strip(t)) + 1 for t in state.tokens.tolist()], dtype=torch.float32)
    best = best_rows(state.scores / lengths, state.tokens, beam)
    return [_strip(state.tokens[i].tolist()) for i in best.tolist()]


def _extend(model: MtTransformer, row_cross, row_visible: torch.Tensor, state: Beam, beam: int,
            eos_masked: torch.Tensor | None = None) -> Beam:
    """One more beam step on an existing beam; `row_cross`, `row_visible`: its hypotheses' sources
    (`hypothesis_sources`); `eos_masked` (B*b,), optional: the rows that may not choose </s> at this step."""
    sentences = state.tokens.shape[0] // beam
    vocab = state.logp.shape[1]
    step_logp, new_cache = model.decoder_step(state.tokens[:, -1], state.cache, row_cross, row_visible, group=beam)
    if eos_masked is not None:
        step_logp = mask_eos(step_logp, eos_masked)
    ended = state.finished.nonzero()[:, 0]
    if ended.numel():  # an ended hypothesis stays as it is: </s> at no cost, nothing else (rows written in place)
        step_logp.index_fill_(0, ended, NEG_INF)
        step_logp[ended, EOS] = 0.0
    total = (state.scores[:, None] + step_logp).reshape(sentences, beam * vocab)
    values, indices = top_lowest(total, beam)
    parent = ((indices // vocab) + torch.arange(sentences)[:, None] * beam).reshape(-1)
    scores = values.reshape(-1)
    settled = state.finished.reshape(sentences, beam).all(1).repeat_interleave(beam)
    if bool(settled.any()):  # a sentence whose hypotheses have all ended keeps them in their order (topk may
        # reorder exact ties), so that a batch stepping on for longer sentences picks what it would alone
        parent = torch.where(settled, torch.arange(parent.numel()), parent)
        scores = torch.where(settled, state.scores, scores)
    was_finished = state.finished.index_select(0, parent)
    token = torch.where(was_finished, torch.full_like(parent, EOS), (indices % vocab).reshape(-1))
    return Beam(torch.cat([state.tokens.index_select(0, parent), token[:, None]], 1), scores,
                was_finished | (token == EOS), new_cache.reorder(parent, state.shared), step_logp, state.shared)


def _strip(tokens: list[int]) -> list[int]:
    return tokens[:tokens.index(EOS)] if EOS in tokens else tokens


@torch.no_grad()
def full_sentence(model: MtTransformer, sources: list[list[int]], beam: int = 1) -> list[Translation]:
    """Translate with the whole source visible (greedy when beam == 1); every delay is |x|."""
    _check(model, sources)
    if beam < 1:
        raise ValueError(f"beam must be >= 1, got {beam}")
    view = SourceView(model, sources)
    rows = torch.arange(len(sources))
    cross = view.cross(view.lengths)
    logp, cache = model.decoder_step(torch.full((len(sources),), BOS, dtype=torch.long), None, cross,
                                     view.lengths, rows)
    tokens = beam_search(model, cross, rows, view.lengths, logp, cache, beam,
                         [max_target_len(len(s)) for s in sources])
    out = []
    for s, toks in zip(sources, tokens, strict=True):
        out.append(Translation(tuple(toks), (len(s),) * len(toks), len(s)))
    return out


# ---- adaptive policy ----------------------------------------------------------------------------------------

CHUNK_METHODS = ("greedy", "beam", "sbs")
MAX_CHUNK = 30


@torch.no_grad()
def adaptive(model: MtTransformer, sources: list[list[int]], threshold: float, method: str = "greedy",
             beam: int = 5, window: int = 2, length_normalized: bool = True,
             force_finish: bool = False) -> list[Translation]:
    """Confidence policy: WRITE while the most probable next token has probability >= `threshold` (or the
    source has ended), else READ one more source token. A run of WRITEs (a chunk of n tokens, found by
    greedy search) is committed greedily, by beam search over n steps ("beam", w = 0), or by chunk SBS
    (beam-search n + w steps and commit the first n: eqs. 6-7). `force_finish`: no </s> (and no confidence
    from it) before the whole source is visible (the module docstring)."""
    _check(model, sources)
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    if method not in CHUNK_METHODS:
        raise ValueError(f"method must be one of {CHUNK_METHODS}, got {method!r}")
    _check_beam(model, beam, window)
    view = SourceView(model, sources)
    n = len(sources)
    out_tokens: list[list[int]] = [[] for _ in range(n)]
    out_delays: list[list[int]] = [[] for _ in range(n)]
    out_end = [0] * n
    visible = torch.ones(n, dtype=torch.long)
    prev = torch.full((n,), BOS, dtype=torch.long)
    caches: list[DecoderCache | None] = [None] * n
    done: set[int] = set()
    while len(done) < n:
        # one batch of every row still going: the causal model's rows extend their own caches, left-padded
        # to one width (DecoderCache.pad); the bidirectional model's prefixes, decoded again whole over the new
        # view, need one length per batch
        groups: dict[int, list[int]] = {}
        for r in range(n):
            if r not in done:
                groups.setdefault(0 if view.causal else len(out_tokens[r]), []).append(r)
        for active in groups.values():
            rows = torch.tensor(active)
            logp, new_cache = next_token(model, view, prev.index_select(0, rows), _stack(caches, active),
                                         [out_tokens[r] for r in active], view.cross(visible),
                                         visible.index_select(0, rows), rows)
            ended = visible.index_select(0, rows) >= view.lengths.index_select(0, rows)
            if force_finish:
                logp = mask_eos(logp, ~ended)
            confident = logp.max(-1).values.exp() >= threshold
            write = (confident | ended).tolist()
            for r, w in zip(active, write, strict=True):
                if not w:
                    visible[r] += 1
            writers = [i for i, w in enumerate(write) if w]
            if writers:
                idx = torch.tensor(writers)
                _write_chunks(model, view, [active[i] for i in writers], logp.index_select(0, idx),
                              new_cache.select(idx), visible, method, beam, window, threshold, out_tokens,
                              out_delays, out_end, caches, prev, done, length_normalized, force_finish)
    return [Translation(tuple(a), tuple(d), e) for a, d, e in zip(out_tokens, out_delays, out_end, strict=True)]


def _stack(caches: list[DecoderCache | None], rows: list[int]) -> DecoderCache | None:
    """One cache for `rows`, left-padded to the longest (None where no row has written yet; a row that has
    not is an empty prefix, its next input <s>)."""
    present = [caches[r] for r in rows if caches[r] is not None]
    if not present:
        return None
    empty = present[0].row(0, 0)
    return DecoderCache.stack([caches[r] if caches[r] is not None else empty for r in rows])


def _write_chunks(model: MtTransformer, view: SourceView, rows: list[int], logp: torch.Tensor, cache: DecoderCache,
                  visible: torch.Tensor, method: str, beam: int, window: int, threshold: float,
                  out_tokens: list[list[int]], out_delays: list[list[int]], out_end: list[int], caches: list,
                  prev: torch.Tensor, done: set[int], length_normalized: bool, force_finish: bool = False) -> None:
    """Find each writing row's chunk greedily, re-decide it by the chunk method, commit it, and keep each
    row's cache: the positions its chunk's search already computed (every token but the chunk's last, the
    next input), so nothing is decoded again. With `force_finish`, `logp` comes with </s> masked where the
    source has not ended."""
    index = torch.tensor(rows)
    sources_visible = visible.index_select(0, index)
    cross = view.cross(visible)
    unread = sources_visible < view.lengths.index_select(0, index)  # rows that may not end yet
    rooms = lookahead_room(model, cache).tolist()
    chunks, kept = _greedy_chunk(model, cross, index, sources_visible, logp, cache, threshold, view, rooms,
                                 force_finish)
    if method != "greedy":
        sizes = [len(chunk) for chunk in chunks]
        steps = [size + (window if method == "sbs" else 0) for size in sizes]
        _chunk_search(model, cross, index, sources_visible, logp, cache, sizes, steps,
                      unread if force_finish else None, beam, length_normalized, chunks, kept)
    for i, row in enumerate(rows):
        chunk = chunks[i]
        if EOS in chunk:
            chunk = chunk[:chunk.index(EOS)]
            ended = True
        else:
            ended = False
        room = max_target_len(int(view.lengths[row])) - len(out_tokens[row])
        chunk = chunk[:room]
        out_tokens[row].extend(chunk)
        out_delays[row].extend([int(visible[row])] * len(chunk))
        if ended or not chunk or len(out_tokens[row]) >= max_target_len(int(view.lengths[row])):
            done.add(row)
            # at the length limit, force_finish reads the rest of the source before </s>
            out_end[row] = int(view.lengths[row]) if force_finish and not ended else int(visible[row])
            continue
        prev[row] = chunk[-1]
        if view.causal:  # (the bidirectional model's prefix is decoded again over the next source view)
            caches[row] = kept[i]


def _chunk_search(model: MtTransformer, cross, index: torch.Tensor, visible: torch.Tensor, logp: torch.Tensor,
                  cache: DecoderCache, sizes: list[int], steps: list[int], unread: torch.Tensor | None, beam: int,
                  length_normalized: bool, chunks: list, kept: list) -> None:
    """One beam search over the chunks of the writing rows `index`, row i for steps[i] steps (its chunk and
    window), its chunk the first sizes[i] tokens of its best hypothesis then (chunks[i]; kept[i]: its cache,
    `cache` and every chunk token but the last). `unread` (force_finish): the rows that may not end within their steps."""
    want = torch.tensor(steps)
    # every step of the chunk and its window is written with the current source (or more, unknown)
    masked = unread.long() * want if unread is not None else None

    def retire(leaving: torch.Tensor, state: Beam) -> None:
        best = best_speculation(state, beam, length_normalized)
        for i, row in zip(leaving.tolist(), best.tolist(), strict=True):
            chunks[i] = state.tokens[row].tolist()[:sizes[i]]
            kept[i] = state.cache.row(row, cache.width + sizes[i] - 1)

    beam_steps(model, cross, index, visible, logp, cache, beam, want, masked, retire)


def _greedy_chunk(model: MtTransformer, cross, index: torch.Tensor, visible: torch.Tensor, logp: torch.Tensor,
                  cache: DecoderCache, threshold: float, view: SourceView, rooms: list[int],
                  force_finish: bool = False) -> tuple[list[list[int]], list[DecoderCache]]:
    """Greedy tokens while the policy keeps writing (confidence >= threshold, or the source has ended),
    up to </s>, MAX_CHUNK tokens or the row's room (`rooms`, see lookahead_room); returns the chunks (each
    of >= 1 token) and each row's cache: `cache` and every chunk token but the last (the next input). A row
    leaves the batch when its chunk ends, so none is decoded past its room. With `force_finish`, </s> is
    masked (in choice and confidence) where the source has not ended."""
    count = index.numel()
    chunks: list[list[int]] = [[] for _ in range(count)]
    kept: list[DecoderCache | None] = [None] * count
    width = cache.width
    alive = torch.arange(count)  # rows still writing, and their state below
    limits = torch.tensor([min(MAX_CHUNK, room) for room in rooms])
    ended = visible >= view.lengths.index_select(0, index)
    token = logp.argmax(-1)

    def keep_only(going: torch.Tensor) -> None:
        nonlocal alive, limits, ended, token, index, visible, cache
        for j in (~going).nonzero()[:, 0].tolist():  # these rows' chunks end here
            i = int(alive[j])
            kept[i] = cache.row(j, width + len(chunks[i]) - 1)
        rows = going.nonzero()[:, 0]
        if rows.numel() < going.numel():
            alive, limits, ended, token, index, visible = (t.index_select(0, rows) for t in
                                                           (alive, limits, ended, token, index, visible))
            cache = cache.select(rows)

    for step in range(int(limits.max())):
        for j, i in enumerate(alive.tolist()):
            chunks[i].append(int(token[j]))
        keep_only((token != EOS) & (limits > step + 1))
        if not alive.numel():
            break
        logp, cache = model.decoder_step(token, cache, cross, visible, index)
        if force_finish:
            logp = mask_eos(logp, ~ended)
        token = logp.argmax(-1)
        keep_only((logp.max(-1).values.exp() >= threshold) | ended)
        if not alive.numel():
            break
    return chunks, kept
