"""The translation Transformer against one written by hand with its weights (positions, scale, causal, padding
and wait-k masks), whole and with the source encoded in chunks."""

from __future__ import annotations

import math

import pytest
import torch

from specbench.simultrans.model import MtTransformer
from specbench.simultrans.settings import MtModelConfig
from specbench.simultrans.tokenizer import BOS, EOS, PAD

pytestmark = pytest.mark.unit
SRC = torch.tensor([[5, 6, 7, 8, EOS], [4, 6, EOS, PAD, PAD]])
TGT = torch.tensor([[BOS, 5, 6, 7], [BOS, 8, 4, 6]])


def tiny(causal: bool) -> MtTransformer:
    torch.manual_seed(3)
    m = MtTransformer(MtModelConfig(vocab_size=9, d_model=8, heads=2, ffn=16, encoder_layers=2, decoder_layers=2,
                                    dropout=0.0, causal_encoder=causal, max_positions=16)).eval()
    for p in (p for n, p in m.named_parameters() if "norm" in n):  # each layer norm its own
        torch.nn.init.normal_(p, 1.0, 0.5)
    return m


def attend(a: torch.nn.Module, x: torch.Tensor, mem: torch.Tensor, mask: list) -> torch.Tensor:
    b, n, d = x.shape
    q, k, v = (f(t).view(b, -1, 2, d // 2).transpose(1, 2) for f, t in ((a.q, x), (a.k, mem), (a.v, mem)))
    w = (q @ k.transpose(2, 3) / math.sqrt(d // 2)).masked_fill(~torch.tensor(mask)[:, None], -math.inf)
    return a.o((w.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))


def reference(m: MtTransformer, k: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(memory, logits), masks built element by element; |x| = 5 and 3 (</s> counted)."""
    s, t, lengths = 5, 4, (5, 3)
    # PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i + 1) = cos(same) = sin(same + pi/2)
    pe = torch.tensor([[math.sin(p / 1e4 ** (i // 2 / 4) + i % 2 * math.pi / 2) for i in range(8)] for p in range(s)])
    x = m.embed.weight[SRC] * math.sqrt(8) + pe
    enc = [[[i == j or (j < n and (j <= i or not m.config.causal_encoder)) for j in range(s)] for i in range(s)]
           for n in lengths]
    for blk in m.encoder:
        x = x + attend(blk.self_attn, blk.norms[0](x), blk.norms[0](x), enc)
        x = x + blk.ff(blk.norms[1](x))
    mem = m.encoder_norm(x)
    see = [[[j < min(n if k is None else k + i, n) for j in range(s)] for i in range(t)] for n in lengths]
    y, causal = m.embed.weight[TGT] * math.sqrt(8) + pe[:t], [[[j <= i for j in range(t)] for i in range(t)]] * 2
    for blk in m.decoder:
        y = y + attend(blk.self_attn, blk.norms[0](y), blk.norms[0](y), causal)
        y = y + attend(blk.cross_attn, blk.norms[1](y), mem, see)
        y = y + blk.ff(blk.norms[2](y))
    return mem, m.decoder_norm(y) @ m.embed.weight.T


@pytest.mark.parametrize("causal, k", [(True, 1), (True, 3), (False, None), (False, 2)])
def test_whole_and_chunked_passes_equal_a_transformer_written_by_hand(causal: bool, k: int | None) -> None:
    m, real = tiny(causal), SRC != PAD
    with torch.no_grad():
        mem, logits = reference(m, k)
        assert torch.allclose(m.encode(SRC)[real], mem[real], atol=1e-5)
        assert torch.allclose(m(SRC, TGT, k), logits, atol=1e-4)
        if causal:  # the source read 2 tokens, then 3
            first, cache = m.encode_step(SRC[:, :2], None)
            rest = m.encode_step(SRC[:, 2:], cache)[0]
            assert torch.allclose(torch.cat([first, rest], 1)[real], mem[real], atol=1e-5)
