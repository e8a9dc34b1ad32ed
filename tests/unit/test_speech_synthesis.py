"""Voices and synthesis: every registered voice speaks, rates and noise do what they say, bad inputs fail
clearly. Needs espeak-ng, flite, festival (cmu_us_slt_arctic_hts, ked_diphone), sox, and mbrola with its
English voices (`cluster/install-speech-packages.sh` installs them all); festival speaks 3 short
utterances."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np
import pytest

from specbench.data.synthesis import SAMPLE_RATE, SynthResult, end_of_speech, read_wav, synthesize
from specbench.data.voices import HELD_OUT_VOICES, VOICES, Voice, check_installed, get_voice
from specbench.errors import DataError, SpecbenchError, ToolError

pytestmark = pytest.mark.unit
SENTENCE = "set an alarm for seven a m"
_BINARY = {"espeak-ng": "espeak-ng", "flite": "flite", "festival": "text2wave"}


def _need(engine: str) -> None:
    """Skip (with the reason) when the engine's program or sox is not installed at all."""
    for tool in (_BINARY[engine], "sox"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")


@pytest.fixture(scope="module")
def spoken(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, SynthResult]]:
    """SENTENCE by every installed-engine voice at rate 1.0, clean."""
    out = tmp_path_factory.mktemp("voices")
    results = {}
    for voice in VOICES:
        if shutil.which(_BINARY[voice.engine]) and shutil.which("sox"):
            wav = out / f"{voice.slug}.wav"
            results[voice.name] = (wav, synthesize(SENTENCE, voice, 1.0, wav, seed=0, snr_db=None))
    return results


def _snr_db(clean: np.ndarray, noisy: np.ndarray) -> float:
    """SNR of `noisy` against `clean`, allowing for a common gain (projection of noisy onto clean)."""
    c, n = clean.astype(np.float64), noisy.astype(np.float64)
    gain = float(np.dot(n, c) / np.dot(c, c))
    residual = n - gain * c
    return 10.0 * math.log10(gain**2 * np.mean(c**2) / np.mean(residual**2))


def test_registry_has_enough_distinct_voices_and_the_held_out_ones() -> None:
    assert len(VOICES) >= 9
    assert {v.engine for v in VOICES} == {"espeak-ng", "flite", "festival"}
    assert "flite:rms" in HELD_OUT_VOICES
    assert any(get_voice(n).engine == "espeak-ng" for n in HELD_OUT_VOICES)
    assert len({v.slug for v in VOICES}) == len(VOICES)
    assert all(re.fullmatch(r"[a-z0-9-]+", v.slug) for v in VOICES)


@pytest.mark.parametrize("voice", VOICES, ids=lambda v: v.name)
def test_every_voice_speaks_16k_mono(voice: Voice, spoken: dict[str, tuple[Path, SynthResult]]) -> None:
    _need(voice.engine)
    wav, result = spoken[voice.name]
    with wave.open(str(wav), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, SAMPLE_RATE)
    samples, rate = read_wav(wav)
    assert rate == SAMPLE_RATE and samples.dtype == np.float32
    assert len(samples) == result.num_samples
    assert 0.8 <= result.duration_s <= 5.0
    assert np.abs(samples).max() > 0.05, "silent output"
    assert 0.5 * result.duration_s < result.end_of_speech_s <= result.duration_s


def test_voices_sound_different(spoken: dict[str, tuple[Path, SynthResult]]) -> None:
    """No two voices give the same bytes (espeak-ng and flite fall back silently on unknown ids)."""
    digests = {name: wav.read_bytes() for name, (wav, _) in spoken.items()}
    assert len(set(digests.values())) == len(digests)


@pytest.mark.parametrize("name", ["espeak:en-us", "flite:slt", "festival:slt-hts", "festival:ked-diphone",
                                  "espeak:mb-us2"])
def test_faster_rate_is_shorter(name: str, tmp_path: Path) -> None:
    voice = get_voice(name)
    _need(voice.engine)
    fast = synthesize(SENTENCE, voice, 1.3, tmp_path / "fast.wav", seed=0, snr_db=None)
    slow = synthesize(SENTENCE, voice, 0.8, tmp_path / "slow.wav", seed=0, snr_db=None)
    assert fast.duration_s < slow.duration_s * 0.8
    assert fast.end_of_speech_s < slow.end_of_speech_s


@pytest.mark.parametrize("noise", ["white", "pink"])
def test_noise_at_10_db_measures_back(noise: str, tmp_path: Path) -> None:
    _need("espeak-ng")
    voice = get_voice("espeak:en-us+f3")
    clean_res = synthesize(SENTENCE, voice, 1.0, tmp_path / "clean.wav", seed=5, snr_db=math.inf)
    noisy_res = synthesize(SENTENCE, voice, 1.0, tmp_path / "noisy.wav", seed=5, snr_db=10.0, noise=noise)
    clean, _ = read_wav(tmp_path / "clean.wav")
    noisy, _ = read_wav(tmp_path / "noisy.wav")
    assert len(clean) == len(noisy)
    assert abs(_snr_db(clean, noisy) - 10.0) <= 1.0
    assert noisy_res.end_of_speech_s == clean_res.end_of_speech_s, "end of speech is measured before noise"


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    _need("flite")
    voice = get_voice("flite:kal16")
    paths = [tmp_path / f"{i}.wav" for i in range(3)]
    for path, seed in zip(paths, (11, 11, 12)):
        synthesize(SENTENCE, voice, 1.15, path, seed=seed, snr_db=15.0)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert paths[0].read_bytes() != paths[2].read_bytes()
    assert not list(tmp_path.glob(".*")), "no temporary files left behind"


