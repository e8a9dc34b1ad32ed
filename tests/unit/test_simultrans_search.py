"""Simultaneous decoding on tiny random Transformers: incremental caches against whole-sequence passes,
search methods against brute force and against each other where they must agree."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
import torch

from specbench.simultrans.model import DecoderCache, MtTransformer
from specbench.simultrans.search import (
    MAX_CHUNK,
    Beam,
    SourceView,
    Translation,
    _greedy_chunk,
    adaptive,
    beam_search,
    beam_steps,
    best_speculation,
    full_sentence,
    longest_source,
    lookahead_room,
    max_target_len,
    wait_k,
)
from specbench.simultrans.settings import MtModelConfig
from specbench.simultrans.tokenizer import BOS, EOS, PAD

pytestmark = pytest.mark.unit
VOCAB = 9


def tiny(causal: bool, seed: int = 0, scale: float = 8.0, source_weight: float = 1.0) -> MtTransformer:
    """A random model. `scale` multiplies the embeddings (8: sharp distributions, so that search methods
    rarely differ from greedy; 1: the initialization's flat ones, where they often do); `source_weight`
    multiplies the decoder's cross-attention query and output weights (more than 1: the next token depends
    more on how much source is visible; at 1 one more source token moves log-probabilities by ~0.1)."""
    torch.manual_seed(seed)
    model = MtTransformer(MtModelConfig(vocab_size=VOCAB, d_model=16, heads=2, ffn=32, encoder_layers=2,
                                        decoder_layers=2, dropout=0.0, causal_encoder=causal, max_positions=96))
    with torch.no_grad():
        model.embed.weight.mul_(scale)  # sharper distributions: less room for ties
        if source_weight != 1.0:
            for block in model.decoder:
                block.cross_attn.q.weight.mul_(source_weight)
                block.cross_attn.o.weight.mul_(source_weight)
    return model.eval()


class _Shaped(MtTransformer):
    """A tiny model with two knobs on its next-token distribution, applied alike by the incremental steps the
    searches use and by the whole-sequence pass the brute-force checks use: `boost` is added to the logit of
    </s> (so that outputs often end before the source is read); with `period` > 0, the log-probabilities at
    target position p with v source tokens visible are multiplied by `sharp` where (p + v) mod `period` <
    `sharp_count`, else by `flat`, and renormalized (so the confidence policy writes chunks of
    `sharp_count` tokens between READs)."""

    boost, period, sharp_count, sharp, flat = 0.0, 0, 1, 1.0, 1.0

    def shape(self, logp: torch.Tensor, position: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        """logp (..., V) at target positions and visible source lengths of the same leading shape."""
        logp = logp.clone()
        logp[..., EOS] += self.boost
        logp = torch.log_softmax(logp, -1)
        if self.period:
            sharp = (position + visible) % self.period < self.sharp_count
            logp = torch.log_softmax(logp * torch.where(sharp, self.sharp, self.flat)[..., None], -1)
        return logp

    def decoder_step(self, tokens, cache, cross, source_len, rows=None, group=1):  # type: ignore[no-untyped-def]
        logp, new_cache = super().decoder_step(tokens, cache, cross, source_len, rows, group)
        position = torch.zeros_like(source_len) if cache is None else cache.lengths()  # each row's own
        return self.shape(logp, position, source_len), new_cache

    def forward(self, src, tgt_in, k=None):  # type: ignore[no-untyped-def]
        logp = torch.log_softmax(super().forward(src, tgt_in, k), -1)
        limits = self.source_limits(src, tgt_in.shape[1], k)
        return self.shape(logp, torch.arange(tgt_in.shape[1])[None].expand_as(limits), limits)


def shaped(seed: int, boost: float = 0.0, chunk: int = 0, sharp: float = 1.0, flat: float = 1.0,
           scale: float = 1.0, source_weight: float = 3.0) -> _Shaped:
    """`tiny(True, ...)` with `_Shaped`'s knobs (chunk > 0: paced for chunks of that many tokens)."""
    model = tiny(True, seed, scale=scale, source_weight=source_weight)
    model.__class__ = _Shaped
    model.boost = boost
    if chunk:
        model.period, model.sharp_count, model.sharp, model.flat = chunk + 2, chunk, sharp, flat
    return model  # type: ignore[return-value]


def sources(seed: int, count: int = 5) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(4, VOCAB, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g).tolist() + [EOS]
            for _ in range(count)]


def test_incremental_encoder_equals_the_causal_pass() -> None:
    model = tiny(True)
    src = torch.tensor([s + [PAD] * (7 - len(s)) for s in sources(1)])
    full = model.encode(src)
    cache, parts = None, []
    for j in range(src.shape[1]):
        out, cache = model.encode_step(src[:, j:j + 1], cache)
        parts.append(out)
    mask = src != PAD
    assert torch.allclose(full[mask], torch.cat(parts, 1)[mask], atol=1e-5)
    with pytest.raises(ValueError, match="causal"):
        tiny(False).encode_step(src[:, :1], None)


@pytest.mark.parametrize("k", [1, 3, None])
def test_decoder_steps_equal_the_whole_sequence_pass(k: int | None) -> None:
    model = tiny(True)
    src = torch.tensor([s + [PAD] * (7 - len(s)) for s in sources(2)])
    tgt = torch.randint(4, VOCAB, (src.shape[0], 6))
    tgt[:, 0] = BOS
    with torch.no_grad():
        whole = torch.log_softmax(model(src, tgt, k), -1)
        cross, cache, steps = model.cross_kv(model.encode(src)), None, []
        limits = model.source_limits(src, tgt.shape[1], k)
        for i in range(tgt.shape[1]):
            logp, cache = model.decoder_step(tgt[:, i], cache, cross, limits[:, i])
            steps.append(logp)
    assert torch.allclose(whole, torch.stack(steps, 1), atol=1e-4)



@pytest.mark.parametrize("causal", [True, False])
def test_decoder_positions_several_at_a_time_equal_the_whole_sequence_pass(causal: bool) -> None:
    """`decoder_positions` with n > 1 new positions (test-time wait-k decodes the committed prefix again this
    way), from an empty cache and after a cached prefix: the log-probabilities after the last position equal
    the whole-sequence pass's, to float rounding (each new position attends to the cached ones and to the new
    ones up to itself, never to a later one)."""
    model = tiny(causal, 4, scale=1.0)
    srcs = sources(3, 4)
    view = SourceView(model, srcs)
    rows = torch.arange(len(srcs))
    tgt = torch.randint(4, VOCAB, (len(srcs), 6), generator=torch.Generator().manual_seed(5))
    tgt[:, 0] = BOS
    padded = torch.tensor([s + [PAD] * (max(map(len, srcs)) - len(s)) for s in srcs])
    with torch.no_grad():
        cross = view.cross(view.lengths)
        whole = torch.log_softmax(model(padded, tgt), -1)
        for split in (0, 2):
            cache = None
            if split:
                _, cache = model.decoder_positions(tgt[:, :split], None, cross, view.lengths, rows)
            logp, _ = model.decoder_positions(tgt[:, split:], cache, cross, view.lengths, rows)
            assert torch.allclose(logp, whole[:, -1], atol=1e-5), (split, float((logp - whole[:, -1]).abs().max()))

