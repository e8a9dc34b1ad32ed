"""The pronunciation lexicon (`wfst.lexicon`) on small inputs checked by hand: espeak-ng output lines (as
espeak-ng 1.51 en-us prints them) for words whose CMUdict pronunciation is known map to exactly that
pronunciation, which pins the mapping choices the module docstring names (short i is IY, reduced ᵻ is IH, ɪɹ
is IH R); ignored marks leave no trace; a word espeak-ng gives no phonemes is left out; words beyond the first
batch are all pronounced; a word with no pronunciation counts as missing."""

from __future__ import annotations

import pytest

from specbench.wfst import lexicon as lex
from specbench.wfst.lexicon import Lexicon, espeak_pronunciations, ipa_to_cmu

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("ipa", "cmudict"),
    [
        ("h_ˈæ_p_i", "HH AE1 P IY0"),          # happy
        ("s_ˈɪ_ɾ_i_z", "S IH1 T IY0 Z"),       # cities
        ("w_ˈɔ_n_t_ᵻ_d", "W AO1 N T IH0 D"),   # wanted
        ("s_t_ˈɑːɹ_ɾ_ᵻ_d", "S T AA1 R T IH0 D"),  # started
        ("k_l_ˈɪɹ", "K L IH1 R"),              # clear
        ("b_ˈɪɹ", "B IH1 R"),                  # beer
    ],
)
def test_espeak_lines_map_to_cmudicts_pronunciation(ipa: str, cmudict: str) -> None:
    assert ipa_to_cmu("w", ipa) == tuple(p.rstrip("012") for p in cmudict.split())


@pytest.mark.parametrize(
    ("ipa", "phones"),
    [
        ("k_ˈæˑ_t", "K AE T"),                 # half-length
        ("t͡ʃ_ˈɪ_p", "CH IH P"),               # tie bar above
        ("t͜ʃ_ˈɪ_p", "CH IH P"),               # tie bar below
        ("k_ˈæ\u200c_t", "K AE T"),            # zero-width non-joiner
        ("ˌæ_t_.ˈæ_k", "AE T AE K"),           # secondary stress, syllable break
    ],
)
def test_ignored_marks_leave_no_trace(ipa: str, phones: str) -> None:
    assert ipa_to_cmu("w", ipa) == tuple(phones.split())


def test_a_word_espeak_gives_no_phonemes_is_left_out() -> None:
    """espeak-ng prints an empty line for a lone apostrophe (a normalized word): it gets no pronunciation."""
    assert espeak_pronunciations(["bee", "'"]) == {"bee": ("B", "IY")}


def test_every_batch_is_pronounced_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """With batches of 3 words, espeak-ng runs on each batch whole, in order, each word once, and the
    pronunciations are those of one run over all the words."""
    words = ["bee", "see", "tea", "day", "key", "may", "low", "see"]
    whole = espeak_pronunciations(words)
    calls: list[list[str]] = []
    run = lex._run_espeak

    def recording(binary: str, batch: list[str], voice: str) -> list[str] | None:
        calls.append(list(batch))
        return run(binary, batch, voice)

    monkeypatch.setattr(lex, "_run_espeak", recording)
    monkeypatch.setattr(lex, "_BATCH_WORDS", 3)
    assert espeak_pronunciations(words) == whole and len(whole) == 7
    assert calls == [["bee", "see", "tea"], ["day", "key", "may"], ["low"]]


def test_a_word_with_no_pronunciation_is_missing() -> None:
    lexicon = Lexicon(prons={"a": (("AH",),), "x": ()})
    assert lexicon.missing(["x", "a", "y"]) == ["x", "y"]
