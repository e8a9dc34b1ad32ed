"""LM training by hand: collate shifts and pads; equal lengths batch at random, in random order; perplexity scores each
sentence alone, dropout off, mode kept, each OOV counted, finite up to overflow and inf past it, a sentence given as
a string refused; training equals the Adam loop written out in torch; a spent budget still scores the cut epoch and
gives the threads back; an equal devel perplexity is no improvement; each epoch's seconds are its own."""

from __future__ import annotations

import copy
import math
import random
import time

import pytest
import torch
import torch.nn.functional as F

from specbench.errors import DataError
from specbench.prediction.lm import LmSettings, WordLstmLm
from specbench.prediction.lm_training import LmTrainSettings, collate, length_batches, perplexity_details, train_lm
from specbench.prediction.vocab import BOS, EOS, WordVocab

pytestmark = pytest.mark.unit
LM = LmSettings(8, 8, 1, dropout=0.0)
TRAIN = [s.split() for s in ["a b c", "a b", "b c a d", "c a", "a b c d e", "d e", "a c", "b"]]
DEVEL = [s.split() for s in ["c b a", "e d", "a b c"]]


def nll(model: WordLstmLm, seq: list[int]) -> torch.Tensor:  # -log P(seq[1:] | seq[0] ..), one sentence alone
    return F.cross_entropy(model(torch.tensor([seq[:-1]]))[0][0], torch.tensor(seq[1:]), reduction="sum")


def test_collate_and_random_batches() -> None:
    inputs, targets = collate([[1, 5, 6, 2], [1, 2]], torch.device("cpu"))
    assert inputs.tolist() == [[1, 5, 6], [1, 0, 0]] and targets.tolist() == [[5, 6, 2], [2, 0, 0]]
    plans = [length_batches([3] * 8, 4, random.Random(seed)) for seed in range(8)]
    assert len({frozenset(map(frozenset, p)) for p in plans}) > 1  # 35 ways to split 8 into two 4s
    assert len({length_batches([1, 2, 3, 4], 1, random.Random(seed))[0][0] for seed in range(8)}) > 1


def test_perplexity_scores_each_sentence_alone_without_dropout_and_keeps_the_mode() -> None:
    vocab = WordVocab.from_sentences(TRAIN)
    torch.manual_seed(0)
    model = WordLstmLm(len(vocab), LmSettings(8, 64, 1, dropout=0.5, tie_embeddings=False))
    sentences = [["a", "zebra", "zebra"], ["c", "b", "a", "d", "e"], []]
    with torch.no_grad():  # 3 + 5 + 0 words, 3 </s>
        expected = math.exp(sum(float(nll(model.eval(), [BOS, *vocab.encode(s), EOS])) for s in sentences) / 11)
    for training in (True, False):
        result = perplexity_details(model.train(training), vocab, sentences)
        assert result.perplexity == pytest.approx(expected, rel=1e-5) and model.training == training
        assert (result.tokens, result.oov_tokens) == (11, 2)
    with torch.no_grad():
        model.output.bias[EOS] = -300.0  # exp(300 nats per token) is ~2e130, still a float
    assert 1e128 < perplexity_details(model, vocab, [[]]).perplexity < 1e133
    with torch.no_grad():
        model.output.bias[EOS] = -3000.0  # exp(3000 nats per token) overflows a float
    assert perplexity_details(model, vocab, [[]]).perplexity == math.inf
    with pytest.raises(DataError, match="sentence 1 is a string, not a list of words"):
        perplexity_details(model, vocab, [["a"], "a b"])


def test_training_equals_the_adam_loop_written_out() -> None:
    s = LmTrainSettings(epochs=8, batch_size=3, learning_rate=0.05, patience=2, threads=1, seed=1)
    trained = train_lm(TRAIN, DEVEL, LM, s, progress=False)
    vocab = WordVocab.from_sentences(TRAIN)
    torch.manual_seed(s.seed)
    model, rng = WordLstmLm(len(vocab), LM), random.Random(s.seed)
    opt = torch.optim.Adam(model.parameters(), lr=s.learning_rate)
    seqs, dev = ([[BOS, *vocab.encode(x), EOS] for x in data] for data in (TRAIN, DEVEL))
    history, best, bad = [], (math.inf, 0, None), 0
    while bad < s.patience and len(history) < 2 * s.epochs:
        total = tokens = 0
        for batch in length_batches([len(x) for x in seqs], s.batch_size, rng):
            loss, n = sum(nll(model, seqs[i]) for i in batch), sum(len(seqs[i]) - 1 for i in batch)
            opt.zero_grad()
            (loss / n).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            total, tokens = total + float(loss.detach()), tokens + n
        with torch.no_grad():
            ppl = math.exp(sum(float(nll(model, x)) for x in dev) / sum(len(x) - 1 for x in dev))
        history += [total / tokens, ppl]
        bad = bad + 1 if ppl >= best[0] else 0
        best = (ppl, len(history) // 2, copy.deepcopy(model.state_dict())) if bad == 0 else best
    assert [h[k] for h in trained.history for k in ("train_loss", "devel_perplexity")] == pytest.approx(history, 1e-4)
    assert trained.stopped_because == "patience" and trained.best_epoch == best[1] < len(history) / 2
    for key, value in trained.model.state_dict().items():
        torch.testing.assert_close(value, best[2][key], atol=1e-4, rtol=0)


def test_a_spent_budget_scores_the_cut_epoch_and_gives_the_threads_back() -> None:
    s = LmTrainSettings(epochs=5, batch_size=3, max_minutes=1e-9, threads=2, min_count=2)
    trained = train_lm(TRAIN + [["f"]], DEVEL, LM, s, progress=False)  # 3 batches, 1 run
    assert torch.get_num_threads() == 1 and trained.vocab == WordVocab.from_sentences(TRAIN, 2)
    assert (trained.stopped_because, trained.best_epoch, len(trained.history)) == ("time", 1, 1)
    assert trained.history[0]["fraction"] == pytest.approx(1 / 3)
    # the budget spent only once the last epoch's every batch had run: it stopped because the epochs ran out
    whole = train_lm(TRAIN, DEVEL, LM, LmTrainSettings(epochs=1, batch_size=100, max_minutes=1e-9, min_count=2),
                     progress=False)  # one batch: the epoch is whole, then the budget is found spent
    assert (whole.stopped_because, whole.history[0]["fraction"]) == ("epochs", 1.0)


def test_an_equal_devel_perplexity_is_no_improvement_and_each_epoch_times_itself() -> None:
    s = LmTrainSettings(epochs=6, batch_size=4, learning_rate=1e-30, patience=3, threads=1)
    start = time.monotonic()
    trained = train_lm(TRAIN, DEVEL, LM, s, progress=False)  # steps of 1e-30 leave every weight as it was
    ppl = [h["devel_perplexity"] for h in trained.history]
    assert ppl == [ppl[0]] * 4 and (trained.best_epoch, trained.stopped_because) == (1, "patience")
    assert sum(h["seconds"] for h in trained.history) <= time.monotonic() - start
