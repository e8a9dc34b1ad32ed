"""The acoustic benchmark's synthesis throughput: each engine's rate counts the utterances it spoke, and an
engine not installed here is "unavailable" while the others are timed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specbench.benchmarks.acoustic import ENGINE_VOICES, bench_acoustic, bench_synthesis
from specbench.data.synthesis import read_wav
from specbench.errors import DataError

pytestmark = pytest.mark.unit


@pytest.mark.skipif(not all(shutil.which(t) for t in ("espeak-ng", "flite", "text2wave", "sox")),
                    reason="the synthesizers are not installed")
def test_each_engines_rate_counts_the_utterances_it_spoke(tmp_path: Path) -> None:
    out = bench_synthesis(["hello"], tmp_path)  # fewer than festival's usual 3
    for engine in ENGINE_VOICES:
        wavs = sorted(tmp_path.glob(f"{engine}-*.wav"))
        audio = sum(len(read_wav(w)[0]) for w in wavs) / 16000
        assert out[f"synth_{engine}_utterances"] == len(wavs) == 1
        # utterances per second over x real time is utterances over audio seconds
        ratio = out[f"synth_{engine}_x_realtime"] / out[f"synth_{engine}_utts_per_s"]
        assert ratio == pytest.approx(audio, rel=1e-3)


@pytest.mark.skipif(not all(shutil.which(t) for t in ("espeak-ng", "sox")), reason="no espeak-ng or sox")
def test_an_engine_not_installed_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"  # a PATH with espeak-ng and sox only
    bin_dir.mkdir()
    for tool in ("espeak-ng", "sox"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    monkeypatch.setenv("PATH", str(bin_dir))
    status: dict = {}
    out = bench_synthesis(["hello"], tmp_path, status)
    assert out["synth_espeak-ng_utterances"] == 1 and not any(k.startswith("synth_flite") for k in out)
    assert status["flite"]["status"] == status["festival"]["status"] == "unavailable"
    assert "the flite program is not on PATH. Fix: apt-get install flite" in status["flite"]["reason"]
    monkeypatch.setenv("PATH", str(tmp_path / "none"))  # no synthesizer at all: nothing to time, said so
    with pytest.raises(DataError, match=r"no synthesizer can speak here.*install flite\..*--audio DIR"):
        bench_acoustic(Path(__file__).resolve().parents[2] / "models" / "am_slurp.pt", 1)


def test_the_audio_key_must_name_a_folder_of_wav_files_when_the_job_is_read(tmp_path: Path) -> None:
    from specbench.experiments.registry import load_config, preflight

    (tmp_path / "file").write_text("")
    (tmp_path / "empty").mkdir()
    for audio, says in (("nowhere", "does not exist"), ("file", "is a file, not a folder"),
                        ("empty", "holds no .wav files")):
        job = tmp_path / "b.toml"
        job.write_text(f'kind = "bench_acoustic"\naudio = "{tmp_path / audio}"\n')
        with pytest.raises(DataError, match=f"b.toml: key 'audio' = '.*{audio}': .* {says}. Fix: point it at"):
            preflight(job, load_config(job))
