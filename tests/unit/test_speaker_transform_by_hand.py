"""The speaker transform's reported losses against a CTC loss computed here independently (torch's
`ctc_loss` per utterance, divided by its target length, averaged over the utterances with a target) on the
scores of the inference path: before the fit under the speaker-independent model, after it under the
checkpoint the transform is installed in, both on features normalized and warped as they are decoded; and
the L2 penalty holding the bias, not only the weight, at the identity map."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from specbench.acoustic.checkpoint import AcousticCheckpoint, load_checkpoint
from specbench.acoustic.features import fbank
from specbench.acoustic.inference import score_features
from specbench.acoustic.speaker_transform import fit_speaker_transform, install
from specbench.wfst.lexicon import PHONES

pytestmark = pytest.mark.unit
RNG = np.random.default_rng(7)
FEATS = [fbank(RNG.normal(0, 0.1, n).astype(np.float32)) for n in (9000, 11000, 13000, 7000)]
TARGETS = [[3, 7, 7, 12], [5, 9], [20, 21, 22], []]  # the last has no target: left out of fit and loss
WARP = 0.8


def loss_per_phone(ckpt: AcousticCheckpoint, warp: float) -> float:
    """Mean over utterances with a target of CTC loss / target length, each utterance scored alone."""
    losses = []
    for feats, target in zip(FEATS, TARGETS):
        if not target:
            continue
        logprobs = torch.from_numpy(score_features(ckpt, [feats], warp=warp)[0])
        loss = torch.nn.functional.ctc_loss(logprobs[:, None, :], torch.tensor([target]),
                                            torch.tensor([len(logprobs)]), torch.tensor([len(target)]),
                                            blank=0, reduction="sum")
        losses.append(float(loss) / len(target))
    return float(np.mean(losses))


def test_losses_before_and_after_are_those_of_the_warped_scores(checkpoint: Path) -> None:
    """losses[0] is the loss of the plain model on the warped features, losses[-1] that of the checkpoint
    with the fitted transform installed (scored as the inference stage scores it); a model left in
    training mode is still fitted and measured without dropout."""
    ckpt = load_checkpoint(checkpoint, PHONES)
    ckpt.model.train()
    fit = fit_speaker_transform(ckpt, FEATS, TARGETS, warp=WARP, epochs=2, learning_rate=1e-2, l2=0.1,
                                batch_size=2)
    plain = load_checkpoint(checkpoint, PHONES)
    assert fit.losses[0] == pytest.approx(loss_per_phone(plain, WARP), rel=1e-6)
    assert abs(loss_per_phone(plain, WARP) - loss_per_phone(plain, 1.0)) > 1e-3  # the warp does matter here
    adapted = load_checkpoint(checkpoint, PHONES)
    install(adapted, fit)
    assert fit.losses[-1] == pytest.approx(loss_per_phone(adapted, WARP), rel=1e-6)
    assert fit.losses[-1] != pytest.approx(fit.losses[0], rel=1e-6)  # the fit did move the map


def test_a_strong_penalty_holds_the_bias_at_zero_too(checkpoint: Path) -> None:
    """The penalty is the squared distance of (W, b) from (I, 0): under a huge one neither moves by more
    than about one Adam step (1e-2), while without it both drift by several steps in 10 epochs."""
    free = fit_speaker_transform(load_checkpoint(checkpoint, PHONES), FEATS, TARGETS, epochs=10,
                                 learning_rate=1e-2, l2=0.0, batch_size=4)
    held = fit_speaker_transform(load_checkpoint(checkpoint, PHONES), FEATS, TARGETS, epochs=10,
                                 learning_rate=1e-2, l2=1e6, batch_size=4)
    assert np.abs(free.bias).max() > 0.05 and np.abs(free.weight - np.eye(80)).max() > 0.05
    assert np.abs(held.bias).max() < 0.02 and np.abs(held.weight - np.eye(80)).max() < 0.02
