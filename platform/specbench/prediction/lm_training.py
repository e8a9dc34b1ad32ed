"""Training and perplexity of the word LSTM LM.

Each sentence (a list of normalized words) becomes `<s> w1 .. wn </s>`; the model is trained with
cross-entropy over every predicted token (`w1 .. wn </s>`), Adam, gradient clipping at norm 1.0, and batches
of similar-length sentences shuffled with a seeded RNG. After every epoch the devel perplexity is measured;
the weights of the best epoch are kept in memory and restored at the end. Training stops after `epochs`
epochs, when devel perplexity has not improved for `patience` epochs, or when the wall-clock budget
`max_minutes` is spent (an epoch cut short by the budget is still scored). `LmTrainSettings` is defined in
`specbench.prediction.settings`.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tqdm import tqdm

from specbench.errors import DataError
from specbench.prediction.lm import WordLstmLm
from specbench.prediction.settings import LmSettings, LmTrainSettings
from specbench.prediction.vocab import BOS, EOS, PAD, WordVocab
from specbench.torch_threads import torch_threads


@dataclass(frozen=True)
class TrainedLm:
    """The trained model (best-devel weights, eval mode), its vocabulary, one dict per epoch (`epoch`,
    `train_loss` nats per token, `devel_perplexity`, `seconds` wall clock, `fraction` of the epoch's
    batches run), the best epoch (1-based) and why training stopped: "epochs", "time" or "patience"."""

    model: WordLstmLm
    vocab: WordVocab
    history: tuple[dict[str, float], ...]
    best_epoch: int
    stopped_because: str


@dataclass(frozen=True)
class PerplexityResult:
    """Perplexity (exp of the mean natural-log loss per predicted token), the number of predicted tokens
    (words + one `</s>` per sentence) and how many of them were out-of-vocabulary words scored as `<unk>`."""

    perplexity: float
    tokens: int
    oov_tokens: int


def encode_sentences(vocab: WordVocab, sentences: Sequence[Sequence[str]]) -> list[list[int]]:
    """`[<s>, w1 .. wn, </s>]` ids per sentence; a sentence given as a string raises `DataError`."""
    out = []
    for i, sentence in enumerate(sentences):
        if isinstance(sentence, str):
            raise DataError(f"sentence {i} is a string, not a list of words. Fix: pass text.split().")
        out.append([BOS, *vocab.encode(sentence), EOS])
    return out


def length_batches(lengths: Sequence[int], batch_size: int, rng: random.Random) -> list[list[int]]:
    """Indices grouped into batches of `batch_size` sentences of similar length (ties broken at random),
    the batches in random order."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], rng.random()))
    plan = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(plan)
    return plan


