"""Training of the translation models: label-smoothed cross-entropy, Adam with warmup and inverse-square-root
decay, batches of similar-length sentences up to a token budget, a wait-k model trained over a random k per
batch (one model serves every k). Resumable: the full state (fp32 weights, optimizer, schedule, epoch, RNG) is
saved every few minutes and at each epoch's end; a rerun with the same config continues from it (on either
device: the state is loaded to the CPU first; dropout draws on a GPU come from its own generator, so a resumed
GPU run is not bit-identical to an uninterrupted one). Stops at the time budget, the epoch limit, or when devel
loss has not improved for `patience` epochs; only whole epochs are scored. Runs on the CPU or a CUDA device:
batches are built on the CPU and moved to the model's device."""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from specbench.checkpoint_io import write_checkpoint
from specbench.errors import DataError
from specbench.simultrans.model import MtTransformer
from specbench.simultrans.settings import MtModelConfig, MtTrainSettings
from specbench.simultrans.tokenizer import BOS, EOS, PAD
from specbench.text_files import replacing
from specbench.torch_threads import torch_threads

STATE_VERSION = 1


@dataclass(frozen=True)
class Example:
    """One tokenized pair: source ids ending in </s>, target ids (no <s>, no </s>)."""

    src: tuple[int, ...]
    tgt: tuple[int, ...]


@dataclass
class TrainState:
    """What a resumed run needs besides the model and optimizer."""

    epoch: int = 0
    step: int = 0
    elapsed_s: float = 0.0
    best_devel_loss: float = math.inf
    best_epoch: int = 0
    bad_epochs: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)


def make_examples(pairs: list[tuple[list[int], list[int]]], max_len: int) -> list[Example]:
    """Examples from (source ids, target ids); pairs longer than max_len - 2 tokens on a side are dropped."""
    return [Example(tuple(s) + (EOS,), tuple(t)) for s, t in pairs if 0 < len(s) <= max_len - 2
            and 0 < len(t) <= max_len - 2]


def batches(examples: list[Example], batch_tokens: int, rng: random.Random) -> list[list[Example]]:
    """Similar-length batches of at most `batch_tokens` (longest side x sentences), shuffled."""
    order = sorted(examples, key=lambda e: (len(e.src), len(e.tgt)))
    out: list[list[Example]] = []
    current: list[Example] = []
    longest = 0
    for ex in order:
        size = max(len(ex.src), len(ex.tgt) + 1)
        if current and max(longest, size) * (len(current) + 1) > batch_tokens:
            out.append(current)
            current, longest = [], 0
        current.append(ex)
        longest = max(longest, size)
    if current:
        out.append(current)
    rng.shuffle(out)
    return out


def collate(batch: list[Example]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(src (B, S), tgt_in (B, T) starting with <s>, tgt_out (B, T) ending with </s>), PAD-padded."""
    s = max(len(e.src) for e in batch)
    t = max(len(e.tgt) for e in batch) + 1
    src = torch.full((len(batch), s), PAD, dtype=torch.long)
    tin = torch.full((len(batch), t), PAD, dtype=torch.long)
    tout = torch.full((len(batch), t), PAD, dtype=torch.long)
    for i, e in enumerate(batch):
        src[i, :len(e.src)] = torch.tensor(e.src)
        tin[i, :len(e.tgt) + 1] = torch.tensor((BOS,) + e.tgt)
        tout[i, :len(e.tgt) + 1] = torch.tensor(e.tgt + (EOS,))
    return src, tin, tout


def loss_of(model: MtTransformer, batch: list[Example], k: int | None, smoothing: float) -> tuple[torch.Tensor, int]:
    """Summed label-smoothed cross-entropy over the batch's target tokens (on the model's device), and
    their count."""
    src, tin, tout = collate(batch)
    count = int((tout != PAD).sum())
    device = model.embed.weight.device
    src, tin, tout = (t.to(device, non_blocking=True) for t in (src, tin, tout))
    logits = model(src, tin, k)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tout.reshape(-1), ignore_index=PAD,
                           label_smoothing=smoothing, reduction="sum")
    return loss, count


def devel_loss(model: MtTransformer, examples: list[Example], ks: list[int | None]) -> float:
    """Mean per-token cross-entropy (no smoothing) on devel, averaged over the visibilities `ks`."""
    model.eval()
    total = count = 0.0
    with torch.no_grad():
        for k in ks:
            for batch in batches(examples, 4000, random.Random(0)):
                loss, n = loss_of(model, batch, k, 0.0)
                total, count = total + float(loss), count + n
    model.train()
    return total / max(count, 1)


class WeightAverage:
    """An exponential moving average of a model's floating-point parameters, `avg <- d * avg + (1 - d) * w`
    after every optimizer step, with the bias correction of Adam (`avg / (1 - d^n)` after n updates, so
    that early averages are not pulled towards the zero start)."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"weight_average_decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.updates = 0
        self.params = [p for p in model.parameters() if p.is_floating_point()]
        self.sums = [torch.zeros_like(p, dtype=torch.float32) for p in self.params]

    def update(self) -> None:
        self.updates += 1
        with torch.no_grad():
            torch._foreach_mul_(self.sums, self.decay)
            torch._foreach_add_(self.sums, [p.float() for p in self.params], alpha=1.0 - self.decay)

    def averaged(self) -> list[torch.Tensor]:
        scale = 1.0 / (1.0 - self.decay ** max(self.updates, 1))
        return [s * scale for s in self.sums]

    @contextmanager
    def swapped_in(self) -> Iterator[None]:
        """The model holds the averaged weights inside the block, its own weights again after it (before the
        first update there is no average: the model keeps its own weights)."""
        if not self.updates:
            yield
            return
        own = [p.detach().clone() for p in self.params]
        with torch.no_grad():
            for p, a in zip(self.params, self.averaged(), strict=True):
                p.copy_(a)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, o in zip(self.params, own, strict=True):
                    p.copy_(o)

    def state(self) -> dict[str, Any]:
        return {"updates": self.updates, "sums": [s.cpu() for s in self.sums]}

    def load(self, blob: dict[str, Any]) -> None:
        self.updates = int(blob["updates"])
        for s, saved in zip(self.sums, blob["sums"], strict=True):
            s.copy_(saved)


