"""Unsupervised speaker adaptation by a feature-space affine transform: the neural counterpart of Kaldi's
two-pass fMLLR decoding (Gales 1998; Kaldi's `decode_fmllr.sh`), also known as a linear input network
(Neto et al. 1995).

A speaker's earlier utterances are decoded once with the speaker-independent model; the phone sequences of
those first-pass best paths serve as CTC targets for one affine map `x -> W x + b` of the (normalized,
VTLN-warped) feature frames, initialized at the identity and pulled back towards it by an L2 penalty, while
the model itself stays frozen. No transcript is used. The map acts frame by frame, so a causal model stays
causal and the adapted model decodes in a single pass; the transform lives in the checkpoint
(`CausalCtcModel.add_input_transform`), one copy per speaker.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from specbench.acoustic.checkpoint import AcousticCheckpoint
from specbench.acoustic.inference import feature_batch
from specbench.acoustic.vtln import IDENTITY


@dataclass(frozen=True)
class SpeakerTransform:
    """The fitted map (`weight (F, F)`, `bias (F,)`) and the mean CTC loss (per target phone) after each
    epoch (index 0: before the first)."""

    weight: np.ndarray
    bias: np.ndarray
    losses: list[float]


def ctc_targets(ilabels: Sequence[int]) -> list[int]:
    """Model output columns of a best path, from its per-frame graph input labels (label j + 1 is column j,
    column 0 the blank): repeats merged, blanks dropped, as CTC reads a frame sequence."""
    out, previous = [], None
    for label in ilabels:
        column = label - 1
        if column != previous and column != 0:
            out.append(column)
        previous = column
    return out


def fit_speaker_transform(ckpt: AcousticCheckpoint, feats: Sequence[np.ndarray], targets: Sequence[list[int]],
                          warp: float = IDENTITY, epochs: int = 10, learning_rate: float = 1e-3,
                          l2: float = 0.1, batch_size: int = 16, seed: int = 0) -> SpeakerTransform:
    """Fit `W x + b` on raw fbank `feats` (normalized by the checkpoint's CMVN, then warped by `warp`) to
    CTC `targets` (model columns, no blanks) by Adam on the CTC loss (per target phone, averaged over a
    batch) plus `l2` times the squared distance of (W, b) from (I, 0). Pairs with an empty target are
    skipped; the model is not changed."""
    pairs = [(f, t) for f, t in zip(feats, targets, strict=True) if t and len(f)]
    if not pairs:
        raise ValueError("no utterance with a non-empty target to fit a speaker transform on")
    model = ckpt.model
    if model.input_transform is not None:
        raise ValueError("the checkpoint already holds a speaker transform: fit on the speaker-independent "
                         "one")
    device = next(model.parameters()).device
    was_training = model.training
    frozen = [p.requires_grad for p in model.parameters()]
    dim = pairs[0][0].shape[1]
    eye = torch.eye(dim, device=device)
    weight = torch.nn.Parameter(eye.clone())
    bias = torch.nn.Parameter(torch.zeros(dim, device=device))
    opt = torch.optim.Adam([weight, bias], lr=learning_rate)
    ctc = torch.nn.CTCLoss(blank=0, zero_infinity=True)  # per utterance over its target length, batch mean
    order = list(range(len(pairs)))
    rng = random.Random(seed)

    def loss_of(index: list[int]) -> torch.Tensor:
        x, lengths = feature_batch(ckpt, [pairs[i][0] for i in index], device, warp)
        logprobs, out_lengths = model(x @ weight.T + bias, lengths.to(device))
        target = torch.tensor([c for i in index for c in pairs[i][1]], dtype=torch.int64, device=device)
        target_lengths = torch.tensor([len(pairs[i][1]) for i in index])
        return ctc(logprobs.transpose(0, 1), target, out_lengths.cpu(), target_lengths)

    def mean_loss() -> float:
        with torch.no_grad():
            return sum(float(loss_of(order[i:i + batch_size])) * len(order[i:i + batch_size])
                       for i in range(0, len(order), batch_size)) / len(order)

    try:
        model.eval()  # dropout off; the model's own weights take no gradient
        for p in model.parameters():
            p.requires_grad_(False)
        with torch.backends.cudnn.flags(enabled=False):  # cuDNN's LSTM has no backward in eval mode
            losses = [mean_loss()]
            for _ in range(epochs):
                rng.shuffle(order)
                for start in range(0, len(order), batch_size):
                    loss = loss_of(order[start:start + batch_size])
                    penalty = ((weight - eye) ** 2).sum() + (bias ** 2).sum()
                    opt.zero_grad(set_to_none=True)
                    (loss + l2 * penalty).backward()
                    opt.step()
                losses.append(mean_loss())
    finally:
        for p, flag in zip(model.parameters(), frozen, strict=True):
            p.requires_grad_(flag)
        model.train(was_training)
    return SpeakerTransform(weight.detach().cpu().numpy(), bias.detach().cpu().numpy(), losses)


def install(ckpt: AcousticCheckpoint, transform: SpeakerTransform) -> None:
    """Put `transform` into the checkpoint's model (as its input transform), in place."""
    layer = ckpt.model.input_transform or ckpt.model.add_input_transform()
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(transform.weight))
        layer.bias.copy_(torch.from_numpy(transform.bias))