def collate(seqs: Sequence[Sequence[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs `(B, T)`, targets `(B, T)`) int64: each sequence without its last / first id, PAD-padded."""
    width = max(len(s) for s in seqs) - 1
    inputs = torch.full((len(seqs), width), PAD, dtype=torch.long)
    targets = torch.full((len(seqs), width), PAD, dtype=torch.long)
    for row, s in enumerate(seqs):
        inputs[row, :len(s) - 1] = torch.tensor(s[:-1])
        targets[row, :len(s) - 1] = torch.tensor(s[1:])
    return inputs.to(device), targets.to(device)


def _summed_loss(model: WordLstmLm, seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, int]:
    """Summed cross-entropy (nats) over the predicted tokens of `seqs`, and their count."""
    device = next(model.parameters()).device
    inputs, targets = collate(seqs, device)
    logits, _ = model(inputs)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=PAD,
                           reduction="sum")
    return loss, int((targets != PAD).sum())


def perplexity_details(model: WordLstmLm, vocab: WordVocab, sentences: Sequence[Sequence[str]],
                       batch_size: int = 256) -> PerplexityResult:
    """Perplexity of `sentences` under `model` (run in eval mode, its mode restored afterwards)."""
    seqs = encode_sentences(vocab, sentences)
    if not seqs:
        raise DataError("perplexity of an empty set of sentences is undefined. "
                        "Fix: give at least one sentence.")
    oov = sum(1 for sentence in sentences for w in sentence if w not in vocab)
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        with torch.inference_mode():
            for start in range(0, len(seqs), batch_size):
                loss, n = _summed_loss(model, seqs[start:start + batch_size])
                total, count = total + float(loss), count + n
    finally:
        model.train(was_training)
    mean = total / count
    return PerplexityResult(math.exp(mean) if mean < 700 else math.inf, count, oov)


def perplexity(model: WordLstmLm, vocab: WordVocab, sentences: Sequence[Sequence[str]],
               batch_size: int = 256) -> float:
    """exp(mean negative log-likelihood per predicted token): words and `</s>`, OOV words scored as
    `<unk>`."""
    return perplexity_details(model, vocab, sentences, batch_size).perplexity


def _train_epoch(model: WordLstmLm, opt: torch.optim.Optimizer, seqs: list[list[int]],
                 settings: LmTrainSettings, rng: random.Random, deadline: float, desc: str,
                 progress: bool) -> tuple[float, float]:
    """One pass (stopped at `deadline`, a `time.monotonic()` value): (mean train loss per token, fraction of
    batches run)."""
    plan = length_batches([len(s) for s in seqs], settings.batch_size, rng)
    model.train()
    total, tokens, done = 0.0, 0, 0
    bar = tqdm(plan, desc=desc, unit="batch", file=sys.stderr, mininterval=5.0, disable=not progress)
    for batch in bar:
        loss, n = _summed_loss(model, [seqs[i] for i in batch])
        opt.zero_grad(set_to_none=True)
        (loss / n).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        total, tokens, done = total + float(loss.detach()), tokens + n, done + 1
        if done % 50 == 0:
            bar.set_postfix(loss=f"{total / tokens:.3f}", refresh=False)
        if time.monotonic() >= deadline:
            break
    bar.close()
    return total / max(tokens, 1), done / len(plan)


def _check_data(train: Sequence[Sequence[str]], devel: Sequence[Sequence[str]]) -> None:
    if not train or not any(len(s) for s in train):
        raise DataError("the LM training set has no words. "
                        "Fix: give at least one non-empty training sentence.")
    if not devel:
        raise DataError("the LM devel set is empty; early stopping needs it. Fix: give devel sentences.")


def train_lm(train: Sequence[Sequence[str]], devel: Sequence[Sequence[str]], lm_settings: LmSettings,
             train_settings: LmTrainSettings, progress: bool = True) -> TrainedLm:
    """Build the vocabulary from `train` (words seen `min_count` times), train a `WordLstmLm` on CPU and
    return it with the best devel-perplexity weights. Sentences are lists of normalized words."""
    _check_data(train, devel)
    with torch_threads(train_settings.threads):
        return _train(train, devel, lm_settings, train_settings, progress)


def _train(train: Sequence[Sequence[str]], devel: Sequence[Sequence[str]], lm_settings: LmSettings,
           settings: LmTrainSettings, progress: bool) -> TrainedLm:
    start = time.monotonic()
    deadline = start + settings.max_minutes * 60
    vocab = WordVocab.from_sentences(train, settings.min_count)
    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    model = WordLstmLm(len(vocab), lm_settings)
    opt = torch.optim.Adam(model.parameters(), lr=settings.learning_rate)
    seqs = encode_sentences(vocab, train)
    history: list[dict[str, float]] = []
    best_ppl, best_epoch, best_state, bad_epochs = math.inf, 0, None, 0
    stopped = "epochs"
    for epoch in range(1, settings.epochs + 1):
        epoch_start = time.monotonic()
        loss, fraction = _train_epoch(model, opt, seqs, settings, rng, deadline, f"lm epoch {epoch}",
                                      progress)
        ppl = perplexity(model, vocab, devel)
        history.append({"epoch": epoch, "train_loss": loss, "devel_perplexity": ppl,
                        "seconds": time.monotonic() - epoch_start, "fraction": fraction})
        if ppl < best_ppl:
            best_ppl, best_epoch, bad_epochs = ppl, epoch, 0
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        else:
            bad_epochs += 1
        if progress:
            print(f"lm epoch {epoch}: train loss {loss:.3f}, devel perplexity {ppl:.2f}", file=sys.stderr)
        if time.monotonic() >= deadline and (epoch < settings.epochs or fraction < 1.0):  # else: all epochs ran
            stopped = "time"
            break
        if bad_epochs >= settings.patience:
            stopped = "patience"
            break
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return TrainedLm(model, vocab, tuple(history), best_epoch, stopped)

