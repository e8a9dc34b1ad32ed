"""The predictive-ASR transcript cache (`experiments/predictive_asr/partials.py`): read once per process
while the file is unchanged, read anew after another writer changed it, and the same rows either way."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq

from specbench.experiments.predictive_asr import partials


def _row(utt: str, end_ms: float) -> dict:
    return {"utt_id": utt, "status": "ok", "voice": "flite:rms", "rate": 1.1, "snr_db": 20.123456789,
            "pitch_cents": 3.3, "audio_sha256": "x", "ref_words": ["a"], "final_words": ["a"],
            "partials": [{"time_ms": 120.0, "words": ["a"]}], "end_of_speech_ms": end_ms,
            "end_source": "alignment", "duration_ms": 900.0}


def test_rows_are_kept_in_memory_until_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "transcripts.parquet"
    partials._write_cache([_row("u1", 512.345678901)], path)
    kept = partials._read_cache(path)
    # the kept rows are what reading the file gives (float32 columns rounded), not the rows as written
    assert kept == {r["utt_id"]: r for r in pq.read_table(path).to_pylist()}
    kept["u2"] = _row("u2", 1.0)  # a caller's copy: changing it leaves the kept rows alone
    assert set(partials._read_cache(path)) == {"u1"}
    # another process rewrites the file: the new stamp makes this process read it again
    other = pq.read_table(path).to_pylist() + [_row("u3", 7.0)]
    partials._write_cache(other, tmp_path / "other.parquet")
    os.replace(tmp_path / "other.parquet", path)
    os.utime(path, ns=(1, 1))
    assert set(partials._read_cache(path)) == {"u1", "u3"}
    assert partials._read_cache(tmp_path / "missing.parquet") == {}


def test_a_damaged_cache_names_the_file_and_the_fix(tmp_path: Path) -> None:
    """A truncated or overwritten transcripts.parquet is a DataError naming it and the fix, not a traceback."""
    import pytest

    from specbench.errors import DataError

    path = tmp_path / "asr-0123" / "transcripts.parquet"
    partials._write_cache([_row("u1", 512.0), _row("u2", 7.0)], path)
    whole = path.read_bytes()
    for damaged in (whole[: len(whole) // 2], b"not parquet at all", b""):
        path.write_bytes(damaged)
        os.utime(path, ns=(len(damaged) + 1, len(damaged) + 1))  # a new stamp: read anew, not the kept rows
        with pytest.raises(DataError, match=rf"transcript cache {path} cannot be read .* Fix: delete it"):
            partials._read_cache(path)
    import pyarrow as pa

    pq.write_table(pa.table({"x": [1, 2]}), path)  # a Parquet file, but not a transcript table
    with pytest.raises(DataError, match=r"cannot be read \(no field 'utt_id'\)\. Fix: delete it") as caught:
        partials._read_cache(path)
    assert "Error" not in str(caught.value)  # the reader's words, no exception class name


def test_a_cache_written_before_partial_posteriors_reads_with_null_posteriors(tmp_path: Path) -> None:
    """Transcripts cached before partials carried posteriors (no `posteriors` field) stay valid: read back,
    written again and read as a transcripts table, their partials' posteriors are null (undefined)."""
    import pyarrow as pa

    old_partial = pa.struct([("time_ms", pa.float32()), ("words", pa.list_(pa.string()))])
    old_schema = pa.schema([f if f.name != "partials" else pa.field("partials", pa.list_(old_partial))
                            for f in partials.TRANSCRIPT_SCHEMA])
    path = tmp_path / "transcripts.parquet"
    pq.write_table(pa.Table.from_pylist([_row("u1", 500.0)], schema=old_schema), path)
    rows = partials._read_cache(path)
    table = pa.Table.from_pylist(list(rows.values()), schema=partials.TRANSCRIPT_SCHEMA)
    assert table.column("partials").to_pylist() == [[{"time_ms": 120.0, "words": ["a"], "posteriors": None}]]
    partials._write_cache(list(rows.values()) + [{**_row("u2", 9.0), "partials": [
        {"time_ms": 120.0, "words": ["a"], "posteriors": [0.75]}]}], path)
    again = partials._read_cache(path)
    assert again["u1"]["partials"][0]["posteriors"] is None and again["u2"]["partials"][0]["posteriors"] == [0.75]


def test_partial_posteriors_have_a_cache_of_their_own(tmp_path: Path) -> None:
    """The cache key of transcripts without posteriors is exactly these settings and the code and audio
    versions that make transcripts (a change of the settings it reads throws away every cached transcript, so
    it must be deliberate); with posteriors it differs, and it follows the lattice beam and the posterior
    scale."""
    import dataclasses
    import hashlib
    import json

    from specbench.config import AsrSection
    from specbench.experiments.graph_recipe import GraphArtifacts
    from specbench.experiments.predictive_asr.code_key import code_and_audio_key

    checkpoint = tmp_path / "am.pt"
    checkpoint.write_bytes(b"model")
    (tmp_path / "graph-abc").mkdir()
    (tmp_path / "graph-abc" / "TLG.fst").write_bytes(b"arcs")
    graph = GraphArtifacts(directory=tmp_path / "graph-abc", stats=None, reused=True)  # the key reads its files
    asr = AsrSection()
    # the graph by its files' contents (`code_digest.files_digest`): sha256 over "TLG.fst", NUL, sha256(b"arcs")
    assert graph.content_digest() == "55f16668aac0a9601da83e978f6aeb9f50522159c67f6e82fb0a526d7b9cba51"
    pinned = {"mode": asr.mode, "am": hashlib.sha256(b"model").hexdigest(), "graph": graph.content_digest(),
              "partial_every_ms": asr.partial_every_ms, "beam": asr.beam, "max_active": asr.max_active,
              "acoustic_scale": asr.acoustic_scale, "version": 3,
              **code_and_audio_key(asr.voices, asr.backend)}
    digest = hashlib.sha256(json.dumps(pinned, sort_keys=True).encode()).hexdigest()[:16]
    assert partials.cache_dir(asr, checkpoint, graph).name == f"asr-{digest}"
    assert set(code_and_audio_key(asr.voices, asr.backend)) == {"code", "audio", "engines"}
    keys = {partials.cache_dir(dataclasses.replace(asr, **change), checkpoint, graph).name
            for change in ({}, {"partial_posteriors": True},
                           {"partial_posteriors": True, "lattice_beam": 6.0},
                           {"partial_posteriors": True, "posterior_scale": 1.0})}
    assert len(keys) == 4
