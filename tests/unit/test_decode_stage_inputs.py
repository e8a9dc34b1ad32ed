"""`specbench decode` and `DecoderStage` on inputs the reviewer found mishandled: the flag an option error
names, lattice file names of ids that differ only in odd characters, partial intervals of a lane batch that
mixes frame shifts, non-finite partial intervals and files that are not UTF-8."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from specbench.cli import main
from specbench.decoder.cpu import CpuDecoder
from specbench.decoder.lattice import read_lattice
from specbench.decoder.options import SearchOptions
from specbench.decoder.stage import DecoderStage, _safe_name
from specbench.decoder.twin import TwinDecoder
from specbench.errors import DataError
from specbench.experiments.decode import decode_file, read_references
from specbench.wfst.graph import from_arrays
from specbench.wfst.symbols import SymbolTable


def _word_then_loop():
    """State 0 --1:7--> state 1 (final) with a 1:0 self-loop: every utterance decodes to word 7."""
    return from_arrays(0, np.array([0.0, 0.0], np.float32), src=np.array([0, 1]), dest=np.array([1, 1]),
                       ilabel=np.array([1, 1]), olabel=np.array([7, 0]), weight=np.array([0.0, 0.0]))


@pytest.fixture
def graph_file(tmp_path: Path) -> Path:
    """A path that exists: decode_file refuses the options before it reads the graph."""
    path = tmp_path / "g.fst"
    path.write_bytes(b"not read")
    return path


# ---------------------------------------------------------------------------------------------- 1. flags


@pytest.mark.parametrize(("options", "flag", "says"), [
    ({"min_active": -1}, "--min-active", "min_active must be an int in [0, max_active=10000)"),
    ({"max_active": 0}, "--max-active", "max_active must be an int"),
    ({"lattice_beam": -1.0}, "--lattice-beam", "lattice_beam must be a number >= 0"),
    ({"beam": -5.0}, "--beam", "beam must be a positive finite number"),
    ({"backend": "kaldi", "partial_every_ms": 120.0}, "--partial-every-ms", "1-best only"),
    ({"backend": "kaldi", "lattice_dir": Path("lat")}, "--lattice-dir", "1-best only"),
    ({"backend": "kaldi", "lattice_beam": 8.0}, "--lattice-beam", "1-best only"),
    ({"partial_every_ms": float("inf")}, "--partial-every-ms", "positive finite number of milliseconds"),
])
def test_an_option_error_names_its_own_flag(tmp_path: Path, graph_file: Path, options: dict, flag: str,
                                            says: str) -> None:
    with pytest.raises(DataError) as err:
        decode_file(graph_file, tmp_path / "s.npz", tmp_path / "o.jsonl", **options)
    text = str(err.value)
    assert text.startswith(f"{flag}: ") and says in text and f"Fix: change {flag}" in text
    others = {"--min-active", "--max-active", "--lattice-beam", "--beam", "--partial-every-ms", "--lattice-dir"}
    assert not any(f"{other}:" in text or f"{other} " in text for other in others - {flag})


@pytest.mark.parametrize(("argv", "flag"), [
    (["--min-active", "-1"], "--min-active"),
    (["--backend", "kaldi", "--partial-every-ms", "120"], "--partial-every-ms"),
    (["--backend", "kaldi", "--lattice-dir", "LAT"], "--lattice-dir"),
])
def test_the_cli_reports_the_flag_in_one_line(tmp_path: Path, graph_file: Path, argv: list[str], flag: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(tmp_path / a) if a == "LAT" else a for a in argv]
    code = main(["decode", "--graph", str(graph_file), "--scores", str(tmp_path / "s.npz"), "--frame-shift-ms",
                 "40", "--out", str(tmp_path / "o.jsonl"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"error: {flag}: " in err and "Fix:" in err
    assert not (tmp_path / "o.jsonl").exists()


# ---------------------------------------------------------------------------------------------- 2. lattice files


def test_ids_that_differ_in_odd_characters_get_their_own_lattice_files(tmp_path: Path) -> None:
    assert _safe_name("utt-1_a.b") == "utt-1_a.b"  # an id that is a file name keeps it, as before
    ids = ("spk/a b", "spk_a_b", "spk:a b", "spk a/b", "")
    names = [_safe_name(u) for u in ids]
    assert len(set(names)) == len(ids) and names[1] == "spk_a_b"
    assert names[0].startswith("spk_a_b-") and len(names[0]) == len("spk_a_b-") + 8
    stage = DecoderStage(tmp_path / "unused.fst", "cpu_numpy", lattice_dir=tmp_path / "lat")
    stage._decoder = CpuDecoder(_word_then_loop(), SearchOptions(lattice_beam=8.0))
    frames = {"spk/a b": 3, "spk_a_b": 9, "spk:a b": 5}
    rows = stage.decode_many([(u, np.zeros((n, 1), np.float32), 40.0) for u, n in frames.items()])
    paths = [r["lattice_path"] for r in rows]
    assert all(r["status"] == "ok" for r in rows) and len(set(paths)) == 3
    assert sorted(p.name for p in (tmp_path / "lat").iterdir()) == sorted(Path(p).name for p in paths)
    for row, n in zip(rows, frames.values(), strict=True):
        lattice = read_lattice(row["lattice_path"])  # each file is its own utterance's lattice: n frames
        assert row["lattice_arcs"] == n and lattice.num_states == n + 1


# ---------------------------------------------------------------------------------------------- 3. frame shifts


def test_a_lane_batch_gives_each_row_partials_at_its_own_frame_shift(tmp_path: Path) -> None:
    items = [("a", np.zeros((8, 1), np.float32), 40.0), ("b", np.zeros((8, 1), np.float32), 10.0),
             ("c", np.zeros((6, 1), np.float32), 40.0), ("d", np.zeros((8, 1), np.float32), None)]
    rows = {}
    for backend, decoder in (("twin", TwinDecoder(_word_then_loop(), lattice_workers=1)),
                             ("cpu_numpy", CpuDecoder(_word_then_loop()))):
        stage = DecoderStage(tmp_path / "unused.fst", backend, partial_every_ms=40.0)
        stage._decoder = decoder
        rows[backend] = stage.decode_many(items)
    twin, cpu = rows["twin"], rows["cpu_numpy"]
    assert [r["id"] for r in twin] == ["a", "b", "c", "d"]
    assert [p["frame"] for p in twin[0]["partials"]] == list(range(8))  # 40 ms at 40 ms: every frame
    assert [p["frame"] for p in twin[1]["partials"]] == [3, 7]  # 40 ms at 10 ms: every fourth frame
    assert [p["time_ms"] for p in twin[1]["partials"]] == [40.0, 80.0]
    assert [p["frame"] for p in twin[2]["partials"]] == list(range(6))
    assert twin[3]["status"].startswith("partials need the frame shift")  # fails alone
    assert all(r["status"] == "ok" for r in twin[:3])
    assert twin == cpu  # the same rows as the one-at-a-time backend


def test_a_lane_batch_of_one_frame_shift_is_one_batch(tmp_path: Path) -> None:
    calls = []

    class Recording(TwinDecoder):
        def decode_batch(self, items, partial_every=None):  # noqa: ANN001, ANN202
            calls.append((len(items), partial_every))
            return super().decode_batch(items, partial_every)

    stage = DecoderStage(tmp_path / "unused.fst", "twin", partial_every_ms=80.0, frame_shift_ms=40.0)
    stage._decoder = Recording(_word_then_loop(), lattice_workers=1)
    rows = stage.decode_many([(u, np.zeros((6, 1), np.float32), None) for u in "abc"])
    assert calls == [(3, 2)] and [[p["frame"] for p in r["partials"]] for r in rows] == [[1, 3, 5]] * 3


# ---------------------------------------------------------------------------------------------- 4. bad values


@pytest.mark.parametrize("every", [float("inf"), float("nan"), 0.0, -40.0])
def test_a_partial_interval_must_be_positive_and_finite(tmp_path: Path, every: float) -> None:
    with pytest.raises(ValueError, match=r"^partial_every_ms must be a positive finite number"):
        DecoderStage(tmp_path / "unused.fst", "cpu_numpy", partial_every_ms=every)


def test_a_huge_partial_interval_gives_no_partials_and_no_overflow(tmp_path: Path) -> None:
    stage = DecoderStage(tmp_path / "unused.fst", "cpu_numpy", partial_every_ms=1e300)
    stage._decoder = CpuDecoder(_word_then_loop())
    row = stage.decode_one("u", np.zeros((5, 1), np.float32), 1e-10)
    assert row["status"] == "ok" and row["partials"] == [] and row["word_ids"] == [7]


def test_references_that_are_not_utf8_name_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "text"
    path.write_bytes("u1 cafe\nu2 caf\xe9\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"references .*text, line 2: not UTF-8 text.*Fix: save it as UTF-8"):
        read_references(path)
    path.write_bytes("u1 caf\xe9\n".encode())
    assert read_references(path) == {"u1": ["caf\xe9"]}
    with pytest.raises(DataError, match=r"references .*: cannot be read \(Is a directory\)\. Fix: give a file"):
        read_references(tmp_path)


def test_a_symbol_table_that_is_not_utf8_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "words.txt"
    path.write_bytes("<eps> 0\ncaf\xe9 1\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"words\.txt, line 2: not UTF-8 text.*Fix: save it as UTF-8"):
        SymbolTable.read(path)
    SymbolTable(("<eps>", "caf\xe9")).write(path)
    assert SymbolTable.read(path).symbols == ("<eps>", "caf\xe9")


def test_decode_reports_non_utf8_files_in_one_line(tmp_path: Path, graph_file: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    words = tmp_path / "words.txt"
    words.write_bytes("<eps> 0\ncaf\xe9 1\n".encode("latin-1"))
    code = main(["decode", "--graph", str(graph_file), "--scores", str(tmp_path / "s.npz"), "--frame-shift-ms",
                 "40", "--words", str(words), "--out", str(tmp_path / "o.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "line 2: not UTF-8" in err and "Traceback" not in err


# ------------------------------------------------------------------------------------- 5. before decoding


@pytest.fixture
def decodable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """decode_file's arguments for a real graph that outputs word 7 and two utterances a, b."""
    from specbench.wfst.fst_binary import write_vector_fst

    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    write_vector_fst(tmp_path / "g.fst", _word_then_loop())
    np.savez(tmp_path / "s.npz", a=np.zeros((2, 1), np.float32), b=np.zeros((3, 1), np.float32))
    return dict(graph=tmp_path / "g.fst", scores=tmp_path / "s.npz", out=tmp_path / "o.jsonl", workers=1,
                frame_shift_ms=40.0, backend="cpu_numpy")


