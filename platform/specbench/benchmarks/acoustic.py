"""`specbench bench acoustic`: synthesis throughput per engine, and features plus model inference as a
real-time factor (CPU, and CUDA when torch sees a GPU, at the CPU's batch of 16 and at 128), measured side by
side in one run, alternating in `rounds` rounds (`bench_inference`). `--audio DIR` times inference on
existing WAV files instead (a machine without the synthesizers, such as the GPU machine)."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specbench.acoustic.checkpoint import load_checkpoint
from specbench.acoustic.features import fbank
from specbench.acoustic.inference import score_features
from specbench.benchmarks.harness import runner
from specbench.config import BenchAcousticConfig
from specbench.data import slurp, text_norm
from specbench.data.synthesis import read_wav, synthesize
from specbench.data.voices import VOICES, check_installed
from specbench.errors import DataError, ToolError
from specbench.hardware import describe
from specbench.paths import from_root
from specbench.wfst.lexicon import PHONES

ENGINE_VOICES = {"espeak-ng": "espeak:en-us", "flite": "flite:slt", "festival": "festival:slt-hts"}


def _sentences(n: int) -> list[str]:
    texts = [text_norm.normalize(u.sentence) for u in slurp.read_split("test")]
    return [t for t in texts if t][:n]


def bench_synthesis(sentences: list[str], tmp: Path, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """Utterances per second and x real time for one voice of each engine (one process), and how many
    utterances each engine spoke (festival, the slowest, a fifth of them, at least 3 where there are 3). An
    engine whose voice is not installed here is left out, "unavailable" with the reason in `status`."""
    out: dict[str, Any] = {}
    by_name = {v.name: v for v in VOICES}
    for engine, name in ENGINE_VOICES.items():
        voice = by_name[name]
        try:
            check_installed(voice)
        except ToolError as err:
            (status if status is not None else {})[engine] = {"status": "unavailable", "reason": str(err)}
            continue
        spoken = sentences if engine != "festival" else sentences[:max(3, len(sentences) // 5)]
        t0, audio = time.perf_counter(), 0.0
        for i, text in enumerate(spoken):
            audio += synthesize(text, voice, 1.0, tmp / f"{engine}-{i}.wav", seed=i, snr_db=20.0).duration_s
        seconds = time.perf_counter() - t0
        out[f"synth_{engine}_utterances"] = len(spoken)
        out[f"synth_{engine}_utts_per_s"] = len(spoken) / seconds
        out[f"synth_{engine}_x_realtime"] = audio / seconds
    return out


MIN_SAMPLES = 400  # one 25 ms analysis window at 16 kHz: a shorter file gives no feature frame


def read_bench_audio(wavs: list[Path]) -> list[np.ndarray]:
    """The samples of every WAV, each checked to hold speech to time: a file without a feature frame's worth
    of samples, or of digital silence only, is a `DataError` naming it (its real-time factor would measure
    nothing, or divide by zero)."""
    samples = []
    for wav in wavs:
        data, rate = read_wav(wav)
        fix = (f"Fix: remove it from the folder, or replace it with a recording of speech (16 kHz mono "
               f"16-bit PCM, at least {MIN_SAMPLES / rate * 1000:.0f} ms)")
        if len(data) < MIN_SAMPLES:
            ms = len(data) / rate * 1000
            what = f"only {len(data)} samples ({ms:.1f} ms)" if len(data) else "no samples"
            raise DataError(f"{wav}: the WAV holds {what}, less than one {MIN_SAMPLES}-sample analysis "
                            f"window. {fix}")
        if not np.any(data):
            raise DataError(f"{wav}: all {len(data)} samples are 0 (digital silence), nothing to recognize. "
                            f"{fix}")
        samples.append(data)
    return samples


def _inference_seconds(ckpt: Any, samples: list[np.ndarray], device: str, batch: int) -> tuple[float, float]:
    """(features seconds, features + model seconds) of fbank + model on `samples`, batched."""
    t0 = time.perf_counter()
    feats = [fbank(s) for s in samples]
    t_feats = time.perf_counter() - t0
    for i in range(0, len(feats), batch):
        score_features(ckpt, feats[i:i + batch], device)
    if device == "cuda":
        torch.cuda.synchronize()
    return t_feats, time.perf_counter() - t0


def bench_inference(checkpoint: Path, wavs: list[Path], rounds: int = 3) -> dict[str, Any]:
    """Real-time factor (compute seconds per audio second) of fbank + model at a batch of 16 on the CPU, and
    with CUDA at 16 and 128 (`backends`: cuda unavailable without it). The ways run one after the other in
    each of `rounds` rounds, after a warm-up of each: every round's seconds are kept (`seconds_rounds`,
    `features_seconds_rounds`), the factors are medians over rounds and the speedup the median of its
    per-round ratios (`speedup_cuda_vs_cpu_rounds`)."""
    samples = read_bench_audio(wavs)
    audio = sum(len(s) for s in samples) / 16000
    ways, out = {"cpu": ("cpu", 16)}, {"rounds": rounds}
    if torch.cuda.is_available():
        ways |= {"cuda": ("cuda", 16), "cuda_batch128": ("cuda", 128)}
    else:
        out["backends"] = {"cuda": {"status": "unavailable", "reason": "torch sees no usable CUDA device"}}
    ckpts = {device: load_checkpoint(checkpoint, PHONES, device) for device, _ in ways.values()}
    for device, ckpt in ckpts.items():
        score_features(ckpt, [fbank(samples[0])], device)  # warm-up
    feats: dict[str, list[float]] = {way: [] for way in ways}
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(rounds):
        for way, (device, batch) in ways.items():
            t_feats, total = _inference_seconds(ckpts[device], samples, device, batch)
            feats[way].append(t_feats)
            seconds[way].append(total)
    median = statistics.median
    for way in ways:  # the names before rounds: cpu_rtf, cuda_rtf, cuda_rtf_batch128, ...
        device, _, tail = way.partition("_")
        tail = f"_{tail}" if tail else ""
        out |= {f"{device}_rtf{tail}": median(seconds[way]) / audio, f"{device}_audio_seconds{tail}": audio,
                f"{device}_features_rtf{tail}": median(feats[way]) / audio}
    if "cuda" in ways:
        ratios = [c / g for c, g in zip(seconds["cpu"], seconds["cuda"], strict=True)]
        out |= {"speedup_cuda_vs_cpu": median(ratios), "speedup_cuda_vs_cpu_rounds": ratios}
    return {**out, "seconds_rounds": seconds, "features_seconds_rounds": feats}


def bench_acoustic(checkpoint: Path, utterances: int = 40, audio: Path | None = None,
                   rounds: int = 3) -> dict[str, Any]:
    """Synthesis of `utterances` SLURP test sentences per engine, then inference on that audio in `rounds`
    rounds; with `audio`, inference on the first `utterances` WAV files there (by name) and no synthesis."""
    with tempfile.TemporaryDirectory(prefix="specbench-bench-") as tmp_name:
        tmp = Path(tmp_name)
        result: dict[str, Any] = {"bench": "acoustic", "hardware": describe(), "threads": torch.get_num_threads()}
        if audio is None:
            sentences = _sentences(utterances)
            result["utterances"] = len(sentences)
            status: dict[str, Any] = {}
            result.update(bench_synthesis(sentences, tmp, status))
            result["backends"] = status
            wavs = sorted(tmp.glob("*.wav"))
            if not wavs:
                reasons = " ".join(entry["reason"] for entry in status.values())
                raise DataError(f"no synthesizer can speak here, so there is no audio to time: {reasons} Or "
                                "time existing 16 kHz mono WAV files with --audio DIR.")
        else:
            if not Path(audio).is_dir():
                raise DataError(f"--audio {audio}: no such folder. Fix: point it at a folder of 16 kHz mono "
                                "WAV files (scripts/gpu_carry.py gathers one)")
            wavs = sorted(Path(audio).glob("*.wav"))[:utterances]
            if not wavs:
                raise DataError(f"--audio {audio}: no .wav files there. Fix: point it at a folder of 16 kHz "
                                "mono WAV files (scripts/gpu_carry.py gathers one)")
            result.update(utterances=len(wavs), audio=str(audio))
        result["inference_wavs"] = len(wavs)  # with synthesis: every engine's renditions of the sentences
        timed = bench_inference(checkpoint, wavs, rounds)
        backends = {**result.get("backends", {}), **timed.pop("backends", {})}
        result.update({**timed, **({"backends": backends} if backends else {})})
    result["model_parameters"] = sum(p.numel() for p in load_checkpoint(checkpoint, PHONES).model.parameters())
    return {k: (float(v) if isinstance(v, np.floating) else v) for k, v in result.items()}


def measure(config: BenchAcousticConfig, job_path: Path) -> dict[str, Any]:
    """The benchmark of a `bench_acoustic` config (see `benchmarks.harness`)."""
    audio = from_root(config.audio) if config.audio is not None else None
    return bench_acoustic(from_root(config.checkpoint), config.utterances, audio, config.rounds)


def summary(result: dict[str, Any]) -> list[str]:
    return [f"acoustic benchmark, inference on {result['inference_wavs']} WAVs: CPU real-time factor "
            f"{result['cpu_rtf']:.4f}" + (f", CUDA {result['cuda_rtf']:.4f}" if "cuda_rtf" in result else "")
            + f" (medians of {result['rounds']} rounds)"]


execute = runner(measure, summary)


def preflight(config: BenchAcousticConfig, job_path: Path) -> None:
    """`audio`, where set, must be a folder holding .wav files: refused when the job is read, naming the key,
    not after its run has started."""
    if config.audio is None:
        return
    folder = from_root(config.audio)
    what = ("does not exist" if not folder.exists() else "is a file, not a folder" if not folder.is_dir() else
            "holds no .wav files" if not any(folder.glob("*.wav")) else None)
    if what is not None:
        raise DataError(f"{job_path}: key 'audio' = '{config.audio}': {folder} {what}. Fix: point it at a "
                        "folder of 16 kHz mono WAV files (scripts/gpu_carry.py gathers one), or leave the key "
                        "out to time synthesized speech")
