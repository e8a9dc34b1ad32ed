"""The word LSTM LM: vocabulary, forward against step, training against a unigram bound, perplexity by hand,
fp16 checkpoints and their errors."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from specbench.checkpoint_io import load_blob
from specbench.errors import ConfigError, DataError
from specbench.prediction.lm import LmSettings, WordLstmLm, load_lm, resolve_device, save_lm
from specbench.prediction.lm_training import (LmTrainSettings, length_batches, perplexity, perplexity_details,
                                              train_lm)
from specbench.prediction.vocab import BOS, EOS, PAD, SPECIALS, UNK, WordVocab

pytestmark = pytest.mark.unit
TINY = LmSettings(embed_dim=16, hidden_dim=16, layers=2, dropout=0.0)
FIX = "specbench train lm jobs/lm.toml"


def random_model(vocab_size: int, settings: LmSettings = TINY, seed: int = 0) -> WordLstmLm:
    torch.manual_seed(seed)
    model = WordLstmLm(vocab_size, settings)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model.eval()


# --- vocabulary -----------------------------------------------------------------------------------------

def test_vocab_orders_by_count_then_alphabetically_and_round_trips() -> None:
    vocab = WordVocab.from_sentences([["b", "a", "c"], ["c", "a"], ["d", "<s>", "c"]])
    assert vocab.tokens == SPECIALS + ("c", "a", "b", "d")
    frequent = WordVocab.from_sentences([["b", "a", "c"], ["c", "a"], ["d", "c"]], min_count=2)
    assert frequent.tokens == SPECIALS + ("c", "a")
    assert vocab.encode(["a", "zebra", "d", "<s>", "</s>", "<unk>", "<pad>"]) == [5, UNK, 7] + [UNK] * 4
    assert vocab.decode([BOS, 4, 5, EOS]) == ["<s>", "c", "a", "</s>"]
    assert len(vocab) == 8 and "a" in vocab and "zebra" not in vocab and "<unk>" not in vocab
    assert WordVocab.from_list(vocab.to_list()) == vocab
    assert vocab.to_list() == list(SPECIALS) + ["c", "a", "b", "d"]
    with pytest.raises(IndexError):
        vocab.decode([8])


@pytest.mark.parametrize("tokens, problem", [
    (["<s>", "<pad>", "</s>", "<unk>", "a"], "special"),
    (list(SPECIALS) + ["a", "b", "a"], "more than once"),
    (list(SPECIALS) + ["a", "<s>"], "more than once"),
    (list(SPECIALS) + ["two words"], "single word"),
    (list(SPECIALS) + [""], "single word"),
])
def test_vocab_rejects_malformed_lists(tokens: list[str], problem: str) -> None:
    with pytest.raises(DataError, match=problem) as err:
        WordVocab.from_list(tokens)
    assert FIX in str(err.value)


def test_vocab_rejects_strings_and_bad_min_count() -> None:
    with pytest.raises(DataError, match="split"):
        WordVocab.from_sentences(["hello world"])
    with pytest.raises(DataError, match="split"):
        WordVocab.from_sentences([["a"]]).encode("a b")
    with pytest.raises(ConfigError, match="min_count"):
        WordVocab.from_sentences([["a"]], min_count=0)


# --- model ----------------------------------------------------------------------------------------------

def stepwise_log_probs(model: WordLstmLm, ids: list[int]) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """(T, V) log-probs after each id, fed one at a time with `step`, and the final state."""
    state, rows = None, []
    for i in ids:
        lp, state = model.step(torch.tensor([i]), state)
        rows.append(lp[0])
    return torch.stack(rows), state


def test_forward_packed_and_last_log_probs_agree_with_step() -> None:
    model = random_model(11)
    seqs = [[BOS, 5, 6, 7, 8], [BOS], [BOS, 9, 4], [BOS, 10, 10, 10]]
    width = max(map(len, seqs))
    ids = torch.tensor([s + [PAD] * (width - len(s)) for s in seqs])
    lengths = torch.tensor([len(s) for s in seqs])
    with torch.no_grad():
        packed, (h, c) = model(ids, lengths)
        plain, _ = model(ids)
        last, (h2, c2) = model.last_log_probs(ids, lengths)
        for row, s in enumerate(seqs):
            expected, (hs, cs) = stepwise_log_probs(model, s)
            n = len(s)
            torch.testing.assert_close(packed[row, :n].log_softmax(-1), expected, atol=1e-5, rtol=0)
            torch.testing.assert_close(plain[row, :n].log_softmax(-1), expected, atol=1e-5, rtol=0)
            torch.testing.assert_close(last[row], expected[-1], atol=1e-5, rtol=0)
            for got in (h, h2):
                torch.testing.assert_close(got[:, row], hs[:, 0], atol=1e-5, rtol=0)
            for got in (c, c2):
                torch.testing.assert_close(got[:, row], cs[:, 0], atol=1e-5, rtol=0)
    assert packed.dtype == torch.float32 and packed.shape == (4, width, 11) and h.shape == (2, 4, 16)


def test_tied_settings_share_the_matrix_and_untied_needs_no_equal_sizes() -> None:
    tied = WordLstmLm(9, TINY)
    assert tied.output.weight is tied.embedding.weight
    untied_settings = LmSettings(embed_dim=8, hidden_dim=12, layers=1, dropout=0.0, tie_embeddings=False)
    untied = WordLstmLm(9, untied_settings)
    assert untied.output.weight.shape == (9, 12)
    with pytest.raises(ConfigError, match="embed_dim"):
        LmSettings(embed_dim=8, hidden_dim=12)


# --- training and perplexity ----------------------------------------------------------------------------

GRAMMAR = [
    ("turn", ["on", "off"], "the", ["kitchen", "bedroom", "hall"], "lights"),
    ("play", ["some", "my"], ["jazz", "rock"], "music"),
    ("what", "is", "the", ["weather", "time"], ["today", "now"]),
]


def grammar_sentences(n: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = rng.choice(GRAMMAR)
        out.append([rng.choice(p) if isinstance(p, list) else p for p in parts])
    return out


def unigram_perplexity(train: list[list[str]], devel: list[list[str]]) -> float:
    """Maximum-likelihood unigram LM over words and </s> (every devel word occurs in train)."""
    counts = Counter(w for s in train for w in s + ["</s>"])
    total = sum(counts.values())
    tokens = [w for s in devel for w in s + ["</s>"]]
    return math.exp(-sum(math.log(counts[w] / total) for w in tokens) / len(tokens))


def test_training_beats_the_unigram_model_and_keeps_the_best_epoch() -> None:
    train, devel = grammar_sentences(80, 0), grammar_sentences(20, 1)
    bound = unigram_perplexity(train, devel)
    settings = LmTrainSettings(epochs=12, batch_size=8, learning_rate=1e-2, max_minutes=2.0, patience=12,
                               threads=1)
    lm_settings = LmSettings(embed_dim=16, hidden_dim=16, layers=1, dropout=0.0)
    trained = train_lm(train, devel, lm_settings, settings, progress=False)
    ppls = [h["devel_perplexity"] for h in trained.history]
    assert trained.stopped_because == "epochs" and len(trained.history) == 12
    assert not trained.model.training
    best = perplexity(trained.model, trained.vocab, devel)
    assert best == pytest.approx(min(ppls), rel=1e-6) and ppls[trained.best_epoch - 1] == min(ppls)
    assert best < 0.5 * bound, (best, bound)  # the grammar's bigrams are far more predictable than unigrams
    assert all(h["fraction"] == 1.0 and h["seconds"] > 0 for h in trained.history)


def test_training_stops_on_patience_and_on_time() -> None:
    train, devel = [["a", "b", "c"]] * 16, [["c", "b", "a"]] * 4  # learning train makes devel less likely
    lm_settings = LmSettings(embed_dim=8, hidden_dim=8, layers=1, dropout=0.0)
    settings = LmTrainSettings(epochs=50, batch_size=4, learning_rate=2e-2, patience=2, threads=1)
    trained = train_lm(train, devel, lm_settings, settings, progress=False)
    assert trained.stopped_because == "patience"
    assert len(trained.history) == trained.best_epoch + 2
    timed = LmTrainSettings(epochs=1000, batch_size=1, max_minutes=0.002, patience=100, threads=1)
    trained = train_lm(grammar_sentences(200, 2), devel, lm_settings, timed, progress=False)
    assert trained.stopped_because == "time" and len(trained.history) < 1000


def test_length_batches_cover_everything_with_similar_lengths() -> None:
    lengths = [(i * 7) % 9 + 1 for i in range(50)]
    plan = length_batches(lengths, 8, random.Random(0))
    assert sorted(i for b in plan for i in b) == list(range(50))
    spans = [max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in plan]
    assert max(spans) <= 2 and plan != length_batches(lengths, 8, random.Random(1))
    assert plan == length_batches(lengths, 8, random.Random(0))


def test_perplexity_equals_a_hand_computation() -> None:
    """With every weight zero but the output bias, each token has probability softmax(bias) in any context."""
    vocab = WordVocab.from_sentences([["a", "b", "b", "c"]])
    model = WordLstmLm(len(vocab), TINY)
    bias = [0.0, 0.0, 1.5, -1.0, 0.3, -0.7, 2.0]
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.output.bias.copy_(torch.tensor(bias))
    log_z = math.log(sum(math.exp(b) for b in bias))
    sentences = [["b", "a"], [], ["c", "zebra", "b", "yak"]]
    ids = [vocab.encode(s) + [EOS] for s in sentences]
    nll = -sum(bias[i] - log_z for s in ids for i in s)
    expected = math.exp(nll / 9)
    result = perplexity_details(model, vocab, sentences)
    assert result.tokens == 9 and result.oov_tokens == 2
    assert result.perplexity == pytest.approx(expected, rel=1e-5)
    assert perplexity(model, vocab, sentences, batch_size=1) == pytest.approx(expected, rel=1e-5)
    with pytest.raises(DataError, match="empty"):
        perplexity(model, vocab, [])


def test_training_rejects_empty_data() -> None:
    with pytest.raises(DataError, match="no words"):
        train_lm([[]], [["a"]], TINY, LmTrainSettings(threads=1), progress=False)
    with pytest.raises(DataError, match="devel"):
        train_lm([["a"]], [], TINY, LmTrainSettings(threads=1), progress=False)


# --- checkpoints ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("settings", [TINY, LmSettings(embed_dim=8, hidden_dim=12, layers=1, dropout=0.1,
                                                          tie_embeddings=False)])
def test_checkpoint_round_trip_in_fp16(tmp_path: Path, settings: LmSettings) -> None:
    vocab = WordVocab.from_sentences([["a", "b", "c", "d", "e"]])
    model = random_model(len(vocab), settings, seed=4)
    path = tmp_path / "models" / "lm.pt"
    save_lm(path, model, vocab, settings, {"perplexity": np.float64(12.5), "epochs": 3}, {"data": Path("x"),
                                                                                           "sizes": (1, 2)})
    assert path.is_file() and list(path.parent.iterdir()) == [path]
    loaded = load_lm(path)
    assert loaded.vocab == vocab and loaded.settings == settings and not loaded.model.training
    assert loaded.metrics == {"perplexity": 12.5, "epochs": 3} and loaded.train_config == {"data": "x",
                                                                                            "sizes": [1, 2]}
    rounded = random_model(len(vocab), settings, seed=4)
    with torch.no_grad():
        for p in rounded.parameters():
            p.copy_(p.half().float())
    ids = torch.tensor([[BOS, 4, 5, 6, 7, 8]])
    with torch.no_grad():
        got = loaded.model(ids)[0].log_softmax(-1)
        torch.testing.assert_close(got, rounded(ids)[0].log_softmax(-1), atol=1e-5, rtol=0)
        torch.testing.assert_close(got, model(ids)[0].log_softmax(-1), atol=2e-2, rtol=0)
    assert loaded.model.embedding.weight.dtype == torch.float32


def test_default_checkpoint_fits_the_size_budget(tmp_path: Path) -> None:
    vocab = WordVocab(SPECIALS + tuple(f"w{i}" for i in range(5400)))
    settings = LmSettings()
    save_lm(tmp_path / "lm.pt", WordLstmLm(len(vocab), settings), vocab, settings, {}, {})
    assert (tmp_path / "lm.pt").stat().st_size < 2.5e6


class NotPlainData:
    pass


def test_checkpoint_errors_name_the_file_and_the_fix(tmp_path: Path) -> None:
    vocab = WordVocab.from_sentences([["a", "b"]])
    model = random_model(len(vocab))
    good = tmp_path / "good.pt"
    save_lm(good, model, vocab, TINY, {}, {})
    blob = load_blob(good)
    cases = {"missing.pt": None, "garbage.pt": b"not a checkpoint at all",
             "truncated.pt": good.read_bytes()[:300]}
    for name, content in cases.items():
        if content is not None:
            (tmp_path / name).write_bytes(content)
    torch.save({**blob, "vocab": blob["vocab"] + ["extra"]}, tmp_path / "mismatch.pt")
    torch.save({**blob, "format_version": 99}, tmp_path / "version.pt")
    torch.save({**blob, "vocab": ["a"] + blob["vocab"]}, tmp_path / "specials.pt")
    torch.save({**blob, "metrics": NotPlainData()}, tmp_path / "unsafe.pt")  # weights_only refuses to run it
    for name in [*cases, "mismatch.pt", "version.pt", "specials.pt", "unsafe.pt"]:
        with pytest.raises(DataError) as err:
            load_lm(tmp_path / name)
        assert name in str(err.value) and FIX in str(err.value), str(err.value)
    with pytest.raises(TypeError, match="metrics.bad"):
        save_lm(tmp_path / "x.pt", model, vocab, TINY, {"bad": NotPlainData()}, {})
    assert asdict(load_lm(good).settings) == asdict(TINY)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_without_a_gpu_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cuda"):
        resolve_device("cuda")
    assert resolve_device("cpu") == torch.device("cpu")