def test_a_word_list_that_cannot_spell_the_graphs_outputs_is_refused(tmp_path: Path, decodable: dict) -> None:
    words = tmp_path / "words.txt"
    for size in (0, 3, 7):
        SymbolTable(tuple(f"w{i}" for i in range(size))).write(words)
        graph = decodable["graph"]
        with pytest.raises(DataError, match=rf"--words {words}: it lists {size} symbols, but the graph "
                                            rf"{graph} outputs word ids up to 7 .*Fix: give the words.txt"):
            decode_file(words=words, **decodable)
        assert not decodable["out"].exists()
    SymbolTable(tuple(f"w{i}" for i in range(8))).write(words)
    assert decode_file(words=words, **decodable)["failed"] == 0
    assert '"words": ["w7"]' in decodable["out"].read_text()


def test_references_missing_an_utterance_or_a_lattice_beam_alone_leave_no_output(tmp_path: Path,
                                                                                 decodable: dict) -> None:
    words, text = tmp_path / "words.txt", tmp_path / "text"
    SymbolTable(tuple(f"w{i}" for i in range(8))).write(words)
    text.write_text("a w7\n")
    with pytest.raises(DataError, match=r"no reference for 1 of the 2 utterance.s. of the scores, e.g. 'b'"):
        decode_file(words=words, references=text, **decodable)
    with pytest.raises(DataError, match=r"--lattice-beam 5: .*Fix: add --lattice-dir DIR"):
        decode_file(lattice_beam=5.0, **decodable)
    assert not decodable["out"].exists()
    text.write_text("a w7\nb w1\n")
    assert decode_file(words=words, references=text, **decodable)["wer"] == 0.5


