"""Training loop of the causal CTC acoustic model: CTC loss, SpecAugment, Adam with warm-up, a time budget,
evaluation on devel after every epoch (greedy CTC phone error rate), early stopping and the best weights kept.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from specbench.acoustic.dataset import Example, epoch_view, length_batches
from specbench.acoustic.features import Cmvn
from specbench.acoustic.model import CausalCtcModel
from specbench.acoustic.settings import ModelConfig, TrainSettings
from specbench.acoustic.vtln import warp_mel_axis
from specbench.metrics.wer import error_rate
from specbench.torch_threads import torch_threads

# CTC first emits only blanks, then a few phones (devel PER near 1.0) for some epochs before it learns. The
# learning-rate halving and early stopping wait until devel PER drops below this, so an epoch without gain
# inside that plateau does not halve the rate before learning has begun.
PAST_PLATEAU_PER = 0.6


@dataclass
class PlateauSchedule:
    """When to halve the learning rate and when to stop, from the devel PER of each epoch.

    Nothing happens until the best PER is below `PAST_PLATEAU_PER`. Then the rate is halved after
    `decay_patience` epochs without a new best (counted from the best epoch or the last halving, whichever is
    later; with 2 or more, one noisy epoch does not halve it); training stops after `patience` epochs without a
    new best.
    """

    patience: int
    decay_patience: int
    best_per: float = math.inf
    best_epoch: int = -1
    last_decay_epoch: int = -1
    scale: float = 1.0  # multiplies the base learning rate

    def update(self, epoch: int, per: float) -> bool:
        """Record epoch `epoch`'s devel PER; True when training should stop."""
        if per < self.best_per:
            self.best_per, self.best_epoch = per, epoch
        if self.best_per >= PAST_PLATEAU_PER:
            return False
        if epoch - self.best_epoch >= self.patience:
            return True
        if epoch - max(self.best_epoch, self.last_decay_epoch) >= self.decay_patience:
            self.scale *= 0.5
            self.last_decay_epoch = epoch
        return False


@dataclass
class TrainHistory:
    """Per-epoch records and the best epoch."""

    epochs: list[dict[str, float]] = field(default_factory=list)
    best_per: float = math.inf
    best_epoch: int = -1
    stopped_because: str = ""


