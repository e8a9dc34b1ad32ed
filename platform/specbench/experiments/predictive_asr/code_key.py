"""What decides the predictive job's cached transcripts and adaptations besides their settings: the code that
scores, aligns and decodes a request's audio, and what decides the audio itself.

The code is read as code (`code_digest`: an edit to a comment, a docstring or a message keeps the caches; a
change to what the code does moves them, and the next run renders its requests again). The audio of an
utterance is synthesized once and kept while its sidecar matches (`data/speech_corpus.py`): it is made again
when the sidecar format's `SIDECAR_VERSION` moves or the voice's engine or sox changes version, so both are
part of the key too, and a transcript never outlives the audio it was decoded from.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from specbench.code_digest import code_digest
from specbench.data.speech_corpus import SIDECAR_VERSION, engine_versions

_PACKAGE = Path(__file__).resolve().parents[2]
# besides every module of acoustic/ (features, the model, its checkpoint and settings, scoring, VTLN, the
# speaker transform, alignment) and of decoder/ (the search, lattices, partials, posteriors, Kaldi's decoder for
# the alignment and the adaptation's first pass): scoring and adapting (eval_am's functions), reading the WAVs,
# the graph and its lexicon, and the two modules that turn scores into transcripts and adaptations
_ASR_CODE = ("experiments/eval_am.py", "data/synthesis.py", "wfst/graph.py", "wfst/mapped.py", "wfst/symbols.py",
             "wfst/lexicon.py", "wfst/topology.py", "experiments/predictive_asr/partials.py",
             "experiments/predictive_asr/adaptation.py")
_MAY_RUN_GPU = ("gpu", "auto")


def asr_code(backend: str) -> list[Path]:
    """The Python modules whose code decides a transcript decoded with `backend` (the GPU decoder's own
    modules only for `gpu` and `auto`, which may choose it: the CPU decoders never run them)."""
    files = [*sorted((_PACKAGE / "acoustic").glob("*.py")), *sorted((_PACKAGE / "decoder").glob("*.py"))]
    files += [_PACKAGE / rel for rel in _ASR_CODE]
    if backend in _MAY_RUN_GPU:
        files += sorted((_PACKAGE / "decoder" / "gpu").rglob("*.py"))
    return files


def _kernel_sources(backend: str) -> dict[str, str]:
    """The GPU decoder's CUDA sources (compiled when it starts) by name -> sha256; none for other backends."""
    if backend not in _MAY_RUN_GPU:
        return {}
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((_PACKAGE / "decoder" / "gpu").rglob("*.cu"))}


@functools.cache
def code_and_audio_key(voices: tuple[str, ...], backend: str) -> dict:
    """{"code": digest of `asr_code(backend)` and the GPU decoder's CUDA sources, "audio": the sidecar
    version, "engines": each voice's engine and sox versions}. Computed once per process."""
    code = code_digest(asr_code(backend))
    if kernels := _kernel_sources(backend):
        code = hashlib.sha256(json.dumps([code, kernels]).encode()).hexdigest()
    return {"code": code, "audio": SIDECAR_VERSION,
            "engines": {voice: engine_versions(voice) for voice in sorted(voices)}}
