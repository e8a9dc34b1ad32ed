"""The pronunciation lexicon: words (normalized by `specbench.data.text_norm`) to CMUdict phones.

Phones are CMUdict's 39 phones without stress (`PHONES`). A word gets every pronunciation CMUdict lists for
it (variants ``word(2)``, ``word(3)`` ... in file order, duplicates after stress removal dropped). A word
CMUdict lacks gets the one pronunciation espeak-ng gives it, mapped from espeak-ng's American-English IPA to
CMUdict phones by `_IPA_TO_CMU`. espeak-ng is called in batches of `_BATCH_WORDS` words, one word per line
ending in a full stop (so that each word is its own clause, pronounced as in isolation), and its output lines
are checked against the input count; a batch that does not align is split in halves until it does.

Lexicon file format (`write_lexicon` / `read_lexicon`): UTF-8 text, one line per pronunciation,
``word<TAB>PH1 PH2 ...<TAB>source`` where source is ``cmudict`` or ``espeak``; words sorted, a word's
pronunciations in lexicon order.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specbench.errors import DataError, ToolError

__all__ = [
    "PHONES",
    "Lexicon",
    "build_lexicon",
    "espeak_pronunciations",
    "ipa_to_cmu",
    "read_cmudict",
    "read_lexicon",
    "write_lexicon",
]

Pron = tuple[str, ...]

PHONES: tuple[str, ...] = tuple(
    "AA AE AH AO AW AY B CH D DH EH ER EY F G HH IH IY JH K L M N NG OW OY P R S SH T TH UH UW V W Y Z ZH"
    .split()
)
_PHONE_SET = frozenset(PHONES)
_VOWELS = frozenset("AA AE AH AO AW AY EH ER EY IH IY OW OY UH UW".split())

# espeak-ng IPA phoneme (as printed with --ipa --sep=_, stress marks and ties removed) -> CMUdict phones.
# Choices that are not one-to-one: the flap ɾ is T (espeak-ng en-us flaps only /t/: "ladder" keeps d);
# the glottal stop ʔ is T (espeak-ng uses it only for /t/ before syllabic n: "button" b ʌ ʔ n̩ = CMUdict
# B AH T AH N); syllabic consonants are AH + consonant; ᵻ (reduced i) is IH; short i (happy) is IY;
# oː (only before ɹ) is AO; ɪɹ is IH R (CMUdict's usual "beer", "clear"). Each choice was checked against
# CMUdict on the SLURP vocabulary (tests/integration/test_lexicon_coverage.py): the alternatives
# (ɾ -> D, ʔ dropped, ᵻ -> AH, ɪɹ -> IY R, ɔ -> AA, i -> IH) all raise the phone error rate.
_IPA_TO_CMU: dict[str, str] = {
    # plosives, affricates, fricatives
    "p": "P", "b": "B", "t": "T", "d": "D", "k": "K", "ɡ": "G", "g": "G", "ɾ": "T", "ʔ": "T",
    "tʃ": "CH", "dʒ": "JH", "ts": "T S", "dz": "D Z",
    "f": "F", "v": "V", "θ": "TH", "ð": "DH", "s": "S", "z": "Z", "ʃ": "SH", "ʒ": "ZH", "h": "HH",
    "x": "K", "ç": "HH", "ɣ": "G", "β": "B", "ɬ": "L",
    # nasals, liquids, glides
    "m": "M", "n": "N", "ŋ": "NG", "nʲ": "N Y", "ɲ": "N Y", "l": "L", "ɫ": "L", "ɹ": "R", "r": "R", "ɻ": "R",
    "w": "W", "j": "Y", "ʍ": "W",
    # syllabic consonants
    "əl": "AH L", "l̩": "AH L", "n̩": "AH N", "m̩": "AH M", "əm": "AH M", "ən": "AH N",
    # monophthongs
    "i": "IY", "iː": "IY", "ɪ": "IH", "ᵻ": "IH", "ɨ": "IH", "e": "EH", "ɛ": "EH", "ɛː": "EH", "æ": "AE",
    "a": "AA", "aː": "AA", "ɑ": "AA", "ɑː": "AA", "ɒ": "AA", "ɔ": "AO", "ɔː": "AO", "o": "OW", "oː": "AO",
    "ʊ": "UH", "u": "UW", "uː": "UW", "ʌ": "AH", "ə": "AH", "ɐ": "AH",
    "ɚ": "ER", "ɝ": "ER", "ɜ": "ER", "ɜː": "ER",
    # diphthongs and vowel sequences espeak-ng prints as one phoneme
    "aɪ": "AY", "aʊ": "AW", "eɪ": "EY", "oʊ": "OW", "əʊ": "OW", "ɔɪ": "OY",
    "aɪɚ": "AY ER", "aɪə": "AY AH", "aʊɚ": "AW ER", "aʊə": "AW AH", "iə": "IY AH", "uə": "UW AH",
    "ɪə": "IH AH", "ʊə": "UH AH", "eə": "EH AH",
    # r-coloured vowels
    "ɑːɹ": "AA R", "ɑɹ": "AA R", "ɔːɹ": "AO R", "ɔɹ": "AO R", "oːɹ": "AO R", "oɹ": "AO R",
    "ɪɹ": "IH R", "iɹ": "IY R", "ɛɹ": "EH R", "eɹ": "EH R", "æɹ": "AE R", "ʊɹ": "UH R", "uɹ": "UW R",
    "ɜːɹ": "ER", "əɹ": "ER",
}  # fmt: skip
# Marks dropped without a trace: primary/secondary stress, half-length, tie bars, zero-width (non-)joiners,
# IPA syllable break. The empty phoneme (espeak-ng's syllable boundary ";" prints as nothing) is dropped too.
_IGNORED_MARKS = re.compile("[\u02c8\u02cc\u02d1\u0361\u035c\u200c\u200d.]")
_ESPEAK_WORD = re.compile(r"[a-z']+")
_BATCH_WORDS = 2000
_TIMEOUT_S = 120


# ----------------------------------------------------------------------------------------------- CMUdict
_CMUDICT_FIX = (
    "restore the file from the shipped data folder (`specbench data check` names every file that differs "
    "from it)"
)
# A CMUdict phone token: a phone, optionally with a stress digit -> the phone.
_CMUDICT_TOKENS: dict[str, str] = {p + s: p for p in PHONES for s in ("", "0", "1", "2")}
_CMUDICT_WORD = re.compile(r"[^\s()#]+(?:\(\d+\))?")


def _parse_cmudict_line(line: str, path: Path, lineno: int) -> tuple[str, Pron] | None:
    """One CMUdict line to (lower-case word without variant suffix, stressless phones); None when blank."""
    fields = line.split("#", 1)[0].split()
    if not fields:
        return None
    if len(fields) < 2 or not _CMUDICT_WORD.fullmatch(fields[0]):
        raise DataError(
            f"{path}, line {lineno}: expected 'word PH1 PH2 ...' (a word, optionally with a variant number "
            f"as in 'word(2)', then its phones), got {line.strip()!r}. Fix: correct or remove that line, or "
            f"{_CMUDICT_FIX}."
        )
    word = fields[0].lower()
    if word.endswith(")"):
        word = word[: word.rindex("(")]
    phones = []
    for token in fields[1:]:
        phone = _CMUDICT_TOKENS.get(token)
        if phone is None:
            raise DataError(
                f"{path}, line {lineno}: {token!r} is not a CMUdict phone (one of {' '.join(PHONES)}, "
                "optionally followed by a stress digit 0/1/2). Fix: correct or remove that line."
            )
        phones.append(phone)
    return word, tuple(phones)


def read_cmudict(path: Path) -> dict[str, list[Pron]]:
    """Parse a CMUdict file: lower-case word -> its stressless pronunciations in file order, no duplicates.

    Variants ``word(2)`` join ``word``; a trailing ``# comment`` is ignored; blank lines are skipped.
    Raises `DataError` naming the file and the line for a line that is not UTF-8, has no phones, has a phone
    outside `PHONES` or a malformed word; and naming the file for one that cannot be read or holds no entry.
    """
    path = Path(path)
    lexicon: dict[str, list[Pron]] = {}
    try:
        fh = path.open("rb")
    except OSError as err:
        raise DataError(
            f"cannot read CMUdict file {path}: {err.strerror or err}. Fix: {_CMUDICT_FIX}."
        ) from err
    with fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(
                    f"{path}, line {lineno}: not UTF-8 text (byte {raw[err.start:err.end]!r} at column "
                    f"{err.start + 1}). Fix: {_CMUDICT_FIX}."
                ) from None
            entry = _parse_cmudict_line(line, path, lineno)
            if entry is None:
                continue
            prons = lexicon.setdefault(entry[0], [])
            if entry[1] not in prons:
                prons.append(entry[1])
    if not lexicon:
        raise DataError(
            f"{path}, line 1: the CMUdict file holds no entry (it is empty). Fix: {_CMUDICT_FIX}."
        )
    return lexicon


# ------------------------------------------------------------------------------------------------ espeak
def _espeak_binary() -> str:
    """Path of the espeak-ng executable; raises `ToolError` with the install command when it is missing."""
    binary = shutil.which("espeak-ng")
    if binary is None:
        raise ToolError(
            "espeak-ng is not installed (needed to pronounce words CMUdict lacks). "
            "Fix: apt-get install espeak-ng"
        )
    return binary


def _run_espeak(binary: str, words: Sequence[str], voice: str) -> list[str] | None:
    """espeak-ng's IPA line per word (phonemes joined by ``_``); None if lines and words do not align."""
    text = "".join(f"{word}.\n" for word in words)
    cmd = [binary, "-q", "--ipa", "--sep=_", "-v", voice, "--stdin"]
    try:
        proc = subprocess.run(
            cmd, input=text, capture_output=True, text=True, encoding="utf-8", timeout=_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ToolError(f"espeak-ng failed to run ({' '.join(cmd)}): {err}") from err
    if proc.returncode != 0:
        raise ToolError(
            f"espeak-ng exited with status {proc.returncode} ({' '.join(cmd)}): {proc.stderr.strip()}. "
            f"Fix: check the voice name {voice!r} with `espeak-ng --voices=en`."
        )
    lines = proc.stdout.splitlines()
    return lines if len(lines) == len(words) else None


def _espeak_lines(binary: str, words: Sequence[str], voice: str) -> dict[str, str]:
    """word -> espeak-ng output line, splitting a batch in halves until output and input align.

    A single word whose output does not align (no line, or several) is left out.
    """
    lines = _run_espeak(binary, words, voice)
    if lines is not None:
        return dict(zip(words, lines, strict=True))
    if len(words) == 1:
        return {}
    half = len(words) // 2
    return {**_espeak_lines(binary, words[:half], voice), **_espeak_lines(binary, words[half:], voice)}


def _cmudict_conventions(phones: list[str]) -> Pron:
    """Bring mapped espeak-ng phones closer to CMUdict's transcription habits.

    An R right after R or ER is dropped (espeak-ng writes an r-coloured vowel plus a linking r: ``ɑːɹ ɹ``,
    ``ɚ ɹ``), and IH right before a vowel becomes IY (``radio`` R EY D IY OW, as CMUdict writes it).
    """
    out: list[str] = []
    for phone in phones:
        if phone == "R" and out and out[-1] in ("R", "ER"):
            continue
        if phone in _VOWELS and out and out[-1] == "IH":
            out[-1] = "IY"
        out.append(phone)
    return tuple(out)


def ipa_to_cmu(word: str, ipa: str) -> Pron:
    """Map one espeak-ng output line (``--ipa --sep=_``; words separated by spaces) to CMUdict phones.

    Raises `ToolError` naming the word and the symbol for a phoneme missing from the mapping table.
    """
    phones: list[str] = []
    for token in ipa.split():
        for phoneme in token.split("_"):
            key = _IGNORED_MARKS.sub("", phoneme)
            if not key:
                continue
            mapped = _IPA_TO_CMU.get(key)
            if mapped is None:
                raise ToolError(
                    f"espeak-ng pronounced {word!r} as {ipa.strip()!r}: phoneme {key!r} has no CMUdict "
                    "mapping. Fix: add it to _IPA_TO_CMU in specbench/wfst/lexicon.py."
                )
            phones.extend(mapped.split())
    return _cmudict_conventions(phones)


def espeak_pronunciations(words: Sequence[str], voice: str = "en-us") -> dict[str, Pron]:
    """Pronounce normalized words (``[a-z']+``) with espeak-ng, as CMUdict phones.

    Runs espeak-ng once per `_BATCH_WORDS` words (more only when a batch's output does not align). A word
    espeak-ng gives no phonemes is absent from the result. Raises `ToolError` when espeak-ng is missing or
    fails, or prints a phoneme the mapping lacks; `ValueError` for a word that is not normalized.
    """
    unique = list(dict.fromkeys(words))
    for word in unique:
        if not _ESPEAK_WORD.fullmatch(word):
            raise ValueError(f"espeak_pronunciations expects normalized words ([a-z']+), got {word!r}")
    if not unique:
        return {}
    binary = _espeak_binary()
    out: dict[str, Pron] = {}
    for start in range(0, len(unique), _BATCH_WORDS):
        for word, line in _espeak_lines(binary, unique[start : start + _BATCH_WORDS], voice).items():
            pron = ipa_to_cmu(word, line)
            if pron:
                out[word] = pron
    return out


# ----------------------------------------------------------------------------------------------- Lexicon
@dataclass(frozen=True)
class Lexicon:
    """Word -> pronunciations (tuples of CMUdict phones); `from_espeak`: the words espeak-ng pronounced."""

    prons: Mapping[str, tuple[Pron, ...]]
    from_espeak: frozenset[str] = frozenset()

    @property
    def num_words(self) -> int:
        """Number of words."""
        return len(self.prons)

    @property
    def num_prons(self) -> int:
        """Number of pronunciations over all words."""
        return sum(len(p) for p in self.prons.values())

    def missing(self, words: Iterable[str]) -> list[str]:
        """The words (unique, first-seen order) the lexicon has no pronunciation for."""
        return [w for w in dict.fromkeys(words) if not self.prons.get(w)]


def build_lexicon(words: Iterable[str], cmudict_path: Path, voice: str = "en-us") -> Lexicon:
    """Lexicon over `words`: all CMUdict pronunciations of a word, else espeak-ng's one.

    Raises `ToolError` if some word ends up without a pronunciation (espeak-ng returned nothing for it).
    """
    unique = sorted(set(words))
    cmudict = read_cmudict(cmudict_path)
    oov = [w for w in unique if w not in cmudict]
    espeak = espeak_pronunciations(oov, voice) if oov else {}
    lacking = [w for w in oov if w not in espeak]
    if lacking:
        shown = ", ".join(repr(w) for w in lacking[:20])
        raise ToolError(
            f"{len(lacking)} word(s) have no pronunciation in {cmudict_path} and espeak-ng ({voice}) gave "
            f"none: {shown}. Fix: add them to the CMUdict file or correct the text normalization."
        )
    prons = {w: tuple(cmudict[w]) if w in cmudict else (espeak[w],) for w in unique}
    return Lexicon(prons=prons, from_espeak=frozenset(espeak))


def write_lexicon(lexicon: Lexicon, path: Path) -> None:
    """Write ``word<TAB>PH1 PH2 ...<TAB>cmudict|espeak`` lines, words sorted (see the module docstring)."""
    lines = []
    for word in sorted(lexicon.prons):
        source = "espeak" if word in lexicon.from_espeak else "cmudict"
        lines.extend(f"{word}\t{' '.join(pron)}\t{source}\n" for pron in lexicon.prons[word])
    Path(path).write_text("".join(lines), encoding="utf-8")


# A lexicon.txt is written by the graph job (`graph_recipe`), whose cached graph is reused while it exists: the
# rebuild that replaces a damaged one needs --force
REBUILD_FIX = ("Fix: rebuild the graph that holds it with `specbench graph build JOB.toml --force` (JOB.toml: the "
               "graph job that wrote it, e.g. jobs/graph_slurp.toml).")


def _parse_lexicon_line(line: str, path: Path, lineno: int) -> tuple[str, Pron, str]:
    """One lexicon line to (word, phones, source); raises `DataError` naming file and line."""
    fields = line.rstrip("\n").split("\t")
    problem = None
    if len(fields) != 3 or not fields[0] or not fields[1]:
        problem = "expected 3 tab-separated fields: word, phones, cmudict|espeak"
    elif fields[2] not in ("cmudict", "espeak"):
        problem = f"source {fields[2]!r} is neither 'cmudict' nor 'espeak'"
    else:
        bad = [p for p in fields[1].split(" ") if p not in _PHONE_SET]
        problem = f"{bad[0]!r} is not a CMUdict phone" if bad else None
    if problem:
        raise DataError(f"{path}, line {lineno}: {problem}. {REBUILD_FIX}")
    return fields[0], tuple(fields[1].split(" ")), fields[2]


def read_lexicon(path: Path) -> Lexicon:
    """Read a file written by `write_lexicon`; raises `DataError` naming the file and line when malformed."""
    path = Path(path)
    prons: dict[str, list[Pron]] = {}
    sources: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"cannot read lexicon {path}: {err}. {REBUILD_FIX}") from err
    for lineno, line in enumerate(text.splitlines(), 1):
        word, pron, source = _parse_lexicon_line(line, path, lineno)
        if sources.setdefault(word, source) != source:
            raise DataError(f"{path}, line {lineno}: {word!r} is marked both cmudict and espeak. {REBUILD_FIX}")
        prons.setdefault(word, []).append(pron)
    from_espeak = frozenset(w for w, s in sources.items() if s == "espeak")
    return Lexicon(prons={w: tuple(p) for w, p in prons.items()}, from_espeak=from_espeak)
