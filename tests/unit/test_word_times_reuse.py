"""Word times of an existing manifest are reused only for the same utterance id, the same words and the same
audio: the same noise seed (which the id does not hold) and a WAV not synthesized again since."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.data.speech_corpus import MANIFEST_SCHEMA
from specbench.experiments.speech import _keep_word_times, _previous_word_times

pytestmark = pytest.mark.unit


def _row(utt_id: str, text: str, times: list | None, noise_seed: int = 1) -> dict:
    row = {name: None for name in MANIFEST_SCHEMA.names}
    row.update(utt_id=utt_id, text=text, normalized_text=text, voice="espeak:en-us", rate=1.0,
               snr_db=float("inf"), noise_seed=noise_seed, split="train", audio_path=f"train/{utt_id}.wav", duration_s=1.0,
               num_samples=16000, end_of_speech_s=0.9, word_times=times, status="ok")
    return row


def test_changed_sentence_behind_an_id_drops_its_old_word_times(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    old = [_row("u1", "play jazz", [{"word": "play", "start_s": 0.1, "end_s": 0.3},
                                    {"word": "jazz", "start_s": 0.4, "end_s": 0.7}]),
           _row("u2", "lights off", [{"word": "lights", "start_s": 0.1, "end_s": 0.4},
                                     {"word": "off", "start_s": 0.5, "end_s": 0.6}])]
    pq.write_table(pa.Table.from_pylist(old, schema=MANIFEST_SCHEMA), tmp_path / "manifest.parquet")
    new = [_row("u1", "play jazz", None), _row("u2", "turn on the lights", None)]
    assert set(_previous_word_times(tmp_path, new)) == {"u1"}
    kept = _keep_word_times(new, tmp_path)
    assert [t["word"] for t in kept[0]["word_times"]] == ["play", "jazz"]
    assert [t["end_s"] for t in kept[0]["word_times"]] == pytest.approx([0.3, 0.7])  # float32 in the manifest
    assert kept[1]["word_times"] is None


def _times(*words: str) -> list[dict]:
    return [{"word": w, "start_s": 0.1 * i, "end_s": 0.1 * i + 0.05} for i, w in enumerate(words)]


def test_other_noise_or_new_audio_behind_an_id_drops_its_old_word_times(tmp_path: Path) -> None:
    """A changed seed keeps an id and its sentence but gives it another noise seed (other audio); an engine
    upgrade synthesizes a WAV again under the same key. Either way the old word times are not the audio's."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    old = [_row(u, "play jazz", _times("play", "jazz")) for u in ("same", "noise", "resynthesized")]
    manifest = tmp_path / "manifest.parquet"
    pq.write_table(pa.Table.from_pylist(old, schema=MANIFEST_SCHEMA), manifest)
    written = manifest.stat().st_mtime_ns
    for utt, offset in (("same", -10**9), ("resynthesized", 10**9)):  # a WAV older, and one newer, than the manifest
        wav = tmp_path / "train" / f"{utt}.wav"
        wav.parent.mkdir(exist_ok=True)
        wav.write_bytes(b"RIFF")
        os.utime(wav, ns=(written + offset, written + offset))
    new = [_row("same", "play jazz", None), _row("noise", "play jazz", None, noise_seed=2),
           _row("resynthesized", "play jazz", None)]
    assert set(_previous_word_times(tmp_path, new)) == {"same"}
    assert [r["word_times"] is None for r in _keep_word_times(new, tmp_path)] == [False, True, True]


def test_a_damaged_manifest_or_alignment_record_is_written_again(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    """A truncated manifest gives no old word times (the speech job writes it again from its rows), and
    a truncated `alignment.json` counts as none (the alignment is done again); both are logged."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from specbench.data.speech_corpus import read_manifest
    from specbench.errors import DataError
    from specbench.experiments.speech import _stamp_key, _write_stamp

    manifest = tmp_path / "quick" / "manifest.parquet"
    manifest.parent.mkdir()
    rows = [_row("u1", "play jazz", _times("play", "jazz"))]
    pq.write_table(pa.Table.from_pylist(rows, schema=MANIFEST_SCHEMA), manifest)
    manifest.write_bytes(manifest.read_bytes()[:300])
    with pytest.raises(DataError, match=r"Fix: run the speech job named 'quick' again \(`specbench data"):
        read_manifest(manifest)
    assert _previous_word_times(manifest.parent, rows) == {}
    checkpoint, graph = tmp_path / "am.pt", tmp_path / "graph"
    graph.mkdir()
    for path in (checkpoint, graph / "lexicon.txt", graph / "tokens.txt"):
        path.write_text("x\n")
    _write_stamp(manifest.parent, checkpoint, graph)
    stamp = manifest.parent / "alignment.json"
    assert _stamp_key(stamp)  # and no temporary file is left beside it
    assert sorted(p.name for p in manifest.parent.iterdir()) == ["alignment.json", "manifest.parquet"]
    stamp.write_text(stamp.read_text()[:40])
    assert _stamp_key(stamp) is None
    err = capsys.readouterr().err
    assert f"{manifest}: the previous manifest cannot be read (" in err
    assert f"{stamp}: not a readable alignment record (" in err
