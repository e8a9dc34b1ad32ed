"""The speaker feature transform: CTC targets from a best path, the fit (the model frozen, the loss going
down, the identity kept under a strong penalty), checkpoints that carry the transform, causality, and (with
the shipped model) that a fitted transform undoes most of a known distortion of the features."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from specbench.acoustic.checkpoint import load_checkpoint, save_checkpoint
from specbench.acoustic.features import fbank
from specbench.acoustic.inference import score_features
from specbench.acoustic.speaker_transform import SpeakerTransform, ctc_targets, fit_speaker_transform, install
from specbench.acoustic.training import greedy_ctc
from specbench.metrics.wer import error_rate
from specbench.wfst.lexicon import PHONES

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
SHIPPED_MODEL = ROOT / "models" / "am_slurp.pt"
RNG = np.random.default_rng(5)


def test_ctc_targets_merge_repeats_and_drop_blanks() -> None:
    # graph input label j + 1 is model column j; column 0 (label 1) is the blank
    assert ctc_targets([1, 1, 3, 3, 1, 3, 5, 5, 1]) == [2, 2, 4]
    assert ctc_targets([4, 4, 4]) == [3] and ctc_targets([1, 1]) == [] and ctc_targets([]) == []
    assert ctc_targets([2, 3, 2]) == [1, 2, 1]


def random_transform(dim: int = 80) -> SpeakerTransform:
    weight = np.eye(dim, dtype=np.float32) + RNG.normal(0, 0.05, (dim, dim)).astype(np.float32)
    return SpeakerTransform(weight, RNG.normal(0, 0.1, dim).astype(np.float32), [])


def test_a_checkpoint_carries_its_transform_and_applies_it_first(checkpoint: Path, tmp_path: Path) -> None:
    base = load_checkpoint(checkpoint, PHONES)
    assert base.model.input_transform is None  # a plain checkpoint loads as before
    feats = [fbank(RNG.normal(0, 0.1, n).astype(np.float32)) for n in (8000, 12000)]
    transform = random_transform()
    adapted = load_checkpoint(checkpoint, PHONES)
    install(adapted, transform)
    save_checkpoint(tmp_path / "adapted.pt", adapted.model, adapted.cmvn, adapted.phones, {}, fp16=False)
    reloaded = load_checkpoint(tmp_path / "adapted.pt", PHONES)
    torch.testing.assert_close(reloaded.model.input_transform.weight, torch.from_numpy(transform.weight))
    got = score_features(reloaded, feats, warp=1.05)
    with torch.no_grad():  # by hand: normalize, warp, transform, then the plain model
        from specbench.acoustic.vtln import warp_mel_axis

        for f, g in zip(feats, got):
            x = warp_mel_axis(torch.from_numpy(base.cmvn.apply(f))[None], 1.05)
            x = x @ torch.from_numpy(transform.weight).T + torch.from_numpy(transform.bias)
            np.testing.assert_allclose(g, base.model(x, torch.tensor([len(f)]))[0][0].numpy(), atol=1e-5)
    plain = score_features(base, feats, warp=1.05)
    assert not np.allclose(got[0], plain[0], atol=1e-3)


def test_transformed_scores_stay_causal(checkpoint: Path, assert_causal) -> None:  # noqa: ANN001
    ckpt = load_checkpoint(checkpoint, PHONES)
    install(ckpt, random_transform())
    assert_causal(ckpt, 1.1)


def test_fit_lowers_the_loss_and_leaves_the_model_alone(checkpoint: Path) -> None:
    ckpt = load_checkpoint(checkpoint, PHONES)
    before = {k: v.clone() for k, v in ckpt.model.state_dict().items()}
    feats = [fbank(RNG.normal(0, 0.1, n).astype(np.float32)) for n in (9000, 11000, 13000, 15000)]
    targets = [[3, 7, 7, 12], [5, 9], [], [20, 21, 22]]  # an empty target is skipped
    fit = fit_speaker_transform(ckpt, feats, targets, warp=1.02, epochs=15, learning_rate=1e-2, l2=0.0,
                                batch_size=2)
    assert len(fit.losses) == 16 and fit.losses[-1] < fit.losses[0] - 0.1  # random weights: a slow descent
    assert not np.allclose(fit.weight, np.eye(80), atol=1e-3)
    for k, v in ckpt.model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(p.requires_grad for p in ckpt.model.parameters())  # as they were before the fit
    held = fit_speaker_transform(ckpt, feats, targets, epochs=3, learning_rate=1e-2, l2=1e6, batch_size=4)
    np.testing.assert_allclose(held.weight, np.eye(80), atol=2e-2)  # a huge penalty keeps the identity
    with pytest.raises(ValueError, match="non-empty target"):
        fit_speaker_transform(ckpt, feats[:1], [[]])


def test_fit_restores_the_model_mode_and_flags_even_when_it_fails(checkpoint: Path) -> None:
    ckpt = load_checkpoint(checkpoint, PHONES)
    ckpt.model.train()
    ckpt.model.output.bias.requires_grad_(False)  # mixed flags come back as they were
    flags = [p.requires_grad for p in ckpt.model.parameters()]
    feats = [fbank(RNG.normal(0, 0.1, 9000).astype(np.float32))]
    fit_speaker_transform(ckpt, feats, [[3, 4]], epochs=1)
    assert ckpt.model.training and [p.requires_grad for p in ckpt.model.parameters()] == flags
    with pytest.raises(ValueError, match="broadcast"):  # 40-bin features do not fit the 80-bin CMVN
        fit_speaker_transform(ckpt, [f[:, :40] for f in feats], [[3, 4]], epochs=1)
    assert ckpt.model.training and [p.requires_grad for p in ckpt.model.parameters()] == flags
    install(ckpt, random_transform())
    with pytest.raises(ValueError, match="already holds a speaker transform"):
        fit_speaker_transform(ckpt, feats, [[3, 4]])


@pytest.mark.skipif(not SHIPPED_MODEL.is_file(), reason="no trained model in models/")
def test_shipped_model_learns_to_undo_a_known_distortion(tmp_path: Path) -> None:
    """A training voice's fbank with a channel distortion (a spectral tilt and a gain, as a different
    microphone would give): the model's greedy phones drift from those of the clean speech; a transform
    fitted by CTC to the clean speech's greedy phones on half the sentences brings the other half back
    (measured: phone disagreement 0.19 distorted, 0.06 after the fit)."""
    from specbench.data.synthesis import read_wav, synthesize
    from specbench.data.voices import get_voice

    ckpt = load_checkpoint(SHIPPED_MODEL, PHONES)
    sentences = ["wake me up at seven in the morning", "what is the weather like in paris today",
                 "turn the lights off in the kitchen", "play some jazz music please",
                 "remind me to call my mother tomorrow", "how long will it take to drive to work",
                 "set an alarm for half past six", "tell me a joke about cats"]
    clean = []
    for i, text in enumerate(sentences):
        synthesize(text, get_voice("espeak:en-us"), 1.0, tmp_path / f"{i}.wav")
        clean.append(fbank(read_wav(tmp_path / f"{i}.wav")[0]))
    tilt = np.linspace(-3.0, 3.0, 80, dtype=np.float32)  # log-mel energies: a tilt adds, a gain shifts
    distorted = [f + tilt + 1.5 for f in clean]

    def phones(feats: list[np.ndarray], model_ckpt) -> list[list[int]]:  # noqa: ANN001
        return [greedy_ctc(torch.from_numpy(m), len(m)) for m in score_features(model_ckpt, feats)]

    reference = phones(clean, ckpt)
    fit = fit_speaker_transform(ckpt, distorted[:4], reference[:4], epochs=30, learning_rate=3e-3, l2=0.01,
                                batch_size=4)
    adapted = load_checkpoint(SHIPPED_MODEL, PHONES)
    install(adapted, fit)
    drift = error_rate(list(zip(reference[4:], phones(distorted[4:], ckpt))))
    after = error_rate(list(zip(reference[4:], phones(distorted[4:], adapted))))
    assert fit.losses[-1] < fit.losses[0]
    assert drift > 0.1 and after < 0.5 * drift, (drift, after)