def test_left_padded_cache_rows_step_as_each_row_alone() -> None:
    """Rows of different prefix lengths in one left-padded cache (DecoderCache.stack) give each row's own
    next-token distribution and cache: the padding is never attended to and positions are the row's own."""
    model = tiny(True, scale=1.0)
    src = torch.tensor([s + [PAD] * (7 - len(s)) for s in sources(4, 3)])
    cross = model.cross_kv(model.encode(src))
    visible = torch.tensor([2, 5, 3])
    prefixes = [[BOS, 5, 6, 7, 8], [BOS], [BOS, 4, 4]]
    alone = []
    with torch.no_grad():
        for i, prefix in enumerate(prefixes):
            row = torch.tensor([i])
            _, cache = model.decoder_positions(torch.tensor([prefix[:-1]]), None, cross, visible[row], row) \
                if len(prefix) > 1 else (None, None)
            alone.append((cache, *model.decoder_step(torch.tensor([prefix[-1]]), cache, cross, visible[row], row)))
        empty = alone[0][0].row(0, 0)
        stacked = DecoderCache.stack([c if c is not None else empty for c, _, _ in alone])
        assert stacked.pad.tolist() == [0, 4, 2] and stacked.lengths().tolist() == [4, 0, 2]
        logp, after = model.decoder_step(torch.tensor([p[-1] for p in prefixes]), stacked, cross, visible)
        for i, (_, row_logp, row_cache) in enumerate(alone):
            assert torch.allclose(logp[i], row_logp[0], atol=1e-5)
            got = after.row(i)
            assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(got.keys, row_cache.keys, strict=True))
        # two more steps, a row selected out of the batch, stay each row's own
        logp2, after2 = model.decoder_step(torch.tensor([5, 6, 7]), after.select(torch.tensor([2, 0, 1])), cross,
                                           visible[[2, 0, 1]], torch.tensor([2, 0, 1]))
        for j, i in enumerate([2, 0, 1]):
            one, _ = model.decoder_step(torch.tensor([[5, 6, 7][j]]), alone[i][2], cross, visible[i:i + 1],
                                        torch.tensor([i]))
            assert torch.allclose(logp2[j], one[0], atol=1e-5)
            assert after2.row(j).width == len(prefixes[i]) + 1


def test_a_beams_rows_attending_to_their_sentence_as_one_block_equal_per_row_keys() -> None:
    """decoder_step with group = b (a sentence's b hypotheses one block of queries over its keys) equals the
    same step with every hypothesis row given its own copy of the keys."""
    model = tiny(True, scale=1.0)
    src = torch.tensor([s + [PAD] * (7 - len(s)) for s in sources(5, 3)])
    beam = 4
    with torch.no_grad():
        cross = model.cross_kv(model.encode(src))
        rows = torch.arange(3).repeat_interleave(beam)
        visible = torch.tensor([2, 7, 4]).repeat_interleave(beam)
        tokens = torch.randint(4, VOCAB, (3 * beam, 3), generator=torch.Generator().manual_seed(1))
        _, cache = model.decoder_positions(tokens[:, :2], None, cross, visible, rows)
        per_row, _ = model.decoder_step(tokens[:, 2], cache, cross, visible, rows)
        grouped, _ = model.decoder_step(tokens[:, 2], cache, cross, visible, group=beam)
    assert torch.allclose(per_row, grouped, atol=1e-5)
    with pytest.raises(ValueError, match="rows and group"):
        model.decoder_step(tokens[:, 2], cache, cross, visible, rows, group=beam)


def test_a_cache_with_room_steps_and_reorders_as_the_copied_cache() -> None:
    """A beam's cache with room (DecoderCache.with_room: each position written into buffers, a reorder moving
    only the positions after the prefix the hypotheses share) gives the same log-probabilities and keys and
    values, bit for bit, step after step, as copying the cache at every step (select, concatenation), from a
    left-padded committed prefix; `select` keeps the room; an older cache of the same buffers, or buffers
    that are full, are refused."""
    model = tiny(True, scale=1.0)
    src = torch.tensor([s + [PAD] * (7 - len(s)) for s in sources(6, 2)])
    beam, visible = 3, torch.tensor([4, 6])
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        cross = model.cross_kv(model.encode(src))
        alone = [model.decoder_positions(torch.tensor([prefix]), None, cross, visible[i:i + 1], torch.tensor([i]))[1]
                 for i, prefix in enumerate([[BOS, 5, 6], [BOS]])]
        committed = DecoderCache.stack(alone)  # left-padded: 3 positions and 1
        rows = torch.arange(2).repeat_interleave(beam)
        row_visible = visible.repeat_interleave(beam)
        copied, roomy = committed.select(rows), committed.with_room(rows, 4)
        for _ in range(3):
            tokens = torch.randint(4, VOCAB, (2 * beam,), generator=g)
            want, copied = model.decoder_step(tokens, copied, cross, row_visible, group=beam)
            got, roomy = model.decoder_step(tokens, roomy, cross, row_visible, group=beam)
            assert torch.equal(want, got)
            parents = (torch.randint(0, beam, (2, beam), generator=g) + torch.arange(2)[:, None] * beam).reshape(-1)
            copied, roomy = copied.select(parents), roomy.reorder(parents, committed.width)
            assert torch.equal(copied.pad, roomy.pad) and roomy.width == copied.width
            for a, b in zip(copied.keys + copied.values, roomy.keys + roomy.values, strict=True):
                assert torch.equal(a, b)
        # sentence 0's hypotheses selected out of the search (a sentence leaving it): one more step and reorder
        first, first_cross = torch.arange(beam), [(k[:1], v[:1]) for k, v in cross]
        kept_copied, kept_roomy = copied.select(first), roomy.select(first)
        assert kept_roomy.room.capacity == roomy.room.capacity
        want, kept_copied = model.decoder_step(tokens[:beam], kept_copied, first_cross, row_visible[:beam], group=beam)
        got, kept_roomy = model.decoder_step(tokens[:beam], kept_roomy, first_cross, row_visible[:beam], group=beam)
        assert torch.equal(want, got)
        parents = torch.tensor([2, 2, 0])
        kept_copied, kept_roomy = kept_copied.select(parents), kept_roomy.reorder(parents, committed.width)
        for a, b in zip(kept_copied.keys + kept_copied.values, kept_roomy.keys + kept_roomy.values, strict=True):
            assert torch.equal(a, b)
        assert committed.width == 3 and all(torch.equal(a, b) for a, b in zip(  # the committed prefix untouched
            committed.keys, DecoderCache.stack(alone).keys, strict=True))
        _, newest = model.decoder_step(tokens, roomy, cross, row_visible, group=beam)  # the last reserved position
        for refused in (roomy, newest):  # an older cache of the buffers; the buffers full
            with pytest.raises(RuntimeError, match="cannot take 1 after"):
                model.decoder_step(tokens, refused, cross, row_visible, group=beam)
        for use in (lambda c: c.select(first), lambda c: c.row(0), lambda c: c.reorder(parents, 3)):
            with pytest.raises(RuntimeError, match="a newer cache has filled"):
                use(roomy)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_adaptive_policy_decodes_each_sentence_as_alone_in_a_left_padded_batch(seed: int) -> None:
    """The adaptive policy batches every unfinished sentence, whatever its output's length (left-padded
    caches), and keeps the cache its chunk search computed: each output must be the sentence's alone, under
    every chunk method, with and without force_finish."""
    model = shaped(seed, chunk=2, sharp=1.5, flat=0.6)  # paced: chunks between READs
    srcs = _long_sources(70 + seed, 7)
    for method, beam, window in (("greedy", 1, 0), ("beam", 3, 0), ("sbs", 3, 2)):
        for force_finish in (False, True):
            batched = adaptive(model, srcs, 0.35, method, beam=beam, window=window, force_finish=force_finish)
            assert sum(len(set(t.delays)) > 2 for t in batched) >= 3  # several chunks, of several lengths
            for src, got in zip(srcs, batched, strict=True):
                assert adaptive(model, [src], 0.35, method, beam=beam, window=window,
                                force_finish=force_finish)[0] == got


