"""The registry of synthetic voices that the project speaks SLURP sentences with.

A voice is one engine (espeak-ng, flite or festival) plus the engine's own voice id. Names are
``ENGINE:ID`` (``espeak:en-us+f3``, ``flite:rms``, ``festival:slt-hts``) and are what job files,
manifests and MLflow runs record.

Voices
------
==========================  ==========  ===============================  ==========
name                        engine      engine voice                     held out
==========================  ==========  ===============================  ==========
espeak:en-us                espeak-ng   en-us (default male variant)     no
espeak:en-us+m3             espeak-ng   en-us, variant m3                no
espeak:en-us+f3             espeak-ng   en-us, variant f3 (female)       no
espeak:en-gb-x-rp           espeak-ng   en-gb-x-rp (British RP accent)   no
espeak:en-029               espeak-ng   en-029 (Caribbean accent)        no
espeak:en-us+f4             espeak-ng   en-us, variant f4 (female)       **yes**
flite:kal16                 flite       kal16 (diphone, male)            no
flite:awb                   flite       awb (Scottish male)              no
flite:slt                   flite       slt (US female)                  no
flite:rms                   flite       rms (US male)                    **yes**
festival:slt-hts            festival    cmu_us_slt_arctic_hts (HTS)      no
festival:ked-diphone        festival    ked_diphone (diphone, US male)   no
espeak:mb-us1               espeak-ng   mb-us1 (MBROLA us1, US female)   no
espeak:mb-us2               espeak-ng   mb-us2 (MBROLA us2, US male)     no
espeak:mb-us3               espeak-ng   mb-us3 (MBROLA us3, US male)     no
espeak:mb-en1               espeak-ng   mb-en1 (MBROLA en1, UK male)     no
==========================  ==========  ===============================  ==========

Held-out voices (devel/test only, never training)
-------------------------------------------------
Test voices must be unseen in training (DESIGN.md, "Data and models"), so that the acoustic model is
measured on a speaker it never heard. One voice is held out of each engine that has several:

- ``flite:rms``: a US male recorded speaker whose recordings stand behind no training voice (``awb`` is a
  Scottish male, ``kal16`` a diphone voice, ``slt`` a female), so it tests a new speaker of a familiar
  synthesis method.
- ``espeak:en-us+f4``: an espeak-ng variant changes pitch, formants and voice quality; ``f4`` is a female
  variant (median F0 about 180 Hz, against 213 Hz for ``f3`` and about 103 Hz for the male voices) whose
  formant settings no training voice shares, so it tests unseen variant parameters within the formant
  synthesizer.

festival's voices are kept for training (``ked_diphone``, Debian's festvox-kdlpc16k, is a US male speaker no
other engine has). So are the four English MBROLA voices, which espeak-ng drives (``-v mb-us1``): espeak-ng
chooses the phones, durations and pitch, and MBROLA concatenates diphones recorded from four more real
speakers (Debian's non-free mbrola-us1/us2/us3/en1; their licences allow free use for synthesis with MBROLA,
and us1-us3 may not be sold or built into a product that is sold); they are not held out, but the shipped corpus (``jobs/speech_slurp.toml``) does not
use them, since training with them did not help on the held-out voices (README). Note that ``flite:slt``
and ``festival:slt-hts`` are built from the same speaker (CMU ARCTIC SLT).

Pitfalls checked by `check_installed`: espeak-ng silently falls back to the plain language when a
``+variant`` does not exist (``en-us+bogus`` gives the same bytes as ``en-us``), and flite silently falls
back to ``kal`` (8 kHz) for an unknown ``-voice``; neither reports an error, so the voice lists are read.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from specbench.errors import ConfigError, ToolError

__all__ = [
    "ENGINES",
    "HELD_OUT_VOICES",
    "VOICES",
    "Voice",
    "check_installed",
    "get_voice",
    "installed_voices",
    "voice_names",
]

Engine = Literal["espeak-ng", "flite", "festival"]
ENGINES: tuple[str, ...] = ("espeak-ng", "flite", "festival")

_APT_FIX = {
    "espeak-ng": "apt-get install espeak-ng",
    "flite": "apt-get install flite",
    "festival": "apt-get install festival festvox-us-slt-hts festvox-kdlpc16k",
    "mbrola": "bash cluster/install-speech-packages.sh (it enables Debian's contrib and non-free components)",
}
_MBROLA_PREFIX = "mb-"
_MBROLA_VOICE_DIRS = (Path("/usr/share/mbrola"), Path("/usr/share/mbrola/voices"))
_BINARY = {"espeak-ng": "espeak-ng", "flite": "flite", "festival": "festival"}
_CHECK_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Voice:
    """One synthetic voice.

    Attributes:
        name: registry name ``ENGINE:ID`` (``espeak:en-us+f3``), recorded in manifests.
        engine: ``espeak-ng`` | ``flite`` | ``festival``.
        engine_voice: the engine's own id: espeak-ng ``LANG[+VARIANT]``, a flite ``-voice`` name, or a
            festival voice name (``cmu_us_slt_arctic_hts``, selected with ``(voice_NAME)``).
        held_out: True when the voice is kept for devel/test and never used in training.
    """

    name: str
    engine: Engine
    engine_voice: str
    held_out: bool = False

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ConfigError(f"Voice {self.name!r}: engine must be one of {ENGINES}, got {self.engine!r}")
        if not re.fullmatch(r"[A-Za-z0-9_.+-]+", self.engine_voice):
            raise ConfigError(
                f"Voice {self.name!r}: engine_voice {self.engine_voice!r} has unsafe characters"
            )

    @property
    def slug(self) -> str:
        """A filesystem-safe form of the name (``espeak:en-us+f3`` -> ``espeak-en-us-f3``)."""
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")


VOICES: tuple[Voice, ...] = (
    Voice("espeak:en-us", "espeak-ng", "en-us"),
    Voice("espeak:en-us+m3", "espeak-ng", "en-us+m3"),
    Voice("espeak:en-us+f3", "espeak-ng", "en-us+f3"),
    Voice("espeak:en-gb-x-rp", "espeak-ng", "en-gb-x-rp"),
    Voice("espeak:en-029", "espeak-ng", "en-029"),
    Voice("espeak:en-us+f4", "espeak-ng", "en-us+f4", held_out=True),
    Voice("flite:kal16", "flite", "kal16"),
    Voice("flite:awb", "flite", "awb"),
    Voice("flite:slt", "flite", "slt"),
    Voice("flite:rms", "flite", "rms", held_out=True),
    Voice("festival:slt-hts", "festival", "cmu_us_slt_arctic_hts"),
    Voice("festival:ked-diphone", "festival", "ked_diphone"),
    Voice("espeak:mb-us1", "espeak-ng", "mb-us1"),
    Voice("espeak:mb-us2", "espeak-ng", "mb-us2"),
    Voice("espeak:mb-us3", "espeak-ng", "mb-us3"),
    Voice("espeak:mb-en1", "espeak-ng", "mb-en1"),
)
_BY_NAME = {v.name: v for v in VOICES}
HELD_OUT_VOICES: tuple[str, ...] = tuple(v.name for v in VOICES if v.held_out)
if len(_BY_NAME) != len(VOICES) or len({v.slug for v in VOICES}) != len(VOICES):
    raise RuntimeError("two registered voices share a name or a slug")


def voice_names(held_out: bool | None = None) -> tuple[str, ...]:
    """Registry names; only held-out (True) or only training (False) voices, or all (None)."""
    return tuple(v.name for v in VOICES if held_out is None or v.held_out == held_out)


def get_voice(name: str) -> Voice:
    """The registered voice called `name`; `ConfigError` (a `SpecbenchError`) naming it and the known ones."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise ConfigError(
            f"unknown voice {name!r}. Known voices: {', '.join(_BY_NAME)} "
            f"(held out of training: {', '.join(HELD_OUT_VOICES)})."
        ) from None


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a short engine query (no shell) and return it; `ToolError` when it cannot start or hangs."""
    try:
        return subprocess.run(args, capture_output=True, text=True, encoding="utf-8", timeout=_CHECK_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ToolError(f"could not run {' '.join(args)}: {err}") from err


@functools.lru_cache(maxsize=None)
def _espeak_languages() -> frozenset[str]:
    """Language ids that `espeak-ng --voices` lists (column 2), e.g. ``en-us``, ``en-gb-x-rp``."""
    out = _run(["espeak-ng", "--voices"]).stdout.splitlines()[1:]
    return frozenset(line.split()[1] for line in out if len(line.split()) > 1)


@functools.lru_cache(maxsize=None)
def _espeak_variants() -> frozenset[str]:
    """Variant ids usable after ``+`` (the file names ``!v/NAME`` of `espeak-ng --voices=variant`)."""
    out = _run(["espeak-ng", "--voices=variant"]).stdout.splitlines()[1:]
    names = set()
    for line in out:
        m = re.search(r"!v/(\S+)", line)
        if m:
            names.add(m.group(1))
    return frozenset(names)


@functools.lru_cache(maxsize=None)
def _flite_voices() -> frozenset[str]:
    """Voices compiled into flite (`flite -lv`: ``Voices available: kal awb ...``)."""
    out = _run(["flite", "-lv"]).stdout
    return frozenset(out.split(":", 1)[1].split()) if ":" in out else frozenset()


@functools.lru_cache(maxsize=None)
def _festival_has(voice_id: str) -> tuple[bool, str]:
    """Whether festival can select ``(voice_ID)``; returns (ok, festival's stderr)."""
    proc = _run(["festival", "--batch", f"(voice_{voice_id})"])
    return proc.returncode == 0 and "SIOD ERROR" not in proc.stderr, proc.stderr.strip()


@functools.lru_cache(maxsize=None)
def _espeak_mbrola_voices() -> frozenset[str]:
    """MBROLA voice ids espeak-ng knows (``mb/mb-us1`` in `espeak-ng --voices=mb` gives ``us1``)."""
    out = _run(["espeak-ng", "--voices=mb"]).stdout
    return frozenset(re.findall(r"\bmb/mb-([a-z]{2}[0-9])\b", out))


def _mbrola_missing(database: str) -> str | None:
    """Why espeak-ng cannot speak with MBROLA database `database` (``us1``), or None when it can."""
    if shutil.which("mbrola") is None:
        return "the mbrola program is not on PATH"
    if database not in _espeak_mbrola_voices():
        return f"espeak-ng has no MBROLA voice mb-{database} (`espeak-ng --voices=mb` lists them)"
    if not any((d / database).exists() for d in _MBROLA_VOICE_DIRS):
        return f"the MBROLA database {database!r} is not installed (Debian package mbrola-{database})"
    return None


def espeak_voice_problem(engine_voice: str) -> str | None:
    """Why espeak-ng cannot speak with `engine_voice` (``LANG`` or ``LANG+VARIANT``, as after ``-v``), or None.
    espeak-ng itself falls back silently to another voice for a name it does not know."""
    lang, _, variant = engine_voice.partition("+")
    if lang not in _espeak_languages():
        known = len(_espeak_languages())
        return (f"espeak-ng has no language {lang!r} (espeak-ng would silently fall back to its default; "
                f"`espeak-ng --voices` lists {known})")
    if variant and variant not in _espeak_variants():
        return (f"espeak-ng has no variant {variant!r} (espeak-ng would silently fall back to {lang!r}; "
                "`espeak-ng --voices=variant` lists the variants)")
    return None


def _missing_reason(voice: Voice) -> str | None:
    """Why `voice` cannot be used on this machine, or None when it can."""
    if shutil.which(_BINARY[voice.engine]) is None:
        return f"the {voice.engine} program is not on PATH"
    if voice.engine == "espeak-ng" and voice.engine_voice.startswith(_MBROLA_PREFIX):
        return _mbrola_missing(voice.engine_voice.removeprefix(_MBROLA_PREFIX))
    if voice.engine == "espeak-ng":
        return espeak_voice_problem(voice.engine_voice)
    if voice.engine == "flite":
        if voice.engine_voice not in _flite_voices():
            return (f"flite has no voice {voice.engine_voice!r} (flite would silently fall back to kal); "
                    f"`flite -lv` lists: {' '.join(sorted(_flite_voices()))}")
        return None
    ok, err = _festival_has(voice.engine_voice)
    return None if ok else f"festival cannot select (voice_{voice.engine_voice}): {err[-300:]}"


def check_installed(voice: Voice) -> None:
    """Raise `ToolError` naming the voice, the reason and the fix unless `voice` can synthesize here.

    Checks the engine binary and that the engine knows the voice (the voice lists, not a test synthesis, since
    espeak-ng and flite fall back silently). Results are cached per process.
    """
    reason = _missing_reason(voice)
    if reason is not None:
        mbrola = voice.engine_voice.startswith(_MBROLA_PREFIX)
        fix = _APT_FIX["mbrola" if mbrola else voice.engine]
        raise ToolError(f"voice {voice.name!r} is not available: {reason}. Fix: {fix}.")


def installed_voices() -> tuple[Voice, ...]:
    """The registered voices that pass `check_installed` on this machine."""
    return tuple(v for v in VOICES if _missing_reason(v) is None)
