"""The word LSTM LM (`prediction/lm.py`) by hand: a vocabulary of the four specials alone is refused, the
dropout sits between the LSTM layers (only with two or more) and on the top layer's outputs, the output bias
starts at zero, and the checkpoint keeps booleans as booleans, refuses dictionary keys that are not strings,
settings that are not the model's, and a file without its metrics or training config."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from specbench.checkpoint_io import load_blob
from specbench.errors import DataError
from specbench.prediction.lm import LmSettings, WordLstmLm, load_lm, save_lm
from specbench.prediction.vocab import BOS, SPECIALS, WordVocab

pytestmark = pytest.mark.unit
TINY = LmSettings(embed_dim=8, hidden_dim=8, layers=2, dropout=0.0)


def test_a_vocabulary_of_the_four_specials_alone_is_refused() -> None:
    assert len(SPECIALS) == 4
    with pytest.raises(DataError, match="no word besides the 4 specials"):
        WordLstmLm(4, TINY)
    assert WordLstmLm(5, TINY).vocab_size == 5


def test_dropout_between_lstm_layers_only_with_two_or_more() -> None:
    assert WordLstmLm(6, LmSettings(embed_dim=8, hidden_dim=8, layers=2, dropout=0.3)).lstm.dropout == 0.3
    assert WordLstmLm(6, LmSettings(embed_dim=8, hidden_dim=8, layers=1, dropout=0.3)).lstm.dropout == 0.0


def test_training_mode_drops_the_top_layer_outputs_and_eval_mode_does_not() -> None:
    """An LSTM output (a tanh times a sigmoid) is never exactly 0.0; dropout 0.5 zeroes about half of them."""
    torch.manual_seed(0)
    model = WordLstmLm(6, LmSettings(embed_dim=8, hidden_dim=64, layers=1, dropout=0.5, tie_embeddings=False))
    ids = torch.tensor([[BOS, 4, 5, 4, 5, 4, 5, 4]])
    with torch.no_grad():
        out, _ = model.train().features(ids)
        zeros = float((out == 0).float().mean())
        assert 0.35 < zeros < 0.65  # 512 outputs, each zeroed with probability 0.5
        out, _ = model.eval().features(ids)
        assert int((out == 0).sum()) == 0


def test_the_output_bias_starts_at_zero_and_the_embedding_within_a_tenth() -> None:
    torch.manual_seed(1)
    model = WordLstmLm(7, LmSettings(embed_dim=8, hidden_dim=8, layers=1, dropout=0.0, tie_embeddings=False))
    assert torch.equal(model.output.bias, torch.zeros(7))
    assert float(model.embedding.weight.detach().abs().max()) <= 0.1


def test_a_checkpoint_keeps_booleans_as_booleans(tmp_path: Path) -> None:
    vocab = WordVocab.from_sentences([["a", "b"]])
    save_lm(tmp_path / "lm.pt", WordLstmLm(len(vocab), TINY), vocab, TINY, {"converged": True, "epochs": 1},
            {"tie": False})
    loaded = load_lm(tmp_path / "lm.pt")
    assert loaded.metrics["converged"] is True and loaded.train_config["tie"] is False
    assert type(loaded.metrics["epochs"]) is int


def test_saving_refuses_keys_that_are_not_strings_and_settings_that_are_not_the_models(tmp_path: Path) -> None:
    vocab = WordVocab.from_sentences([["a", "b"]])
    model = WordLstmLm(len(vocab), TINY)
    with pytest.raises(TypeError, match="string keys"):
        save_lm(tmp_path / "lm.pt", model, vocab, TINY, {1: 2.0}, {})
    other = LmSettings(embed_dim=8, hidden_dim=8, layers=2, dropout=0.1)
    with pytest.raises(ValueError, match="does not match"):
        save_lm(tmp_path / "lm.pt", model, vocab, other, {}, {})
    with pytest.raises(ValueError, match="does not match"):
        save_lm(tmp_path / "lm.pt", WordLstmLm(len(vocab) + 1, TINY), vocab, TINY, {}, {})
    assert not (tmp_path / "lm.pt").exists()


@pytest.mark.parametrize("key", ["metrics", "train_config"])
def test_a_checkpoint_without_its_metrics_or_training_config_is_named(tmp_path: Path, key: str) -> None:
    vocab = WordVocab.from_sentences([["a", "b"]])
    save_lm(tmp_path / "good.pt", WordLstmLm(len(vocab), TINY), vocab, TINY, {}, {})
    blob = load_blob(tmp_path / "good.pt")
    del blob[key]
    torch.save(blob, tmp_path / "lacking.pt")
    with pytest.raises(DataError, match=rf"lacking\.pt: checkpoint lacks \['{key}'\]"):
        load_lm(tmp_path / "lacking.pt")
