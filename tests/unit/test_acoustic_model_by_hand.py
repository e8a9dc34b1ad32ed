"""Acoustic model by hand: length batches, phone targets, the 25 ms lookahead, checkpoint contents
(model_config keys this version does not know are ignored), each epoch's uniform draw of the original or one
speed-perturbed copy, which keeps the utterance's id, voice and targets, and SpecAugment's time masks."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from specbench.acoustic.checkpoint import load_checkpoint, save_checkpoint
from specbench.acoustic.dataset import Example, epoch_view, length_batches, load_examples, phone_targets
from specbench.acoustic.features import Cmvn
from specbench.acoustic.inference import score_samples
from specbench.acoustic.model import CausalCtcModel, lookahead_ms
from specbench.acoustic.settings import ModelConfig, TrainSettings
from specbench.acoustic.training import spec_augment
from specbench.checkpoint_io import load_blob, write_checkpoint
from specbench.data.synthesis import write_wav
from specbench.errors import DataError
from specbench.wfst.lexicon import PHONES

pytestmark = pytest.mark.unit


def test_a_new_model_draws_its_weights_from_the_training_seed() -> None:
    from specbench.acoustic.settings import ModelConfig
    from specbench.acoustic.training import new_model

    config = ModelConfig(hidden=8, layers=1)
    first = new_model(config, 3).state_dict()
    torch.rand(5)  # whatever else drew from torch's generator meanwhile
    second, other = new_model(config, 3).state_dict(), new_model(config, 4).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first)


def test_length_batches_by_hand() -> None:
    examples = [Example("u", np.zeros((n, 1)), np.zeros(1), "v") for n in (2, 3, 5, 5, 7)]
    # budget 10: [2, 3] pads to 3 * 2 (+5: 15), [5, 5] to exactly 10 (+7: 21)
    assert length_batches(examples, 10, None) == [[0, 1], [2, 3], [4]]
    spread = [Example("u", np.zeros((30 * k, 1)), np.zeros(1), "v") for k in range(6)]
    shuffled = length_batches(spread, 1, np.random.default_rng(0))
    assert sorted(shuffled) == [[k] for k in range(6)] != shuffled  # 30 apart: jitter < 20 keeps the order


def test_targets_and_example_fields(tmp_path: Path) -> None:
    prons = {"hi": [("HH", "AY"), ("HH", "IY")], "a": [("AH",)]}
    assert phone_targets(["hi", "a"], prons, PHONES).tolist() == [16, 6, 3]  # 1-based: AA AE AH
    with pytest.raises(DataError, match="word 'bye' is not in the lexicon"):
        phone_targets(["bye"], prons, PHONES)
    write_wav(tmp_path / "a.wav", np.random.default_rng(1).normal(0, 0.1, 8000).astype(np.float32))
    rows = [{"audio_path": "a.wav", "normalized_text": "a", "utt_id": "u7", "voice": "flite:rms"}]
    (ex,) = load_examples(rows, tmp_path, prons, PHONES, speed_factors=(1.1, 1.0, 1.1))
    assert (ex.utt_id, ex.voice, ex.targets.tolist(), len(ex.perturbed)) == ("u7", "flite:rms", [3], 1)


@pytest.mark.parametrize(("cut_s", "first"), [(1.015, 25), (1.03, 26)])
def test_first_output_frame_a_change_reaches(checkpoint: Path, cut_s: float, first: int) -> None:
    # output j reads fbank frames <= 4j (10k..10k+25 ms): 1015 ms is in frame 100, 1030 ms first in 101
    ckpt, audio = load_checkpoint(checkpoint), np.random.default_rng(2).normal(0, 0.1, 32000).astype(np.float32)
    changed = np.concatenate([audio[:round(cut_s * 16000)], audio[round(cut_s * 16000):] * 3])
    differs = np.flatnonzero((score_samples(ckpt, audio) != score_samples(ckpt, changed)).any(axis=1))
    assert differs[0] == first == int((cut_s * 1000 - lookahead_ms()) // 40) + 1


def test_checkpoint_gives_back_cmvn_weights_and_transform(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = CausalCtcModel(ModelConfig(hidden=16, layers=1, conv_channels=4)).eval()
    x, n = torch.randn(1, 9, 80), torch.tensor([9])
    before = model(x, n)[0]
    model.add_input_transform()
    torch.testing.assert_close(model(x, n)[0], before)  # the transform starts as the identity
    with torch.no_grad():
        model.input_transform.weight.mul_(0.5)
    cmvn = Cmvn(np.linspace(-1, 1, 80, dtype=np.float32), np.linspace(0.5, 2.1, 80, dtype=np.float32))
    save_checkpoint(tmp_path / "am.pt", model, cmvn, PHONES, {}, fp16=False)
    back = load_checkpoint(tmp_path / "am.pt")
    assert np.array_equal(back.cmvn.mean, cmvn.mean) and np.array_equal(back.cmvn.inv_std, cmvn.inv_std)
    assert torch.equal(back.model(x, n)[0], model(x, n)[0])
    later = {**load_blob(tmp_path / "am.pt")["model_config"], "a_later_setting": 3}  # unknown sizes are ignored
    write_checkpoint({**load_blob(tmp_path / "am.pt"), "model_config": later}, tmp_path / "later.pt")
    assert torch.equal(load_checkpoint(tmp_path / "later.pt").model(x, n)[0], model(x, n)[0])
    write_checkpoint({**load_blob(tmp_path / "am.pt"), "format_version": 2}, tmp_path / "v2.pt")
    with pytest.raises(DataError, match=r"of format_version 1 \(it has format_version 2\)"):
        load_checkpoint(tmp_path / "v2.pt")


def test_each_epoch_draws_the_original_or_a_copy_uniformly_and_a_copy_keeps_its_voice() -> None:
    feats = [np.zeros((n, 80), np.float16) for n in (10, 11, 12)]
    two = Example("u", feats[0], np.array([1, 2]), "flite:rms", (feats[1], feats[2]))
    one = Example("w", feats[0], np.array([3]), "flite:slt", (feats[2],))
    rng = np.random.default_rng(0)
    views = [epoch_view([two, one], rng) for _ in range(900)]
    # 900 draws: 300 each of 3 (sd 14) and 450 each of 2 (sd 15)
    assert all(240 < n < 360 for n in Counter(len(v[0].feats) for v in views).values())
    assert all(390 < n < 510 for n in Counter(len(v[1].feats) for v in views).values())
    for view in views:
        assert [(v.utt_id, v.voice) for v in view] == [("u", "flite:rms"), ("w", "flite:slt")]
        assert all(v.targets is e.targets and (v is e or v.perturbed == ())
                   for v, e in zip(view, (two, one), strict=True))


def test_spec_augment_masks_no_time_span_at_fraction_zero_and_at_most_the_fraction_else() -> None:
    """`time_mask_fraction = 0` turns time masks off, whatever `time_masks` says; at 0.1 of 50 frames each of
    the two masks zeroes at most 5 frames. Frequency masks and the warp are off here."""
    feats, lengths = torch.randn(16, 50, 80) + 5.0, torch.full((16,), 50)
    for fraction, most in ((0.0, 0), (0.1, 10)):
        s = TrainSettings(freq_warp=0.0, freq_masks=0, time_masks=2, time_mask_fraction=fraction)
        out = spec_augment(feats, lengths, s, torch.Generator().manual_seed(0))
        zeroed = (out == 0).all(dim=2).sum(dim=1)
        assert int(zeroed.max()) <= most and torch.equal(out[out != 0], feats[out != 0]), fraction
