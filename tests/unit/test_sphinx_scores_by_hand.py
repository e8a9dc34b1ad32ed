"""Reading pocketsphinx senone logs (`acoustic.sphinx_scores.read_senone_log`) byte by byte: files that are not
senone logs, the wrong byte order, bodies that are not whole frames, the scores returned as an array of their
own; and the conversion of scores to nats to the float32 nearest the exact product."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pytest

from specbench.acoustic.sphinx_scores import read_senone_log, senone_loglikes
from specbench.errors import DataError

pytestmark = pytest.mark.unit

HEADER = b"s3\nversion 0.1\nn_sen 3\nlogbase 1.000100\nendhdr\n"
ORDER = struct.pack("<I", 0x11223344)
# two frames of 3 senones, each led by its count 3: 8 int16 values
BODY = np.array([3, 0, 12, 300, 3, 7, 0, 518], dtype="<i2").tobytes()


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "utt.sen"
    path.write_bytes(data)
    return path


def test_a_well_formed_log_reads_back_frame_by_frame(tmp_path: Path) -> None:
    scores, logbase = read_senone_log(_write(tmp_path, HEADER + ORDER + BODY), expected_senones=3)
    assert scores.tolist() == [[0, 12, 300], [7, 0, 518]] and logbase == 1.0001
    scores[0, 0] = 99  # an array of its own, not a read-only view of the file's bytes
    assert scores[0, 0] == 99


@pytest.mark.parametrize("data", [
    b"s2\n" + HEADER[3:] + ORDER + BODY,  # not an s3 header
    HEADER.replace(b"endhdr\n", b"") + ORDER + BODY,  # no endhdr line
    b"",
], ids=["not-s3", "no-endhdr", "empty"])
def test_a_file_without_an_s3_header_is_not_a_senone_log(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(DataError, match=r"utt.sen: not a pocketsphinx senone log"):
        read_senone_log(_write(tmp_path, data))


def test_a_big_endian_log_is_refused_by_its_byte_order_word(tmp_path: Path) -> None:
    big = struct.pack(">I", 0x11223344) + np.frombuffer(BODY, dtype="<i2").astype(">i2").tobytes()
    with pytest.raises(DataError, match=r"byte-order word 0x44332211, expected 0x11223344"):
        read_senone_log(_write(tmp_path, HEADER + big))


@pytest.mark.parametrize("cut, values", [(b"\x00", "8.5"), (None, "7")], ids=["extra-byte", "missing-value"])
def test_a_body_that_is_not_whole_frames_is_refused(tmp_path: Path, cut: bytes | None, values: str) -> None:
    # 8 values make 2 frames of 1 + 3; one byte more is 8.5 values, one int16 less is 7: neither is whole frames
    body = BODY + cut if cut is not None else BODY[:-2]
    with pytest.raises(DataError, match=rf"{values} values is not a whole number of 4-value frames"):
        read_senone_log(_write(tmp_path, HEADER + ORDER + body))


def test_scores_become_the_float32_nearest_the_exact_nats() -> None:
    """Every int16 score s: -s * 1024 * ln(1.0001), computed in double and rounded once to float32."""
    scores = np.arange(0, 32768, dtype=np.int16).reshape(-1, 64)
    nats = senone_loglikes(scores, 1.0001)
    per_unit = 1024 * math.log(1.0001)  # 0.10239488...
    expected = np.array([-float(s) * per_unit for s in scores.ravel()], dtype=np.float32).reshape(scores.shape)
    assert nats.dtype == np.float32 and np.array_equal(nats, expected)
    assert nats[0, 1] == np.float32(-per_unit)
    assert nats[-1, -1] == pytest.approx(-3355.173, abs=0.001)  # 32767 * 0.1023949
