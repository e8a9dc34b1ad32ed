"""Translation training by hand: the BPE (rare characters kept, unseen ones as bytes, <unk> shown, written as
an xz stream that reads like the plain model), examples, batches, smoothed and devel losses, the learning
rate, stopping after `patience` epochs (an improving epoch starts the count again; patience is the reason named
when the epoch limit is reached too), and training equal to the warmup Adam loop written out."""

from __future__ import annotations

import copy
import hashlib
import random
import subprocess
from pathlib import Path

import pytest
import torch

from specbench.errors import DataError
from specbench.simultrans.model import MtTransformer
from specbench.simultrans.settings import MtModelConfig, MtTrainSettings
from specbench.simultrans.tokenizer import BOS, EOS, PAD, UNK, Tokenizer, train_bpe
from specbench.simultrans.training import (
    TrainState,
    _lr,
    batches,
    collate,
    devel_loss,
    loss_of,
    make_examples,
    stopped_because,
    train,
)

pytestmark = pytest.mark.unit
CONFIG = MtModelConfig(vocab_size=9, d_model=8, heads=2, ffn=16, encoder_layers=1, decoder_layers=1,
                       dropout=0.0, causal_encoder=True, max_positions=16)


def test_bpe_keeps_rare_characters_and_falls_back_to_bytes(tmp_path: Path) -> None:
    tok = Tokenizer(train_bpe(["ein Hund läuft", "a dog runs"] * 200 + ["Straße"], tmp_path / "b.model", 290))
    assert "<0x" not in "".join(tok.pieces(tok.encode("Straße")))  # 'S' seen once in 5k characters
    ids = tok.encode("€ Hund")  # '€' never seen: its UTF-8 bytes
    assert tok.pieces(ids)[1:4] == ["<0xE2>", "<0x82>", "<0xAC>"] and tok.decode([BOS, *ids, EOS, PAD]) == "€ Hund"
    assert tok.decode([UNK]) == " ⁇ " and tok.encode_many(["ein", "Hund"]) == [tok.encode("ein"), tok.encode("Hund")]
    plain = subprocess.run(["xz", "-dc", str(tok.path)], capture_output=True, check=True).stdout  # the xz tool
    (tmp_path / "plain.model").write_bytes(plain)
    again = Tokenizer(tmp_path / "plain.model")
    assert tok.sha256 == again.sha256 == hashlib.sha256(plain).hexdigest() and len(plain) > tok.path.stat().st_size
    assert again.encode("€ Hund läuft") == tok.encode("€ Hund läuft")
    (tmp_path / "cut.model").write_bytes(tok.path.read_bytes()[:-9])  # an xz stream cut short
    with pytest.raises(DataError, match=r"cut.model: not a SentencePiece \(BPE\) model \(.+\)\. Fix: point"):
        Tokenizer(tmp_path / "cut.model")


def test_examples_batches_losses_and_learning_rate_by_hand() -> None:
    # max_len 6: 1 to 4 tokens a side
    assert [e.src for e in make_examples([([4] * 4, [5] * 4), ([4] * 5, [5]), ([4], [5] * 5), ([4], [])], 6)] == \
        [(4, 4, 4, 4, EOS)]
    # max(|src|, |tgt| + 1) = max(3, 4): 3 examples fill a budget of 12 exactly
    assert [len(b) for b in batches(make_examples([([4, 5], [6, 7, 8])] * 6, 32), 12, random.Random(0))] == [3, 3]
    batch = make_examples([([4, 5], [5, 6]), ([6], [7])], 32)
    src, tin, tout = [[4, 5, EOS], [6, EOS, PAD]], [[BOS, 5, 6], [BOS, 7, PAD]], [[5, 6, EOS], [7, EOS, PAD]]
    assert [t.tolist() for t in collate(batch)] == [src, tin, tout]
    torch.manual_seed(0)
    model, y = MtTransformer(CONFIG).eval(), torch.tensor(tout)
    with torch.no_grad():  # smoothing 0.1: 0.9 * -log p(y) + 0.1 * mean_v -log p(v), over the 5 non-pad targets
        logp = model(torch.tensor(src), torch.tensor(tin), 2).log_softmax(-1)
        want = (-0.9 * logp.gather(2, y[..., None])[..., 0] - 0.1 * logp.mean(2))[y != PAD].sum()
        loss, n = loss_of(model, batch, 2, 0.1)
        assert n == 5 and float(loss) == pytest.approx(float(want), rel=1e-5)
        plain = sum(float(loss_of(model, batch, k, 0.0)[0]) for k in (3, 5, 7, None)) / 20  # 4 x 5 tokens
    assert devel_loss(model, batch, [3, 5, 7, None]) == pytest.approx(plain, rel=1e-6)
    # warmup to the peak at step 4 (step 0 counts as 1), then sqrt(4 / step)
    lr = [_lr(n, MtTrainSettings(learning_rate=1e-3, warmup_steps=4)) for n in (0, 2, 4, 16)]
    assert lr == pytest.approx([2.5e-4, 5e-4, 1e-3, 5e-4])


