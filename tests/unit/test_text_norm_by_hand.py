"""The text normalization (`specbench.data.text_norm`) by hand, on the edges of its rules: number words at
twenty and the tens, digit runs of exactly twelve digits (still a number) and commas that do not group digits in
threes, decimals with several digits after the point, every transliterated letter, every typographic apostrophe
inside a word, markup tokens that hold symbols or digits (dropped whole), and Unicode compatibility forms
(NFKD: ligatures and full-width letters become plain ASCII letters). Expected strings are written out by hand."""

from __future__ import annotations

import pytest

from specbench.data.text_norm import normalize, spell_number

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("n", "words"),
    [
        (20, "twenty"),  # the first of the tens: _TENS[2], not a teen
        (90, "ninety"),
        (99, "ninety nine"),
        (110, "one hundred ten"),
        (120, "one hundred twenty"),
        (1_000_020, "one million twenty"),
        (1_000_000_000, "one billion"),
    ],
)  # fmt: skip
def test_tens_and_scales_are_spelled(n: int, words: str) -> None:
    assert spell_number(n) == words


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("20 minutes", "twenty minutes"),
        # 12 digits is the longest run still read as a number: 123 billion 456 million 789 thousand 12
        ("123456789012", ("one hundred twenty three billion four hundred fifty six million "
                          "seven hundred eighty nine thousand twelve")),
        # the same 12 digits grouped by commas (16 characters): still one number
        ("123,456,789,012", ("one hundred twenty three billion four hundred fifty six million "
                             "seven hundred eighty nine thousand twelve")),
        # a comma followed by two digits does not group: "1" then "00" (leading zero: digit by digit)
        ("1,00", "one zero zero"),
        # a group of four digits is not a thousands group: "1" then "0000" digit by digit
        ("1,0000", "one zero zero zero zero"),
        ("12,345,6", "twelve thousand three hundred forty five six"),
        # every digit after the point is read alone, however many there are
        ("3.14159", "three point one four one five nine"),
        ("2.50", "two point five zero"),
    ],
)  # fmt: skip
def test_number_runs_at_the_edges(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Þorn", "thorn"),
        ("Œuvre", "oeuvre"),
        ("ðæt", "daet"),
        ("Đakovo", "dakovo"),
        ("ıstanbul", "istanbul"),  # dotless i
        ("Øl Łódź", "ol lodz"),
    ],
)
def test_every_transliterated_letter(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("don\u02bct", "don't"),  # modifier letter apostrophe
        ("rock\u2018n\u2018roll", "rock'n'roll"),  # left single quotation mark, between letters
        ("it\u2019s", "it's"),
    ],
)
def test_typographic_apostrophes_inside_words_are_kept(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("play <a&b> now", "play now"),  # markup is dropped before symbols are read aloud
        ("play <noise2> now", "play now"),  # and before digits are spelled
        ("<x@y> <100%>", ""),
    ],
)
def test_markup_with_symbols_or_digits_is_dropped_whole(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("\ufb01le", "file"),  # the ligature fi: NFKD gives "fi"
        ("\uff28\uff45\uff4c\uff4c\uff4f", "hello"),  # full-width HELLO (mixed case)
    ],
)
def test_compatibility_forms_become_ascii_letters(raw: str, expected: str) -> None:
    assert normalize(raw) == expected
