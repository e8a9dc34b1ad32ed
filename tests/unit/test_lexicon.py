"""Unit tests of the pronunciation lexicon (`specbench.wfst.lexicon`) on small hand-written files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specbench.errors import DataError, ToolError
from specbench.wfst import lexicon as lex
from specbench.wfst.lexicon import (
    PHONES,
    Lexicon,
    build_lexicon,
    espeak_pronunciations,
    ipa_to_cmu,
    read_cmudict,
    read_lexicon,
    write_lexicon,
)

pytestmark = pytest.mark.unit

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")

_SNIPPET = """\
a AH0
a(2) EY1
aalborg AO1 L B AO0 R G # place, danish
aalborg(2) AA1 L B AO0 R G
READ R EH1 D
read(2) R IY1 D
read(3) R EH2 D

o'clock AH0 K L AA1 K
"""


def _write(tmp_path: Path, text: str, name: str = "cmudict.dict") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_phones_are_cmudicts_39() -> None:
    assert len(PHONES) == 39 == len(set(PHONES))
    assert PHONES == tuple(sorted(PHONES))
    assert PHONES[:3] == ("AA", "AE", "AH") and PHONES[-1] == "ZH"


def test_read_cmudict_variants_comments_stress(tmp_path: Path) -> None:
    cmu = read_cmudict(_write(tmp_path, _SNIPPET))
    assert cmu == {
        "a": [("AH",), ("EY",)],
        "aalborg": [("AO", "L", "B", "AO", "R", "G"), ("AA", "L", "B", "AO", "R", "G")],
        "read": [("R", "EH", "D"), ("R", "IY", "D")],  # read(3) equals read after stress removal
        "o'clock": [("AH", "K", "L", "AA", "K")],
    }


@pytest.mark.parametrize(
    ("line", "needle"),
    [("hello HH AH0 L OW1 XX", "'XX'"), ("hello HH AH0 L OW3", "'OW3'"), ("hello", "expected"),
     ("hello hh ah0", "'hh'")],
)  # fmt: skip
def test_read_cmudict_malformed_line(tmp_path: Path, line: str, needle: str) -> None:
    path = _write(tmp_path, f"a AH0\nb B IY1\n{line}\n")
    with pytest.raises(DataError) as err:
        read_cmudict(path)
    assert str(path) in str(err.value) and "line 3" in str(err.value) and needle in str(err.value)


def test_read_cmudict_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot read CMUdict"):
        read_cmudict(tmp_path / "nope.dict")


def _small_lexicon() -> Lexicon:
    return Lexicon(
        prons={
            "a": (("AH",), ("EY",)),
            "finlee's": (("F", "IH", "N", "L", "IY", "Z"),),
            "read": (("R", "EH", "D"), ("R", "IY", "D")),
        },
        from_espeak=frozenset({"finlee's"}),
    )


def test_lexicon_properties() -> None:
    lexicon = _small_lexicon()
    assert lexicon.num_words == 3
    assert lexicon.num_prons == 5
    assert lexicon.missing(["read", "zzz", "a", "zzz", "yy"]) == ["zzz", "yy"]


def test_write_read_round_trip(tmp_path: Path) -> None:
    lexicon = _small_lexicon()
    path = tmp_path / "lexicon.txt"
    write_lexicon(lexicon, path)
    assert path.read_text(encoding="utf-8").splitlines() == [
        "a\tAH\tcmudict",
        "a\tEY\tcmudict",
        "finlee's\tF IH N L IY Z\tespeak",
        "read\tR EH D\tcmudict",
        "read\tR IY D\tcmudict",
    ]
    again = read_lexicon(path)
    assert again == lexicon
    assert list(again.prons["read"]) == [("R", "EH", "D"), ("R", "IY", "D")]
    write_lexicon(again, tmp_path / "again.txt")
    assert (tmp_path / "again.txt").read_bytes() == path.read_bytes()


@pytest.mark.parametrize(
    "line",
    ["a\tAH", "a\tAH\tother", "a\tAH XX\tcmudict", "a\t\tcmudict", "a\tAH  EY\tcmudict", "a\tEY\tespeak"],
)
def test_read_lexicon_malformed(tmp_path: Path, line: str) -> None:
    path = _write(tmp_path, f"a\tAH\tcmudict\n{line}\n", "lexicon.txt")
    with pytest.raises(DataError, match="line 2") as err:
        read_lexicon(path)
    assert str(path) in str(err.value) and "Fix: rebuild the graph that holds it with `specbench graph build " \
        "JOB.toml --force`" in str(err.value)  # the command that writes it, not an internal function


def test_read_lexicon_unreadable_names_the_fix(tmp_path: Path) -> None:
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(b"caf\xe9\tK AE F EY\tcmudict\n")
    for path, problem in ((tmp_path / "missing.txt", "No such file"), (latin1, "codec can't decode")):
        with pytest.raises(DataError, match=problem) as err:
            read_lexicon(path)
        assert f"cannot read lexicon {path}" in str(err.value), err.value
        assert "Fix: rebuild the graph that holds it with `specbench graph build JOB.toml --force`" in str(err.value)


@pytest.mark.parametrize(
    ("ipa", "phones"),
    [
        ("ɐ_b_ˈaʊ_t", "AH B AW T"),  # about
        ("b_ˈʌ_ʔ_n̩", "B AH T AH N"),  # button
        ("b_ˈʌ_ɾ_ɚ", "B AH T ER"),  # butter
        ("ˈɑːɹ_ɹ_ɑː_n_s_ə_n", "AA R AA N S AH N"),  # aaronson: linking r collapsed
        ("ɐ_k_s_ˌɛ_l_ɚ_ɹ_ˈeɪ_ʃ_ə_n", "AH K S EH L ER EY SH AH N"),  # acceleration
        ("ɐ_p_ɹ_ˈiː_ʃ_ɪ__ˌeɪ_t", "AH P R IY SH IY EY T"),  # appreciate: empty phoneme, IH + vowel -> IY
        ("ɹ_ˈeɪ_d_ɪ_oʊ", "R EY D IY OW"),  # radio
        ("k_w_ˈaɪɚ", "K W AY ER"),  # choir
        ("aɪ_d_ˈəl", "AY D AH L"),  # i'dl
        ("h_ˌɑː_l_ə_p_ˈeɪ_nʲ_oʊ_z", "HH AA L AH P EY N Y OW Z"),  # jalapenos
        ("d_ɪ_ˈɑː ɹ_ˈe‍ɪ", "D IY AA R EY"),  # two espeak words for one input word; ZWJ tie dropped
    ],
)
def test_ipa_to_cmu(ipa: str, phones: str) -> None:
    assert ipa_to_cmu("w", ipa) == tuple(phones.split())


def test_ipa_to_cmu_unmapped_symbol() -> None:
    with pytest.raises(ToolError) as err:
        ipa_to_cmu("qoph", "q_ˈɔ_f")
    assert "'qoph'" in str(err.value) and "'q'" in str(err.value)


def test_espeak_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lex.shutil, "which", lambda name: None)
    with pytest.raises(ToolError, match="apt-get install espeak-ng"):
        espeak_pronunciations(["finlee's"])


def test_espeak_rejects_unnormalized_words() -> None:
    with pytest.raises(ValueError, match="normalized"):
        espeak_pronunciations(["Hello world"])


def test_espeak_lines_split_batches_that_do_not_align(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def fake_run(binary: str, words: list[str], voice: str) -> list[str] | None:
        calls.append(len(words))
        if len(words) > 2 or "bad" in words:
            return None
        return [f"x_{w}" for w in words]

    monkeypatch.setattr(lex, "_run_espeak", fake_run)
    words = ["a", "b", "c", "bad", "e", "f", "g"]
    lines = lex._espeak_lines("espeak-ng", words, "en-us")
    assert lines == {w: f"x_{w}" for w in words if w != "bad"}
    assert calls[0] == 7


@needs_espeak
def test_espeak_pronunciations_real() -> None:
    prons = espeak_pronunciations(["finlee's", "hello", "butter", "i'dl", "hello"])
    assert prons == {
        "finlee's": ("F", "IH", "N", "L", "IY", "Z"),
        "hello": ("HH", "AH", "L", "OW"),
        "butter": ("B", "AH", "T", "ER"),
        "i'dl": ("AY", "D", "AH", "L"),
    }


@needs_espeak
def test_espeak_bad_voice() -> None:
    with pytest.raises(ToolError, match="nosuchvoice"):
        espeak_pronunciations(["hello"], voice="nosuchvoice")


@needs_espeak
def test_build_lexicon(tmp_path: Path) -> None:
    path = _write(tmp_path, _SNIPPET)
    lexicon = build_lexicon(["read", "a", "finlee's", "read"], path)
    assert lexicon.prons == {
        "a": (("AH",), ("EY",)),
        "finlee's": (("F", "IH", "N", "L", "IY", "Z"),),
        "read": (("R", "EH", "D"), ("R", "IY", "D")),
    }
    assert lexicon.from_espeak == frozenset({"finlee's"})


def test_build_lexicon_word_without_pronunciation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lex, "espeak_pronunciations", lambda words, voice="en-us": {})
    with pytest.raises(ToolError, match="'zzyzx'"):
        build_lexicon(["a", "zzyzx"], _write(tmp_path, _SNIPPET))
