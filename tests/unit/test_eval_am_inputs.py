"""eval_am's edges: a graph whose lexicon lacks a test word is refused before anything is scored (the greedy
PER spells every test reference), and a real recording the decoder found no path for counts as all
deletions instead of ending the run with a KeyError after every figure was computed."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.data.real_speech import Recording
from specbench.errors import DataError
from specbench.experiments.eval_am import check_pronounced, recordings_metrics
from specbench.wfst.lexicon import Lexicon


def test_a_test_word_without_pronunciation_is_refused_with_the_fix() -> None:
    rows = [{"normalized_text": "wake me up"}, {"normalized_text": "play zzyzx now"}]
    lexicon = Lexicon({**{w: (("W",),) for w in ("wake", "me", "up", "play")}, "now": ()})  # "now": none either
    with pytest.raises(DataError, match=r"job.toml: .*lexicon.txt has no pronunciation of 2 test word\(s\) "
                                        r"\(zzyzx, now\).*Fix: .*extra_vocabulary"):
        check_pronounced(rows, lexicon, Path("graphs/g/lexicon.txt"), Path("job.toml"))
    check_pronounced(rows[:1], lexicon, Path("graphs/g/lexicon.txt"), Path("job.toml"))  # all spelled: passes


def test_a_recording_without_a_decode_counts_as_all_deletions() -> None:
    recordings = [Recording("a", Path("a.wav"), "turn the lights on"), Recording("b", Path("b.wav"), "good night")]
    hyps = {"a": ["turn", "the", "light", "on"]}  # b: no path
    m = recordings_metrics(recordings, hyps, {"turn", "the", "lights", "on", "good"})
    assert m["asr.real_recordings_wer"] == pytest.approx((1 + 2) / 6)
    assert m["asr.real_recordings_decode_failed"] == 1.0 and m["asr.real_recordings"] == 2.0
    assert m["asr.real_recordings_oov_rate"] == pytest.approx(1 / 6)