def _reference_greedy(model: MtTransformer, src: list[int], limit: int) -> list[int]:
    """Argmax decoding by whole-sequence passes (no caches), the whole source visible."""
    out = [BOS]
    with torch.no_grad():
        for _ in range(limit):
            logits = model(torch.tensor([src]), torch.tensor([out]))
            token = int(logits[0, -1].argmax())
            if token == EOS:
                break
            out.append(token)
    return out[1:]


@pytest.mark.parametrize("causal", [True, False])
def test_full_sentence_greedy_and_late_wait_k_equal_uncached_greedy(causal: bool) -> None:
    model = tiny(causal)
    srcs = sources(3)
    greedy = full_sentence(model, srcs)
    late = wait_k(model, srcs, k=50)
    for src, a, b in zip(srcs, greedy, late, strict=True):
        assert list(a.tokens) == _reference_greedy(model, src, 2 * len(src) + 10)
        assert a == b and set(a.delays) <= {len(src)} and a.end_delay == len(src)


@pytest.mark.parametrize("causal", [True, False])
def test_wait_k_delays_and_its_first_token(causal: bool) -> None:
    model = tiny(causal)
    srcs = sources(4)
    for k in (1, 2):
        out = wait_k(model, srcs, k)
        for src, t in zip(srcs, out, strict=True):
            assert list(t.delays) == [min(k + i, len(src)) for i in range(len(t.tokens))]
            assert t.end_delay == min(k + len(t.tokens), len(src))  # </s> written on the same schedule
            with torch.no_grad():  # the first token sees exactly the first k source tokens
                prefix = torch.tensor([src[:k]])
                logits = model(prefix, torch.tensor([[BOS]]))
            first = int(logits[0, 0].argmax())
            assert (t.tokens[:1] == (first,)) or (first == EOS and t.tokens == ())


def _test_time_replay(model: MtTransformer, src: list[int], first: int, reads: int,
                      write: Callable[[torch.Tensor], bool]) -> Translation:
    """A simultaneous policy over the bidirectional model by whole-sequence passes, no caches: with g source
    tokens read, the next token's log-probabilities are the last position of `model(src[:g], <s> + committed)`.
    `first` tokens are read before anything else; then the argmax is written where `write(logp)` says so or the
    source has ended (else one more token is read), and `reads` more tokens are read after each token written.
    Ends at </s> or the length limit, as the searches do."""
    tokens: list[int] = []
    delays: list[int] = []
    g = min(first, len(src))
    while len(tokens) < max_target_len(len(src)):
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([src[:g]]), torch.tensor([[BOS, *tokens]])), -1)[0, -1]
        if not (write(logp) or g == len(src)):
            g += 1
            continue
        if int(logp.argmax()) == EOS:
            break
        tokens.append(int(logp.argmax()))
        delays.append(g)
        g = min(g + reads, len(src))
    return Translation(tuple(tokens), tuple(delays), g)


def test_test_time_wait_k_and_adaptive_decode_as_whole_sequence_passes_over_each_source_prefix() -> None:
    """The full-sentence model's encoder is bidirectional, so every source token read changes every source
    state and every decoder state computed from them: greedy test-time wait-k and the greedy confidence policy
    must give what whole-sequence passes over (source prefix, target prefix) give. A model whose next token
    leans on the source, so that keeping the decoder's states from a shorter source would change outputs."""
    cases = 0
    for seed in (0, 1, 2):
        model = tiny(False, seed, scale=1.0, source_weight=3.0)
        srcs = _long_sources(80 + seed)
        for k in (1, 2, 3):
            for src, got in zip(srcs, wait_k(model, srcs, k), strict=True):
                assert got == _test_time_replay(model, src, k, 1, lambda logp: True), (seed, k, src)
                cases += 1
        for src, got in zip(srcs, adaptive(model, srcs, 0.3), strict=True):
            want = _test_time_replay(model, src, 1, 0, lambda logp: float(logp.max().exp()) >= 0.3)
            assert got == want, (seed, src)
            cases += 1
    assert cases == 3 * 6 * 4


def test_the_source_view_re_encodes_only_the_sentences_whose_view_changed() -> None:
    """The bidirectional encoder's keys and values, kept across calls and updated in place for the sentences
    whose visible length changed (encoded over the longest changed view, not the batch's width), equal a
    fresh encoding of every sentence's prefix at the batch's width on every position the decoder may attend
    to, also when sentences encoded together see views of different lengths; a sentence whose view did not
    change is not encoded again."""
    model = tiny(False, 3, scale=1.0)
    srcs = _long_sources(90)
    lengths = torch.tensor([len(s) for s in srcs])
    view = SourceView(model, srcs)
    calls = [torch.minimum(torch.full_like(lengths, v), lengths) for v in (1, 2, 3)]
    # views of 2, 3 and 4 tokens side by side, mid-source: encoded together, each must see its own only
    calls.insert(1, torch.minimum(torch.arange(len(srcs)) % 3 + 2, lengths))
    calls.append(calls[-1].clone())  # nothing changed: nothing encoded
    calls.append(torch.where(torch.arange(len(srcs)) % 2 == 0, lengths, calls[-1]))  # half the rows read it all
    calls.append(lengths.clone())
    encoded = 0
    with torch.no_grad():
        for visible in calls:
            before = None if view._visible is None else view._visible.clone()
            got = view.cross(visible)
            encoded += len(srcs) if before is None else int((visible != before).sum())
            assert view.encoded_rows == encoded
            prefix = torch.where(torch.arange(view.src.shape[1])[None] < visible[:, None], view.src, PAD)
            want = model.cross_kv(model.encode(prefix))
            for (keys, values), (want_keys, want_values) in zip(got, want, strict=True):
                for row, seen in enumerate(visible.tolist()):
                    torch.testing.assert_close(keys[row, :, :seen], want_keys[row, :, :seen], rtol=1e-5, atol=1e-6)
                    torch.testing.assert_close(values[row, :, :seen], want_values[row, :, :seen], rtol=1e-5,
                                               atol=1e-6)
    assert encoded < len(srcs) * len(calls)


