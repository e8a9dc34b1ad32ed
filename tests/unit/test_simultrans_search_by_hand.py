"""Simultaneous decoding against hand computations, on a model whose next-token distribution is a small table.

The model is a real (tiny, causal) `MtTransformer`, so the searches' caches, positions and batching run as
usual, but its log-probabilities are replaced by a table of probabilities (binary fractions, exact in float32:
1, 3/4, 1/2, 3/8, 1/4, 1/8; or exact ties) that depends only on the previous token, the target position and
the number of source tokens visible. That makes every decision checkable by hand: the confidence policy's
comparison with a threshold the most probable token equals exactly, the greedy chunk and the beam search
over it, speculative beam search overruling the next-token argmax and its ranking of speculations that end,
force_finish's masking of </s> one source token before the end (greedy wait-k, a chunk's window), exact ties,
each sentence's own length limit in a batch, and sources that do not end in </s>."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from specbench.simultrans.model import MtTransformer
from specbench.simultrans.search import Translation, adaptive, full_sentence, max_target_len, wait_k
from specbench.simultrans.settings import MtModelConfig
from specbench.simultrans.tokenizer import EOS

pytestmark = pytest.mark.unit

Rule = Callable[[int, int, int], dict[int, float]]  # (previous token, target position, visible) -> P


class _Table(MtTransformer):
    """A causal model whose next-token log-probabilities are log(rule(previous token, target position,
    visible source tokens)); tokens the rule leaves out get -1e9. The network still runs, for the caches."""

    rule: Rule

    def decoder_positions(self, tokens, cache, cross, source_len,  # type: ignore[no-untyped-def]
                          rows=None, group=1):
        _, new_cache = super().decoder_positions(tokens, cache, cross, source_len, rows, group)
        start = torch.zeros(tokens.shape[0], dtype=torch.long) if cache is None else cache.lengths()
        position = start + tokens.shape[1] - 1  # the target position whose token is predicted
        logp = torch.full((tokens.shape[0], self.config.vocab_size), -1e9)
        for i in range(tokens.shape[0]):
            for token, p in self.rule(int(tokens[i, -1]), int(position[i]), int(source_len[i])).items():
                logp[i, token] = torch.log(torch.tensor(p))
        return logp, new_cache


def table(rule: Rule) -> _Table:
    torch.manual_seed(0)
    model = _Table(MtModelConfig(vocab_size=7, d_model=8, heads=2, ffn=16, encoder_layers=1, decoder_layers=1,
                                 dropout=0.0, causal_encoder=True, max_positions=96))
    model.rule = rule
    return model.eval()


FLAT = {4: 0.25, 5: 0.25, 6: 0.25, EOS: 0.25}  # most probable token at 1/4


def test_the_table_probabilities_are_exact_in_float32() -> None:
    """The hand computations below compare probabilities with thresholds for equality: they must survive
    log and exp in float32 exactly."""
    for p in (1.0, 0.75, 0.5, 0.375, 0.25, 0.125):
        assert float(torch.log(torch.tensor(p)).exp()) == p


def _chunk_rule(previous: int, position: int, visible: int) -> dict[int, float]:
    # position 0: flat with one source token, then 4 at 1/2 (6 at 3/8);
    # position 1: 5 at 1/2 after 4, 5 certain after 6;
    # position 2: flat until 4 source tokens are visible, then </s> at 3/4
    if position == 0:
        return FLAT if visible < 2 else {4: 0.5, 6: 0.375, 5: 0.125}
    if position == 1:
        return {5: 1.0} if previous == 6 else {5: 0.5, 4: 0.25, 6: 0.25}
    return FLAT if visible < 4 else {EOS: 0.75, 4: 0.25}


def test_the_confidence_policy_writes_when_the_top_probability_equals_the_threshold() -> None:
    """Threshold 1/2 (WRITE when the top probability is >= 1/2). Source of 5 tokens. v = 1: top 1/4, READ;
    v = 2: top exactly 1/2, WRITE a chunk: 4, then 5 (1/2 again, the chunk goes on), then position 2 is flat
    (1/4): the chunk ends; READ at v = 2 and v = 3; v = 4: </s> at 3/4, the output ends with 4 tokens read."""
    model = table(_chunk_rule)
    src = [5, 5, 5, 5, EOS]
    assert adaptive(model, [src], 0.5) == [Translation((4, 5), (2, 2), 4)]
    # a threshold just above 1/2 waits for the source's end (v = 5): the same tokens, written at 5
    assert adaptive(model, [src], 0.5 + 1e-6) == [Translation((4, 5), (5, 5), 5)]


@pytest.mark.parametrize("method, window", [("beam", 0), ("sbs", 1)])
def test_a_chunk_whose_confidence_equals_the_threshold_is_searched_whole(method: str, window: int) -> None:
    """The greedy chunk at v = 2 is (4, 5): its second token's probability, 1/2, equals the threshold, so
    the chunk has n = 2 tokens. Beam search over the chunk (b = 3) compares two-token chunks:
    P(4, 5) = 1/2 * 1/2 = 1/4 < P(6, 5) = 3/8 * 1 = 3/8, so (6, 5) is committed, both at v = 2. Chunk SBS
    (w = 1) looks one flat step further (1/4 for every third token): 1/4 * 1/4 < 3/8 * 1/4, the same chunk.
    (Beam search over a chunk cut at its first token would commit the argmax 4 instead.)"""
    model = table(_chunk_rule)
    got = adaptive(model, [[5, 5, 5, 5, EOS]], 0.5, method, beam=3, window=window)
    assert got == [Translation((6, 5), (2, 2), 4)]
    assert adaptive(model, [[5, 5, 5, 5, EOS]], 0.5, "greedy") == [Translation((4, 5), (2, 2), 4)]


def test_threshold_one_writes_only_certain_tokens_before_the_source_ends() -> None:
    """Threshold 1 (the top probability must be exactly 1): token 4 is certain at positions 0 and 1 whatever
    is read, so both are written at v = 1; position 2 is 3/4 likely </s> until the source ends (3 tokens),
    where </s> becomes certain -- READ, READ, then the output ends with the whole source read."""
    def rule(previous: int, position: int, visible: int) -> dict[int, float]:
        if position < 2:
            return {4: 1.0}
        return {EOS: 1.0} if visible >= 3 else {EOS: 0.75, 6: 0.25}

    model = table(rule)
    assert adaptive(model, [[5, 6, EOS]], 1.0) == [Translation((4, 4), (1, 1), 3)]
    assert adaptive(model, [[5, 6, EOS]], 0.75) == [Translation((4, 4), (1, 1), 1)]  # </s> at 3/4 is enough


@pytest.mark.parametrize("length", [2, 3])
def test_chunk_sbs_with_force_finish_may_not_end_in_its_window_before_the_source_is_read(length: int) -> None:
    """Chunk SBS, n = 1, w = 1, threshold 1/2, force_finish, a source of 2 or 3 tokens. v = 1: 4 at 1/2 is
    written as a chunk of one (after 4 the best token but </s> has 1/8). The speculation's second step is
    written with the source still unread, so </s> is masked there too: P(4, 4) = P(4, 5) = 1/2 * 1/8 = 1/16
    < P(6, 4) = P(6, 5) = 3/8 * 1/4 = 3/32, and 6 is committed (with </s> allowed, P(4, </s>) = 3/8 would
    commit 4). After 6 nothing but </s> reaches 1/2: READ until the source has ended, and there </s> (1/2)
    ends the output, beating (5, </s>) per token: 1/2 > (1/4 * 3/4) ** (1/2)."""
    def rule(previous: int, position: int, visible: int) -> dict[int, float]:
        if position == 0:
            return {4: 0.5, 6: 0.375, 5: 0.125}
        if position == 1:
            return {EOS: 0.75, 4: 0.125, 5: 0.125} if previous == 4 else {EOS: 0.5, 4: 0.25, 5: 0.25}
        return {EOS: 0.75, 4: 0.25}

    model = table(rule)
    src = [5] * (length - 1) + [EOS]
    assert adaptive(model, [src], 0.5, "sbs", beam=4, window=1, force_finish=True) == [
        Translation((6,), (1,), length)]
    # without force_finish the speculation (4, </s>) wins, and </s> (3/4 after 4) ends the output at once
    assert adaptive(model, [src], 0.5, "sbs", beam=4, window=1) == [Translation((4,), (1,), 1)]


def test_exact_ties_go_to_the_lowest_token_id_and_sbs_without_window_is_greedy() -> None:
    """4, 5 and 6 tie exactly (1/3 each) at the first three positions, then </s> is certain. Greedy wait-k
    (k = 2, a source of 6 tokens) takes the first maximum, the lowest id: (4, 4, 4) at delays 2, 3, 4, and
    </s> at 5. SBS with w = 0 speculates nothing, so it commits the next-token argmax: the same output;
    so does the tail method (the tail starts with the whole source read, after </s> here)."""
    def rule(previous: int, position: int, visible: int) -> dict[int, float]:
        return {4: 1 / 3, 5: 1 / 3, 6: 1 / 3} if position < 3 else {EOS: 1.0}

    model = table(rule)
    src = [5, 6, 5, 6, 5, EOS]
    want = [Translation((4, 4, 4), (2, 3, 4), 5)]
    assert wait_k(model, [src], 2) == want
    assert wait_k(model, [src], 2, "sbs", beam=3, window=0) == want
    assert wait_k(model, [src], 2, "tail", beam=3) == want


@pytest.mark.parametrize("beam, window", [(1, 1), (2, 1), (3, 2), (4, 1)])
def test_exact_ties_go_to_the_lowest_token_id_in_every_beam_search(beam: int, window: int) -> None:
    """3, 4, 5 and 6 tie exactly (1/4 each) at the first three positions, then </s> is certain. Every search
    writes (3, 3, 3) as greedy does: the beam keeps the lowest ids among tied candidates and the best of
    tied hypotheses is the lowest in token order (torch.topk's own order of ties varies with the beam)."""
    def rule(previous: int, position: int, visible: int) -> dict[int, float]:
        return {6: 0.25, 5: 0.25, 4: 0.25, 3: 0.25} if position < 3 else {EOS: 1.0}

    model, src = table(rule), [5, 6, 5, 6, 5, EOS]
    assert wait_k(model, [src], 2, "sbs", beam=beam, window=window) == [Translation((3, 3, 3), (2, 3, 4), 5)]
    assert full_sentence(model, [src], beam)[0].tokens == (3, 3, 3)
    for method in ("beam", "sbs"):
        assert adaptive(model, [src], 0.25, method, beam=beam, window=window)[0].tokens == (3, 3, 3)


def test_wait_k_sbs_commits_the_first_token_of_the_best_speculation() -> None:
    """k = 1, w = 1, b = 3, a source of 4 tokens. t = 0 (v = 1): next-token 4 at 1/2, 6 at 3/8, 5 at 1/8;
    after 4 the best is 6 at 1/2, after 6 or 5 token 5 is certain. Two-step speculations: (4, 6) = 1/4,
    (6, 5) = 3/8, (5, 5) = 1/8: 6 is committed where greedy writes 4. t = 1 (v = 2): after 6, 5 is certain
    and then </s> (3/4) -- commit 5. t = 2 (v = 3): </s> now (3/4 per token) beats (4, </s>)
    ((1/4 * 3/4) ** (1/2) ~ 0.43): the output ends with 3 tokens read. Greedy: 4, 6, then </s> at v = 3."""
    def rule(previous: int, position: int, visible: int) -> dict[int, float]:
        if position == 0:
            return {4: 0.5, 6: 0.375, 5: 0.125}
        if position == 1:
            return {6: 0.5, 4: 0.25, 5: 0.25} if previous == 4 else {5: 1.0}
        return {EOS: 0.75, 4: 0.25}

    model = table(rule)
    src = [5, 5, 5, EOS]
    assert wait_k(model, [src], 1, "sbs", beam=3, window=1) == [Translation((6, 5), (1, 2), 3)]
    assert wait_k(model, [src], 1) == [Translation((4, 6), (1, 2), 3)]


def test_sbs_per_token_ranking_does_not_end_where_the_summed_ranking_does() -> None:
    """k = 1, w = 1, a source of 5 tokens. t = 0 (v = 1): </s> at 3/8 against 4 at 1/2 followed by 6 at 1/2.
    Summed: log 3/8 > log 1/4, the speculation that ends wins and the output is empty, ended at v = 1. Per
    token: 3/8 < (1/4) ** (1/2) = 1/2, so 4 is committed; then 6 (1/2, then </s> certain: (1/2) ** (1/2)
    per token) at v = 2, and </s> at v = 3 -- greedy's output too."""
    def rule(previous: int, position: int, visible: int) -> dict[int, float]:
        if position == 0:
            return {4: 0.5, EOS: 0.375, 5: 0.125}
        return {6: 0.5, 4: 0.25, 5: 0.25} if position == 1 else {EOS: 1.0}

    model = table(rule)
    src = [5, 5, 5, 5, EOS]
    per_token = wait_k(model, [src], 1, "sbs", beam=3, window=1)
    assert per_token == [Translation((4, 6), (1, 2), 3)] == wait_k(model, [src], 1)
    summed = wait_k(model, [src], 1, "sbs", beam=3, window=1, length_normalized=False)
    assert summed == [Translation((), (), 1)]


def test_every_search_cuts_each_sentence_of_a_batch_at_its_own_length_limit() -> None:
    """A model that never writes </s> (4 at 3/4, 5 at 1/4): every output runs to 2 |x| + 10 tokens, each
    sentence's own limit in a batch with a longer one (3 tokens: 16; 13 tokens: 36)."""
    model = table(lambda previous, position, visible: {4: 0.75, 5: 0.25})
    srcs = [[5, 6, EOS], [5] * 12 + [EOS]]
    assert [max_target_len(len(s)) for s in srcs] == [16, 36]
    for out in (full_sentence(model, srcs), full_sentence(model, srcs, beam=2), wait_k(model, srcs, 2),
                wait_k(model, srcs, 2, "tail", beam=2), wait_k(model, srcs, 2, "sbs", beam=2, window=2),
                adaptive(model, srcs, 0.5), adaptive(model, srcs, 0.5, "sbs", beam=2, window=2)):
        assert [t.tokens for t in out] == [(4,) * 16, (4,) * 36]


@pytest.mark.parametrize("method", ["greedy", "tail"])
def test_greedy_wait_k_with_force_finish_may_not_end_one_token_before_the_source_ends(method: str) -> None:
    """k = 1, a source of 3 tokens, </s> at 3/4 from position 1 on. v = 1: 4 (3/4). v = 2, one source token
    still unread: </s> is masked, so 5 (1/4, the best of the rest) is written. v = 3: </s> ends the output
    with the whole source read. Without force_finish the output ends at v = 2 after one token."""
    model = table(lambda previous, position, visible:
                  {4: 0.75, EOS: 0.25} if position == 0 else {EOS: 0.75, 5: 0.25})
    src = [5, 6, EOS]
    assert wait_k(model, [src], 1, method, beam=2, force_finish=True) == [Translation((4, 5), (1, 2), 3)]
    assert wait_k(model, [src], 1, method, beam=2) == [Translation((4,), (1,), 2)]


def test_a_source_must_end_in_the_end_of_sentence_token() -> None:
    model = table(lambda previous, position, visible: {EOS: 1.0})
    for search in (lambda s: wait_k(model, s, 1), lambda s: adaptive(model, s, 0.5),
                   lambda s: full_sentence(model, s)):
        with pytest.raises(ValueError, match="source 1 must be a non-empty id list ending in </s>"):
            search([[5, EOS], [5, 6]])
        assert search([[EOS]]) == [Translation((), (), 1)]  # </s> certain: an empty output


def test_speculations_near_the_length_limit_of_the_longest_source_stay_within_the_positions() -> None:
    """The longest source a 96-position model takes, (96 - 11) // 2 = 42 tokens, may get 2 * 42 + 10 = 94
    output tokens: <s> and 94 tokens fill 95 positions. A model that never writes </s>: wait-k SBS (k = 33)
    with a window of 90 speculates 91 tokens after the 1 + t positions of step t (up to t = 8, then the tail),
    at positions t .. t + 90, so from t = 6 on a whole speculation would need more than the 96 positions
    (0 .. 95); it must look no further than the last, as must
    the adaptive policy's chunk SBS near the length limit, and both still write all 94 tokens."""
    model = table(lambda previous, position, visible: {4: 0.75, 5: 0.25})
    src = [5] * 41 + [EOS]
    for out in (wait_k(model, [src], 33, "sbs", beam=2, window=90),
                adaptive(model, [src], 0.5, "sbs", beam=2, window=5)):
        assert out[0].tokens == (4,) * 94
