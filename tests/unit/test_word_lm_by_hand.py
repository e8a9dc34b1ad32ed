"""The word LSTM LM, its vocabulary and batch stage by hand: a vocabulary of the four specials alone is refused;
dropout sits on the embeddings, between LSTM layers (two or more) and on the top outputs, and `step` and
`last_log_probs` drop as the forward pass does in training mode and not at all in eval mode; the output bias starts
at zero; a state carries a sentence on (past a packed row's end the logits are the bias); a checkpoint keeps
booleans, stores a tied matrix once, refuses non-string keys, foreign settings, a file without metrics or training
config, and names weights for another vocabulary or settings out of range. Vocabulary ties go alphabetically. The
stage gives the n best found by enumeration, scores summed from `step`, and a reason for a bad row."""

from __future__ import annotations

from itertools import product
from pathlib import Path

import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F

from specbench.checkpoint_io import load_blob
from specbench.errors import ConfigError, DataError
from specbench.prediction.lm import LmSettings, WordLstmLm, load_lm, save_lm
from specbench.prediction.lm_stage import LmStage, choose_device
from specbench.prediction.settings import CompletionSettings
from specbench.prediction.vocab import BOS, EOS, SPECIALS, UNK, WordVocab

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


def test_a_state_carries_on_where_the_first_part_stopped_packed_or_not() -> None:
    torch.manual_seed(2)
    model, ids = WordLstmLm(9, TINY).eval(), torch.tensor([[BOS, 4, 5, 6, 7, 8], [BOS, 8, 7, 6, 5, 4]])
    with torch.no_grad():
        full, state = model(ids)[0], model(ids[:, :2])[1]
        torch.testing.assert_close(model(ids[:, 2:], None, state)[0], full[:, 2:])
        part = model(ids[:, 2:], torch.tensor([3, 2]), state)[0]  # 3 and 2 of the 4 tokens left
        torch.testing.assert_close(part[0, :3], full[0, 2:5])
        torch.testing.assert_close(part[1, :2], full[1, 2:4])
        assert torch.equal(part[0, 3], model.output.bias) and torch.equal(part[1, 3], model.output.bias)


def test_training_mode_drops_the_embeddings_and_the_top_outputs_as_torch_does() -> None:
    model, ids = WordLstmLm(6, LmSettings(8, 8, 1, dropout=0.4)).train(), torch.tensor([[BOS, 4, 5, 4]])
    with torch.no_grad():
        torch.manual_seed(3)
        got = model.features(ids)[0]
        torch.manual_seed(3)
        assert torch.equal(got, F.dropout(model.lstm(F.dropout(model.embedding(ids), 0.4))[0], 0.4))


def test_step_and_last_log_probs_drop_as_the_forward_pass_in_training_and_not_in_eval() -> None:
    torch.manual_seed(0)
    model = WordLstmLm(7, LmSettings(8, 64, 2, dropout=0.5, tie_embeddings=False))
    ids, seen = torch.tensor([BOS, 4, 6]), []
    model.output.register_forward_pre_hook(lambda _, args: seen.append(args[0]))  # what the linear layer reads
    with torch.no_grad():
        for training, seed in ((True, 5), (False, 5), (False, 6)):
            model.train(training)
            torch.manual_seed(5)
            full, state = model(ids[:, None])
            torch.manual_seed(seed)  # the same draws: the same dropout masks, eval mode: no draws at all
            lp, got = model.step(ids, state=None)
            assert torch.equal(lp, F.log_softmax(full[:, 0], -1)) and torch.equal(got[0], state[0])
            seen.clear()
            model.last_log_probs(torch.tensor([[BOS, 4, 5], [BOS, 6, 0]]), torch.tensor([3, 2]))
            zeros = float((seen[0] == 0).float().mean())  # 2 x 64 top-layer states, never exactly 0 undropped
            assert 0.3 < zeros < 0.7 if training else zeros == 0.0


def test_settings_a_checkpoint_cannot_hold_are_a_data_error(tmp_path: Path) -> None:
    vocab = WordVocab.from_sentences([["a", "b"]])
    save_lm(tmp_path / "good.pt", WordLstmLm(len(vocab), TINY), vocab, TINY, {}, {})
    blob = load_blob(tmp_path / "good.pt")
    torch.save({**blob, "settings": {**blob["settings"], "dropout": 2.0}}, tmp_path / "bad.pt")
    with pytest.raises(DataError, match=r"bad\.pt: bad vocabulary or model settings \(.*dropout"):
        load_lm(tmp_path / "bad.pt")


