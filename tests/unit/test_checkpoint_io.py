"""Checkpoint files: written as xz streams of `torch.save` files, read back exactly, plain files still read,
a damaged stream refused with the file and the fix named; every shipped model is written compressed."""

from __future__ import annotations

import lzma
from pathlib import Path

import pytest
import torch

from specbench.checkpoint_io import XZ_MAGIC, load_blob, read_checkpoint, write_checkpoint
from specbench.errors import DataError

MODELS = Path(__file__).resolve().parents[2] / "models"
FIX = "Train it again."


def test_round_trip_is_exact_and_the_file_an_xz_stream_of_a_torch_file(tmp_path: Path) -> None:
    blob = {"format_version": 3, "state_dict": {"w": torch.randn(64, 64).half(), "b": torch.arange(5)},
            "vocab": ["a", "b"]}
    path = tmp_path / "sub" / "model.pt"
    write_checkpoint(blob, path)
    data = path.read_bytes()
    assert data.startswith(XZ_MAGIC) and lzma.decompress(data).startswith(b"PK")  # `xz -d` gives a torch zip
    back = read_checkpoint(path, "test model", FIX, {"format_version": 3})
    assert back["vocab"] == ["a", "b"] and back["state_dict"].keys() == blob["state_dict"].keys()
    assert all(torch.equal(back["state_dict"][k], v) for k, v in blob["state_dict"].items())
    assert [p.name for p in path.parent.iterdir()] == ["model.pt"]  # no temporary file left
    plain = tmp_path / "plain.pt"
    torch.save(blob, plain)
    assert torch.equal(load_blob(plain)["state_dict"]["w"], blob["state_dict"]["w"])


def test_a_damaged_stream_names_the_file_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    write_checkpoint({"format_version": 1, "w": torch.zeros(1000)}, path)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(DataError, match=rf"{path}: not a readable test model.*{FIX}"):
        read_checkpoint(path, "test model", FIX, {})


class Unsafe:
    pass


def test_a_refused_file_gives_the_cause_without_torchs_advice_to_unpickle(tmp_path: Path) -> None:
    """torch's message advises loading with weights_only off, which would run code from the file."""
    (tmp_path / "text.fst").write_text("0 1 2 3 0.5\n1\n")
    torch.save({"x": Unsafe()}, tmp_path / "object.pt")
    for name, cause in (("text.fst", "Unsupported operand"), ("object.pt", "Unsupported global")):
        with pytest.raises(DataError) as err:
            read_checkpoint(tmp_path / name, "test model", FIX, {})
        said = str(err.value)
        assert f"(reading it said: a weights-only load refused it ({cause}" in said, said
        assert "never unpickles code" in said and said.endswith(FIX) and "weights_only" not in said, said
    (tmp_path / "junk.pt").write_bytes(b"\x80\x02junk" * 50)  # torch raises a bare KeyError on it
    with pytest.raises(DataError, match=r"\(reading it said: its bytes are no PyTorch file's\)\. Train it again\."):
        read_checkpoint(tmp_path / "junk.pt", "test model", FIX, {})


def test_every_shipped_checkpoint_is_written_compressed() -> None:
    shipped = sorted(MODELS.glob("*.pt"))
    assert len(shipped) >= 5
    assert [p.name for p in shipped if p.read_bytes()[:6] != XZ_MAGIC] == []
