"""The translation Transformer (pre-norm, shared source/target/output embeddings over the joint BPE).

Two kinds, one class (`MtModelConfig.causal_encoder`):
- the prefix-to-prefix wait-k model: a unidirectional (causal) source encoder, so the states of a source
  prefix never change when more source arrives and are computed incrementally (`encode_step` with an
  `EncoderCache`: a new token attends to the cached keys and values of the prefix), and a decoder whose
  target position i (predicting token i + 1) sees the first g(i) = min(k + i, |x|) source states. Trained
  over random k per batch, so one model serves every k.
- the full-sentence model: a bidirectional encoder (test-time wait-k re-encodes each source prefix).

Incremental decoding (`decoder_step`) keeps per-layer self-attention keys and values of the target prefix
(`DecoderCache`) and attends over cross-attention keys and values of the source states available to each row
(`cross_kv` + a per-row source length), so a step costs one position per row. The cache holds for as long as
the source states it was computed over: for the bidirectional model every source token read changes them all,
so the search decodes the committed target prefix again over the new states (`decoder_positions`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from specbench.simultrans.settings import MtModelConfig
from specbench.simultrans.tokenizer import PAD


def sinusoids(length: int, dim: int) -> torch.Tensor:
    """(length, dim) sinusoidal position encodings (Vaswani et al. 2017)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)
    return table


