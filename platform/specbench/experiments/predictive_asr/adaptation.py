"""Speaker adaptation of the request audio: the ASR headline's own, applied to the voices users speak with.

`asr.adaptation_job` names the `eval_am` job whose figures are the ASR headline. For each voice in
`asr.voices`, its `[vtln]` warp is chosen without transcripts from the first `vtln.utterances` devel
utterances of that voice in the eval job's speech corpus, and its `[speaker_transform]` is fitted on the
first-pass best paths of the first `speaker_transform.utterances` of them (no transcripts), with the
functions `eval_am` uses (`choose_voice_warps`, `fit_voice_transforms`) on the same audio: only those
devel rows are synthesized (a failed one replaced by the voice's next, as in the eval job's corpus), into
the corpus folder where the speech job puts them. No request audio and no
test audio is used. The requests are then scored with their voice's warp and transformed checkpoint.

The result is cached in `.specbench/predictive/adapt-<key>/` (`adaptation.json` and one checkpoint per
voice), keyed by everything it depends on (acoustic model, graph, the eval job's adaptation and search
settings, the corpus plan, the first-pass acoustic scale, and the code and audio versions that decide it:
`code_key.py`), and the key is part of the transcript cache's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from specbench.config import AsrSection, EvalAmConfig, SpeechConfig
from specbench.data.speech_corpus import plan_utterances, synthesize_shard
from specbench.errors import DataError, plain_reason
from specbench.experiments.eval_am import choose_voice_warps, fit_voice_transforms
from specbench.experiments.graph_recipe import GraphArtifacts
from specbench.experiments.job_refs import referenced_job
from specbench.experiments.predictive_asr.checks import adaptation_job
from specbench.experiments.predictive_asr.code_key import code_and_audio_key
from specbench.experiments.speech import corpus_plan, corpus_root
from specbench.paths import work_dir
from specbench.runtime import run_tasks
from specbench.stage import STATUS_COLUMN, STATUS_OK
from specbench.text_files import json_number, json_text

VERSION = 1


@dataclass(frozen=True)
class VoiceAdaptation:
    """Per voice: the VTLN warp and the checkpoint with its speaker transform (a voice missing from
    `checkpoints` is scored with the speaker-independent model), what each was estimated from, and the
    cache key."""

    key: str
    warps: dict[str, float]
    checkpoints: dict[str, Path]
    details: dict[str, dict[str, float]]

    def metrics(self, prefix: str = "prefetch.asr.") -> dict[str, float]:
        """`<prefix>vtln_warp.<voice>`, `<prefix>adaptation_utterances.<voice>`, ... as flat floats."""
        out = {}
        for voice, info in sorted(self.details.items()):
            slug = voice.replace(":", "_").replace("+", "_")
            out |= {f"{prefix}{name}.{slug}": json_number(value) for name, value in info.items()}
        return out


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _eval_job(asr: AsrSection, job_path: Path) -> tuple[EvalAmConfig, SpeechConfig]:
    """The adaptation job (`eval_am`, with VTLN or the speaker transform on: `checks.adaptation_job`, which
    the preflight calls too) and its speech job."""
    assert asr.adaptation_job is not None
    eval_cfg = adaptation_job(asr, job_path)
    assert eval_cfg is not None
    eval_path = asr.adaptation_job if asr.adaptation_job.is_absolute() else job_path.parent / asr.adaptation_job
    speech_cfg = referenced_job(eval_path, "speech_job", eval_cfg.speech_job, SpeechConfig)
    return eval_cfg, speech_cfg


def adaptation_dir(asr: AsrSection, job_path: Path, checkpoint: Path, graph: GraphArtifacts) -> Path:
    """`.specbench/predictive/adapt-<key>` for this job's adaptation settings."""
    eval_cfg, speech_cfg = _eval_job(asr, job_path)
    key = {"am": _digest(checkpoint), "graph": graph.content_digest(), "voices": sorted(asr.voices),
           "vtln": dataclasses.asdict(eval_cfg.vtln), "transform": dataclasses.asdict(eval_cfg.speaker_transform),
           "beam": eval_cfg.decode.beam, "max_active": eval_cfg.decode.max_active,
           "first_pass_scale": asr.acoustic_scale, "corpus": corpus_plan(speech_cfg).to_json(),
           "version": VERSION, **code_and_audio_key(asr.voices, "cpu")}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return work_dir() / "predictive" / f"adapt-{digest}"


def per_voice_count(eval_cfg: EvalAmConfig) -> int:
    """Devel utterances each voice is adapted on: the most that VTLN or the speaker transform, if on, use."""
    return max(eval_cfg.vtln.utterances if eval_cfg.vtln.enabled else 0,
               eval_cfg.speaker_transform.utterances if eval_cfg.speaker_transform.enabled else 0)


