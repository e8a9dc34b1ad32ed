"""Senone scores of real speech from CMU Sphinx's en-us acoustic model (PyPI `pocketsphinx`), as a stage.

pocketsphinx computes every senone's score for every 10 ms frame when asked (`compallsen`) and writes them
to a senone log (`senlogdir`): an s3 text header (`n_sen`, `logbase`) ending in `endhdr\\n`, the int32
byte-order word 0x11223344, then per frame an int16 count (`n_sen`) and `n_sen` int16 scores. A score is the
senone's log-likelihood below the frame's best, in units of log base `logbase` (1.0001) shifted right by 10
bits, so the frame's best senone scores 0 and

    log-likelihood - best log-likelihood (nats) = -score * 2**10 * ln(logbase)   (about -0.1024 * score).

The per-frame offset does not change a Viterbi path. Which search pocketsphinx runs does not change the
scores; the cheap phone-loop search (`allphone`) is used. The front end keeps state from one utterance to
the next (noise removal, cepstral mean), so each utterance gets a fresh decoder (0.1 s): its scores do not
depend on what was scored before it.

Input and output are those of the project's acoustic stage (`acoustic.inference`): rows with `utt_id` and
`audio_path` (16 kHz mono 16-bit WAV); output in DESIGN.md's scores format with `frame_shift_ms` 10 and
`num_classes` the model's senone count (column j is senone j, graph input label j + 1).
"""

from __future__ import annotations

import math
import shutil
import struct
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa

from specbench.acoustic.inference import batch_scores_table, resolve_audio, row_failure
from specbench.data.synthesis import read_wav
from specbench.errors import DataError
from specbench.stage import STATUS_OK, Resources, Stage

FRAME_SHIFT_MS = 10.0
SCORE_SHIFT_BITS = 10
_BYTE_ORDER = 0x11223344


def default_model_dir() -> Path:
    """pocketsphinx's generic US-English acoustic model (`en-us/en-us` inside the PyPI package)."""
    import pocketsphinx

    return Path(pocketsphinx.get_model_path()) / "en-us" / "en-us"


def read_senone_log(path: Path, expected_senones: int | None = None) -> tuple[np.ndarray, float]:
    """`(frames, n_sen)` int16 scores and the log base of a pocketsphinx senone log. A count that is not the
    header's (or not `expected_senones`: the model's mdef) raises `DataError` naming the file."""
    path = Path(path)
    data = path.read_bytes()
    end = data.find(b"endhdr\n")
    if not data.startswith(b"s3\n") or end < 0:
        raise DataError(f"{path}: not a pocketsphinx senone log (no s3 header ending in endhdr)")
    header = dict(line.split(maxsplit=1) for line in data[3:end].decode("ascii").splitlines() if " " in line)
    n_sen, logbase = int(header["n_sen"]), float(header["logbase"])
    if expected_senones is not None and n_sen != expected_senones:
        raise DataError(f"{path}: {n_sen} senones per frame, but the model's mdef has {expected_senones}. Fix: "
                        "score with the model whose mdef the graph was built from.")
    offset = end + len(b"endhdr\n")
    (order,) = struct.unpack_from("<I", data, offset)
    if order != _BYTE_ORDER:
        raise DataError(f"{path}: byte-order word {order:#x}, expected {_BYTE_ORDER:#x}")
    values = (len(data) - offset - 4) / 2
    if values != int(values) or int(values) % (n_sen + 1):
        raise DataError(f"{path}: {values:g} values is not a whole number of {n_sen + 1}-value frames "
                        "(truncated?)")
    body = np.frombuffer(data, dtype="<i2", offset=offset + 4)
    frames = body.reshape(-1, n_sen + 1)
    if frames.size and np.any(frames[:, 0] != n_sen):
        raise DataError(f"{path}: a frame lists {int(frames[frames[:, 0] != n_sen][0, 0])} senones, not {n_sen}")
    return frames[:, 1:].copy(), logbase