@pytest.mark.parametrize("scale", [8.0, 1.0])
def test_sbs_without_window_is_tail_beam_and_tail_with_beam_one_is_greedy(scale: float) -> None:
    model = tiny(True, scale=scale)
    srcs = sources(5, 6)
    greedy = wait_k(model, srcs, 2)
    tail = wait_k(model, srcs, 2, "tail", beam=4)
    assert wait_k(model, srcs, 2, "sbs", beam=4, window=0) == tail
    assert wait_k(model, srcs, 2, "tail", beam=1) == greedy
    sbs = wait_k(model, srcs, 2, "sbs", beam=3, window=2)
    assert all(list(s.delays) == [min(2 + i, len(src)) for i in range(len(s.tokens))] for s, src in zip(sbs, srcs))
    if scale == 1.0:  # flat distributions: the searches are not greedy search (at scale 8 they are, here)
        assert tail != greedy and sum(a != b for a, b in zip(sbs, greedy, strict=True)) >= 3


def test_two_step_beam_with_beam_vocab_finds_the_brute_force_best() -> None:
    model = tiny(True, seed=7)
    srcs = sources(6, 3)
    view = SourceView(model, srcs)
    rows = torch.arange(len(srcs))
    with torch.no_grad():
        logp, cache = model.decoder_step(torch.full((3,), BOS), None, view.cross(view.lengths), view.lengths, rows)
        beam = beam_steps(model, view.cross(view.lengths), rows, view.lengths, logp, cache, VOCAB, 2)
        for s, src in enumerate(srcs):
            scores = {}
            for a, b in itertools.product(range(VOCAB), repeat=2):
                lp = torch.log_softmax(model(torch.tensor([src]), torch.tensor([[BOS, a]])), -1)[0]
                scores[(a, b)] = float(lp[0, a]) + (0.0 if a == EOS and b == EOS else
                                                    float("-inf") if a == EOS else float(lp[1, b]))
            best = max(scores.values())
            top = int(beam.scores[s * VOCAB:(s + 1) * VOCAB].argmax()) + s * VOCAB
            assert float(beam.scores[top]) == pytest.approx(best, abs=1e-4)
            assert scores[tuple(beam.tokens[top].tolist())] == pytest.approx(best, abs=1e-4)


def test_beam_search_with_beam_vocab_chooses_the_best_kept_hypothesis_per_token() -> None:
    """Two steps of `beam_search` with b = |V| against whole-sequence passes (no caches, no beam code): the
    beam keeps the |V| best continuations by summed log-probability (every first token, then the best two-token
    ones, a hypothesis that ended with </s> at the first step among them), and the output is the kept
    hypothesis with the best log-probability per token, </s> counted; one cut at the limit counts as ended
    there, its forced </s> at no cost. </s> is boosted, so that ended and cut hypotheses compete (counted: the
    rules that leave out </s>, or charge nothing for the cut's end, pick another output often)."""
    checked, differs = 0, [0, 0]
    for seed in range(4):
        for boost in (0.5, 1.0, 1.5, 2.0):
            model = shaped(seed, boost=boost, scale=1.0, source_weight=1.0)
            srcs = sources(20 + seed, 6)
            view = SourceView(model, srcs)
            rows = torch.arange(len(srcs))
            with torch.no_grad():
                logp, cache = model.decoder_step(torch.full((len(srcs),), BOS), None, view.cross(view.lengths),
                                                 view.lengths, rows)
                out = beam_search(model, view.cross(view.lengths), rows, view.lengths, logp, cache, VOCAB,
                                  [2] * len(srcs))
                for src, got in zip(srcs, out, strict=True):
                    first = torch.log_softmax(model(torch.tensor([src]), torch.tensor([[BOS]])), -1)[0, 0]
                    kept = [((), float(first[EOS]), 1)]  # (tokens, summed score, tokens counted)
                    for a in range(VOCAB):
                        if a == EOS:
                            continue
                        second = torch.log_softmax(model(torch.tensor([src]), torch.tensor([[BOS, a]])), -1)[0, 1]
                        kept += [((a,) if b == EOS else (a, b), float(first[a] + second[b]), 2 if b == EOS else 3)
                                 for b in range(VOCAB)]
                    kept = sorted(kept, key=lambda h: -h[1])[:VOCAB]
                    assert got == list(max(kept, key=lambda h: h[1] / h[2])[0]), (seed, boost, src)
                    checked += 1
                    uncounted_eos = max(kept, key=lambda h: h[1] / max(len(h[0]), 1e-9))  # </s> left out
                    cut_tokens_only = max(kept, key=lambda h: h[1] / min(h[2], 2))  # the cut's end not counted
                    differs[0] += got != list(uncounted_eos[0])
                    differs[1] += got != list(cut_tokens_only[0])
    assert checked == 96 and min(differs) >= 3, differs


def test_force_finish_changes_nothing_when_the_whole_source_is_visible_from_the_start() -> None:
    """With k at least the longest source, every token is written with the whole source read, so
    force_finish masks nothing: every search's outputs equal those without it (</s> is boosted, so that
    they end early and a mask applied with the whole source read would show)."""
    model = shaped(0, boost=3.0, scale=3.0, source_weight=1.0)
    srcs = sources(11, 12)
    k = max(len(src) for src in srcs)
    for search in (lambda ff: wait_k(model, srcs, k, force_finish=ff),
                   lambda ff: wait_k(model, srcs, k, "tail", beam=3, force_finish=ff),
                   lambda ff: wait_k(model, srcs, k, "sbs", beam=3, window=2, force_finish=ff)):
        before = search(False)
        assert sum(len(t.tokens) < max_target_len(len(src)) for t, src in zip(before, srcs, strict=True)) >= 6
        assert search(True) == before


