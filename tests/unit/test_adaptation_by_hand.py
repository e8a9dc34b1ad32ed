"""Request speaker adaptation by hand: figures per voice keyed with ':' and '+' replaced; the cache folder
follows the model, the eval job's VTLN, transform and search settings, its speech corpus (a job named
relative to it) and the first-pass scale, not the voices' order; a cached adaptation is read, not estimated
again; no adaptation job, no adaptation."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from specbench.config import AsrSection, EvalAmConfig, SpeakerTransformSection, VtlnSection
from specbench.errors import DataError
from specbench.experiments.graph_recipe import GraphArtifacts
from specbench.experiments.predictive_asr import adaptation as ad
from specbench.experiments.predictive_asr import checks
from specbench.experiments.predictive_asr.adaptation import VoiceAdaptation, adapt_voices, adaptation_dir

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
SPEECH = (ROOT / "jobs" / "speech_quick.toml").read_text()
EVAL = (f'kind = "eval_am"\nspeech_job = "speech.toml"\ngraph_job = "{ROOT / "jobs" / "graph_slurp.toml"}"\n[decode]\n'
        "beam = 15.0\n[vtln]\nenabled = true\nutterances = 3\n[speaker_transform]\nenabled = true\nepochs = 1\n")


def test_metrics_name_each_voice_with_its_slug() -> None:
    details = {"flite:rms": {"vtln_warp": 1.08, "vtln_utterances": 3}, "espeak:en-us+f4": {"vtln_warp": 0.96}}
    assert VoiceAdaptation("k", {}, {}, details).metrics("p.") == {
        "p.vtln_warp.flite_rms": 1.08, "p.vtln_utterances.flite_rms": 3.0, "p.vtln_warp.espeak_en-us_f4": 0.96}


def _setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, speech: str = SPEECH, evaluation: str = EVAL):
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    (tmp_path / "jobs").mkdir(exist_ok=True)
    (tmp_path / "jobs" / "speech.toml").write_text(speech)
    (tmp_path / "jobs" / "eval.toml").write_text(evaluation)
    (tmp_path / "graph").mkdir(exist_ok=True)
    (tmp_path / "graph" / "TLG.fst").write_bytes(b"arcs")
    (tmp_path / "am.pt").write_bytes(b"model")
    graph = GraphArtifacts(directory=tmp_path / "graph", stats=None, reused=True)
    return AsrSection(adaptation_job=Path("eval.toml")), tmp_path / "jobs" / "pa.toml", tmp_path / "am.pt", graph


def test_the_cache_folder_follows_what_the_adaptation_depends_on(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def key(asr_change: dict | None = None, **setup) -> str:
        asr, job, checkpoint, graph = _setup(tmp_path, monkeypatch, **setup)
        return adaptation_dir(dataclasses.replace(asr, **(asr_change or {})), job, checkpoint, graph).name

    base = key()
    assert key({"voices": tuple(reversed(AsrSection().voices))}) == base
    changed = [key({"acoustic_scale": 0.5}), key(speech=SPEECH.replace("seed = 0", "seed = 1")),
               key(evaluation=EVAL.replace("utterances = 3", "utterances = 4")),
               key(evaluation=EVAL.replace("epochs = 1", "epochs = 2")),
               key(evaluation=EVAL.replace("beam = 15.0", "beam = 12.0"))]
    (tmp_path / "am2.pt").write_bytes(b"other model")
    asr, job, _, graph = _setup(tmp_path, monkeypatch)
    assert len({base, *changed, adaptation_dir(asr, job, tmp_path / "am2.pt", graph).name}) == 7


def test_a_cached_adaptation_is_read_not_estimated_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    speech = SPEECH.replace("devel_sentences = 8", "devel_sentences = 0")  # no devel audio to estimate from
    asr, job, checkpoint, graph = _setup(tmp_path, monkeypatch, speech=speech)
    assert adapt_voices(dataclasses.replace(asr, adaptation_job=None), job, checkpoint, graph) is None
    folder = adaptation_dir(asr, job, checkpoint, graph)
    folder.mkdir(parents=True)
    saved = {v: {"vtln_warp": 1.0, "checkpoint": None} for v in asr.voices}
    (folder / "adaptation.json").write_text(json.dumps(saved))
    got = adapt_voices(asr, job, checkpoint, graph)
    assert (got.key, got.warps, got.checkpoints) == (folder.name, {v: 1.0 for v in asr.voices}, {})



def test_each_voice_adapts_on_its_first_devel_rows_a_failed_one_replaced_by_its_next() -> None:
    plan = ["t0 train a", "d0 devel a", "d1 devel b", "d2 devel a", "d3 devel a", "d4 devel b", "x0 test a"]
    planned = [dict(zip(("utt_id", "split", "voice"), row.split(), strict=True)) for row in plan]

    def pick(failed: set[str], voices: tuple[str, ...] = ("b", "a")) -> list[str]:
        return [r["utt_id"] for r in ad.pick_adaptation_rows(planned, voices, 2, failed, "sp")]

    assert pick(set()) == ["d1", "d4", "d0", "d2"] and pick({"d0", "d2", "d4"}) == ["d1", "d3"]
    with pytest.raises(DataError, match="speech job 'sp' plans no devel utterance in voice c.*Fix: add c"):
        pick(set(), ("a", "c"))
    cfg = EvalAmConfig(vtln=VtlnSection(enabled=True, utterances=3),
                       speaker_transform=SpeakerTransformSection(enabled=True, utterances=5))
    assert ad.per_voice_count(cfg) == 5  # the larger need of the parts that are on
    assert ad.per_voice_count(dataclasses.replace(cfg, speaker_transform=SpeakerTransformSection())) == 3


def test_a_hand_set_scale_that_differs_from_the_devel_choice_is_a_warning(tmp_path: Path) -> None:
    shipped = ROOT / "models" / "am_slurp.pt"  # its card: 1.2 chosen on devel for the adapted scores
    assert "asr.acoustic_scale = 1, set by hand, but am_slurp.pt's eval job chose 1.2" in checks.scale_warning(
        AsrSection(), shipped)
    assert checks.scale_warning(AsrSection(acoustic_scale=1.2), shipped) is None
    assert checks.scale_warning(AsrSection(), tmp_path / "no_card.pt") is None