def senone_loglikes(scores: np.ndarray, logbase: float) -> np.ndarray:
    """Scores (`read_senone_log`) as float32 log-likelihoods in nats relative to each frame's best."""
    return (scores.astype(np.float64) * (-(2 ** SCORE_SHIFT_BITS) * math.log(logbase))).astype(np.float32)


def pcm16(samples: np.ndarray) -> np.ndarray:
    """Float samples in [-1, 1] as int16, clipped first (a sample of 1.0 is 32767, never wrapped to -32768)."""
    return np.round(np.asarray(samples, dtype=np.float64) * 32768.0).clip(-32768, 32767).astype(np.int16)


class SphinxSenoneScorer(Stage):
    """The stage: audio rows -> senone log-likelihoods (`SCORES_SCHEMA`); an unreadable or non-16 kHz file
    keeps its row with the reason in `status`."""

    stateful = True
    resources = Resources(num_cpus=1.0)

    def __init__(self, model_dir: Path | None = None, audio_root: Path | None = None) -> None:
        self.model_dir = Path(model_dir) if model_dir else None
        self.audio_root = Path(audio_root) if audio_root else None
        self._senones: int | None = None

    def setup(self) -> None:
        from specbench.wfst.sphinx_mdef import read_mdef

        self.model_dir = self.model_dir or default_model_dir()
        self._senones = read_mdef(self.model_dir / "mdef").n_senones

    def score_pcm(self, pcm: np.ndarray) -> np.ndarray:
        """`(frames, n_sen)` float32 log-likelihoods of 16 kHz int16 samples, with a fresh decoder."""
        import pocketsphinx

        if self._senones is None:
            self.setup()
        assert self.model_dir is not None
        if len(pcm) == 0:
            raise DataError("the audio has no samples, so there is no frame to score. Fix: leave the file out, "
                            "or record it again.")
        out_dir = Path(tempfile.mkdtemp(prefix="specbench-senlog-"))  # removed below, as its parent was not
        try:
            phone_lm = self.model_dir.parent / "en-us-phone.lm.bin"
            config = pocketsphinx.Config(hmm=str(self.model_dir), senlogdir=str(out_dir), compallsen=True,
                                         pl_window=0, fwdflat=False, bestpath=False, loglevel="ERROR",
                                         allphone=str(phone_lm))
            decoder = pocketsphinx.Decoder(config)
            decoder.start_utt()
            decoder.process_raw(np.ascontiguousarray(pcm, dtype="<i2").tobytes(), full_utt=True)
            decoder.end_utt()
            logs = sorted(out_dir.glob("*.sen"))
            if len(logs) != 1:
                raise DataError(f"pocketsphinx wrote {len(logs)} senone logs (*.sen) for this audio, expected one "
                                f"({len(pcm)} samples: too short for a 10 ms frame?). Fix: leave the file out, or "
                                "give it at least a few frames of 16 kHz audio.")
            scores, logbase = read_senone_log(logs[0], self._senones)
            return senone_loglikes(scores, logbase)
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)

    def __call__(self, batch: pa.Table) -> pa.Table:
        if self._senones is None:
            self.setup()
        ids = batch.column("utt_id").to_pylist()
        scores: list[np.ndarray | None] = [None] * len(ids)
        status = [STATUS_OK] * len(ids)
        for i, audio_path in enumerate(batch.column("audio_path").to_pylist()):
            try:
                samples, _ = read_wav(resolve_audio(audio_path, self.audio_root))  # 16 kHz mono 16-bit, else a DataError with the fix
                scores[i] = self.score_pcm(pcm16(samples))
            except Exception as err:  # noqa: BLE001 - reported per row
                status[i] = row_failure(err, audio_path)
        return batch_scores_table(ids, scores, status, FRAME_SHIFT_MS, self._senones)
