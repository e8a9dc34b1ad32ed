"""`specbench decode` and the DecoderStage: every scores format, both backends, bad utterances reported
while the others decode, and the stage through Ray actors equal to the plain loop."""

from __future__ import annotations

import json
from pathlib import Path

import kaldiio
import numpy as np
import pyarrow as pa
import pyarrow.parquet  # noqa: F401 - pa.parquet
import pytest

from specbench.cli import main
from specbench.decoder.stage import DecoderStage
from specbench.errors import DataError
from specbench.experiments.graph_recipe import GraphArtifacts

pytestmark = pytest.mark.integration


def peaky_scores(rng: np.random.Generator, frames: int, columns: int = 40) -> np.ndarray:
    """CTC-like log-probabilities: mostly blank, a few sharp phone spikes."""
    logits = rng.normal(0, 1, (frames, columns)).astype(np.float32)
    logits[:, 0] += 4.0
    spikes = rng.choice(frames, size=max(1, frames // 4), replace=False)
    logits[spikes, rng.integers(1, columns, len(spikes))] += 9.0
    return (logits - np.log(np.exp(logits).sum(1, keepdims=True))).astype(np.float32)


@pytest.fixture(scope="module")
def utterances() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {f"utt{i}": peaky_scores(rng, int(n)) for i, n in enumerate(rng.integers(20, 60, 6))}


def test_cli_decodes_all_formats_and_reports_bad_utterances(tmp_path: Path, slurp_graph: GraphArtifacts,
                                                             utterances: dict[str, np.ndarray],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    bad = dict(utterances)
    bad["nan"] = np.full((10, 40), np.nan, dtype=np.float32)
    bad["narrow"] = utterances["utt0"][:, :10]
    np.savez(tmp_path / "scores.npz", **bad)
    with kaldiio.WriteHelper(f"ark,scp:{tmp_path / 's.ark'},{tmp_path / 's.scp'}") as writer:
        for key, mat in utterances.items():
            writer(key, mat)
    outputs = {}
    for name, backend in (("scores.npz", "cpu"), ("s.scp", "kaldi"), ("s.scp", "cpu"), ("scores.npz", "twin")):
        out = tmp_path / f"{name}.{backend}.jsonl"
        code = main(["decode", "--graph", str(slurp_graph.tlg), "--scores", str(tmp_path / name),
                     "--frame-shift-ms", "40", "--words", str(slurp_graph.words), "--backend", backend,
                     "--beam", "12", "--max-active", "3000", "--out", str(out)])
        assert code == 0
        summary = json.loads(capsys.readouterr().out)
        rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
        outputs[(name, backend)] = rows
        assert summary["utterances"] == len(rows)
    npz = outputs[("scores.npz", "cpu")]
    assert "NaN" in npz["nan"]["status"] or "nan" in npz["nan"]["status"].lower()
    assert "narrow" in npz and npz["narrow"]["status"] != "ok"
    twin = outputs[("scores.npz", "twin")]
    assert "frame 0, column 0" in twin["nan"]["status"] and twin["narrow"]["status"] != "ok"
    assert set(twin) == set(npz) == set(bad)
    for key in utterances:
        ours, kaldi = outputs[("s.scp", "cpu")][key], outputs[("s.scp", "kaldi")][key]
        assert twin[key] == npz[key]
        assert ours["status"] == kaldi["status"] == "ok"
        assert ours["words"] == kaldi["words"] and ours["words"] == npz[key]["words"]
        assert ours["graph_cost"] + ours["acoustic_cost"] == pytest.approx(
            kaldi["graph_cost"] + kaldi["acoustic_cost"], rel=1e-4)
    assert main(["decode", "--graph", str(slurp_graph.tlg), "--scores", str(tmp_path / "s.scp"),
                 "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "--frame-shift-ms" in capsys.readouterr().err


def test_decoder_stage_on_ray_equals_the_plain_loop(ray_cluster: object, slurp_graph: GraphArtifacts,
                                                    utterances: dict[str, np.ndarray]) -> None:
    from specbench.runtime import run_local, run_ray

    table = pa.table({"utt_id": list(utterances), "num_frames": [len(m) for m in utterances.values()],
                      "num_classes": [40] * len(utterances),
                      "loglikes": [m.reshape(-1) for m in utterances.values()]})
    stage = DecoderStage(slurp_graph.tlg, "cpu", beam=12.0, max_active=3000)
    local = run_local(stage, table, batch_size=2)
    on_ray = run_ray(stage, table, batch_size=2, mode="actors", num_actors=2)
    assert local.equals(on_ray)
    assert set(local.column("status").to_pylist()) == {"ok"}
    twin = DecoderStage(slurp_graph.tlg, "twin", beam=12.0, max_active=3000)
    lanes_on_ray = run_ray(twin, table, batch_size=3, mode="actors", num_actors=2)
    for name in ("id", "status", "word_ids", "graph_cost", "acoustic_cost", "word_end_frames"):
        assert lanes_on_ray.column(name).equals(local.column(name)), name


def test_cli_decodes_on_every_core_as_in_one_process(ray_cluster: object, tmp_path: Path,
                                                    slurp_graph: GraphArtifacts,
                                                    utterances: dict[str, np.ndarray],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`decode --workers 2` (two Ray actors, one mapped graph) writes the rows `--workers 1` writes, in
    order; the stage's decoder reads the graph through the shared memory map."""
    np.savez(tmp_path / "scores.npz", **utterances)
    outputs, summaries = {}, {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}.jsonl"
        code = main(["decode", "--graph", str(slurp_graph.tlg), "--scores", str(tmp_path / "scores.npz"),
                     "--frame-shift-ms", "40", "--beam", "12", "--max-active", "3000", "--lattice-beam", "4",
                     "--lattice-dir", str(tmp_path / "lat"), "--workers", str(workers), "--out", str(out)])
        assert code == 0
        summaries[workers] = json.loads(capsys.readouterr().out)
        outputs[workers] = out.read_text()
    assert outputs[1] == outputs[2]
    assert summaries[1]["workers"] == 1 and summaries[2]["workers"] == 2
    stage = DecoderStage(slurp_graph.tlg, "cpu")
    stage.share_graph()
    stage.setup()
    assert isinstance(stage._decoder.graph.emitting.dest, np.memmap)
    assert main(["decode", "--graph", str(slurp_graph.tlg), "--scores", str(tmp_path / "scores.npz"),
                 "--frame-shift-ms", "40", "--workers", "0", "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "--workers 0" in capsys.readouterr().err
    assert main(["decode", "--graph", str(slurp_graph.tlg), "--scores", str(tmp_path / "scores.npz"),
                 "--frame-shift-ms", "40", "--workers", "3", "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "--workers 3: the Ray cluster holds only 2 decoder(s) at once" in capsys.readouterr().err


def test_gpu_stage_asks_ray_for_a_gpu_fraction(ray_cluster: object, slurp_graph: GraphArtifacts,
                                               utterances: dict[str, np.ndarray]) -> None:
    from specbench.errors import SpecbenchError
    from specbench.runtime import run_ray

    stage = DecoderStage(slurp_graph.tlg, "gpu", gpu_fraction=0.25)
    assert stage.resources.num_gpus == 0.25 and DecoderStage(slurp_graph.tlg, "cpu").resources.num_gpus == 0
    table = pa.table({"utt_id": ["u"], "num_frames": [3], "num_classes": [40],
                      "loglikes": [np.zeros(120, np.float32)]})
    with pytest.raises(SpecbenchError, match="GPU"):
        run_ray(stage, table, batch_size=1, mode="actors", num_actors=1)  # this cluster has no GPU


def test_missing_graph_or_words_is_one_clear_error(tmp_path: Path, slurp_graph: GraphArtifacts,
                                                   utterances: dict[str, np.ndarray],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    np.savez(tmp_path / "s.npz", **utterances)
    for args in (["--graph", str(tmp_path / "nope.fst")], ["--graph", str(slurp_graph.tlg), "--words",
                                                            str(tmp_path / "nope.txt")]):
        code = main(["decode", *args, "--scores", str(tmp_path / "s.npz"), "--frame-shift-ms", "40",
                     "--out", str(tmp_path / "o.jsonl")])
        err = capsys.readouterr().err
        assert code == 2 and "nope" in err and "Traceback" not in err


@pytest.mark.parametrize(("option", "expected"), [
    (["--beam", "-5"], "--beam: beam must be a positive finite number"),
    (["--max-active", "0"], "--max-active: max_active must be an int"),
    (["--min-active", "-1"], "--min-active: min_active must be an int in [0, max_active=10000)"),
    (["--partial-every-ms", "inf"], "--partial-every-ms: partial_every_ms must be a positive finite number"),
    (["--backend", "kaldi", "--partial-every-ms", "120"], "--partial-every-ms: partial_every_ms must be left"),
    (["--lattice-beam", "-1"], "--lattice-beam: lattice_beam must be a number >= 0"),
    (["--frame-shift-ms", "-1"], "--frame-shift-ms -1.0: must be a positive number of milliseconds"),
    (["--out", "o.csv"], "--out o.csv: unknown output format '.csv'"),
])
def test_a_bad_option_names_the_flag_and_the_fix(tmp_path: Path, slurp_graph: GraphArtifacts,
                                                 utterances: dict[str, np.ndarray], option: list[str],
                                                 expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    np.savez(tmp_path / "s.npz", **utterances)
    defaults = {"--frame-shift-ms": "40", "--out": str(tmp_path / "o.jsonl")}
    defaults.pop(option[0], None)
    argv = ["decode", "--graph", str(slurp_graph.tlg), "--scores", str(tmp_path / "s.npz"), *option]
    assert main([*argv, *(x for kv in defaults.items() for x in kv)]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Fix:" in err and "Traceback" not in err
    assert not list(tmp_path.glob("o.*")), "nothing is written"


def test_a_malformed_row_fails_alone(slurp_graph: GraphArtifacts, utterances: dict[str, np.ndarray]) -> None:
    good = utterances["utt1"]
    table = pa.table({"utt_id": ["bad", "good"], "num_frames": [7, len(good)], "num_classes": [40, 40],
                      "loglikes": [good.reshape(-1)[:13], good.reshape(-1)]})
    out = DecoderStage(slurp_graph.tlg, "cpu", beam=12.0, max_active=3000)(table)
    status = out.column("status").to_pylist()
    assert status[0].startswith("malformed scores") and status[1] == "ok"


def test_cli_writes_lattices_and_partials(tmp_path: Path, slurp_graph: GraphArtifacts,
                                          utterances: dict[str, np.ndarray],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from specbench.decoder.lattice import read_lattice

    np.savez(tmp_path / "s.npz", **utterances)
    rows = {}
    for backend in ("cpu", "twin"):
        out = tmp_path / f"{backend}.parquet"
        code = main(["decode", "--graph", str(slurp_graph.tlg), "--scores", str(tmp_path / "s.npz"),
                     "--frame-shift-ms", "40", "--words", str(slurp_graph.words), "--backend", backend,
                     "--lattice-dir", str(tmp_path / f"lat-{backend}"), "--partial-every-ms", "120",
                     "--beam", "12", "--max-active", "3000", "--out", str(out)])
        assert code == 0
        summary = json.loads(capsys.readouterr().out)
        assert summary["lattice_density"] > 0
        rows[backend] = {r["id"]: r for r in pa.parquet.read_table(out).to_pylist()}
    for key, mat in utterances.items():
        cpu, twin = rows["cpu"][key], rows["twin"][key]
        assert cpu["status"] == "ok" and cpu["words"] == twin["words"] and cpu["partials"] == twin["partials"]
        assert [p["frame"] for p in cpu["partials"]] == list(range(2, len(mat), 3))
        assert all(p["time_ms"] == pytest.approx(40 * (p["frame"] + 1)) for p in cpu["partials"])
        assert all(len(p["words"]) == len(p["word_ids"]) for p in cpu["partials"])
        lattice = read_lattice(cpu["lattice_path"])
        assert lattice.num_states > 0  # the twin's lattice file is the CPU backend's, byte for byte
        assert Path(twin["lattice_path"]).read_bytes() == Path(cpu["lattice_path"]).read_bytes()
    for flag, value in (("--partial-every-ms", "120"), ("--lattice-dir", str(tmp_path / "lat-kaldi"))):
        assert main(["decode", "--graph", str(slurp_graph.tlg), "--scores", str(tmp_path / "s.npz"),
                     "--frame-shift-ms", "40", "--backend", "kaldi", flag, value,
                     "--out", str(tmp_path / "k.jsonl")]) == 2
        err = capsys.readouterr().err
        assert "1-best only" in err and f"error: {flag}: " in err


def test_decode_scores_lattices_against_references(tmp_path: Path, slurp_graph: GraphArtifacts,
                                                   utterances: dict[str, np.ndarray],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """With references (`--references`) the summary has the WER and the lattice oracle WER (the metric
    lattice_oracle_wer): never above the WER, and below it where a reference is a word sequence the
    lattice holds but the 1-best is not."""
    import kaldifst

    from specbench.decoder.lattice import read_lattice
    from specbench.experiments.decode import decode_file
    from specbench.metrics.wer import edit_distance
    from specbench.wfst.symbols import SymbolTable

    np.savez(tmp_path / "s.npz", **utterances)
    common = dict(frame_shift_ms=40.0, words=slurp_graph.words, beam=12.0, max_active=3000, workers=1)
    first = decode_file(slurp_graph.tlg, tmp_path / "s.npz", tmp_path / "first.jsonl",
                        lattice_dir=tmp_path / "lat", **common)
    assert "wer" not in first and "lattice_oracle_wer" not in first  # nothing to score against
    rows = {r["id"]: r for r in map(json.loads, (tmp_path / "first.jsonl").read_text().splitlines())}
    symbols = SymbolTable.read(slurp_graph.words).symbols
    refs, others = {}, 0
    for key in sorted(rows):
        best = rows[key]["words"]
        for path in kaldifst.lattice_to_nbest(read_lattice(rows[key]["lattice_path"]), n=50):
            ok, _, olabels, _ = kaldifst.get_linear_symbol_sequence(path)
            words = [symbols[w] for w in olabels if w]
            if ok and words != best:  # another word sequence of the lattice: the oracle's choice
                refs[key], others = words, others + 1
                break
        else:
            refs[key] = best + ["<not-a-word>"]  # one error the lattice cannot avoid either
    assert others >= 2, "the lattices of these scores hold other word sequences than the 1-best"
    text = tmp_path / "text"
    text.write_text("".join(f"{key} {' '.join(words)}\n" for key, words in refs.items()))
    assert main(["decode", "--graph", str(slurp_graph.tlg), "--scores", str(tmp_path / "s.npz"),
                 "--frame-shift-ms", "40", "--words", str(slurp_graph.words), "--beam", "12", "--max-active",
                 "3000", "--workers", "1", "--out", str(tmp_path / "o.jsonl"), "--lattice-dir",
                 str(tmp_path / "lat2"), "--references", str(text)]) == 0
    summary = json.loads(capsys.readouterr().out)
    tokens = sum(len(words) for words in refs.values())
    wer = sum(edit_distance(refs[k], r["words"]) for k, r in rows.items()) / tokens
    assert summary["reference_words"] == tokens and summary["wer"] == pytest.approx(wer)
    assert summary["lattice_oracle_wer"] == pytest.approx((len(refs) - others) / tokens)
    assert 0 <= summary["lattice_oracle_wer"] < summary["wer"]
    assert "lattice_oracle_wer" not in decode_file(slurp_graph.tlg, tmp_path / "s.npz", tmp_path / "n.jsonl",
                                                   references=text, **common)  # no lattices
    text.write_text(f"{sorted(refs)[0]} a\n")
    with pytest.raises(DataError, match=f"no reference for {len(refs) - 1} of the {len(refs)} utter.*Fix:"):
        decode_file(slurp_graph.tlg, tmp_path / "s.npz", tmp_path / "m.jsonl", references=text, **common)
    with pytest.raises(DataError, match="references .*give words too"):
        decode_file(slurp_graph.tlg, tmp_path / "s.npz", tmp_path / "m.jsonl", references=text,
                    **{**common, "words": None})


def test_gpu_backend_without_a_gpu_is_one_clear_error(tmp_path: Path, slurp_graph: GraphArtifacts,
                                                      utterances: dict[str, np.ndarray],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from specbench.decoder.gpu import gpu_available

    if gpu_available():
        pytest.skip("this machine has a GPU")
    np.savez(tmp_path / "s.npz", **utterances)
    code = main(["decode", "--graph", str(slurp_graph.tlg), "--scores", str(tmp_path / "s.npz"),
                 "--frame-shift-ms", "40", "--backend", "gpu", "--out", str(tmp_path / "g.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "--backend cpu" in err and "Traceback" not in err
    assert not (tmp_path / "g.jsonl").exists()
