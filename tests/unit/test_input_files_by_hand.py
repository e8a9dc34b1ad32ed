"""What `input_files.problem` says of a model file given for the wrong input: an unknown input kind is refused,
a checkpoint of another kind is named without its path or a closing period (the caller adds both), a
translation model whose config lacks `causal_encoder` counts as full-sentence, and a file that is not a
SentencePiece model carries sentencepiece's own error."""

from __future__ import annotations

from pathlib import Path

import pytest
import sentencepiece

from specbench.checkpoint_io import write_checkpoint
from specbench.errors import DataError
from specbench.input_files import check_frame_shift, problem

pytestmark = pytest.mark.unit
MODELS = Path(__file__).resolve().parents[2] / "models"


def test_the_problem_of_each_wrong_file_in_words(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown input kind 'LM'; known: acoustic model, prediction LM"):
        problem("LM", MODELS / "lm_slurp.pt")
    assert problem("prediction LM", MODELS / "confidence_slurp.pt") == (
        "this is a confidence model checkpoint (`specbench train confidence`), but a prediction LM checkpoint "
        "is needed here")
    old = tmp_path / "old_mt.pt"  # a translation model from before causal encoders: bidirectional
    write_checkpoint({"bpe_sha256": "0", "model_config": {}, "state_dict": {}}, old)
    assert problem("full-sentence translation model", old) is None
    assert problem("wait-k translation model", old).startswith("a full-sentence translation model (its encoder")
    text = tmp_path / "bpe.model"
    text.write_text("not a model\n")
    with pytest.raises(RuntimeError) as err:
        sentencepiece.SentencePieceProcessor(model_proto=text.read_bytes())
    said = " ".join(str(err.value).split())
    assert len(said) > 40 and problem("BPE model", text) == f"not a SentencePiece (BPE) model ({said[:120]})"


def test_a_given_frame_shift_must_agree_with_the_one_the_scores_record() -> None:
    assert check_frame_shift(Path("s.npz"), None, [None]) is None and check_frame_shift(Path("s"), 40.0, []) == 40.0
    assert check_frame_shift(Path("s"), None, [40.0, 40.0]) == 40.0 == check_frame_shift(Path("s"), 40.0, [40.0])
    with pytest.raises(DataError, match=r"--frame-shift-ms 10: s records its frames 40 ms apart\. Fix: leave"):
        check_frame_shift(Path("s"), 10.0, [40.0])
