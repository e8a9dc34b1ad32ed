"""The real-speech job end to end (`jobs/real_speech_quick.toml`): pocketsphinx's scores of recorded clips,
the small Sphinx HCLG, our CPU backend and the twin, pocketsphinx's own decoder, WER per set with intervals
in MLflow; and a graph job of the wrong recipe refused with the fix."""

from __future__ import annotations

import shutil
from pathlib import Path

import mlflow
import pytest

from specbench.cli import main
from specbench.data.recorded_speech import SPHINX_TESTDATA
from specbench.experiments.real_speech.audio import RealUtterance
from specbench.experiments.real_speech.score_cache import score_chunks
from specbench.paths import work_dir

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SETS = ("asterisk_tune", "asterisk_test", "librivox", "cards", "recordings")


def test_recorded_clips_are_decoded_by_every_system_and_reported_per_set(tmp_path: Path, ray_cluster: object) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["--tracking-uri", uri, "run", str(ROOT / "jobs" / "real_speech_quick.toml")]) == 0
    mlflow.set_tracking_uri(uri)
    run = mlflow.search_runs(experiment_names=["real_speech"], output_format="list")[0]
    metrics = run.data.metrics
    assert metrics["asr.real.utterances"] == 10  # two clips of each set of 3+ words (the Asterisk prompts per half)
    assert metrics["asr.real.flagged"] == 18  # 17 prompts without speech, one transcript without audio
    assert metrics["asr.real.cpu_twin_identical"] == 10  # the twin's 1-best equals the CPU backend's
    assert metrics["asr.real.decode_failed.cpu"] == metrics["asr.real.decode_failed.twin"] == 0
    for name, weight in (("lw", 6.5), ("fwdflatlw", 8.5), ("bestpathlw", 9.5)):  # 6.5: pocketsphinx's defaults
        assert metrics[f"asr.real.pocketsphinx_{name}"] == pytest.approx(weight)
    assert "asr.real.language_weight" not in metrics
    assert metrics["asr.real.wer"] == metrics["asr.real.wer.asterisk_test.cpu"]
    for group in SETS:
        for system in ("cpu", "twin", "pocketsphinx"):
            wer = metrics[f"asr.real.wer.{group}.{system}"]
            assert metrics[f"asr.real.wer_low.{group}.{system}"] <= wer <= metrics[f"asr.real.wer_high.{group}.{system}"]
        assert f"asr.real.vs_pocketsphinx.{group}.cpu" in metrics
    # recorded read speech, recognized: far from chance on the LibriVox sentences even with 3,000 words
    assert metrics["asr.real.wer.librivox.cpu"] < 0.7
    for group in SETS:  # out-of-vocabulary words, a floor under every system's WER
        assert 0.0 <= metrics[f"asr.real.oov_rate.{group}"] <= metrics[f"asr.real.wer.{group}.cpu"]
    assert metrics["asr.real.oov_rate.cards"] == 0.0 and metrics["asr.real.oov_rate.asterisk_test"] > 0.0
    assert metrics["asr.real.oov_rate"] == metrics["asr.real.oov_rate.asterisk_test"]
    for system in ("cpu", "twin", "pocketsphinx"):
        assert metrics[f"asr.real.frames_per_second.{system}"] > 0
    speed = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/real_speech.json")["speed"]
    assert speed["pocketsphinx"]["frames"] == speed["cpu"]["frames"]  # the same audio's frames
    rows = (work_dir() / "real_speech" / "decodes" / "real_speech_quick").glob("pocketsphinx-6.5_8.5_9.5-*")
    assert sum(len(path.read_text().splitlines()) for path in rows) == 10


