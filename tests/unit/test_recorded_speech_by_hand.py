"""The pocketsphinx-testdata listing on a hand-made folder: blank transcript lines skipped, ids trimmed of
spaces inside their parentheses, a line without an id flagged with its line number, and a transcript line
whose WAV is absent kept as a row without audio and with the fix, and one without words left out (a WER over no
reference words would count only insertions)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specbench.data.recorded_speech import sphinx_testdata
from specbench.data.synthesis import write_wav
from specbench.stage import STATUS_OK

pytestmark = pytest.mark.unit


def test_sphinx_transcripts_on_a_small_folder(tmp_path: Path) -> None:
    for folder in ("librivox", "cards"):
        (tmp_path / folder).mkdir()
    write_wav(tmp_path / "librivox" / "u1.wav", np.zeros(160))
    write_wav(tmp_path / "cards" / "c1.wav", np.zeros(160))
    write_wav(tmp_path / "cards" / "c2.wav", np.zeros(160))
    (tmp_path / "librivox" / "transcription").write_text(
        "<s> Hello World </s> (u1 )\n\n   \nno id here\n<s> gone </s> (u2)\n", encoding="utf-8")
    (tmp_path / "cards" / "cards.transcription").write_text("<s> ten of clubs  </s> (c1)\n<s> </s> (c2)\n", encoding="utf-8")
    rows = sphinx_testdata(tmp_path)
    assert [(r.set, r.utt_id, r.text) for r in rows] == [
        ("librivox", "u1", "hello world"), ("librivox", "transcription:4", ""), ("librivox", "u2", "gone"),
        ("cards", "c1", "ten of clubs"), ("cards", "c2", "")]
    u1, bad, u2, c1, silent = rows
    assert u1.status == c1.status == STATUS_OK and u1.audio_path == tmp_path / "librivox" / "u1.wav"
    assert bad.audio_path is None and bad.status.endswith("line 4: not '<s> words </s> (id)'; left out")
    assert u2.audio_path is None
    assert "transcription, line 5: no audio file" in u2.status and "u2.wav" in u2.status
    assert "apt-get install" in u2.status
    assert silent.status.endswith("cards.transcription, line 2: the transcript of c2 has no words; left out")