def test_unscored_rows_count_as_failed_a_repeated_id_is_refused_and_no_reference_words_is_inf(
        tmp_path: Path, decodable: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    words, text, scores = tmp_path / "words.txt", tmp_path / "text", tmp_path / "s.parquet"
    SymbolTable(tuple(f"w{i}" for i in range(8))).write(words)
    text.write_text("a w7\nb w7 w7\n")
    rows = {"utt_id": ["a", "b"], "num_frames": [2, None], "num_classes": [1, None], "loglikes": [[0.0, 0.0], None],
            "status": ["ok", "failed: unreadable WAV"]}
    pq.write_table(pa.table(rows), scores)
    summary = decode_file(**{**decodable, "scores": scores}, words=words, references=text,
                          lattice_dir=tmp_path / "lat")
    assert summary["failures"] == {"not scored: failed: unreadable WAV": 1} and summary["wer"] == 2 / 3
    assert summary["lattice_oracle_wer"] == 2 / 3 and '"lattice_arcs": null' in decodable["out"].read_text()
    for bad in (tmp_path / "missing.parquet", text):  # named by the scores reader, not a pyarrow traceback
        with pytest.raises(DataError, match="scores"):
            decode_file(**{**decodable, "scores": bad if bad.suffix else bad.rename(tmp_path / "junk.parquet")})
    pq.write_table(pa.table({**rows, "frame_shift_ms": [40.0, 40.0]}), scores)
    with pytest.raises(DataError, match=r"--frame-shift-ms 10: .*s.parquet records its frames 40 ms apart\. Fix"):
        decode_file(**{**decodable, "scores": scores, "frame_shift_ms": 10.0})  # was ignored without a word
    SymbolTable(("<eps>", "<blk>", "x", "#0")).write(tmp_path / "tokens.txt")  # a graph of 2 tokens
    with pytest.raises(DataError, match=r"s.parquet: scores of 1 columns, but .*tokens.txt lists 2 tokens"):
        decode_file(**{**decodable, "scores": scores})  # another model's scores decoded to nonsense before
    (tmp_path / "tokens.txt").unlink()
    pq.write_table(pa.table({**rows, "utt_id": ["a", "a"]}), scores)
    with pytest.raises(DataError, match=r"s.parquet: utterance 'a' appears 2 times .* Fix: give each utterance"):
        decode_file(**{**decodable, "scores": scores})
    (tmp_path / "file").write_text("")
    with pytest.raises(DataError, match=r"--lattice-dir .*file/lat: cannot be made \(Not a directory\)\. Fix"):
        decode_file(**decodable, lattice_dir=tmp_path / "file" / "lat")
    text.write_text("a\nb\n")  # nothing to say, and the decoder says w7: no perfect score
    assert decode_file(words=words, references=text, **decodable)["wer"] == math.inf


def test_folders_and_an_out_that_cannot_be_written_or_is_an_input_are_refused(tmp_path: Path,
                                                                               decodable: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    for key, inside in (("graph", "TLG.fst or HCLG.fst"), ("words", "words.txt")):
        with pytest.raises(DataError, match=rf"--{key} {tmp_path}: a folder, not a file\. Fix: give the file in "
                                            rf"it \({inside}\)"):
            decode_file(**{**decodable, key: tmp_path})
    text, words = tmp_path / "text", tmp_path / "words.txt"
    SymbolTable(tuple(f"w{i}" for i in range(8))).write(words)
    text.write_text("a w7\nb w7\n")
    for key, says in (("scores", rf"scores file {tmp_path} is a folder, not a file\. Fix: give --scores"),
                      ("references", rf"--references {tmp_path}: a folder, not a file\. Fix: give")):
        with pytest.raises(DataError, match=says):
            decode_file(**{**decodable, "words": words, "references": text, key: tmp_path})
    (tmp_path / "d.jsonl").mkdir()
    for out, says in ((tmp_path / "d.jsonl", "is a folder"), (text / "o.jsonl", r"cannot be written \(")):
        with pytest.raises(DataError, match=rf"decode: option --out = {out} {says}.* Fix: name a \.jsonl or"):
            decode_file(**{**decodable, "out": out})
        assert not out.parent.is_dir() or not list(out.parent.glob(f".{out.name}.*.tmp"))  # no temporary file left
    scores, refs = tmp_path / "s.parquet", text.rename(tmp_path / "text.jsonl")
    pq.write_table(pa.table({"utt_id": ["a"], "num_frames": [2], "num_classes": [1], "loglikes": [[0.0, 0]]}),
                   scores)
    for key, given in (("scores", scores), ("references", refs)):
        before = given.read_bytes()
        with pytest.raises(DataError, match=rf"--out {given}: the same file as --{key} {given}.* Fix: name"):
            decode_file(**{**decodable, "scores": scores, "words": words, "references": refs, "out": given})
        assert given.read_bytes() == before