RESUMABLE_CHANGES = ("max_minutes", "max_epochs", "patience", "checkpoint_minutes", "threads")  # not in the tag


def config_hash(model_cfg: MtModelConfig, settings: MtTrainSettings, data_tag: str) -> str:
    """The tag a saved state must carry to be resumed: everything that shapes the optimisation, but not
    the stopping rules or the thread count (a run may be resumed with a longer budget)."""
    training = {k: v for k, v in settings.to_dict().items() if k not in RESUMABLE_CHANGES}
    if not training["weight_average_decay"]:
        del training["weight_average_decay"]  # off: the tag of runs from before averaging existed
    blob = json.dumps({"model": model_cfg.to_dict(), "training": training, "data": data_tag,
                       "version": STATE_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _lr(step: int, settings: MtTrainSettings) -> float:
    """Linear warmup to the peak, then inverse-square-root decay."""
    step = max(step, 1)
    return settings.learning_rate * min(step / settings.warmup_steps, math.sqrt(settings.warmup_steps / step))


def train(model: MtTransformer, train_set: list[Example], devel_set: list[Example], settings: MtTrainSettings,
          state_path: Path, tag: str, on_epoch: Callable[[MtTransformer, TrainState, dict[str, float]], None],
          judged_on: str = "") -> TrainState:
    """Train `model` in place (resuming from `state_path` when its config tag matches, and, when the saved
    state records one, its `judged_on`: the devel sentences its best loss and kept epoch were judged on; a
    state saved before that was recorded resumes on the tag alone); after every epoch call
    `on_epoch(model, state, metrics)` (which keeps the best model). Returns the final state."""
    with torch_threads(settings.threads):
        return _train(model, train_set, devel_set, settings, state_path, tag, on_epoch, judged_on)


def _train(model: MtTransformer, train_set: list[Example], devel_set: list[Example], settings: MtTrainSettings,
           state_path: Path, tag: str, on_epoch: Callable[[MtTransformer, TrainState, dict[str, float]], None],
           judged_on: str) -> TrainState:
    torch.manual_seed(settings.seed)
    opt = torch.optim.Adam(model.parameters(), lr=settings.learning_rate, betas=(0.9, 0.98), eps=1e-9)
    state = TrainState()
    rng = random.Random(settings.seed)
    average = WeightAverage(model, settings.weight_average_decay) if settings.weight_average_decay else None
    progress = None  # an epoch under way when the state was saved: its plan's seed, batches done, loss sums
    if state_path.is_file():
        blob = read_state(state_path)
        if blob.get("tag") == tag and blob.get("judged_on", judged_on) == judged_on:
            model.load_state_dict(blob["model"])
            opt.load_state_dict(blob["optimizer"])  # moves the moments to the parameters' device
            state = TrainState(**blob["state"])
            rng.setstate(blob["rng"])
            torch.set_rng_state(blob["torch_rng"])
            if average is not None:
                average.load(blob["average"])
            progress = blob.get("epoch_progress")
            print(f"resuming from {state_path}: epoch {state.epoch}, step {state.step}, "
                  f"{state.elapsed_s / 60:.1f} min trained", file=sys.stderr)
    causal = model.config.causal_encoder
    devel_ks = [3, 5, 7, None] if causal else [None]
    budget = settings.max_minutes * 60
    last_save = time.monotonic()
    model.train()
    while state.epoch < settings.max_epochs and state.elapsed_s < budget and state.bad_epochs < settings.patience:
        epoch_start, total, tokens = time.monotonic(), torch.zeros((), device=model.embed.weight.device), 0
        elapsed_before = state.elapsed_s
        epoch_rng, done, after = rng.getstate(), 0, None
        if progress is not None:  # the epoch's own plan, and on from the batch where it stopped
            epoch_rng, done, after = progress["rng"], progress["done"], rng.getstate()
            total, tokens = total + progress["total"], progress["tokens"]
            rng.setstate(epoch_rng)
        plan = batches(train_set, settings.batch_tokens, rng)
        if after is not None:
            rng.setstate(after)
        for batch in tqdm(plan[done:], desc=f"epoch {state.epoch + 1}", unit="batch", file=sys.stderr,
                          mininterval=5.0):
            k = None
            if causal and rng.random() >= settings.full_sentence_fraction:
                k = rng.randint(settings.k_min, settings.k_max)
            loss, n = loss_of(model, batch, k, settings.label_smoothing)
            for group in opt.param_groups:
                group["lr"] = _lr(state.step + 1, settings)
            opt.zero_grad(set_to_none=True)
            (loss / n).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if average is not None:
                average.update()
            state.step, done = state.step + 1, done + 1
            total, tokens = total + loss.detach(), tokens + n  # summed on the device: no sync per step
            state.elapsed_s = elapsed_before + time.monotonic() - epoch_start
            progress = {"rng": epoch_rng, "done": done, "total": total, "tokens": tokens}
            if time.monotonic() - last_save > settings.checkpoint_minutes * 60:
                _save(state_path, model, opt, state, rng, tag, average, judged_on, progress)
                last_save = time.monotonic()
            if state.elapsed_s >= budget:
                break
        if done < len(plan):
            break  # a partial epoch is not scored (its state is saved for a resumed run to go on with)
        progress = None
        state.epoch += 1
        with average.swapped_in() if average is not None else nullcontext():  # devel scores what is kept
            metrics = {"train_loss": float(total) / max(tokens, 1),
                       "devel_loss": devel_loss(model, devel_set, devel_ks),
                       "epoch_minutes": (time.monotonic() - epoch_start) / 60,
                       "elapsed_minutes": state.elapsed_s / 60}
            if metrics["devel_loss"] < state.best_devel_loss - 1e-4:
                state.best_devel_loss, state.best_epoch = metrics["devel_loss"], state.epoch
                state.bad_epochs = 0
            else:
                state.bad_epochs += 1
            state.history.append({"epoch": state.epoch, **metrics})
            on_epoch(model, state, metrics)
        _save(state_path, model, opt, state, rng, tag, average, judged_on)
        last_save = time.monotonic()
    _save(state_path, model, opt, state, rng, tag, average, judged_on, progress)
    return state


def stopped_because(state: TrainState, settings: MtTrainSettings) -> str:
    if state.bad_epochs >= settings.patience:
        return f"devel loss did not improve for {settings.patience} epochs"
    if state.epoch >= settings.max_epochs:
        return f"{settings.max_epochs} epochs"
    return f"time budget of {settings.max_minutes:g} minutes"


def read_state(path: Path) -> dict[str, Any]:
    """A resume state written by `train`, read as data only (`weights_only`: tensors, numbers, strings and
    containers; no code from disk runs)."""
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises UnpicklingError, RuntimeError or EOFError for what it refuses
        raise DataError(f"{path}: not a training resume state specbench can read safely ({type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else 'empty'}); delete it to train from the start") from e
    if not isinstance(blob, dict):
        raise DataError(f"{path}: a resume state holds a dict, this file a {type(blob).__name__}; delete it to "
                        "train from the start")
    return blob


def _save(path: Path, model: MtTransformer, opt: torch.optim.Optimizer, state: TrainState, rng: random.Random,
          tag: str, average: WeightAverage | None, judged_on: str = "", progress: dict | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = {"tag": tag, "judged_on": judged_on, "model": model.state_dict(), "optimizer": opt.state_dict(), "state": state.__dict__,
            "rng": rng.getstate(), "torch_rng": torch.get_rng_state()}
    if progress is not None:  # mid-epoch: a resumed run rebuilds the epoch's plan and skips the batches done
        blob["epoch_progress"] = {**progress, "total": float(progress["total"])}
    if average is not None:
        blob["average"] = average.state()
    with replacing(path) as tmp:  # a temporary file of this call's own: two runs never mix
        torch.save(blob, tmp)


def save_model(path: Path, model: MtTransformer, bpe_sha256: str, metadata: dict[str, Any]) -> None:
    """The fp16 inference checkpoint (weights only loadable), written atomically."""
    state = {k: (v.detach().cpu().half() if v.is_floating_point() else v.detach().cpu())
             for k, v in model.state_dict().items()}
    write_checkpoint({"format_version": STATE_VERSION, "state_dict": state, "model_config": model.config.to_dict(),
                      "bpe_sha256": bpe_sha256, "metadata": metadata}, path)