def test_training_stops_after_patience_epochs_without_a_1e_4_devel_improvement(tmp_path: Path) -> None:
    torch.manual_seed(0)
    data = make_examples([([4 + i, 5], [6, 4 + i % 4]) for i in range(5)], 16)
    settings = MtTrainSettings(max_epochs=6, patience=2, learning_rate=1e-6, warmup_steps=1, k_min=1, k_max=3)
    state = train(MtTransformer(CONFIG), data, data, settings, tmp_path / "s.pt", "t", lambda *_: None)
    # steps of ~1e-6 move devel loss by ~3e-5 an epoch, less than 1e-4: only epoch 1 improves (on inf)
    assert (state.epoch, state.best_epoch, state.bad_epochs) == (3, 1, 2)
    assert stopped_because(state, settings) == "devel loss did not improve for 2 epochs"
    at_the_limit = MtTrainSettings(max_epochs=3, patience=2)  # both rules hold after epoch 3: patience is named
    assert stopped_because(state, at_the_limit) == "devel loss did not improve for 2 epochs"


def test_an_improving_epoch_starts_the_patience_count_again(tmp_path: Path) -> None:
    torch.manual_seed(0)
    data, kept = make_examples([([4 + i, 5], [6, 4 + i % 4]) for i in range(5)], 16), {}

    def spoil_or_restore(model: MtTransformer, state: TrainState, _: object) -> None:
        # after an odd epoch keep the weights and spoil them; after an even one put the kept ones back
        with torch.no_grad():
            if state.epoch % 2:
                kept.update({k: v.clone() for k, v in model.state_dict().items()})
                for p in model.parameters():
                    p.add_(torch.randn_like(p))
            else:
                model.load_state_dict(kept)

    settings = MtTrainSettings(max_epochs=6, patience=2, learning_rate=1e-2, warmup_steps=1, k_min=1, k_max=3)
    state = train(MtTransformer(CONFIG), data, data, settings, tmp_path / "s.pt", "t", spoil_or_restore)
    loss = [h["devel_loss"] for h in state.history]
    assert loss[0] - 1e-4 > loss[2] and loss[2] - 1e-4 > loss[4] and min(loss[1], loss[3], loss[5]) > loss[0]
    assert (state.epoch, state.best_epoch, state.bad_epochs) == (6, 5, 1)
    assert stopped_because(state, settings) == "6 epochs"


def test_training_equals_the_warmup_adam_loop_written_out(tmp_path: Path) -> None:
    data = make_examples([([4 + i % 5] * (1 + i % 6), [6, 4 + i % 4] * (1 + i % 3)) for i in range(40)], 16)
    s = MtTrainSettings(max_epochs=2, batch_tokens=100, learning_rate=1e-2, warmup_steps=3, k_min=1, k_max=4,
                        patience=9, threads=1)
    torch.manual_seed(0)
    model = MtTransformer(CONFIG)
    mine, rng, step = copy.deepcopy(model), random.Random(s.seed), 0
    train(model, data, data, s, tmp_path / "s.pt", "t", lambda *_: None)
    opt = torch.optim.Adam(mine.parameters(), betas=(0.9, 0.98), eps=1e-9)
    for _ in range(2):
        for batch in batches(data, s.batch_tokens, rng):  # a wait-k batch 9 times in 10, k from 1 to 4
            k = rng.randint(s.k_min, s.k_max) if rng.random() >= s.full_sentence_fraction else None
            loss, n = loss_of(mine, batch, k, s.label_smoothing)
            step += 1
            opt.param_groups[0]["lr"] = 1e-2 * min(step / 3, (3 / step) ** 0.5)
            opt.zero_grad()
            (loss / n).backward()
            torch.nn.utils.clip_grad_norm_(mine.parameters(), 1.0)
            opt.step()
    for a, b in zip(model.parameters(), mine.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