def test_a_graph_job_of_the_ctc_recipe_is_refused_with_the_fix(tmp_path: Path, slurp_graph: object,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "real.toml"
    job.write_text(f'kind = "real_speech"\ngraph_job = "{ROOT / "jobs" / "graph_slurp.toml"}"\n')
    assert main(["--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}", "run", str(job)]) != 0
    err = capsys.readouterr().err
    assert "graph_job" in err and "sphinx_hclg" in err and "Fix" in err


def test_the_scale_then_the_beam_are_tuned_on_the_tune_half(tmp_path: Path, ray_cluster: object) -> None:
    """Our decoders alone (`[pocketsphinx] enabled = false`): the acoustic scale tuned at `beam`, then the beam
    from `beams` at that scale (lowest tune WER, ties to the narrower); nothing compared with pocketsphinx."""
    job = tmp_path / "real.toml"
    job.write_text(f'kind = "real_speech"\nname = "real_tuned"\ngraph_job = "{ROOT / "jobs" / "graph_sphinx_quick.toml"}"\n'
                   'max_per_set = 2\nbootstrap_samples = 50\n[search]\nbackends = ["cpu"]\nbeam = 13.0\n'
                   'beams = [9.0, 13.0]\nacoustic_scales = [0.08, 0.1]\n[pocketsphinx]\nenabled = false\n')
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["--tracking-uri", uri, "run", str(job)]) == 0
    mlflow.set_tracking_uri(uri)
    run = mlflow.search_runs(experiment_names=["real_speech"], output_format="list")[0]
    report = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/real_speech.json")
    tuning = report["tuning"]
    assert set(tuning["acoustic_scale"]) == {"0.08", "0.1"} and set(tuning["beam"]) == {"9", "13"}
    assert report["acoustic_scale"] == min((0.08, 0.1), key=lambda s: tuning["acoustic_scale"][f"{s:g}"])
    assert report["beam"] == min((9.0, 13.0), key=lambda b: (tuning["beam"][f"{b:g}"], b))
    assert run.data.metrics["asr.real.beam"] == report["beam"] and tuning["language_weight"] == {}
    assert not any("pocketsphinx" in key for key in run.data.metrics)
    assert report["decode_failed"] == {"cpu": {}} and run.data.metrics["asr.real.decode_failed.cpu"] == 0


def test_candidates_to_tune_without_tune_prompts_are_refused_with_the_fix(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Several acoustic scales but no Asterisk prompts: refused before the graph is built or anything decoded."""
    job = tmp_path / "real.toml"
    job.write_text(f'kind = "real_speech"\ngraph_job = "{ROOT / "jobs" / "graph_sphinx_quick.toml"}"\n'
                   'sets = ["cards"]\n[search]\nacoustic_scales = [0.08, 0.1]\n[pocketsphinx]\nenabled = false\n')
    assert main(["--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}", "run", str(job)]) != 0
    err = capsys.readouterr().err
    assert "sets = ['cards'] has no tune prompts" in err and "acoustic_scales = [0.08, 0.1]" in err and "Fix" in err


def test_scores_are_cached_per_utterance_whatever_the_chunks(tmp_path: Path, ray_cluster: object,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """pocketsphinx scores each utterance once: regrouped into other chunks nothing is scored again; a damaged
    file is scored again alone; an utterance that fails is reported, not cached, and tried again next time."""
    clips = []
    for name in ("001", "002", "003"):
        wav = tmp_path / f"{name}.wav"
        shutil.copy(SPHINX_TESTDATA / "cards" / f"{name}.wav", wav)
        clips.append(RealUtterance("cards", name, wav, "-", "-"))
    cache = tmp_path / "scores"
    first, failed = score_chunks([clips], cache)
    assert failed == {} and len(first[0]) == 3 and "scoring chunk 1/1 with pocketsphinx: 3 utterances\n" in capsys.readouterr().err
    stamps = {path: path.stat().st_mtime_ns for path in first[0]}
    again, failed = score_chunks([clips[2:], clips[:2]], cache)
    assert failed == {} and again == [first[0][2:], first[0][:2]]
    assert "scoring" not in capsys.readouterr().err
    assert {path: path.stat().st_mtime_ns for path in first[0]} == stamps  # read, not written again
    first[0][1].write_bytes(first[0][1].read_bytes()[:-20])  # damaged on disk: no Parquet footer
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF not a wave file")
    broken = RealUtterance("cards", "bad", bad, "-", "-")
    paths, failed = score_chunks([clips + [broken]], cache)
    err = capsys.readouterr().err
    assert "cached scores that cannot be read" in err and "2 of 4 utterances (2 cached)" in err
    assert paths == [first[0]] and set(failed) == {"cards/bad"}  # the failed one has no file
    assert first[0][0].stat().st_mtime_ns == stamps[first[0][0]]
    _, failed = score_chunks([[broken]], cache)
    assert set(failed) == {"cards/bad"} and "scoring chunk 1/1 with pocketsphinx: 1 utterance\n" in capsys.readouterr().err