def _sbs_first_token_scores(model: MtTransformer, src: list[int], k: int, prefix: list[int], normalized: bool,
                            read_ahead: int = 0, force_finish: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Brute force of one wait-k SBS step with w = 1 and an exhaustive beam, by whole-sequence passes (no
    caches, no beam code): for each first token a, the best ranking score of a two-token continuation
    (a, b) of the committed `prefix`; also the next-token log-probabilities (greedy's choice).

    The step reads g = min(k + t, |x|) source tokens (t = len(prefix)). `model(src[:g], tgt, k)` lets target
    position i see min(k + i, g) source states: the committed positions i <= t see k + i, as when they were
    written, and the speculated position t + 1 sees g, not k + t + 1 (a speculation reads no further source);
    the causal encoder's states of src[:g] are those of the whole source's first g. `read_ahead` > 0 lets the
    speculated position see that many more (a wrong SBS, to show the test can tell). Scores: the sum of the
    two log-probabilities, or per token; a continuation starting with </s> ends there (one token, its
    log-probability), one ending with </s> counts it as its second token. `force_finish`: </s> is not a
    first token while g < |x|, nor a second one while g + 1 < |x| (the second token's write reads one more).
    The bidirectional model (test-time wait-k) is one whole-sequence pass over src[:g]: every target position
    sees all g states, whose encoding changes with g."""
    t, g = len(prefix), min(k + len(prefix), len(src))
    tgt = torch.tensor([[BOS] + prefix + [a] for a in range(VOCAB)])
    with torch.no_grad():
        limits = k if model.config.causal_encoder else None
        logp = torch.log_softmax(model(torch.tensor([src[:g + read_ahead]] * VOCAB), tgt, limits), -1)
    first, second = logp[0, t].clone(), logp[:, t + 1].clone()  # first[a]; second[a, b] after a
    if force_finish and g < len(src):
        first[EOS] = float("-inf")
    if force_finish and g + 1 < len(src):
        second[:, EOS] = float("-inf")
    scores = (first[:, None] + second).max(1).values / (2.0 if normalized else 1.0)
    scores[EOS] = first[EOS]
    return scores, first


@pytest.mark.parametrize("normalized, force_finish, causal", [(True, False, True), (False, False, True),
                                                             (True, True, True), (True, False, False)])
def test_wait_k_sbs_with_beam_vocab_and_window_one_commits_the_brute_force_best(normalized: bool,
                                                                                force_finish: bool,
                                                                                causal: bool) -> None:
    """b = |V| makes next^b_2 exhaustive, so at every step before the tail SBS (eqs. 4-5) must commit the
    first token of the best of all two-token continuations under the ranking. Unsharpened models with a
    strong source, so that the speculation often overrules the next-token argmax and a speculation that read
    one more source token would often commit another (both counted: the test is not one of greedy search).
    With force_finish, </s> is boosted, so that without the mask the best continuation would often end
    before the source is read (counted too). The bidirectional model (test-time wait-k) against whole-sequence
    passes over each source prefix."""
    cases = differ = steps = overruled = early_ends = read_ahead_differs = masked = 0
    for seed in (0, 1, 2):
        model = shaped(seed, boost=2.0) if force_finish else tiny(causal, seed, scale=1.0, source_weight=3.0)
        srcs = sources(40 + seed, 6)
        for k in (1, 2, 3):
            greedy = wait_k(model, srcs, k, force_finish=force_finish)
            out = wait_k(model, srcs, k, "sbs", beam=VOCAB, window=1, length_normalized=normalized,
                         force_finish=force_finish)
            for src, o, gr in zip(srcs, out, greedy, strict=True):
                cases += 1
                differ += o != gr
                for t in range(len(src) - k):  # steps that see less than the whole source; then the tail
                    chosen = o.tokens[t] if t < len(o.tokens) else EOS
                    prefix = list(o.tokens[:t])
                    scores, first = _sbs_first_token_scores(model, src, k, prefix, normalized,
                                                            force_finish=force_finish)
                    # the best, or one within rounding of it (no such near tie occurs here)
                    best = float(scores.max())
                    assert float(scores[chosen]) == pytest.approx(best, abs=1e-5), (seed, k, src, t)
                    steps += 1
                    overruled += chosen != int(first.argmax())
                    ahead, _ = _sbs_first_token_scores(model, src, k, prefix, normalized, read_ahead=1,
                                                       force_finish=force_finish)
                    read_ahead_differs += int(ahead.argmax()) != int(scores.argmax())
                    unmasked, _ = _sbs_first_token_scores(model, src, k, prefix, normalized)
                    masked += int(unmasked.argmax()) != int(scores.argmax())
                    if chosen == EOS:
                        assert o.end_delay == k + t and len(o.tokens) == t
                        early_ends += 1
                        break
                    assert o.delays[t] == k + t
                assert all(d == len(src) for d in o.delays[max(len(src) - k, 0):])
    counts = dict(cases=cases, differ=differ, steps=steps, overruled=overruled, read_ahead=read_ahead_differs,
                  masked=masked)
    assert steps > 100 and overruled >= 10 and read_ahead_differs >= 3 and differ >= cases // 2, counts
    if force_finish:
        assert early_ends == 0 and masked >= 5, counts
    elif not normalized:  # summed scores favour ending early (the module docstring)
        assert early_ends >= 5, early_ends


def _beam(tokens: list[list[int]], scores: list[float]) -> Beam:
    t = torch.tensor(tokens)
    return Beam(t, torch.tensor(scores), t[:, -1] == EOS, DecoderCache([], []), torch.zeros(len(tokens), VOCAB))


def test_speculation_ranking_per_token_stops_early_endings_winning() -> None:
    # sentence 0: an ending after one token (-1.5) against three tokens at -0.8 each (-2.4)
    # sentence 1: no ending, so both rankings agree
    state = _beam([[EOS, EOS, EOS], [4, 5, 6], [5, 6, 7], [6, 7, 8]], [-1.5, -2.4, -3.0, -2.0])
    assert best_speculation(state, 2, length_normalized=False).tolist() == [0, 3]
    assert best_speculation(state, 2, length_normalized=True).tolist() == [1, 3]
    # an ending after two tokens competes per token: -1.0 / 2 beats -1.8 / 3
    state = _beam([[4, EOS, EOS], [4, 5, 6]], [-1.0, -1.8])
    assert best_speculation(state, 2, length_normalized=True).tolist() == [0]


def test_speculation_rankings_agree_when_no_hypothesis_ends() -> None:
    g = torch.Generator().manual_seed(3)
    for _ in range(20):
        tokens = torch.randint(4, VOCAB, (12, 4), generator=g).tolist()
        state = _beam(tokens, (-torch.rand(12, generator=g) * 10).tolist())
        assert best_speculation(state, 3, True).tolist() == best_speculation(state, 3, False).tolist()


@pytest.mark.parametrize("scale, threshold", [(8.0, 0.3), (1.0, 0.4)])
def test_sbs_rankings_share_the_wait_k_schedule(scale: float, threshold: float) -> None:
    model = tiny(True, seed=2, scale=scale)
    srcs = sources(9, 8)
    greedy, chunked_greedy = wait_k(model, srcs, 2), adaptive(model, srcs, threshold)
    for normalized in (True, False):
        out = wait_k(model, srcs, 2, "sbs", beam=4, window=3, length_normalized=normalized)
        assert all(list(t.delays) == [min(2 + i, len(src)) for i in range(len(t.tokens))]
                   for t, src in zip(out, srcs, strict=True))
        chunked = adaptive(model, srcs, threshold=threshold, method="sbs", beam=3, window=2,
                           length_normalized=normalized)
        assert all(list(t.delays) == sorted(t.delays) for t in chunked)
        if scale == 1.0:  # the searches are not greedy search, and the policy writes in several chunks
            assert sum(a != b for a, b in zip(out, greedy, strict=True)) >= 2
            assert sum(a != b for a, b in zip(chunked, chunked_greedy, strict=True)) >= 2
            assert sum(len(set(t.delays)) > 1 for t in chunked_greedy) >= 4


@pytest.mark.parametrize("seed, scale", [(0, 8.0), (1, 1.0)])
def test_adaptive_policy_extremes(seed: int, scale: float) -> None:
    model = tiny(True, seed, scale)
    srcs = sources(8)
    read_all = adaptive(model, srcs, threshold=1.0)
    assert read_all == wait_k(model, srcs, k=50)
    eager = adaptive(model, srcs, threshold=0.0)
    assert all(set(t.delays) <= {1} and t.end_delay == 1 for t in eager)
    chunked_greedy = adaptive(model, srcs, threshold=0.3)
    if scale == 1.0:  # the policy writes in several chunks
        assert sum(len(set(t.delays)) > 1 for t in chunked_greedy) >= 2
    for method in ("beam", "sbs"):
        out = adaptive(model, srcs, threshold=0.3, method=method, beam=3, window=1)
        assert len(out) == len(srcs)
        if scale == 1.0:  # the chunk searches are not greedy search (at scale 8 they are, here)
            assert sum(a != b for a, b in zip(out, chunked_greedy, strict=True)) >= 2
        assert all(list(t.delays) == sorted(t.delays) for t in out)
        assert all(max(t.delays, default=1) <= t.end_delay <= len(src) for t, src in zip(out, srcs, strict=True))


def test_every_search_runs_without_autograd(monkeypatch: pytest.MonkeyPatch) -> None:
    model, seen = tiny(True), []
    step = model.decoder_step
    monkeypatch.setattr(model, "decoder_step", lambda *a, **k: (seen.append(torch.is_grad_enabled()), step(*a, **k))[1])
    wait_k(model, sources(2), 2, "sbs", beam=2, window=1)
    adaptive(model, sources(2), 0.5, "sbs", beam=2, window=1)
    full_sentence(model, sources(2), beam=2)
    assert seen and not any(seen)


def test_bad_arguments_name_the_value() -> None:
    model = tiny(True)
    with pytest.raises(ValueError, match="source 0"):
        wait_k(model, [[]], 1)
    with pytest.raises(ValueError, match="k must be"):
        wait_k(model, sources(1), 0)
    with pytest.raises(ValueError, match="method"):
        wait_k(model, sources(1), 1, method="x")
    with pytest.raises(ValueError, match="threshold"):
        adaptive(model, sources(1), 1.5)
    with pytest.raises(ValueError, match="beam"):
        full_sentence(model, sources(1), beam=0)
    vocabulary = model.config.vocab_size  # a beam keeps distinct tokens: no more than the vocabulary
    for search in (lambda: wait_k(model, sources(1), 2, "sbs", beam=vocabulary + 1, window=2),
                   lambda: adaptive(model, sources(1), 0.5, "beam", beam=vocabulary + 1)):
        with pytest.raises(ValueError, match=f"beam must be 1..{vocabulary} .*got beam {vocabulary + 1}"):
            search()
    too_long = [5] * longest_source(96) + [EOS]  # tiny models have 96 positions
    for search in (lambda s: wait_k(model, s, 3), lambda s: adaptive(model, s, 0.5),
                   lambda s: full_sentence(model, s)):
        with pytest.raises(ValueError, match=f"source 0 has {len(too_long)} tokens.*Fix: split"):
            search([too_long])


def test_the_longest_source_and_its_longest_output_fit_the_positions() -> None:
    """A source of `longest_source` tokens whose output never ends (</s> suppressed) runs to the length limit
    without running out of positions, under every search."""
    model = shaped(0, boost=-1e4)
    src = [5] * (longest_source(96) - 1) + [EOS]
    for out in (wait_k(model, [src], 2), wait_k(model, [src], 2, "sbs", beam=2, window=1),
                adaptive(model, [src], 0.5), adaptive(model, [src], 0.5, "sbs", beam=2, window=5),
                full_sentence(model, [src], beam=2)):
        assert len(out[0].tokens) == max_target_len(len(src))


def test_a_sentence_at_its_length_limit_decodes_as_alone_in_any_batch() -> None:
    """A model that never writes </s> runs every sentence to its own limit (2 |x| + 10): batched with a
    longer sentence, a short one must get exactly its output alone (before, the batch ran to the longest
    limit and cut the rows after, which can pick another hypothesis)."""
    short, long_ = [5, 6, 7, EOS], [4, 5, 6, 7, 8] * 3 + [4, 5, EOS]
    at_limit = 0
    for seed in range(8):
        torch.manual_seed(seed)
        model = MtTransformer(MtModelConfig(vocab_size=VOCAB, d_model=16, heads=2, ffn=32, encoder_layers=2,
                                            decoder_layers=2, dropout=0.0, causal_encoder=True,
                                            max_positions=128)).eval()
        with torch.no_grad():  # </s> made unlikely, so the limit decides
            model.embed.weight[EOS] *= -1.0
            model.embed.weight[EOS] -= 0.5 * model.embed.weight.mean(0)
        for decode in (lambda s: full_sentence(model, s, 4), lambda s: wait_k(model, s, 2, "tail", beam=4),
                       lambda s: adaptive(model, s, 0.3), lambda s: adaptive(model, s, 0.3, "sbs", beam=3, window=2)):
            alone, batched = decode([short])[0], decode([short, long_])[0]
            assert alone == batched
            at_limit += len(alone.tokens) == 2 * len(short) + 10
    assert at_limit > 0  # some outputs did run to the limit, so the case is tested


@pytest.mark.parametrize("causal", [True, False])
def test_exact_ties_at_a_length_limit_decode_as_alone_in_a_batch(causal: bool) -> None:
    """Zero embeddings make every next-token distribution uniform, so all hypotheses tie exactly. A sentence
    whose hypotheses have all ended (here at its own length limit) while the batch steps on for a longer one
    must keep them in their order: before, each extra step let topk reorder the tied hypotheses, and the
    batch picked another output than the sentence alone."""
    model = tiny(causal, scale=0.0)
    sources = [[5, EOS], [6, 4, EOS], [4, 5, 6, 7, 8, 6, EOS], [EOS]]
    for decode in (lambda s: full_sentence(model, s, 4), lambda s: wait_k(model, s, 2, "tail", beam=4),
                   lambda s: wait_k(model, s, 2, "sbs", beam=4, window=2)):
        assert decode(sources) == [decode([s])[0] for s in sources]


def test_a_greedy_chunk_batch_never_decodes_a_row_past_the_models_positions() -> None:
    """One greedy chunk batch (the adaptive policy's) holds a row two positions short of the model's last
    (room 2) and a row with room for a whole chunk: the first must leave the batch when its chunk ends, not be
    decoded at a position the model lacks, and each row's chunk and kept cache must be the row's alone."""
    torch.manual_seed(3)
    model = MtTransformer(MtModelConfig(vocab_size=VOCAB, d_model=16, heads=2, ffn=32, encoder_layers=2,
                                        decoder_layers=2, dropout=0.0, causal_encoder=True, max_positions=32)).eval()
    with torch.no_grad():  # </s> made unlikely, so that the rows write on
        model.embed.weight[EOS] *= -1.0
        model.embed.weight[EOS] -= 0.5 * model.embed.weight.mean(0)
    srcs = [[5, 6, EOS], [4, 5, 6, 7, EOS]]
    view = SourceView(model, srcs)
    visible = view.lengths.clone()  # the whole source read: the policy writes whatever its confidence
    cross = view.cross(visible)
    prefixes = [[BOS] + [5, 6, 7] * 10, [BOS]]  # 31 and 1 positions
    alone = []
    with torch.no_grad():
        for i, prefix in enumerate(prefixes):
            row = torch.tensor([i])
            logp, cache = model.decoder_positions(torch.tensor([prefix]), None, cross, visible[row], row)
            alone.append((logp, cache, *_greedy_chunk(model, cross, row, visible[row], logp, cache, 1.0, view,
                                                      lookahead_room(model, cache).tolist())))
        cache = DecoderCache.stack([c for _, c, _, _ in alone])
        assert lookahead_room(model, cache).tolist() == [2, 32]
        chunks, kept = _greedy_chunk(model, cross, torch.arange(2), visible, torch.cat([lp for lp, _, _, _ in alone]),
                                     cache, 1.0, view, lookahead_room(model, cache).tolist())
    assert [len(c) for c in chunks] == [2, MAX_CHUNK]
    for i, (_, _, alone_chunks, alone_kept) in enumerate(alone):
        assert chunks[i] == alone_chunks[0]
        assert kept[i].width == len(prefixes[i]) + len(chunks[i]) - 1 == alone_kept[0].width
        assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(kept[i].keys, alone_kept[0].keys, strict=True))


# ---- ending before the source is read (force_finish) --------------------------------------------------------


def test_force_finish_ends_every_output_with_the_whole_source_read() -> None:
    """With </s> boosted, every search ends many outputs early by default; with force_finish none: every
    output's </s> comes with the whole source read (end_delay == |x|), the wait-k schedule is kept, and greedy
    search writes what it wrote before up to where it had ended."""
    model = shaped(0, boost=3.0, scale=3.0, source_weight=1.0)
    srcs = sources(11, 12)
    searches = {
        "greedy": lambda ff: wait_k(model, srcs, 2, force_finish=ff),
        "tail": lambda ff: wait_k(model, srcs, 2, "tail", beam=3, force_finish=ff),
        "sbs": lambda ff: wait_k(model, srcs, 2, "sbs", beam=3, window=2, force_finish=ff),
        "sbs_sum": lambda ff: wait_k(model, srcs, 2, "sbs", beam=3, window=2, length_normalized=False,
                                     force_finish=ff),
        "adaptive_greedy": lambda ff: adaptive(model, srcs, 0.3, force_finish=ff),
        "adaptive_beam": lambda ff: adaptive(model, srcs, 0.3, "beam", beam=3, force_finish=ff),
        "adaptive_sbs": lambda ff: adaptive(model, srcs, 0.3, "sbs", beam=3, window=2, force_finish=ff),
    }
    outputs = {}
    for name, search in searches.items():
        before, forced = search(False), search(True)
        outputs[name] = (before, forced)
        assert sum(t.end_delay < len(src) for t, src in zip(before, srcs, strict=True)) >= 6, name
        assert [t.end_delay for t in forced] == [len(src) for src in srcs], name
        for t, src in zip(forced, srcs, strict=True):
            assert EOS not in t.tokens and list(t.delays) == sorted(t.delays) and max(t.delays, default=1) <= len(src)
            if not name.startswith("adaptive"):
                assert list(t.delays) == [min(2 + i, len(src)) for i in range(len(t.tokens))], name
    for before, forced in zip(*outputs["greedy"], strict=True):
        assert forced.tokens[:len(before.tokens)] == before.tokens
    # the adaptive policy still writes with part of the source read (force_finish does not just wait)
    assert sum(any(d < len(src) for d in t.delays) for t, src in zip(outputs["adaptive_sbs"][1], srcs)) >= 4


def test_force_finish_changes_nothing_where_no_output_ends_early() -> None:
    model = tiny(True, 3)
    srcs = sources(12, 8)
    for search in (lambda ff: wait_k(model, srcs, 2, "sbs", beam=3, window=2, force_finish=ff),
                   lambda ff: wait_k(model, srcs, 3, force_finish=ff)):
        before = search(False)
        if all(t.end_delay == len(src) for t, src in zip(before, srcs, strict=True)):
            assert search(True) == before


def test_force_finish_reads_the_rest_of_the_source_at_the_length_limit() -> None:
    """An eager policy (threshold 0) that may not end writes until the length limit with one source token
    read; its </s> then comes after the rest of the source."""
    model = tiny(True, 0, scale=8.0)
    srcs = sources(8)
    for t, src in zip(adaptive(model, srcs, 0.0, force_finish=True), srcs, strict=True):
        assert t.end_delay == len(src)
        assert len(t.tokens) == max_target_len(len(src)) or len(src) == 1


# ---- the adaptive policy's chunk searches against brute force ----------------------------------------------


def _positions_logp(model: MtTransformer, src: list[int], targets: list[list[int]],
                    limits: list[int]) -> torch.Tensor:
    """Next-token log-probabilities (R, T, V) at every position of each target row (same length T) by one
    whole-sequence pass, position i seeing the first `limits[i]` source states (no caches, no search code;
    a `_Shaped` model's knobs applied per position)."""
    rows, length = len(targets), len(targets[0])
    with torch.no_grad():
        source = torch.tensor([src] * rows)
        memory = model.encode(source)
        cross = torch.arange(len(src))[None, None] < torch.tensor(limits)[None, :, None]
        causal = torch.ones(length, length, dtype=torch.bool).tril()[None]
        x = model._embed(torch.tensor(targets))
        for block in model.decoder:
            x = block(x, causal, memory, cross.expand(rows, -1, -1))
        logp = torch.log_softmax(model.decoder_norm(x) @ model.embed.weight.T, -1)
        if isinstance(model, _Shaped):
            logp = model.shape(logp, torch.arange(length)[None].expand(rows, -1),
                               torch.tensor(limits)[None].expand(rows, -1))
        return logp


def _two_token_scores(model: MtTransformer, src: list[int], prefix: list[int], limits: list[int], v: int,
                      normalized: bool, force_finish: bool) -> torch.Tensor:
    """(V, V) ranking scores of every two-token continuation (a, b) of `prefix` (written at `limits`) with v
    source tokens visible: a = </s> ends there (one token, row a = </s> holds its score in every column), b =
    </s> counts as the second token; per token or summed. `force_finish`: no </s> while v < |x|."""
    logp = _positions_logp(model, src, [[BOS, *prefix, a] for a in range(VOCAB)], [*limits, v, v])
    first, second = logp[0, len(prefix)].clone(), logp[:, len(prefix) + 1].clone()
    if force_finish and v < len(src):
        first[EOS] = second[:, EOS] = float("-inf")
    scores = (first[:, None] + second) / (2.0 if normalized else 1.0)
    scores[EOS] = first[EOS]
    return scores


def _check_adaptive_chunks(model: MtTransformer, src: list[int], threshold: float, out: Translation, size: int,
                           normalized: bool, force_finish: bool, commit_all: bool) -> dict[str, int]:
    """Replay the confidence policy by whole-sequence passes (READ/WRITE, the greedy chunk and its length n)
    and check the output's delays against it; at each chunk of `size` tokens check what was committed
    against every two-token continuation: the first token of the best (chunk SBS, n = 1, w = 1), or both
    (`commit_all`: beam search over a chunk of n = 2, w = 0). Other chunks are taken from the output."""
    counts = {"checked": 0, "overruled": 0, "chunks": 0, "masked": 0}
    toks: list[int] = []
    delays: list[int] = []
    v = 1
    limit = max_target_len(len(src))

    def policy_logp(written: list[int]) -> torch.Tensor:
        lp = _positions_logp(model, src, [[BOS, *toks, *written]], [*delays, *[v] * (len(written) + 1)])[0, -1]
        lp = lp.clone()
        if force_finish and v < len(src):
            lp[EOS] = float("-inf")
        return lp

    while True:
        ended = v >= len(src)
        lp = policy_logp([])
        if not (float(lp.max().exp()) >= threshold or ended):
            v += 1  # READ
            continue
        greedy: list[int] = []  # the greedy chunk: argmax while the policy keeps writing
        for step in range(MAX_CHUNK):
            greedy.append(int(lp.argmax()))
            if greedy[-1] == EOS or step == MAX_CHUNK - 1:
                break
            lp = policy_logp(greedy)
            if not (float(lp.max().exp()) >= threshold or ended):
                break
        counts["chunks"] += 1
        rest = list(out.tokens[len(toks):])  # a chunk committed whole leaves at least n tokens here
        if len(greedy) == size and len(toks) + size <= limit:
            scores = _two_token_scores(model, src, toks, delays, v, normalized, force_finish)
            if commit_all:  # the chosen chunk: what was written, then </s> where the output ended
                pair = (rest[:2] + [EOS, EOS])[:2]
                got, overruled = float(scores[pair[0], pair[1]]), pair != (greedy + [EOS])[:2]
            else:
                first = rest[0] if rest else EOS
                got, overruled = float(scores[first].max()), first != greedy[0]
            # the best, or one within rounding of it
            assert got == pytest.approx(float(scores.max()), abs=1e-5), (src, toks, v)
            counts["checked"] += 1
            counts["overruled"] += overruled
            if force_finish:  # where the mask decided the chunk
                unmasked = _two_token_scores(model, src, toks, delays, v, normalized, False)
                counts["masked"] += int(unmasked.argmax()) != int(scores.argmax())
        chunk = rest[:len(greedy)]
        assert list(out.delays[len(toks):len(toks) + len(chunk)]) == [v] * len(chunk), (src, toks, v)
        toks += chunk
        delays += [v] * len(chunk)
        if len(chunk) < len(greedy) or len(toks) >= limit:  # the output ended with this chunk
            assert toks == list(out.tokens)
            at_limit = len(toks) >= limit and force_finish
            assert out.end_delay in ((v, len(src)) if at_limit else (v,)), (src, toks, v)
            return counts


def _long_sources(seed: int, count: int = 6) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(4, VOCAB, (int(torch.randint(4, 10, (1,), generator=g)),), generator=g).tolist() + [EOS]
            for _ in range(count)]


@pytest.mark.parametrize("method, size, window, sharp, flat, normalized, force_finish", [
    ("sbs", 1, 1, 2.0, 0.8, True, False), ("sbs", 1, 1, 2.0, 0.8, False, False), ("sbs", 1, 1, 2.0, 0.8, True, True),
    ("beam", 2, 0, 1.5, 0.6, True, False), ("beam", 2, 0, 1.5, 0.6, False, False)])
def test_adaptive_chunk_search_with_beam_vocab_matches_enumeration(method: str, size: int, window: int,
                                                                   sharp: float, flat: float, normalized: bool,
                                                                   force_finish: bool) -> None:
    """b = |V| makes two steps of beam search exhaustive: chunk SBS with n = 1, w = 1 must commit the first
    token of the best two-token continuation, and beam search over a chunk of n = 2 (w = 0) the best
    two-token chunk, under the ranking; the policy's READs and WRITEs (the delays) must be the replay's. A
    paced model makes chunks of n tokens common; some chunks differ from the greedy ones (so greedy chunks,
    or a search that read further, would fail here). With force_finish, </s> is boosted, so that the mask
    often decides the chunk."""
    totals = {"checked": 0, "overruled": 0, "chunks": 0, "masked": 0}
    for seed in range(4):
        model = shaped(seed, boost=2.0 if force_finish else 0.0, chunk=size, sharp=sharp, flat=flat)
        srcs = _long_sources(60 + seed)
        out = adaptive(model, srcs, 0.35, method, beam=VOCAB, window=window, length_normalized=normalized,
                       force_finish=force_finish)
        if force_finish:
            assert all(t.end_delay == len(src) for t, src in zip(out, srcs, strict=True))
        for src, t in zip(srcs, out, strict=True):
            counts = _check_adaptive_chunks(model, src, 0.35, t, size, normalized, force_finish,
                                            commit_all=method == "beam")
            for key, value in counts.items():
                totals[key] += value
    assert totals["checked"] >= 20 and totals["overruled"] >= 4, totals
    if force_finish:  # </s> is boosted there, so that the mask often decides
        assert totals["masked"] >= 3, totals