def pick_adaptation_rows(planned: list[dict], voices: tuple[str, ...], per_voice: int, failed: set[str],
                         speech_name: str) -> list[dict]:
    """Each voice's first `per_voice` planned devel rows but the `failed` ones (utt_ids), as in its corpus."""
    wanted = []
    for voice in voices:
        mine = [r for r in planned if r["split"] == "devel" and r["voice"] == voice]
        if not mine:
            raise DataError(f"the speech job '{speech_name}' plans no devel utterance in voice {voice}, so "
                            f"its requests cannot be adapted. Fix: add {voice} to its corpus.eval_voices, or "
                            "remove asr.adaptation_job.")
        wanted += [r for r in mine if r["utt_id"] not in failed][:per_voice]
    return wanted


def _adaptation_rows(speech_cfg: SpeechConfig, voices: tuple[str, ...], per_voice: int) -> list[dict]:
    """`pick_adaptation_rows`, synthesized (existing WAVs are kept; a failed row replaced by the next)."""
    planned = plan_utterances(corpus_plan(speech_cfg)).to_pylist()
    done: dict[str, dict] = {}
    failed: set[str] = set()

    def wanted() -> list[dict]:
        return pick_adaptation_rows(planned, voices, per_voice, failed, speech_cfg.name)

    while todo := [r for r in wanted() if r["utt_id"] not in done]:
        shards = [todo[i:i + speech_cfg.shard_size] for i in range(0, len(todo), speech_cfg.shard_size)]
        for shard in run_tasks(partial(synthesize_shard, corpus_root=corpus_root(speech_cfg)), shards,
                               progress=f"synthesizing {len(todo)} adaptation utterances"):
            for r in shard:
                done[r["utt_id"]] = r
                if r[STATUS_COLUMN] != STATUS_OK:
                    failed.add(r["utt_id"])
    return [done[r["utt_id"]] for r in wanted()]


def adapt_voices(asr: AsrSection, job_path: Path, checkpoint: Path, graph: GraphArtifacts) -> VoiceAdaptation | None:
    """The voices' adaptation (None without `asr.adaptation_job`), from the cache or estimated now."""
    if asr.adaptation_job is None:
        return None
    out_dir = adaptation_dir(asr, job_path, checkpoint, graph)
    summary_path = out_dir / "adaptation.json"
    if not summary_path.is_file():
        _estimate(asr, job_path, checkpoint, graph, out_dir)
    return read_adaptation(out_dir)


def read_adaptation(out_dir: Path) -> VoiceAdaptation:
    """The cached adaptation in `out_dir` (its `adaptation.json`); a file that cannot be read or is not such a
    summary (damaged, truncated, edited) is a `DataError` naming it and the fix."""
    summary_path = out_dir / "adaptation.json"
    try:
        saved = json.loads(summary_path.read_text())
        return VoiceAdaptation(
            key=out_dir.name, warps={v: s["vtln_warp"] for v, s in saved.items()},
            checkpoints={v: out_dir / s["checkpoint"] for v, s in saved.items() if s["checkpoint"]},
            details={v: {k: x for k, x in s.items() if k != "checkpoint"} for v, s in saved.items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:  # ValueError: bad JSON or UTF-8
        raise DataError(f"speaker adaptation cache {summary_path} cannot be read ({plain_reason(error)}). Fix: "
                        f"delete it (or its folder {out_dir}); the adaptation is estimated again on the next "
                        "run") from error


def _estimate(asr: AsrSection, job_path: Path, checkpoint: Path, graph: GraphArtifacts, out_dir: Path) -> None:
    """Choose the warps, fit the transforms, write the checkpoints and then `adaptation.json` (last, so a
    folder without it is an unfinished estimate and is redone)."""
    eval_cfg, speech_cfg = _eval_job(asr, job_path)
    rows = _adaptation_rows(speech_cfg, asr.voices, per_voice_count(eval_cfg))
    root = corpus_root(speech_cfg)
    voices = sorted(asr.voices)
    warps = {v: 1.0 for v in voices}
    summary: dict[str, dict] = {v: {"vtln_warp": 1.0, "vtln_utterances": 0.0, "checkpoint": None,
                                    "speaker_transform_utterances": 0.0} for v in voices}
    if eval_cfg.vtln.enabled:
        for voice, chosen in choose_voice_warps(checkpoint, root, rows, voices, eval_cfg).items():
            warps[voice] = chosen["warp"]
            summary[voice] |= {"vtln_warp": chosen["warp"], "vtln_utterances": chosen["utterances"]}
    out_dir.mkdir(parents=True, exist_ok=True)
    if eval_cfg.speaker_transform.enabled:
        fitted = fit_voice_transforms(checkpoint, root, rows, voices, warps, asr.acoustic_scale, graph.tlg,
                                      eval_cfg, out_dir)
        for voice, info in fitted.items():
            summary[voice] |= {"checkpoint": info["checkpoint"].name if info["checkpoint"] else None,
                               "speaker_transform_utterances": float(info["utterances"])}
            summary[voice] |= {f"speaker_transform_{k}": float(info[k]) for k in ("loss_before", "loss_after")
                               if k in info}
    tmp = out_dir / f"adaptation.{os.getpid()}.tmp"
    tmp.write_text(json_text(summary, indent=1, sort_keys=True))
    tmp.replace(out_dir / "adaptation.json")