def collate(examples: Sequence[Example], cmvn: Cmvn) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Padded normalized features `(B, T, 80)`, lengths `(B,)`, concatenated targets, target lengths."""
    longest = max(len(e.feats) for e in examples)
    feats = np.zeros((len(examples), longest, examples[0].feats.shape[1]), dtype=np.float32)
    for i, e in enumerate(examples):
        feats[i, : len(e.feats)] = cmvn.apply(e.feats.astype(np.float32))
    lengths = torch.tensor([len(e.feats) for e in examples], dtype=torch.int64)
    targets = torch.from_numpy(np.concatenate([e.targets for e in examples]))
    target_lengths = torch.tensor([len(e.targets) for e in examples], dtype=torch.int64)
    return torch.from_numpy(feats), lengths, targets, target_lengths


def spec_augment(feats: torch.Tensor, lengths: torch.Tensor, s: TrainSettings, gen: torch.Generator) -> torch.Tensor:
    """Warp the mel axis, zero random frequency bands and time spans (on a copy)."""
    feats = feats.clone()
    bins = feats.shape[2]
    for b in range(feats.shape[0]):
        if s.freq_warp > 0:
            factor = 1.0 + s.freq_warp * (2 * float(torch.rand(1, generator=gen)) - 1)
            feats[b] = warp_mel_axis(feats[b], factor)
        for _ in range(s.freq_masks):
            width = int(torch.randint(0, s.freq_mask_width + 1, (1,), generator=gen))
            start = int(torch.randint(0, max(1, bins - width), (1,), generator=gen))
            feats[b, :, start:start + width] = 0.0
        # at least one frame for a short utterance, none when the fraction is 0 (time masks off)
        max_t = max(1, int(s.time_mask_fraction * int(lengths[b]))) if s.time_mask_fraction > 0 else 0
        for _ in range(s.time_masks):
            width = int(torch.randint(0, max_t + 1, (1,), generator=gen))
            start = int(torch.randint(0, max(1, int(lengths[b]) - width), (1,), generator=gen))
            feats[b, start:start + width, :] = 0.0
    return feats


def greedy_ctc(logprobs: torch.Tensor, length: int) -> list[int]:
    """Best label per frame, repeats merged, blanks (0) removed."""
    best = logprobs[:length].argmax(dim=-1).tolist()
    out, previous = [], 0
    for label in best:
        if label != previous and label != 0:
            out.append(label)
        previous = label
    return out


@torch.no_grad()
def phone_error_rate(model: CausalCtcModel, examples: Sequence[Example], cmvn: Cmvn, batch_frames: int) -> float:
    """Greedy-decoding PER of `model` on `examples`."""
    model.eval()
    pairs = []
    for batch in length_batches(examples, batch_frames, None):
        chunk = [examples[i] for i in batch]
        feats, lengths, _, _ = collate(chunk, cmvn)
        logprobs, out_lengths = model(feats, lengths)
        for j, e in enumerate(chunk):
            pairs.append((e.targets.tolist(), greedy_ctc(logprobs[j], int(out_lengths[j]))))
    return error_rate(pairs)


def new_model(config: ModelConfig, seed: int) -> CausalCtcModel:
    """A model to train, its starting weights drawn from `seed` (the training seed: a run is reproduced whole)."""
    torch.manual_seed(seed)
    return CausalCtcModel(config)


def train(model: CausalCtcModel, train_set: Sequence[Example], devel_set: Sequence[Example], cmvn: Cmvn,
          s: TrainSettings, on_epoch: Callable[[dict[str, float], CausalCtcModel], None] = lambda r, m: None,
          on_step: Callable[[int, int, float], None] = lambda i, n, loss: None) -> TrainHistory:
    """Train in place; at the end `model` holds the weights of the best devel epoch."""
    with torch_threads(s.threads):
        return _train(model, train_set, devel_set, cmvn, s, on_epoch, on_step)


def _train(model: CausalCtcModel, train_set: Sequence[Example], devel_set: Sequence[Example], cmvn: Cmvn,
           s: TrainSettings, on_epoch: Callable[[dict[str, float], CausalCtcModel], None],
           on_step: Callable[[int, int, float], None]) -> TrainHistory:
    torch.manual_seed(s.seed)
    gen = torch.Generator().manual_seed(s.seed)
    rng = np.random.default_rng(s.seed)
    ctc = torch.nn.CTCLoss(blank=0, zero_infinity=True)
    opt = torch.optim.AdamW(model.parameters(), lr=s.learning_rate, weight_decay=1e-2)
    plateau = PlateauSchedule(s.patience, s.lr_decay_patience)  # LambdaLR multiplies the base rate by its scale
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: plateau.scale * min(1.0, (step + 1) / s.warmup_steps))
    history, best_state, start = TrainHistory(), None, time.monotonic()
    for epoch in range(s.max_epochs):
        model.train()
        epoch_set = epoch_view(train_set, rng)
        batches = length_batches(epoch_set, s.batch_frames, rng)
        total, frames = 0.0, 0
        for i, batch in enumerate(batches):
            feats, lengths, targets, target_lengths = collate([epoch_set[j] for j in batch], cmvn)
            logprobs, out_lengths = model(spec_augment(feats, lengths, s, gen), lengths)
            loss = ctc(logprobs.transpose(0, 1), targets, out_lengths, target_lengths)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            sched.step()
            value = float(loss.detach())
            total += value * len(batch)
            frames += len(batch)
            on_step(i, len(batches), value)
            if (time.monotonic() - start) / 60 > s.max_minutes:
                break
        per = phone_error_rate(model, devel_set, cmvn, s.batch_frames)
        record = {"epoch": float(epoch), "train_loss": total / max(frames, 1), "devel_per": per,
                  "minutes": (time.monotonic() - start) / 60, "lr": opt.param_groups[0]["lr"]}
        history.epochs.append(record)
        if per < history.best_per:
            history.best_per, history.best_epoch = per, epoch
            best_state = copy.deepcopy(model.state_dict())
        on_epoch(record, model)
        if record["minutes"] > s.max_minutes:
            history.stopped_because = f"time budget of {s.max_minutes} minutes"
            break
        if plateau.update(epoch, per):
            history.stopped_because = f"no devel improvement for {s.patience} epochs"
            break
    else:
        history.stopped_because = f"{s.max_epochs} epochs"
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return history
