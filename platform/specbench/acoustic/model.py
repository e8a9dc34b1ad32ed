"""A small causal CTC acoustic model: causal convolutional subsampling (4x) and a unidirectional LSTM.

Input `(B, T, 80)` normalized fbank at 100 frames/s; output `(B, T', P)` log-probabilities at 25 frames/s,
T' = ceil(ceil(T / 2) / 2), P = 1 + number of phones (column 0 is the CTC blank). Convolutions pad on the
left only, so output frame j depends on fbank frames up to 4j and therefore on audio up to 40j + 25 ms,
against a frame that starts at 40j ms: see `lookahead_ms`.
"""

from __future__ import annotations

import torch
from torch import nn

from specbench.acoustic.settings import ModelConfig


class CausalSubsampling(nn.Module):
    """Two 3x3 convolutions with stride 2 in time and frequency, padded on the left in time."""

    def __init__(self, num_bins: int, channels: int, out_dim: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, kernel_size=3, stride=2, padding=(0, 1))
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, stride=2, padding=(0, 1))
        freq = (num_bins + 1) // 2
        freq = (freq + 1) // 2
        self.proj = nn.Linear(channels * freq, out_dim)

    @staticmethod
    def output_lengths(lengths: torch.Tensor) -> torch.Tensor:
        return torch.div(torch.div(lengths + 1, 2, rounding_mode="floor") + 1, 2, rounding_mode="floor")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`x: (B, T, F)` -> `(B, T', out_dim)`."""
        x = x.unsqueeze(1)  # (B, 1, T, F)
        x = torch.relu(self.conv1(nn.functional.pad(x, (0, 0, 2, 0))))
        x = torch.relu(self.conv2(nn.functional.pad(x, (0, 0, 2, 0))))
        b, c, t, f = x.shape
        return self.proj(x.permute(0, 2, 1, 3).reshape(b, t, c * f))


class CausalCtcModel(nn.Module):
    """Subsampling, LSTM, linear; `forward` returns log-probabilities and output lengths."""

    subsampling_factor = 4

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.frontend = CausalSubsampling(config.num_bins, config.conv_channels, config.hidden)
        self.lstm = nn.LSTM(config.hidden, config.hidden, num_layers=config.layers, batch_first=True,
                            dropout=config.dropout if config.layers > 1 else 0.0)
        self.dropout = nn.Dropout(config.dropout)
        self.output = nn.Linear(config.hidden, config.num_classes)
        self.input_transform: nn.Linear | None = None

    def add_input_transform(self) -> nn.Linear:
        """A per-frame affine map of the input features, identity at first (a speaker's feature transform,
        `acoustic.speaker_transform`); frame by frame, so causality is unchanged."""
        transform = nn.Linear(self.config.num_bins, self.config.num_bins)
        with torch.no_grad():
            transform.weight.copy_(torch.eye(self.config.num_bins))
            transform.bias.zero_()
        self.input_transform = transform.to(self.output.weight.device)
        return self.input_transform

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`feats: (B, T, F) float32`, `lengths: (B,) int64` -> `(B, T', P)` log-probs, `(B,)` lengths."""
        if self.input_transform is not None:
            feats = self.input_transform(feats)
        x = self.dropout(self.frontend(feats))
        out_lengths = CausalSubsampling.output_lengths(lengths)
        x, _ = self.lstm(x)
        return torch.log_softmax(self.output(self.dropout(x)), dim=-1), out_lengths

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def lookahead_ms() -> float:
    """Audio after the start of output frame j that its log-probabilities may depend on, in ms.

    Output frame j reads conv2 input rows up to 2j, which read fbank frames up to 4j; fbank frame k covers
    audio up to 10k + 25 ms. Frame j starts at 40j ms: the lookahead is 25 ms (at most 40 ms allowed).
    """
    return 25.0
