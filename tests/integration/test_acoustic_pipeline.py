"""The speech -> acoustic model -> decoding path end to end on the quick corpus: a short real training run
through the `train_am` job, evaluation through the `eval_am` job (Ray stages, Kaldi's FasterDecoder), and
forced alignment in the `speech` job."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from specbench.acoustic.checkpoint import load_checkpoint
from specbench.acoustic.features import fbank
from specbench.acoustic.inference import score_features
from specbench.cli import main
from specbench.data.scores import iter_matrices
from specbench.data.speech_corpus import read_manifest
from specbench.data.synthesis import read_wav
from specbench.paths import work_dir
from specbench.tracking.queries import get_run, recent_runs
from specbench.wfst.lexicon import PHONES

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "jobs"


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")


def test_train_then_evaluate_a_small_model(tmp_path: Path, store: None, slurp_graph: object) -> None:
    ckpt = tmp_path / "am_tiny.pt"
    train_job = tmp_path / "am_tiny.toml"
    train_job.write_text(f'''kind = "train_am"
name = "am_tiny"
speech_job = "{JOBS / 'speech_quick.toml'}"
graph_job = "{JOBS / 'graph_slurp.toml'}"
output = "{ckpt}"
devel_utterances = 8
[model]
hidden = 32
layers = 1
conv_channels = 4
[training]
max_minutes = 0.1
max_epochs = 2
warmup_steps = 2
speed_factors = [0.9, 1.0, 1.1]
''')
    assert main(["train", "am", str(train_job)]) == 0
    model = load_checkpoint(ckpt, PHONES)
    assert model.metadata["train_utterances"] == 8 and len(model.metadata["train_voices"]) >= 2
    assert ckpt.with_suffix(".json").is_file()
    eval_job = tmp_path / "eval_tiny.toml"
    eval_job.write_text(f'''kind = "eval_am"
name = "tiny"
checkpoint = "{ckpt}"
speech_job = "{JOBS / 'speech_quick.toml'}"
graph_job = "{JOBS / 'graph_slurp.toml'}"
devel_utterances = 4
test_utterances = 6
real_recordings = true
shard_size = 3
[decode]
acoustic_scales = [1.0]
beam = 8.0
max_active = 2000
[vtln]
enabled = true
low = 0.95
high = 1.05
step = 0.05
utterances = 2
[speaker_transform]
enabled = true
utterances = 2
epochs = 2
''')
    assert main(["run", str(eval_job)]) == 0
    run = recent_runs(experiment="acoustic", limit=1)[0]
    assert run.status == "FINISHED" and run.tags["asr_decoder"] == "kaldi"
    metrics = get_run(run.run_id).metrics
    for key in ("asr.wer", "asr.per_greedy", "asr.acoustic_scale", "asr.real_recordings_wer",
                "asr.wer_all_words_in_lm_text"):
        assert key in metrics
    assert {k for k in metrics if k.startswith("asr.wer.")} == {"asr.wer.espeak_en-us_f4", "asr.wer.flite_rms"}
    for voice in ("espeak_en-us_f4", "flite_rms"):  # a warp per voice, from 2 of its devel utterances
        assert metrics[f"asr.vtln_warp.{voice}"] in (0.95, 1.0, 1.05)
        assert metrics[f"asr.vtln_utterances.{voice}"] == 2.0
        assert f"asr.no_vtln.wer.{voice}" in metrics
    assert run.tags["vtln"] == "true" and run.tags["speaker_transform"] == "true"
    for voice in ("espeak_en-us_f4", "flite_rms"):  # a transform per voice where the barely trained model's
        # first pass finds a phone at all (the shipped model's test below checks the fit itself)
        fitted = metrics[f"asr.speaker_transform_utterances.{voice}"]
        assert fitted in (0.0, 1.0, 2.0)
        assert (work_dir() / "scores" / "tiny" / "speaker" / f"{voice}.pt").is_file() == (fitted > 0)
    for key in ("wer", "per_greedy", "acoustic_scale", "devel_wer"):
        assert f"asr.no_speaker_transform.{key}" in metrics  # VTLN alone
    for key in ("wer", "per_greedy", "acoustic_scale", "devel_wer", "wer_all_words_in_lm_text"):
        assert f"asr.no_vtln.{key}" in metrics  # the unadapted figures beside the adapted ones
    gain = metrics["asr.adaptation_gain"]  # unadapted WER less adapted, with its paired interval
    assert metrics["asr.adaptation_gain_low"] <= gain <= metrics["asr.adaptation_gain_high"]
    assert gain == pytest.approx(metrics["asr.no_vtln.wer"] - metrics["asr.wer"])
    scores = pq.read_table(work_dir() / "scores" / "tiny" / "test.parquet")
    assert scores.num_rows == 6 and set(scores.column("status").to_pylist()) == {"ok"}
    assert (work_dir() / "scores" / "tiny" / "test.scp").is_file()


@pytest.mark.skipif(not (ROOT / "models" / "am_slurp.pt").is_file(), reason="no trained model in models/")
def test_shipped_model_decodes_and_aligns_the_quick_corpus(store: None, slurp_graph: object,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "speech", str(JOBS / "speech_quick.toml")]) == 0
    manifest = read_manifest(work_dir() / "speech" / "quick" / "manifest.parquet").to_pylist()
    aligned = [r for r in manifest if r["word_times"]]
    assert len(aligned) == len(manifest)
    for r in aligned:
        times = r["word_times"]
        assert [t["word"] for t in times] == r["normalized_text"].split()
        assert all(0 <= t["start_s"] < t["end_s"] <= r["duration_s"] + 0.05 for t in times)
        assert all(a["end_s"] <= b["start_s"] + 1e-6 for a, b in zip(times, times[1:]))
    assert main(["run", str(JOBS / "am_eval_quick.toml")]) == 0
    out = capsys.readouterr().out
    wer = float(out.split("test WER ")[1].split()[0])
    assert wer <= 0.30, out  # measured 0.128 with models/am_slurp.pt, VTLN and the speaker transform fitted
    # on 4 utterances per voice (0.121 with VTLN alone, 0.128 with neither)
    assert "without VTLN: test WER" in out and "without speaker transform: test WER" in out
    metrics = get_run(recent_runs(experiment="acoustic", limit=1)[0].run_id).metrics
    written_table = pq.read_table(work_dir() / "scores" / "quick" / "test.parquet")
    # in the corpus's order, though each voice was scored with its own checkpoint
    assert written_table.column("utt_id").to_pylist() == [r["utt_id"] for r in manifest if r["split"] == "test"]
    scores = dict(iter_matrices(written_table))
    shipped = load_checkpoint(ROOT / "models" / "am_slurp.pt", PHONES)
    for voice in ("espeak:en-us+f4", "flite:rms"):
        key = voice.replace(":", "_").replace("+", "_")
        # fitted on the first-pass paths of all 4 quick devel utterances of the voice
        assert metrics[f"asr.speaker_transform_utterances.{key}"] == 4.0
        # and the test scores written are those of the voice's adapted checkpoint, not of the shipped one
        adapted = load_checkpoint(work_dir() / "scores" / "quick" / "speaker" / f"{key}.pt", PHONES)
        assert adapted.model.input_transform is not None
        row = next(r for r in manifest if r["split"] == "test" and r["voice"] == voice)
        feats = fbank(read_wav(work_dir() / "speech" / "quick" / row["audio_path"])[0])
        warp = metrics[f"asr.vtln_warp.{key}"]
        written = scores[row["utt_id"]]
        np.testing.assert_allclose(written, score_features(adapted, [feats], warp=warp)[0], atol=2e-4)
        assert not np.allclose(written, score_features(shipped, [feats], warp=warp)[0], atol=1e-3)
        loss = {when: metrics[f"asr.speaker_transform_loss_{when}.{key}"] for when in ("before", "after")}
        assert loss["after"] < loss["before"]
