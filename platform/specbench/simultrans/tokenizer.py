"""The joint German-English BPE of the translation models (sentencepiece), trained by the project.

Ids: 0 <pad>, 1 <s>, 2 </s>, 3 <unk>; byte fallback is on, so a character the BPE never saw becomes its
UTF-8 bytes instead of <unk> and decodes back unchanged. Training is deterministic for a given text.

The model is written as an xz stream of the SentencePiece model (about a third of its size; `xz -d` gives the
plain model back); a plain model reads as well. Its `sha256`, which a translation checkpoint records, is the
digest of the plain model, so compressing a model file does not change which checkpoints it fits.
"""

from __future__ import annotations

import hashlib
import io
import lzma
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

from specbench.checkpoint_io import XZ_MAGIC
from specbench.errors import DataError
from specbench.text_files import replacing

PAD, BOS, EOS, UNK = 0, 1, 2, 3


def train_bpe(texts: Iterable[str], path: Path, vocab_size: int) -> Path:
    """Train a BPE model on `texts` and write it, xz-compressed, to `path` atomically; returns `path`."""
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(list(texts)), model_writer=buffer, vocab_size=vocab_size, model_type="bpe",
        pad_id=PAD, bos_id=BOS, eos_id=EOS, unk_id=UNK, character_coverage=1.0, byte_fallback=True,
        input_sentence_size=0, shuffle_input_sentence=False, num_threads=1, minloglevel=2,
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        tmp.write_bytes(lzma.compress(buffer.getvalue(), preset=9 | lzma.PRESET_EXTREME))
    return path


def read_model_proto(path: Path) -> bytes:
    """The plain SentencePiece model in the file at `path`, which holds it plain or as an xz stream."""
    data = Path(path).read_bytes()
    return lzma.decompress(data) if data.startswith(XZ_MAGIC) else data


class Tokenizer:
    """A trained BPE model: `encode(text) -> ids` (no <s> or </s>), `decode(ids) -> text`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise DataError(f"BPE model {self.path} does not exist. Fix: train it with `specbench train mt "
                            "jobs/mt_waitk.toml` (it is written first).")
        try:
            proto = read_model_proto(self.path)
            self.sp = spm.SentencePieceProcessor(model_proto=proto)
        except (OSError, RuntimeError, lzma.LZMAError) as err:
            raise DataError(f"{self.path}: not a SentencePiece (BPE) model ({' '.join(str(err).split())[:120]}). "
                            "Fix: point the BPE key at a BPE model (models/mt_bpe.model), or, for `specbench train "
                            "mt`, at a path where no file is yet, so that it trains one there.") from None
        self.vocab_size = self.sp.get_piece_size()
        if not self.vocab_size:  # sentencepiece loads an empty file without a word
            raise DataError(f"{self.path}: an empty SentencePiece (BPE) model, with no pieces. Fix: point the "
                            "BPE key at a BPE model (models/mt_bpe.model), or delete this file so that "
                            "`specbench train mt` trains one there.")
        self.sha256 = hashlib.sha256(proto).hexdigest()

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text)

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        return self.sp.encode(texts)

    def decode(self, ids: Iterable[int]) -> str:
        return self.sp.decode([int(i) for i in ids if int(i) > UNK or int(i) == UNK])

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self.sp.id_to_piece(int(i)) for i in ids]
