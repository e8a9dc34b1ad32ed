"""The voice registry checked by hand: slugs of unusual names, the voice-name filters, what a `Voice` refuses,
`get_voice` on a non-string, and `check_installed` against the engines' own voice lists (every language
espeak-ng lists is accepted; an MBROLA voice espeak-ng knows but whose database is absent, one it does not
know, a flite id that merely looks like an MBROLA id, and an engine missing from PATH are each refused with
their own reason, and then no voice counts as installed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from specbench.data.voices import (
    HELD_OUT_VOICES,
    VOICES,
    Voice,
    check_installed,
    get_voice,
    installed_voices,
    voice_names,
)
from specbench.errors import ConfigError, ToolError

pytestmark = pytest.mark.unit


def _need(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")


def test_slug_lowercases_and_collapses_runs_of_other_characters() -> None:
    # "Festival: SLT (hts)" -> lower "festival: slt (hts)" -> runs ": ", " (", ")" become "-", ends stripped
    assert Voice("Festival: SLT (hts)", "festival", "x").slug == "festival-slt-hts"
    assert Voice("espeak:en-us+f3", "espeak-ng", "en-us+f3").slug == "espeak-en-us-f3"


def test_voice_names_filters_by_held_out() -> None:
    assert voice_names() == tuple(v.name for v in VOICES)
    assert voice_names(held_out=True) == HELD_OUT_VOICES == ("espeak:en-us+f4", "flite:rms")
    training = voice_names(held_out=False)
    assert len(training) == len(VOICES) - 2 and not set(training) & set(HELD_OUT_VOICES)


@pytest.mark.parametrize(
    ("engine", "engine_voice", "match"),
    [("say", "alex", "engine must be one of"), ("espeak-ng", "en us", "unsafe characters"),
     ("flite", "kal;rm", "unsafe characters")],
)
def test_a_voice_with_an_unknown_engine_or_unsafe_id_is_refused(engine: str, engine_voice: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Voice("x:y", engine, engine_voice)  # type: ignore[arg-type]


def test_get_voice_of_a_non_string_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"unknown voice \['espeak:en-us'\]"):
        get_voice(["espeak:en-us"])  # type: ignore[arg-type]


def test_every_language_espeak_ng_lists_is_accepted() -> None:
    _need("espeak-ng")
    lines = subprocess.run(["espeak-ng", "--voices"], capture_output=True, text=True, check=True).stdout
    languages = [line.split()[1] for line in lines.splitlines()[1:] if len(line.split()) > 1]
    assert "en-us" in languages
    for lang in languages:
        check_installed(Voice(f"espeak:{lang}", "espeak-ng", lang))


def test_mbrola_voices_are_refused_with_the_reason_that_applies() -> None:
    _need("espeak-ng")
    _need("mbrola")
    listed = subprocess.run(["espeak-ng", "--voices=mb"], capture_output=True, text=True, check=True).stdout
    absent = next(db for db in ("af1", "ar1", "de1", "fr1") if f"mb/mb-{db}" in listed
                  and not any(Path(d, db).exists() for d in ("/usr/share/mbrola", "/usr/share/mbrola/voices")))
    with pytest.raises(ToolError, match=rf"the MBROLA database '{absent}' is not installed.*mbrola-{absent}"):
        check_installed(Voice(f"espeak:mb-{absent}", "espeak-ng", f"mb-{absent}"))
    assert "mb/mb-zz9" not in listed
    with pytest.raises(ToolError, match=r"espeak-ng has no MBROLA voice mb-zz9"):
        check_installed(Voice("espeak:mb-zz9", "espeak-ng", "mb-zz9"))


def test_a_flite_id_that_looks_like_an_mbrola_id_is_checked_against_flite() -> None:
    _need("flite")
    with pytest.raises(ToolError, match=r"flite has no voice 'mb-us1'"):
        check_installed(Voice("flite:mb-us1", "flite", "mb-us1"))


@pytest.mark.parametrize("name", ["espeak:en-us", "flite:kal16"])
def test_an_engine_missing_from_path_is_named(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no engine on PATH
    voice = get_voice(name)
    with pytest.raises(ToolError, match=rf"the {voice.engine} program is not on PATH.*apt-get install"):
        check_installed(voice)
    assert installed_voices() == ()  # no engine here, so no voice can speak
