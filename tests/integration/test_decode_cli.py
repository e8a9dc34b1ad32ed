"""`specbench decode` and the DecoderStage: every scores format, both backends, bad utterances reported
while the others decode, and the stage through Ray actors equal to the plain loop."""

from __future__ import annotations

import json
from pathlib import Path

import kaldiio
import numpy as np
import pyarrow as pa
import pytest

from specbench.cli import main
from specbench.decoder.stage import DecoderStage
from specbench.wfst.build import GraphArtifacts

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
    for name, backend in (("scores.npz", "cpu"), ("s.scp", "kaldi"), ("s.scp", "cpu")):
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
    for key in utterances:
        ours, kaldi = outputs[("s.scp", "cpu")][key], outputs[("s.scp", "kaldi")][key]
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


def test_a_malformed_row_fails_alone(slurp_graph: GraphArtifacts, utterances: dict[str, np.ndarray]) -> None:
    good = utterances["utt1"]
    table = pa.table({"utt_id": ["bad", "good"], "num_frames": [7, len(good)], "num_classes": [40, 40],
                      "loglikes": [good.reshape(-1)[:13], good.reshape(-1)]})
    out = DecoderStage(slurp_graph.tlg, "cpu", beam=12.0, max_active=3000)(table)
    status = out.column("status").to_pylist()
    assert status[0].startswith("malformed scores") and status[1] == "ok"
