"""Translation-model training on the GPU against the CPU (skipped without CUDA): the same weights give the
same loss and gradients on both devices, and a few optimizer steps on the GPU lower the loss of the shipped
wait-k model's batch as they do on the CPU. Runs on the H200 machine (`make gpu-check`)."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from specbench.checkpoint_io import load_blob
from specbench.simultrans.model import MtTransformer
from specbench.simultrans.settings import MtModelConfig
from specbench.simultrans.training import Example, batches, loss_of, save_model

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]
CONFIG = MtModelConfig(vocab_size=300, d_model=64, heads=4, ffn=128, encoder_layers=2, decoder_layers=2,
                       dropout=0.0, causal_encoder=True, max_positions=64)


def _examples(count: int, seed: int = 0) -> list[Example]:
    rng = random.Random(seed)
    return [Example(tuple(rng.randrange(4, 300) for _ in range(rng.randrange(2, 20))) + (2,),
                    tuple(rng.randrange(4, 300) for _ in range(rng.randrange(1, 20)))) for _ in range(count)]


@pytest.mark.parametrize("k", [None, 1, 3])
def test_loss_and_gradients_agree_between_cpu_and_gpu(k: int | None) -> None:
    torch.manual_seed(0)
    cpu = MtTransformer(CONFIG)
    gpu = copy.deepcopy(cpu).cuda()
    batch = batches(_examples(64), 1500, random.Random(0))[0]
    loss_cpu, n_cpu = loss_of(cpu, batch, k, 0.1)
    loss_gpu, n_gpu = loss_of(gpu, batch, k, 0.1)
    assert loss_gpu.device.type == "cuda" and n_cpu == n_gpu
    assert float(loss_gpu.detach()) == pytest.approx(float(loss_cpu.detach()), rel=1e-4)
    loss_cpu.backward()
    loss_gpu.backward()
    # float32 sums in another order differ in the last bits; some gradients are zero up to rounding (a key
    # bias shifts every logit of a query alike, which softmax ignores), so each parameter's difference is
    # measured against the norm of the whole gradient
    total = torch.cat([p.grad.reshape(-1) for p in cpu.parameters()]).norm()
    for (name, p_cpu), p_gpu in zip(cpu.named_parameters(), gpu.parameters(), strict=True):
        error = float((p_gpu.grad.cpu() - p_cpu.grad).norm() / total)
        assert error < 1e-3, f"{name}: gradient difference {error:.2e} of the gradient's norm"


def test_steps_on_the_gpu_lower_the_loss_and_save_a_cpu_checkpoint(tmp_path) -> None:
    torch.manual_seed(0)
    model = MtTransformer(CONFIG).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    batch = batches(_examples(64), 1500, random.Random(0))[0]
    first = None
    for _ in range(30):
        loss, n = loss_of(model, batch, 3, 0.0)
        first = float(loss.detach()) / n if first is None else first
        opt.zero_grad()
        (loss / n).backward()
        opt.step()
    assert float(loss_of(model, batch, 3, 0.0)[0]) / n < 0.5 * first
    save_model(tmp_path / "m.pt", model, "sha", {})
    blob = load_blob(tmp_path / "m.pt")
    assert all(v.device.type == "cpu" for v in blob["state_dict"].values())
