"""Audio to CTC log-probabilities: a batched stage (CPU or GPU) over rows naming WAV files.

Input columns: `utt_id: string`, `audio_path: string` (absolute, or relative to `audio_root`), and
optionally `vtln_warp: float64`, the speaker's mel-axis warp (`acoustic.vtln`; 1.0 or null: none).
Output columns (DESIGN.md's scores format): `utt_id`, `frame_shift_ms: float32`, `num_frames: int32`,
`num_classes: int32`, `loglikes: list<float32>` (row-major T x P; column j is graph input label j + 1,
column 0 the blank), and `status`. A row whose audio cannot be read keeps its id and gets the reason in
`status`; the rest of the batch is scored.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from specbench.acoustic.checkpoint import AcousticCheckpoint, load_checkpoint
from specbench.acoustic.features import FRAME_SHIFT_MS, fbank
from specbench.acoustic.model import CausalCtcModel
from specbench.acoustic.vtln import IDENTITY, warp_mel_axis
from specbench.data.synthesis import read_wav
from specbench.stage import STATUS_COLUMN, STATUS_OK, Resources, Stage

SCORES_SCHEMA = pa.schema([
    ("utt_id", pa.string()),
    ("frame_shift_ms", pa.float32()),
    ("num_frames", pa.int32()),
    ("num_classes", pa.int32()),
    ("loglikes", pa.list_(pa.float32())),
    (STATUS_COLUMN, pa.string()),
])
OUTPUT_FRAME_SHIFT_MS = FRAME_SHIFT_MS * CausalCtcModel.subsampling_factor


def scores_table(items: list[tuple[str, np.ndarray]], frame_shift_ms: float = OUTPUT_FRAME_SHIFT_MS) -> pa.Table:
    """`(utt_id, (T, P) float32)` pairs as a scores table (`SCORES_SCHEMA`), every row ok."""
    return pa.Table.from_pylist([
        {"utt_id": u, "frame_shift_ms": frame_shift_ms, "num_frames": len(m), "num_classes": m.shape[1],
         "loglikes": np.asarray(m, dtype=np.float32).reshape(-1), STATUS_COLUMN: STATUS_OK} for u, m in items
    ], schema=SCORES_SCHEMA)


def resolve_audio(audio_path: str, audio_root: Path | None) -> Path:
    """`audio_path` as given when absolute (or without a root), else under `audio_root`."""
    path = Path(audio_path)
    return path if path.is_absolute() or audio_root is None else audio_root / path


def row_failure(err: Exception, audio_path: str) -> str:
    """A scoring stage's per-row status for `err`, naming the file."""
    reason = str(err).strip() or "the audio could not be scored"
    return reason if str(audio_path) in reason else f"{audio_path}: {reason}"


def batch_scores_table(ids: list[str], scores: list[np.ndarray | None], status: list[str], frame_shift_ms: float,
                       num_classes: int | None) -> pa.Table:
    """A scoring stage's output batch (`SCORES_SCHEMA`); a row without scores keeps its id and status."""
    return pa.table({
        "utt_id": ids,
        "frame_shift_ms": pa.array([frame_shift_ms] * len(ids), pa.float32()),
        "num_frames": pa.array([len(s) if s is not None else None for s in scores], pa.int32()),
        "num_classes": pa.array([num_classes] * len(ids), pa.int32()),
        "loglikes": pa.array([s.reshape(-1) if s is not None else None for s in scores], pa.list_(pa.float32())),
        STATUS_COLUMN: status,
    }, schema=SCORES_SCHEMA)


