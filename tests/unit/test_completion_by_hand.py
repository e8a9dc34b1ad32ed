"""N-best completion (`prediction/completion.py`) by hand on an LM whose every next-token distribution is
uniform: each continuation's log-prob is -(words + 1) log V, equal scores are ranked by their words
(alphabetically, whatever the vocabulary order), and the batched search and the single-prefix reference agree."""

from __future__ import annotations

import math

import pytest
import torch

from specbench.prediction.completion import Completer, CompletionSettings
from specbench.prediction.lm import LmSettings, LoadedLm, WordLstmLm
from specbench.prediction.vocab import SPECIALS, WordVocab

pytestmark = pytest.mark.unit


def uniform_lm(words: tuple[str, ...]) -> LoadedLm:
    """All weights zero: the LSTM state stays 0, the logits are all 0, every token has probability 1 / V."""
    settings = LmSettings(embed_dim=8, hidden_dim=8, layers=1, dropout=0.0)
    vocab = WordVocab(SPECIALS + words)
    model = WordLstmLm(len(vocab), settings)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    return LoadedLm(model.eval(), vocab, settings, {}, {})


def test_equal_scores_are_ranked_by_their_words_with_log_probs_by_hand() -> None:
    lm = uniform_lm(("stop", "jazz", "play"))  # V = 4 specials + 3 words = 7, not in alphabetical order
    completer = Completer(lm, CompletionSettings(n_best=4, beam=4, max_new_words=2))
    log_v = math.log(7)
    # () ends at once: -log 7; each one-word continuation: -2 log 7 (the word, then </s>); the three one-word
    # ones tie and are ranked alphabetically; two-word ones (-3 log 7) do not make the 4-best
    want = [((), -log_v), (("jazz",), -2 * log_v), (("play",), -2 * log_v), (("stop",), -2 * log_v)]
    for got in (completer.complete([["play"]])[0], completer.complete_one(["play"])):
        assert [(c.words, c.rank) for c in got] == [(w, r) for r, (w, _) in enumerate(want)]
        assert [c.log_prob for c in got] == pytest.approx([s for _, s in want], abs=1e-5)
