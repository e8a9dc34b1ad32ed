"""What a job's input file must hold, checked when the job is validated or before it runs: a job pointing at
the wrong kind of model (a confidence model where the LM goes, a full-sentence translation model where the
wait-k one goes, a checkpoint where the BPE model goes) is refused at once, with the key, instead of failing
after minutes of work or, worse, running and reporting a mislabeled result.

`problem(reads, path)` names what is wrong with an existing file, or None. `reads` is one of `KINDS`: the
config field's `config_input(reads=...)`. Checking reads the file (a few MB at most) and imports torch or
sentencepiece on first use.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from specbench.errors import DataError

# the kind of input -> the checkpoint kind it must be (`checkpoint_io.KIND_KEYS`), None for the BPE model
KINDS: dict[str, str | None] = {
    "acoustic model": "acoustic model checkpoint",
    "prediction LM": "prediction LM",
    "confidence model": "confidence model",
    "wait-k translation model": "translation model",
    "full-sentence translation model": "translation model",
    "BPE model": None,
}


def check_frame_shift(path: Path, given: float | None, stored: Iterable[float | None]) -> float | None:
    """The frame shift to use for the scores at `path`: `given` (--frame-shift-ms), else the one they record
    (`stored`, one per row or one for the file); a given shift the file contradicts is refused, not obeyed
    (it would rescale every time and real-time figure) nor silently ignored."""
    if given is not None and not 0 < given < float("inf"):
        raise DataError(f"--frame-shift-ms {given:g}: must be a positive number of milliseconds. Fix: leave it "
                        "out where the scores record their shift, or pass theirs, e.g. --frame-shift-ms 40")
    known = sorted({float(s) for s in stored if s})
    wrong = [s for s in known if given is not None and abs(s - given) > 1e-6 * max(s, given)]
    if wrong:
        raise DataError(f"--frame-shift-ms {given:g}: {path} records its frames {wrong[0]:g} ms apart. Fix: "
                        "leave --frame-shift-ms out (the scores' own shift is used), or score them again")
    return given if given is not None else (known[0] if known else None)


def problem(reads: str, path: Path) -> str | None:
    """What is wrong with the existing file `path` as a `reads` input (a key of `KINDS`), or None."""
    if reads not in KINDS:
        raise ValueError(f"unknown input kind {reads!r}; known: {', '.join(KINDS)}")
    if reads == "BPE model":
        return _bpe_problem(path)
    from specbench.checkpoint_io import read_checkpoint

    try:
        blob = read_checkpoint(path, KINDS[reads] or "", "", {})  # its format version is the loader's check
    except DataError as err:
        return str(err).removeprefix(f"{path}: ").strip().rstrip(".")
    if reads.endswith("translation model"):
        causal = bool(blob.get("model_config", {}).get("causal_encoder", False))
        if reads.startswith("wait-k") and not causal:
            return ("a full-sentence translation model (its encoder reads the whole source: causal_encoder = "
                    "false); wait-k decoding needs a model trained with causal_encoder = true (models/mt_waitk.pt)")
        if reads.startswith("full-sentence") and causal:
            return ("a wait-k translation model (causal_encoder = true); the full-sentence baselines need the "
                    "bidirectional model (models/mt_full.pt)")
    return None


def _bpe_problem(path: Path) -> str | None:
    import lzma

    import sentencepiece

    from specbench.simultrans.tokenizer import read_model_proto

    try:
        model = sentencepiece.SentencePieceProcessor(model_proto=read_model_proto(path))
    except (OSError, RuntimeError, lzma.LZMAError) as err:
        detail = " ".join(str(err).split())[:120]
        return f"not a SentencePiece (BPE) model ({detail})"
    return None if model.get_piece_size() else "an empty SentencePiece (BPE) model, with no pieces"