class Attention(nn.Module):
    """Multi-head attention; `mask` (B, 1 or Q, K) bool, True where a query may attend."""

    def __init__(self, d: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        return x.view(b, n, self.heads, d // self.heads).transpose(1, 2)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """q (B, H, Q, dh), k and v (B, H, K, dh) -> (B, Q, d)."""
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask[:, None],
                                             dropout_p=self.dropout if self.training else 0.0)
        b, h, n, dh = out.shape
        return self.o(out.transpose(1, 2).reshape(b, n, h * dh))

    def forward(self, x: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return self.attend(self.split(self.q(x)), self.split(self.k(memory)), self.split(self.v(memory)), mask)


class Block(nn.Module):
    """Pre-norm self-attention (+ cross-attention in the decoder) + feed-forward."""

    def __init__(self, cfg: MtModelConfig, cross: bool) -> None:
        super().__init__()
        d = cfg.d_model
        self.self_attn = Attention(d, cfg.heads, cfg.dropout)
        self.cross_attn = Attention(d, cfg.heads, cfg.dropout) if cross else None
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(3 if cross else 2))
        self.ff = nn.Sequential(nn.Linear(d, cfg.ffn), nn.ReLU(), nn.Dropout(cfg.dropout), nn.Linear(cfg.ffn, d))
        self.drop = nn.Dropout(cfg.dropout)

    def cached_self_attention(self, x: torch.Tensor, keys: torch.Tensor | None, values: torch.Tensor | None,
                              mask: torch.Tensor | None,
                              buffers: tuple[torch.Tensor, torch.Tensor] | None = None
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, n, d) new positions after the residual self-attention over the cached keys/values of earlier
        positions (None: no cache) and their own; returns (x, all keys, all values). With `buffers` (key and
        value buffers whose first t positions are `keys` and `values`), the new positions are written into
        them after the t, and the keys and values returned are views of the buffers (the cache is not copied)."""
        attn = self.self_attn
        h = self.norms[0](x)
        k, v = attn.split(attn.k(h)), attn.split(attn.v(h))
        if buffers is not None:
            start, end = keys.shape[2], keys.shape[2] + k.shape[2]
            buffers[0][:, :, start:end] = k
            buffers[1][:, :, start:end] = v
            k, v = buffers[0][:, :, :end], buffers[1][:, :, :end]
        elif keys is not None:
            k, v = torch.cat([keys, k], 2), torch.cat([values, v], 2)
        return x + self.drop(attn.attend(attn.split(attn.q(h)), k, v, mask)), k, v

    def forward(self, x: torch.Tensor, self_mask: torch.Tensor | None, memory: torch.Tensor | None = None,
                cross_mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.norms[0](x)
        x = x + self.drop(self.self_attn(h, h, self_mask))
        if self.cross_attn is not None:
            x = x + self.drop(self.cross_attn(self.norms[1](x), memory, cross_mask))
        return x + self.drop(self.ff(self.norms[-1](x)))


@dataclass
class EncoderCache:
    """Per encoder layer, the keys and values (B, H, S, dh) of the source prefix encoded so far."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def length(self) -> int:
        return 0 if not self.keys else int(self.keys[0].shape[2])


@dataclass
class CacheRoom:
    """Key and value buffers (N, H, capacity, dh) per decoder layer, whose first `filled` positions hold the
    newest `DecoderCache` made from them; the decoder writes each new position after those."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    filled: int

    @property
    def capacity(self) -> int:
        return int(self.keys[0].shape[2])


@dataclass
class DecoderCache:
    """Per decoder layer, the self-attention keys and values (N, H, t, dh) of the target prefix.

    `pad` (N,), optional: rows of different prefix lengths in one batch, left-padded: row r's prefix is its
    last t - pad[r] positions (the first pad[r] are never attended to), so every row's next position is
    appended at the end and sits at position t - pad[r] of its own sequence. None: every row holds t.

    `room`, optional (`with_room`, for a beam search's hypotheses): the keys and values are the first t
    positions of larger buffers, so that a decoder step writes its position into them instead of copying the
    cache into a longer one, and `reorder` moves only the positions after the prefix the rows share. Such a
    cache belongs to one search: extending or reordering it writes into the buffers, so only the newest cache
    made from them holds (the decoder, `select`, `row`, `reorder` and `with_room` refuse an older one)."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    pad: torch.Tensor | None = None
    room: CacheRoom | None = None

    def select(self, rows: torch.Tensor) -> DecoderCache:
        """The cache of the rows `rows` (N',) long, in that order; a copy, with as much room as this one."""
        if self.room is None:
            return DecoderCache([k.index_select(0, rows) for k in self.keys],
                                [v.index_select(0, rows) for v in self.values],
                                None if self.pad is None else self.pad.index_select(0, rows))
        return self.with_room(rows, self.room.capacity - self.width)

    def with_room(self, rows: torch.Tensor, extra: int) -> DecoderCache:
        """`select(rows)` into new buffers with space for `extra` more positions (see the class docstring)."""
        self._check_newest("with_room")
        width = self.width

        def buffer(t: torch.Tensor) -> torch.Tensor:
            out = t.new_empty((rows.numel(), t.shape[1], width + extra, t.shape[3]))
            out[:, :, :width] = t.index_select(0, rows)
            return out

        room = CacheRoom([buffer(k) for k in self.keys], [buffer(v) for v in self.values], width)
        return DecoderCache([k[:, :, :width] for k in room.keys], [v[:, :, :width] for v in room.values],
                            None if self.pad is None else self.pad.index_select(0, rows), room)

    def reorder(self, parents: torch.Tensor, shared: int) -> DecoderCache:
        """Row r takes row parents[r]'s cache (a beam step's hypotheses, their parents'). With room, in place,
        moving only the positions from `shared` on: the caller guarantees that each row and its parent hold
        the same first `shared` positions (a beam's hypotheses share the prefix its search started from).
        Without room, `select`."""
        if self.room is None:
            return self.select(parents)
        self._check_newest("reorder")
        width = self.width
        for t in (*self.room.keys, *self.room.values):
            t[:, :, shared:width] = t[:, :, shared:width].index_select(0, parents)
        return DecoderCache(self.keys, self.values, None if self.pad is None else self.pad.index_select(0, parents),
                            self.room)

    def _check_newest(self, what: str) -> None:
        if self.room is not None and self.room.filled != self.width:
            raise RuntimeError(f"DecoderCache.{what}: this cache holds {self.width} positions of buffers a newer "
                               f"cache has filled to {self.room.filled}: its positions may have been overwritten "
                               "(a cache with room belongs to one search, DecoderCache.with_room)")

    @property
    def width(self) -> int:
        """t: the positions of the longest row's prefix (every row's, without `pad`)."""
        return int(self.keys[0].shape[2])

    def lengths(self) -> torch.Tensor:
        """(N,) each row's prefix length."""
        full = torch.full((self.keys[0].shape[0],), self.width, dtype=torch.long)
        return full if self.pad is None else full - self.pad

    def row(self, i: int, end: int | None = None) -> DecoderCache:
        """Row i alone, unpadded, its positions up to the padded index `end` (default: all); a copy, so that
        it does not keep the batch's tensors alive."""
        self._check_newest("row")
        start = 0 if self.pad is None else int(self.pad[i])
        return DecoderCache([k[i:i + 1, :, start:end].clone() for k in self.keys],
                            [v[i:i + 1, :, start:end].clone() for v in self.values])

    @staticmethod
    def stack(rows: list[DecoderCache]) -> DecoderCache:
        """One batch of single-row unpadded caches, left-padded to the longest (no `pad` when all are as long)."""
        lengths = [c.width for c in rows]
        width = max(lengths)
        if min(lengths) == width:
            return DecoderCache([torch.cat([c.keys[i] for c in rows]) for i in range(len(rows[0].keys))],
                                [torch.cat([c.values[i] for c in rows]) for i in range(len(rows[0].keys))])

        def padded(tensors: list[torch.Tensor]) -> torch.Tensor:
            out = tensors[0].new_zeros((len(tensors), *tensors[0].shape[1:2], width, tensors[0].shape[3]))
            for j, (t, n) in enumerate(zip(tensors, lengths, strict=True)):
                out[j:j + 1, :, width - n:] = t
            return out

        return DecoderCache([padded([c.keys[i] for c in rows]) for i in range(len(rows[0].keys))],
                            [padded([c.values[i] for c in rows]) for i in range(len(rows[0].keys))],
                            torch.tensor([width - n for n in lengths], dtype=torch.long))


class MtTransformer(nn.Module):
    """See the module docstring. Token ids: tokenizer.PAD/BOS/EOS/UNK."""

    def __init__(self, cfg: MtModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=PAD)
        nn.init.normal_(self.embed.weight, 0.0, cfg.d_model ** -0.5)
        self.register_buffer("positions", sinusoids(cfg.max_positions, cfg.d_model), persistent=False)
        self.encoder = nn.ModuleList(Block(cfg, cross=False) for _ in range(cfg.encoder_layers))
        self.decoder = nn.ModuleList(Block(cfg, cross=True) for _ in range(cfg.decoder_layers))
        self.encoder_norm, self.decoder_norm = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.scale = math.sqrt(cfg.d_model)

    def _embed(self, tokens: torch.Tensor, offset: int | torch.Tensor = 0) -> torch.Tensor:
        n = tokens.shape[1]
        if isinstance(offset, torch.Tensor):  # per-row positions (N,)
            pos = self.positions[offset[:, None] + torch.arange(n, device=tokens.device)[None]]
        else:
            pos = self.positions[offset:offset + n][None]
        return self.drop(self.embed(tokens) * self.scale + pos)

    # ---- whole-sequence passes (training, full-sentence decoding) ----------------------------------------

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        """src (B, S) -> memory (B, S, d); causal when the config says so (padding keys masked)."""
        s = src.shape[1]
        keys = (src != PAD)[:, None, :].expand(-1, s, -1)
        if self.config.causal_encoder:
            keys = keys & torch.ones(s, s, dtype=torch.bool, device=src.device).tril()[None]
        keys = keys | torch.eye(s, dtype=torch.bool, device=src.device)[None]  # padded rows attend to themselves
        x = self._embed(src)
        for block in self.encoder:
            x = block(x, keys)
        return self.encoder_norm(x)

    def source_limits(self, src: torch.Tensor, target_len: int, k: int | None) -> torch.Tensor:
        """(B, T) number of source states visible to each target position: min(k + i, |x|) (|x| counts
        </s>), or |x| everywhere when k is None (full sentence)."""
        lengths = (src != PAD).sum(1)
        if k is None:
            return lengths[:, None].expand(-1, target_len)
        steps = torch.arange(target_len, device=src.device)[None] + k
        return torch.minimum(steps, lengths[:, None])

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, k: int | None = None) -> torch.Tensor:
        """Training / scoring: logits (B, T, V) of the next token at every target position, under wait-k
        visibility (k None: the whole source)."""
        memory = self.encode(src)
        t, s = tgt_in.shape[1], src.shape[1]
        limits = self.source_limits(src, t, k)
        cross = torch.arange(s, device=src.device)[None, None] < limits[:, :, None]
        causal = torch.ones(t, t, dtype=torch.bool, device=src.device).tril()[None]
        x = self._embed(tgt_in)
        for block in self.decoder:
            x = block(x, causal, memory, cross)
        return self.decoder_norm(x) @ self.embed.weight.T

    # ---- incremental passes (simultaneous decoding) -------------------------------------------------------

    def encode_step(self, tokens: torch.Tensor, cache: EncoderCache | None) -> tuple[torch.Tensor, EncoderCache]:
        """Causal encoder only: the states (B, n, d) of `n` new source tokens (B, n) given the cached
        prefix; returns them and the extended cache. Earlier states are never recomputed."""
        if not self.config.causal_encoder:
            raise ValueError("encode_step needs a causal encoder (the wait-k model); the full-sentence model "
                             "re-encodes the source prefix with encode()")
        start = 0 if cache is None else cache.length
        n = tokens.shape[1]
        x = self._embed(tokens, start)
        keys_out, values_out = [], []
        mask = torch.ones(n, start + n, dtype=torch.bool, device=tokens.device).tril(start)[None]
        for i, block in enumerate(self.encoder):
            x, k, v = block.cached_self_attention(x, cache.keys[i] if cache else None,
                                                  cache.values[i] if cache else None, mask)
            keys_out.append(k)
            values_out.append(v)
            x = x + block.drop(block.ff(block.norms[-1](x)))
        return self.encoder_norm(x), EncoderCache(keys_out, values_out)

    def cross_kv(self, memory: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per decoder layer, cross-attention keys and values (B, H, S, dh) of source states (B, S, d)."""
        out = []
        for block in self.decoder:
            attn = block.cross_attn
            out.append((attn.split(attn.k(memory)), attn.split(attn.v(memory))))
        return out

    def decoder_step(self, tokens: torch.Tensor, cache: DecoderCache | None,
                     cross: list[tuple[torch.Tensor, torch.Tensor]], source_len: torch.Tensor,
                     rows: torch.Tensor | None = None, group: int = 1) -> tuple[torch.Tensor, DecoderCache]:
        """One target position for N rows: tokens (N,) are the previous tokens; `cross` holds the source
        keys/values of B sentences and `rows` (N,) maps each row to its sentence (None: identity);
        source_len (N,) how many source states each row may see. With `group` g > 1 (a beam), rows
        g * i .. g * i + g - 1 all belong to sentence i of `cross` (no `rows`; N = g B) and see as many
        states: their queries attend to the sentence's keys as one block, which are not copied per row.
        Returns log-probabilities (N, V) of the next token and the extended cache."""
        return self.decoder_positions(tokens[:, None], cache, cross, source_len, rows, group)

    def decoder_positions(self, tokens: torch.Tensor, cache: DecoderCache | None,
                          cross: list[tuple[torch.Tensor, torch.Tensor]], source_len: torch.Tensor,
                          rows: torch.Tensor | None = None, group: int = 1) -> tuple[torch.Tensor, DecoderCache]:
        """`decoder_step` for n new target positions at once, tokens (N, n): each attends to the cached
        positions and to the new ones up to itself, and all see `source_len` source states. Returns the
        next-token log-probabilities (N, V) after the last position and the extended cache. From an empty
        cache, the target prefix decoded again over a new source view (test-time wait-k)."""
        if group > 1 and rows is not None:
            raise ValueError("decoder_positions: rows and group > 1 exclude each other (a group's rows are "
                             "its sentence's, in order)")
        start = 0 if cache is None else cache.width
        n = tokens.shape[1]
        pad = None if cache is None else cache.pad
        x = self._embed(tokens, start if pad is None else start - pad)
        causal = None if n == 1 else \
            torch.ones(n, start + n, dtype=torch.bool, device=tokens.device).tril(start)[None]
        if pad is not None:  # a left-padded batch: no row attends to its padding
            keep = torch.arange(start + n, device=tokens.device)[None, None] >= pad[:, None, None]
            causal = keep if causal is None else keep & causal
        room = None if cache is None else cache.room
        if room is not None and (room.filled != start or room.capacity < start + n):
            raise RuntimeError(f"decoder_positions: a cache with room for {room.capacity} positions, {room.filled} "
                               f"of them filled, cannot take {n} after its {start}: it is not the newest cache made "
                               "from its buffers, or they are full (DecoderCache.with_room)")
        keys_out, values_out = [], []
        for i, block in enumerate(self.decoder):
            x, k, v = block.cached_self_attention(x, cache.keys[i] if cache else None,
                                                  cache.values[i] if cache else None, causal,
                                                  None if room is None else (room.keys[i], room.values[i]))
            keys_out.append(k)
            values_out.append(v)
            ck, cv = cross[i]
            if rows is not None:
                ck, cv = ck.index_select(0, rows), cv.index_select(0, rows)
            visible = torch.arange(ck.shape[2], device=x.device)[None, None] < source_len[::group, None, None]
            ca = block.cross_attn
            q = ca.split(ca.q(block.norms[1](x)))  # (N, H, n, dh)
            if group > 1:  # (B, H, g n, dh): a sentence's rows are one block of queries
                _, h, _, dh = q.shape
                q = q.reshape(-1, group, h, n, dh).transpose(1, 2).reshape(-1, h, group * n, dh)
            x = x + block.drop(ca.attend(q, ck, cv, visible).reshape(x.shape))
            x = x + block.drop(block.ff(block.norms[-1](x)))
        logits = self.decoder_norm(x[:, -1]) @ self.embed.weight.T
        if room is not None:
            room.filled = start + n
        return torch.log_softmax(logits.float(), -1), DecoderCache(keys_out, values_out, pad, room)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
