"""Checkpoint files by hand: xz streams with lc=0 lp=2 pb=2, the kind and format checks, failed writes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from specbench.checkpoint_io import read_checkpoint, write_checkpoint
from specbench.errors import DataError

pytestmark = pytest.mark.unit
AM = {"phones": [], "cmvn_mean": 0, "cmvn_inv_std": 0, "model_config": {}, "state_dict": {}, "format_version": 1}
MT = {"bpe_sha256": "ab", "model_config": {}, "state_dict": {}, "format_version": 1}


def test_xz_tool_reads_the_file_and_the_first_chunk_sets_lc0_lp2_pb2(tmp_path: Path) -> None:
    write_checkpoint({"w": torch.arange(300.0)}, tmp_path / "m.pt")
    subprocess.run(["xz", "-dk", "-S", ".pt", str(tmp_path / "m.pt")], check=True)  # writes tmp_path/m
    assert torch.equal(torch.load(tmp_path / "m", weights_only=True)["w"], torch.arange(300.0))
    data = (tmp_path / "m.pt").read_bytes()
    chunk = 12 + (data[12] + 1) * 4  # after stream and block headers
    assert data[chunk] >> 5 == 7 and data[chunk + 5] == (2 * 5 + 2) * 9 + 0  # props byte (pb*5 + lp)*9 + lc


@pytest.mark.parametrize(("blob", "what", "message"), [
    (MT, "translation model", None),
    (AM, "acoustic model checkpoint", None),
    (MT, "acoustic model checkpoint", r"this is a translation model .* but an acoustic model checkpoint is needed"),
    (AM, "translation model", r"this is an acoustic model .* but a translation model checkpoint is needed"),
    ({"phones": [], "state_dict": {}}, "acoustic model checkpoint",
     r"not a .* lacks the entries \['cmvn_inv_std', 'cmvn_mean', 'model_config'\]\. Fix"),
    ({**MT, "format_version": 2}, "translation model", r"not a .* of format_version 1 \(it has format_version 2\)"),
    ([1, 2], "test model", r"holds a list, not a specbench test model\. Fix"),
])
def test_kind_and_format_checks(tmp_path: Path, blob: object, what: str, message: str | None) -> None:
    torch.save(blob, tmp_path / "m.pt")  # a plain torch file is read too
    if message is None:
        assert read_checkpoint(tmp_path / "m.pt", what, "Fix", {"format_version": 1}) == blob
    else:
        with pytest.raises(DataError, match=rf"^{tmp_path / 'm.pt'}: {message}"):
            read_checkpoint(tmp_path / "m.pt", what, "Fix", {"format_version": 1})


def test_a_failed_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    (tmp_path / "m.pt").mkdir()  # the final rename fails
    with pytest.raises(OSError):
        write_checkpoint({"w": torch.zeros(3)}, tmp_path / "m.pt")
    assert [p.name for p in tmp_path.iterdir()] == ["m.pt"]