def test_quotes_and_apostrophes_are_safe(tmp_path: Path) -> None:
    _need("espeak-ng")
    _need("flite")
    for name in ("espeak:en-us", "flite:kal16"):
        res = synthesize("let's play o'reilly's song", get_voice(name), 1.0, tmp_path / f"{name[:5]}.wav")
        assert res.duration_s > 0.5


def test_end_of_speech_on_a_known_signal() -> None:
    t = np.arange(SAMPLE_RATE) / SAMPLE_RATE
    x = np.zeros(2 * SAMPLE_RATE, dtype=np.float32)
    x[1000:SAMPLE_RATE] = 0.5 * np.sin(2 * np.pi * 200 * t[1000:])
    x[SAMPLE_RATE:] = 1e-4  # -74 dB: silence at a -40 dB threshold
    assert end_of_speech(x) == pytest.approx(1.0, abs=0.0101)
    assert end_of_speech(np.zeros(100)) == 0.0


def test_empty_text_names_the_utterance(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="utt-empty.*empty"):
        synthesize("", get_voice("espeak:en-us"), 1.0, tmp_path / "utt-empty.wav")
    assert not (tmp_path / "utt-empty.wav").exists()


def test_unnormalized_text_says_to_normalize(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"'Hello!'.*text_norm\.normalize"):
        synthesize("Hello!", get_voice("espeak:en-us"), 1.0, tmp_path / "x.wav")


def _installed_by_script() -> set[str]:
    """The package names of the `apt-get install` command in cluster/install-speech-packages.sh."""
    root = Path(__file__).resolve().parents[2]
    lines = [line.split("#")[0] for line in (root / "cluster" / "install-speech-packages.sh").read_text().splitlines()]
    command = " ".join(" ".join(lines).replace("\\", " ").split())
    match = re.search(r"apt-get install ((?:\S+ )+)", command)
    assert match, "no apt-get install command"
    return {word for word in match.group(1).split() if not word.startswith(("-", '"'))}


def test_the_install_script_installs_every_voice_and_ci_uses_it() -> None:
    """`make run`/`make test` (so CI), the cluster image and `ray up` install through one script; it must
    install each voice's package."""
    packages = _installed_by_script()
    mbrola = [v.engine_voice.removeprefix("mb-") for v in VOICES if v.engine_voice.startswith("mb-")]
    assert len(mbrola) >= 4
    assert {"mbrola", *(f"mbrola-{database}" for database in mbrola)} <= packages
    assert {"espeak-ng", "flite", "festival", "festvox-us-slt-hts", "festvox-kdlpc16k", "sox"} <= packages
    root = Path(__file__).resolve().parents[2]
    assert (root / ".ci" / "run").read_text().strip().endswith("make test")
    makefile = (root / "Makefile").read_text()
    assert "scripts/ensure_system_packages.sh" in makefile
    assert "cluster/install-speech-packages.sh" in (root / "scripts" / "ensure_system_packages.sh").read_text()


def test_unknown_voice_lists_the_known_ones() -> None:
    with pytest.raises(SpecbenchError, match=r"'espeak:klingon'.*flite:rms"):
        get_voice("espeak:klingon")


@pytest.mark.parametrize(
    ("voice", "match"),
    [
        (Voice("espeak:en-us+bogus", "espeak-ng", "en-us+bogus"),
         r"variant 'bogus'.*apt-get install espeak-ng"),
        (Voice("espeak:xx-yy", "espeak-ng", "xx-yy"), r"language 'xx-yy'"),
        (Voice("flite:nobody", "flite", "nobody"), r"'nobody'.*apt-get install flite"),
        (Voice("festival:nobody", "festival", "nobody_hts"), r"voice_nobody_hts.*festvox-us-slt-hts"),
        (Voice("espeak:mb-de9", "espeak-ng", "mb-de9"), r"mb-de9.*install-speech-packages\.sh.*non-free"),
    ],
    ids=["espeak-variant", "espeak-language", "flite", "festival", "mbrola"],
)
def test_missing_voice_is_a_tool_error_with_the_fix(voice: Voice, match: str) -> None:
    _need(voice.engine)
    with pytest.raises(ToolError, match=match):
        check_installed(voice)


def test_wrong_sample_rate_names_the_file_and_the_fix(tmp_path: Path) -> None:
    if shutil.which("sox") is None:
        pytest.skip("sox is not installed")
    path = tmp_path / "eight_k.wav"
    subprocess.run(
        ["sox", "-n", "-r", "8000", "-c", "1", "-b", "16", str(path), "synth", "0.5", "sine", "300"],
        check=True,
    )
    with pytest.raises(DataError, match=r"eight_k\.wav.*8000 Hz.*sox .* -r 16000 -c 1"):
        read_wav(path)


def test_corrupt_and_truncated_wavs_name_the_file(tmp_path: Path) -> None:
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"RIFF\x00\x01garbage" * 10)
    with pytest.raises(DataError, match=r"junk\.wav.*not a readable"):
        read_wav(junk)
    good = tmp_path / "good.wav"
    with wave.open(str(good), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(np.zeros(1600, dtype="<i2").tobytes())
    cut = tmp_path / "cut.wav"
    cut.write_bytes(good.read_bytes()[:-1000])
    with pytest.raises(DataError, match=r"cut\.wav.*truncated"):
        read_wav(cut)
    with pytest.raises(DataError, match=r"missing\.wav"):
        read_wav(tmp_path / "missing.wav")
