"""N-best completion: brute force on a tiny LM, the batched search against the single-prefix reference,
teacher-forced scores, memoization and the tokens that are never generated."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specbench.errors import ConfigError, DataError
from specbench.prediction.completion import Completer, Completion, CompletionSettings
from specbench.prediction.lm import LmSettings, LoadedLm, WordLstmLm
from specbench.prediction.vocab import BOS, EOS, PAD, SPECIALS, UNK, WordVocab

pytestmark = pytest.mark.unit
TOL = 1e-4


def random_lm(words: Sequence[str], seed: int, eos_bias: float = 0.0, layers: int = 2) -> LoadedLm:
    """A randomly initialized LM with peaked distributions (weights ~ N(0, 1)); `eos_bias` raises </s>."""
    torch.manual_seed(seed)
    lm_settings = LmSettings(embed_dim=8, hidden_dim=8, layers=layers, dropout=0.0)
    vocab = WordVocab(SPECIALS + tuple(words))
    model = WordLstmLm(len(vocab), lm_settings)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 1.0)
        model.output.bias[EOS] += eos_bias
    return LoadedLm(model.eval(), vocab, lm_settings, {}, {})


@torch.no_grad()
def exact_log_prob(lm: LoadedLm, prefix: Sequence[str], continuation: Sequence[str]) -> float:
    """log P(continuation, </s> | <s>, prefix), token by token with `step`, summed in float64."""
    ids = [BOS, *lm.vocab.encode(prefix)]
    state, total = None, 0.0
    for i, token in enumerate(ids + lm.vocab.encode(continuation) + [EOS]):
        if i >= len(ids):
            total += float(log_probs[0, token])
        log_probs, state = lm.model.step(torch.tensor([token]), state)
    return total


def brute_force(lm: LoadedLm, prefix: Sequence[str], max_words: int) -> dict[tuple[str, ...], float]:
    """Every continuation of at most `max_words` vocabulary words, with its exact log-prob."""
    words = lm.vocab.tokens[len(SPECIALS):]
    return {c: exact_log_prob(lm, prefix, c)
            for n in range(max_words + 1) for c in itertools.product(words, repeat=n)}


def assert_is_nbest(got: list[Completion], scores: dict[tuple[str, ...], float], n_best: int) -> None:
    """`got` is an n-best list of `scores` up to float ties: right length, ranks, each entry's exact score,
    the best scores; and exactly the brute-force words where no two candidates are within 10 * TOL."""
    expected = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
    assert [c.rank for c in got] == list(range(min(n_best, len(scores))))
    assert len({c.words for c in got}) == len(got)
    for c, (_, best) in zip(got, expected):
        assert c.log_prob == pytest.approx(best, abs=TOL)
        assert scores[c.words] == pytest.approx(c.log_prob, abs=TOL)
    head = [s for _, s in expected[:n_best + 1]]
    if all(a - b > 10 * TOL for a, b in zip(head, head[1:])):
        assert [c.words for c in got] == [w for w, _ in expected[:n_best]]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), eos_bias=st.sampled_from([-1.0, 0.0, 2.0]), n_best=st.integers(1, 8),
       prefix=st.lists(st.sampled_from(["a", "b", "c", "zebra"]), max_size=4), words=st.integers(3, 4))
def test_nbest_equals_exhaustive_enumeration(seed: int, eos_bias: float, n_best: int, prefix: list[str],
                                             words: int) -> None:
    lm = random_lm(["a", "b", "c", "d"][:words], seed, eos_bias)
    exhaustive = CompletionSettings(n_best=n_best, beam=words ** 3, max_new_words=3, batch_size=3)
    completer = Completer(lm, exhaustive)
    scores = brute_force(lm, prefix, 3)
    assert_is_nbest(completer.complete([prefix])[0], scores, n_best)
    assert_is_nbest(completer.complete_one(prefix), scores, n_best)


def random_prefixes(words: Sequence[str], count: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    pool = [*words, "zebra", "yak"]  # two out-of-vocabulary words
    prefixes = [[], ["zebra"], [words[0]]] + [[rng.choice(pool) for _ in range(rng.randint(0, 7))]
                                              for _ in range(count - 3)]
    return prefixes + prefixes[::5]  # some repeats


@pytest.mark.parametrize("eos_bias, layers", [(0.0, 2), (2.5, 2), (1.0, 1)])
def test_batched_search_equals_the_single_prefix_reference(eos_bias: float, layers: int) -> None:
    words = [f"w{i}" for i in range(20)]
    lm = random_lm(words, seed=7, eos_bias=eos_bias, layers=layers)
    completer = Completer(lm, CompletionSettings(n_best=4, beam=6, max_new_words=5, batch_size=7))
    prefixes = random_prefixes(words, 60, seed=1)
    batched = completer.complete(prefixes)
    assert len(batched) == len(prefixes)
    for prefix, nbest in zip(prefixes, batched):
        reference = completer.complete_one(prefix)
        assert [c.words for c in nbest] == [c.words for c in reference], prefix
        for c, r in zip(nbest, reference):
            assert c.log_prob == pytest.approx(r.log_prob, abs=TOL) and c.rank == r.rank
        assert [c.log_prob for c in nbest] == sorted((c.log_prob for c in nbest), reverse=True)
        assert 1 <= len(nbest) <= 4 and all(len(c.words) <= 5 for c in nbest)
    pairs = [(p, c.words) for p, nbest in zip(prefixes, batched) for c in nbest]
    scores = completer.score(pairs)
    assert scores == pytest.approx([c.log_prob for nbest in batched for c in nbest], abs=TOL)


def test_score_equals_step_by_step_log_probs_for_arbitrary_continuations() -> None:
    words = [f"w{i}" for i in range(12)]
    lm = random_lm(words, seed=3)
    completer = Completer(lm, CompletionSettings(batch_size=4))
    rng = random.Random(5)
    pool = [*words, "zebra"]
    pairs = [([rng.choice(pool) for _ in range(rng.randint(0, 5))],
              [rng.choice(pool) for _ in range(rng.randint(0, 6))]) for _ in range(30)]
    expected = [exact_log_prob(lm, p, c) for p, c in pairs]
    assert completer.score(pairs) == pytest.approx(expected, abs=TOL)
    assert completer.score([]) == []
    # OOV words score as <unk>: the same as spelling them "<unk>"
    assert completer.score([(["zebra"], ["yak"])]) == pytest.approx(completer.score([(["<unk>"], ["<unk>"])]))


def test_memoization_counts_hits_and_misses() -> None:
    lm = random_lm(["a", "b", "c"], seed=1)
    completer = Completer(lm, CompletionSettings(n_best=2, beam=3, max_new_words=4))
    first = completer.complete([["a"], [], ["a"]])
    assert (completer.cache_misses, completer.cache_hits) == (2, 1)
    assert first[0] == first[2] and first[0] is not first[2]
    second = completer.complete([[], ("b", "c"), ["a"]])
    assert (completer.cache_misses, completer.cache_hits) == (3, 3)
    assert second[0] == first[1] and second[2] == first[0]
    assert completer.complete([]) == [] and (completer.cache_misses, completer.cache_hits) == (3, 3)
    completer.clear_cache()
    assert completer.complete([["a"]]) == [first[0]] and completer.cache_misses == 4
    assert completer.complete_one(["a"]) == first[0] and completer.cache_misses == 4


def test_special_tokens_are_never_generated() -> None:
    lm = random_lm(["a", "b", "c", "d"], seed=2)
    with torch.no_grad():
        lm.model.output.bias[UNK] += 9.0  # <unk>, <s> and <pad> would otherwise be the likeliest tokens
        lm.model.output.bias[BOS] += 8.0
        lm.model.output.bias[PAD] += 8.0
    completer = Completer(lm, CompletionSettings(n_best=4, beam=4, max_new_words=4))
    prefixes = [[], ["a"], ["zebra", "b"], ["d", "d", "d"]]
    for prefix, nbest in zip(prefixes, completer.complete(prefixes)):
        assert len(nbest) == 4 and any(c.words for c in nbest)
        assert all(w in lm.vocab for c in nbest for w in c.words)
        assert [c.words for c in nbest] == [c.words for c in completer.complete_one(prefix)]


def test_the_end_is_forced_after_max_new_words() -> None:
    """n_best = 8 but only 5 continuations have at most one word: all are returned, </s> forced after one."""
    lm = random_lm(["a", "b", "c", "d"], seed=4, eos_bias=-3.0)
    completer = Completer(lm, CompletionSettings(n_best=8, beam=8, max_new_words=1))
    for nbest in (completer.complete([["b"]])[0], completer.complete_one(["b"])):
        assert sorted(c.words for c in nbest) == [(), ("a",), ("b",), ("c",), ("d",)]
        assert_is_nbest(nbest, brute_force(lm, ["b"], 1), 8)


def test_input_and_settings_errors() -> None:
    lm = random_lm(["a", "b"], seed=0)
    completer = Completer(lm)
    with pytest.raises(DataError, match="split"):
        completer.complete(["a b"])
    with pytest.raises(DataError, match="split"):
        completer.score([(["a"], "b")])
    with pytest.raises(ConfigError, match="beam"):
        CompletionSettings(n_best=4, beam=2)
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="cuda"):
            Completer(lm, device="cuda")
