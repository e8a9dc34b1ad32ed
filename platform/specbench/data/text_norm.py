"""The one text normalization of the project.

Every job that turns text into words (the ASR decoding graph, the acoustic model's transcripts, the language
models, the predictive ASR, the lexicon) calls `normalize` / `normalize_words`, so that a word means the same
thing everywhere. The rules below are the whole rule set. The code first maps typographic apostrophes, folds
case and strips accents (rules 1, 6 and 7), then applies rules 2 to 8 in order.

1. Lower-case everything (`str.casefold`, so ``ß`` becomes ``ss``).
2. Markup tokens are dropped: ``<unk>`` and any other ``<...>`` token without spaces inside
   (``i want to hear <unk> song`` -> ``i want to hear song``). A lone ``<`` or ``>`` is a separator (rule 7).
3. Symbols that are read aloud become words of their own: ``@`` -> ``at`` (``jack@gmail`` ->
   ``jack at gmail``, ``@microsoft`` -> ``at microsoft``), ``&`` -> ``and`` (``at&t`` -> ``at and t``),
   ``#`` -> ``hashtag`` (``#nothappy`` -> ``hashtag nothappy``; SLURP's spreadsheet artefact ``#NAME?`` ->
   ``hashtag name``), ``%`` -> ``percent``, ``+`` -> ``plus``, ``$`` -> ``dollar``, ``=`` -> ``equals``.
   ``$5`` reads ``dollar five`` (symbols are not reordered).
4. Runs of ASCII digits are spelled as English number words (`spell_number`: no "and", no hyphens) and split
   from adjacent letters: ``n9ne`` -> ``n nine ne``, ``42`` -> ``forty two``. A run that starts with ``0`` and
   has more than one digit (``007``), or that is longer than 12 digits, is read digit by digit
   (``zero zero seven``). A decimal point between digits reads ``point`` followed by the digits one by one
   (``3.5`` -> ``three point five``, ``0.25`` -> ``zero point two five``). Commas that group digits in
   threes are part of the number (``1,000`` -> ``one thousand``); any other comma is a separator (rule 7).
5. Any other ``.`` is a word separator and is dropped (``u. s. d.`` -> ``u s d``, ``s.f.`` -> ``s f``,
   ``mr.`` -> ``mr``), except that a ``.`` directly followed by an apostrophe is just removed
   (``mary s.'s`` -> ``mary s's``, ``i. b. m.'s`` -> ``i b m's``).
6. Apostrophes are kept only inside a word, between two letters (``let's``, ``o'clock``, ``i'dl``); leading,
   trailing and any other apostrophes are removed (``'s`` -> ``s``, ``a''b`` -> ``ab``). The typographic
   apostrophes ``’`` and ``‘`` (and the modifier letter ``ʼ``) count as ``'``.
7. ``-``, ``_``, ``/`` and every other punctuation mark or symbol are word separators (``bi-weekly`` ->
   ``bi weekly``, ``turn_down`` -> ``turn down``, ``robert, what`` -> ``robert what``). Accented Latin letters
   are reduced to ASCII (Unicode NFKD, combining marks dropped: ``café`` -> ``cafe``); the letters
   ``æ œ ø ł đ ð þ ı`` are transliterated (``ae oe o l d d th i``); any remaining character outside ``a-z'``
   (other scripts, digits of other scripts such as ``٣``) is a separator. NFKD comes first, so digits with
   an ASCII compatibility form are read as those digits (fullwidth ``１２`` -> ``twelve``, superscript
   ``x²`` -> ``x two``, ``½`` -> ``one two``: its parts, not "one half").
8. Whitespace collapses to single spaces, with none leading or trailing; an empty result is ``""``.

The output holds only ``a-z``, ``'`` and single spaces, every apostrophe sits between two letters, and
`normalize` is idempotent: ``normalize(normalize(x)) == normalize(x)``.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["normalize", "normalize_words", "spell_number"]

_MAX_NUMBER = 999_999_999_999

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((1_000_000_000, "billion"), (1_000_000, "million"), (1_000, "thousand"))

_MARKUP = re.compile(r"<[^<>\s]+>")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'"})
_LETTERS = str.maketrans({"æ": "ae", "œ": "oe", "ø": "o", "ł": "l", "đ": "d", "ð": "d", "þ": "th", "ı": "i"})
_SYMBOLS = {"@": "at", "&": "and", "#": "hashtag", "%": "percent", "+": "plus", "$": "dollar", "=": "equals"}
_SYMBOL_RE = re.compile("[" + re.escape("".join(_SYMBOLS)) + "]")
_NUMBER = re.compile(r"(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?:\.[0-9]+)?")
_DOT_APOSTROPHE = re.compile(r"\.(?=')")
_SEPARATOR = re.compile(r"[^a-z']+")
_BAD_APOSTROPHE = re.compile(r"(?<![a-z])'|'(?![a-z])")


def _below_thousand(n: int) -> list[str]:
    """Words for 0 < n < 1000."""
    words: list[str] = []
    hundreds, rest = divmod(n, 100)
    if hundreds:
        words += [_ONES[hundreds], "hundred"]
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        words.append(_TENS[tens])
        if ones:
            words.append(_ONES[ones])
    elif rest:
        words.append(_ONES[rest])
    return words


def spell_number(n: int) -> str:
    """English words for an integer 0 <= n <= 999,999,999,999 (``123`` -> ``one hundred twenty three``).

    No "and", no hyphens, scale words thousand / million / billion. Raises `ValueError` out of range.
    """
    if not 0 <= n <= _MAX_NUMBER:
        raise ValueError(f"spell_number covers 0 .. {_MAX_NUMBER:,}, got {n}")
    if n == 0:
        return _ONES[0]
    words: list[str] = []
    for scale, name in _SCALES:
        count, n = divmod(n, scale)
        if count:
            words += _below_thousand(count) + [name]
    if n:
        words += _below_thousand(n)
    return " ".join(words)


def _spell_digits(digits: str) -> str:
    """Digits read one by one (``"07"`` -> ``"zero seven"``)."""
    return " ".join(_ONES[int(d)] for d in digits)


def _spell_number_token(match: re.Match[str]) -> str:
    """Replacement for one digit run, optionally with a decimal part (rule 4), padded with spaces."""
    whole, _, fraction = match.group(0).partition(".")
    whole = whole.replace(",", "")
    if (len(whole) > 1 and whole[0] == "0") or len(whole) > 12:
        words = _spell_digits(whole)
    else:
        words = spell_number(int(whole))
    if fraction:
        words += " point " + _spell_digits(fraction)
    return f" {words} "


def _fold(text: str) -> str:
    """Rules 1 and 7 (letters): case-fold, NFKD, drop combining marks, transliterate a few letters."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", text).casefold())  # NFKD makes capitals too
    text = "".join(ch for ch in text if not unicodedata.combining(ch))
    return text.translate(_LETTERS)


def normalize_words(sentence: str) -> list[str]:
    """The normalized words of `sentence` (see the module docstring for the rules); may be empty."""
    text = _fold(sentence.translate(_APOSTROPHES))
    text = _MARKUP.sub(" ", text)
    text = _SYMBOL_RE.sub(lambda m: f" {_SYMBOLS[m.group(0)]} ", text)
    text = _NUMBER.sub(_spell_number_token, text)
    text = _DOT_APOSTROPHE.sub("", text)
    words = []
    for token in _SEPARATOR.split(text):
        token = _BAD_APOSTROPHE.sub("", token)
        if token:
            words.append(token)
    return words


def normalize(sentence: str) -> str:
    """`sentence` normalized: lower-case words of ``a-z`` and inner apostrophes, joined by single spaces."""
    return " ".join(normalize_words(sentence))