def feature_batch(ckpt: AcousticCheckpoint, feats_list: list[np.ndarray], device: str | torch.device = "cpu",
                  warp: float = IDENTITY) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw fbank `(T_i, F)` arrays -> the model's input: normalized by the checkpoint's CMVN, zero-padded to
    `(B, T, F)` on `device` and warped along the mel axis by `warp`; with the lengths `(B,)` (on the CPU)."""
    longest = max(len(f) for f in feats_list)
    batch = np.zeros((len(feats_list), max(longest, 1), feats_list[0].shape[1]), dtype=np.float32)
    for i, f in enumerate(feats_list):
        batch[i, : len(f)] = ckpt.cmvn.apply(f)
    lengths = torch.tensor([len(f) for f in feats_list], dtype=torch.int64)
    return warp_mel_axis(torch.from_numpy(batch).to(device), warp), lengths


@torch.no_grad()
def score_features(ckpt: AcousticCheckpoint, feats_list: list[np.ndarray], device: str = "cpu",
                   warp: float = IDENTITY) -> list[np.ndarray]:
    """Raw fbank `(T_i, 80)` arrays -> log-probabilities `(T'_i, P) float32` arrays, one padded batch;
    `warp` stretches the normalized features along the mel axis first (VTLN, `acoustic.vtln`)."""
    if not feats_list:
        return []
    inputs, lengths = feature_batch(ckpt, feats_list, device, warp)
    logprobs, out_lengths = ckpt.model(inputs, lengths.to(device))
    logprobs = logprobs.float().cpu().numpy()
    return [logprobs[i, : int(n)] for i, n in enumerate(out_lengths.cpu())]


def score_samples(ckpt: AcousticCheckpoint, samples: np.ndarray, device: str = "cpu",
                  warp: float = IDENTITY) -> np.ndarray:
    """One utterance `(N,) float32` at 16 kHz -> `(T', P) float32` log-probabilities."""
    return score_features(ckpt, [fbank(samples)], device, warp)[0]


class AcousticScorer(Stage):
    """The inference stage; `num_gpus > 0` puts the model on CUDA (a fraction lets models share a GPU)."""

    stateful = True

    def __init__(self, checkpoint: Path, audio_root: Path | None = None, num_gpus: float = 0.0,
                 expected_phones: tuple[str, ...] | None = None) -> None:
        self.checkpoint = Path(checkpoint)
        self.audio_root = Path(audio_root) if audio_root else None
        self.expected_phones = expected_phones
        self.resources = Resources(num_cpus=1.0, num_gpus=num_gpus)
        self.device = "cuda" if num_gpus > 0 else "cpu"
        self._ckpt: AcousticCheckpoint | None = None

    def setup(self) -> None:
        self._ckpt = load_checkpoint(self.checkpoint, self.expected_phones, self.device)

    def __call__(self, batch: pa.Table) -> pa.Table:
        if self._ckpt is None:
            self.setup()
        assert self._ckpt is not None
        ids = batch.column("utt_id").to_pylist()
        warps = (batch.column("vtln_warp").to_pylist() if "vtln_warp" in batch.column_names
                 else [None] * len(ids))
        feats: dict[float, list[tuple[int, np.ndarray]]] = {}
        status = [STATUS_OK] * len(ids)
        for i, audio_path in enumerate(batch.column("audio_path").to_pylist()):
            try:
                warp = IDENTITY if warps[i] is None else float(warps[i])
                if not (math.isfinite(warp) and warp > 0):
                    raise ValueError(f"vtln_warp must be a positive finite factor (1.0 or null: no warp), "
                                     f"got {warps[i]!r}")
                samples, _ = read_wav(resolve_audio(audio_path, self.audio_root))
                feats.setdefault(warp, []).append((i, fbank(samples)))
            except Exception as err:  # noqa: BLE001 - reported per row
                status[i] = row_failure(err, audio_path)
        scores: list[np.ndarray | None] = [None] * len(ids)
        for warp, items in feats.items():
            for (i, _), s in zip(items, score_features(self._ckpt, [f for _, f in items], self.device, warp)):
                scores[i] = s
        return batch_scores_table(ids, scores, status, OUTPUT_FRAME_SHIFT_MS, self._ckpt.model.config.num_classes)