def test_a_tied_matrix_is_stored_once_and_weights_for_another_vocabulary_are_named(tmp_path: Path) -> None:
    vocab = WordVocab.from_sentences([["a", "b"]])
    save_lm(tmp_path / "lm.pt", WordLstmLm(len(vocab), TINY), vocab, TINY, {}, {})
    blob = load_blob(tmp_path / "lm.pt")
    assert "output.weight" not in blob["state_dict"]
    torch.save({**blob, "vocab": blob["vocab"] + ["c"]}, tmp_path / "more.pt")
    with pytest.raises(DataError, match="weights are for 6 tokens but the vocabulary has 7"):
        load_lm(tmp_path / "more.pt")


def test_vocabulary_ties_go_alphabetically_and_the_first_word_is_a_word() -> None:
    vocab = WordVocab.from_sentences([["z", "y", "x", "y"]])
    assert vocab.tokens == SPECIALS + ("y", "x", "z")  # y twice; x and z once each
    assert vocab.encode(["y", "x", "w"]) == [4, 5, UNK] and "y" in vocab
    with pytest.raises(IndexError):
        vocab.decode([-1])


def log_prob(model: WordLstmLm, prefix: list[int], rest: list[int]) -> float:  # log P(rest, </s> | <s>, prefix)
    state, total, ids = None, 0.0, [BOS, *prefix, *rest, EOS]
    with torch.no_grad():
        for i in range(len(ids) - 1):
            lp, state = model.step(torch.tensor([ids[i]]), state)
            total += float(lp[0, ids[i + 1]]) if i >= len(prefix) else 0.0
    return total


def test_the_stage_completes_scores_and_names_the_rows_it_cannot_answer(tmp_path: Path) -> None:
    assert choose_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu") and choose_device("cuda") == "cuda"
    vocab, words = WordVocab.from_sentences([["a", "b", "c"]]), pa.list_(pa.string())  # a b c: ids 4 5 6
    torch.manual_seed(0)
    model = WordLstmLm(len(vocab), TINY)
    for p in model.parameters():
        torch.nn.init.normal_(p, 0.0, 0.5)
    save_lm(tmp_path / "lm.pt", model, vocab, TINY, {}, {})
    model = load_lm(tmp_path / "lm.pt").model
    stage = LmStage(tmp_path / "lm.pt", CompletionSettings(n_best=2, beam=9, max_new_words=2))
    prefixes, continuations = [["a"], ["b"], [None]], [None, ["b", "zebra"], ["a"]]
    rows = stage(pa.table({"prefix": pa.array(prefixes, words), "continuation": pa.array(continuations, words)}))
    rows = rows.to_pylist()
    every = {c: log_prob(model, [4], vocab.encode(c)) for n in range(3) for c in product("abc", repeat=n)}
    best = sorted(every, key=every.get, reverse=True)[:2]
    assert [(tuple(c["words"]), c["rank"]) for c in rows[0]["completions"]] == [(best[0], 0), (best[1], 1)]
    assert [c["log_prob"] for c in rows[0]["completions"]] == pytest.approx([every[c] for c in best], abs=1e-4)
    assert rows[1]["log_prob"] == pytest.approx(log_prob(model, [5], [5, 3]), abs=1e-4)  # zebra is <unk> (3)
    assert rows[0]["status"] == rows[1]["status"] == "ok"
    assert rows[0]["log_prob"] is None and rows[1]["completions"] == []
    assert rows[2]["status"].startswith("completion failed: ") and "list of words" in rows[2]["status"]


@pytest.mark.parametrize("tokens, error, match", [
    (SPECIALS + ("a\n",), DataError, r"entry 'a\\n' is not a single word"),
    (SPECIALS + ("a\tb",), DataError, r"entry 'a\\tb' is not a single word"),  # a tab inside: two words
    (SPECIALS + ("",), DataError, "entry '' is not a single word"),
    ({"<pad>": 0}, DataError, "must be a list of strings, got dict")])
def test_a_malformed_vocabulary_list_is_refused(tokens, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        WordVocab.from_list(tokens)


def test_min_count_must_be_a_whole_number_not_a_truth_value() -> None:
    with pytest.raises(ConfigError, match="min_count = True: must be an integer >= 1"):
        WordVocab.from_sentences([["a"]], min_count=True)
