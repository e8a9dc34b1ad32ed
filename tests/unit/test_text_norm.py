"""Tests of the project-wide text normalization (`specbench.data.text_norm`), one group per rule."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbench.data.text_norm import normalize, normalize_words, spell_number

pytestmark = pytest.mark.unit

_OUTPUT = re.compile(r"(?:[a-z']+(?: [a-z']+)*)?")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("What's Happening Today", "what's happening today"),  # rule 1
        ("STRASSE Straße", "strasse strasse"),
        ("Call № 5, ℌello 𝐇𝐢", "call no five hello hi"),  # capitals NFKD makes are lower-cased too
    ],
)
def test_lower_case(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("i want to hear <unk> song <unk>", "i want to hear song"),  # SLURP
        ("play <noise> music <laugh>", "play music"),
        ("a < b > c", "a b c"),  # lone brackets are separators
    ],
)
def test_markup_dropped(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("send an email to jack@gmail dot com", "send an email to jack at gmail dot com"),  # SLURP
        ("post my complaint to @microsoft on twitter", "post my complaint to at microsoft on twitter"),
        ("tweet complaint to @", "tweet complaint to at"),
        ("olly tweet a message to at&t and tell them", "olly tweet a message to at and t and tell them"),
        ("tweet @nike my pants ripped #nothappy", "tweet at nike my pants ripped hashtag nothappy"),
        ("#NAME?", "hashtag name"),  # SLURP's spreadsheet artefact
        ("50% off", "fifty percent off"),
        ("c+ grade", "c plus grade"),
        ("$5", "dollar five"),
        ("x=y", "x equals y"),
    ],
)
def test_symbols_read_aloud(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("play be warned by tech n9ne", "play be warned by tech n nine ne"),  # SLURP
        ("42", "forty two"),
        ("set an alarm for 7am", "set an alarm for seven am"),
        ("3.5 stars", "three point five stars"),
        ("0.25", "zero point two five"),
        ("1,000 dollars", "one thousand dollars"),
        ("agent 007", "agent zero zero seven"),
        ("1234567890123", "one two three four five six seven eight nine zero one two three"),
        ("route 66.", "route sixty six"),
    ],
)
def test_numbers_spelled(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("exchange rate from cad to u. s. d.", "exchange rate from cad to u s d"),  # SLURP
        ("i wish to know the weather in s.f.", "i wish to know the weather in s f"),
        ("please tell me when is the marriage of mr. jim", "please tell me when is the marriage of mr jim"),
        ("what is mary s.'s birthday", "what is mary s's birthday"),
        ("what are i. b. m.'s stock prices", "what are i b m's stock prices"),
    ],
)
def test_full_stops(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("let's go at five o'clock", "let's go at five o'clock"),
        ("i'dl", "i'dl"),  # SLURP
        ("finlee's", "finlee's"),
        ("'quoted' words'", "quoted words"),
        ("rock ' n ' roll", "rock n roll"),
        ("a''b", "ab"),
        ("don’t ‘worry’", "don't worry"),
        ("90's music", "ninety s music"),
    ],
)
def test_apostrophes(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("set regular bi-weekly meeting", "set regular bi weekly meeting"),  # SLURP
        ("turn_down speakers", "turn down speakers"),  # SLURP
        ("send email to robert, what time is dinner", "send email to robert what time is dinner"),  # SLURP
        ("what's happening today with syria ?", "what's happening today with syria"),  # SLURP
        ("this may brings given of these proble,s to us", "this may brings given of these proble s to us"),
        ("and/or", "and or"),
        ("Café Noël in São Paulo", "cafe noel in sao paulo"),
        ("Ærø Łódź", "aero lodz"),
        ("東京 tokyo", "tokyo"),
    ],
)
def test_separators_and_accents(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


@pytest.mark.parametrize("raw", ["", "   ", "<unk>", "...", "' '", "\t\n"])
def test_empty_result(raw: str) -> None:
    assert normalize(raw) == ""
    assert normalize_words(raw) == []


def test_whitespace_collapses() -> None:
    assert normalize("  wake   me\tup \n at  six  ") == "wake me up at six"


def test_normalize_words_matches_normalize() -> None:
    raw = "Tweet @wendys that i don't like their product #badpho"
    assert normalize_words(raw) == normalize(raw).split(" ")


@pytest.mark.parametrize(
    ("n", "words"),
    [
        (0, "zero"),
        (7, "seven"),
        (13, "thirteen"),
        (40, "forty"),
        (42, "forty two"),
        (105, "one hundred five"),
        (123, "one hundred twenty three"),
        (1000, "one thousand"),
        (2019, "two thousand nineteen"),
        (1_000_001, "one million one"),
        (12_000_300, "twelve million three hundred"),
        (999_999_999_999, "nine hundred ninety nine billion nine hundred ninety nine million "
         "nine hundred ninety nine thousand nine hundred ninety nine"),
    ],
)  # fmt: skip
def test_spell_number(n: int, words: str) -> None:
    assert spell_number(n) == words


@pytest.mark.parametrize("n", [-1, 1_000_000_000_000])
def test_spell_number_out_of_range(n: int) -> None:
    with pytest.raises(ValueError, match="spell_number"):
        spell_number(n)


_FRAGMENTS = st.sampled_from(
    ["a", "Z", "'", "’", "‘", "0", "7", "12", ",", ".", ".'", "<unk>", "<", ">", "@", "&", "#", "%", "+", "$",
     "=", "-", "_", "/", " ", "  ", "\t", "é", "ß", "æ", "İ", "東", "²", "½", "\u0301", "\u200d", "o'clock"]
)  # fmt: skip
_TEXT = st.one_of(st.text(max_size=60), st.lists(_FRAGMENTS, max_size=30).map("".join))


@settings(max_examples=400, deadline=None)
@given(_TEXT)
def test_normalize_properties(raw: str) -> None:
    out = normalize(raw)
    assert _OUTPUT.fullmatch(out), out
    assert "  " not in out
    for word in out.split():
        assert not word.startswith("'") and not word.endswith("'") and "''" not in word
    assert normalize(out) == out
    assert normalize_words(raw) == (out.split(" ") if out else [])
