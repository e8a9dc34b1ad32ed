"""The Sphinx model-definition readers (`wfst.sphinx_mdef`) on pocketsphinx's shipped en-us model, checked
against pocketsphinx's own text dump (`pocketsphinx_mdef_convert -text`, Debian package `pocketsphinx`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pocketsphinx
import pytest

from specbench.errors import DataError
from specbench.wfst.sphinx_mdef import Triphone, read_mdef, read_transition_matrices

MODEL = Path(pocketsphinx.get_model_path()) / "en-us" / "en-us"


@pytest.fixture(scope="module")
def mdef():
    return read_mdef(MODEL / "mdef")


def test_the_shipped_model_has_the_documented_shape(mdef) -> None:
    assert len(mdef.ci_phones) == 42 and len(mdef.triphones) == 137_053
    assert mdef.n_senones == 5126 and mdef.n_ci_senones == 126
    assert mdef.ci_phones[mdef.silence] == "SIL"
    assert {mdef.ci_phones[i] for i in mdef.fillers} == {"SIL", "+NSN+", "+SPN+"}
    # context-independent phones own the first senones, three each; triphones share the rest
    assert np.array_equal(mdef.senones[:42], np.arange(126).reshape(42, 3))
    assert mdef.senones[42:].min() >= 126 and mdef.senones.max() < 5126
    assert {t.position for t in mdef.triphones} == {"i", "b", "e", "s"}


def test_a_missing_triphone_backs_off_to_its_base_phone(mdef) -> None:
    some = next(iter(mdef.triphones))
    assert mdef.phone_id(some.base, some.left, some.right, some.position) == mdef.triphones[some]
    missing = Triphone("AA", "AA", "AA", "i")
    assert missing not in mdef.triphones
    assert mdef.phone_id("AA", "AA", "AA", "i") == mdef.ci_phones.index("AA")


@pytest.mark.skipif(shutil.which("pocketsphinx_mdef_convert") is None,
                    reason="Debian's pocketsphinx (pocketsphinx_mdef_convert) is not installed")
def test_every_phone_equals_pocketsphinx_text_dump(mdef, tmp_path: Path) -> None:
    out = tmp_path / "mdef.txt"
    subprocess.run(["pocketsphinx_mdef_convert", "-text", str(MODEL / "mdef"), str(out)], check=True,
                   capture_output=True)
    rows = {}
    for line in out.read_text().splitlines():
        parts = line.split()
        if len(parts) == 10 and parts[9] == "N" and not parts[0].startswith("#"):
            rows[tuple(parts[:4])] = (int(parts[5]), tuple(int(x) for x in parts[6:9]))
    ours = {(name, "-", "-", "-"): i for i, name in enumerate(mdef.ci_phones)}
    ours |= {(t.base, t.left, t.right, t.position): pid for t, pid in mdef.triphones.items()}
    assert set(ours) == set(rows)
    for key, pid in ours.items():
        assert rows[key] == (int(mdef.tmat[pid]), tuple(int(s) for s in mdef.senones[pid])), key


def test_transition_matrices_are_left_to_right_and_normalized() -> None:
    tmat = read_transition_matrices(MODEL / "transition_matrices")
    assert tmat.shape == (42, 3, 4)
    assert np.allclose(tmat.sum(axis=2), 1.0)
    for state in range(3):  # only a self-loop and the next state (the exit after the last)
        allowed = np.zeros(4, dtype=bool)
        allowed[[state, state + 1]] = True
        assert np.all(tmat[:, state, ~allowed] == 0.0)
        assert np.all(tmat[:, state, state] > 0.0)


def test_a_file_that_is_not_a_model_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "mdef"
    bad.write_bytes(b"0.3\n42 n_base\n")
    with pytest.raises(DataError, match=r"mdef: not a binary Sphinx model definition.*Fix"):
        read_mdef(bad)
    cut = tmp_path / "cut_mdef"
    cut.write_bytes((MODEL / "mdef").read_bytes()[:5000])
    with pytest.raises(DataError, match="truncated or damaged binary mdef"):
        read_mdef(cut)
    cut_tmat = tmp_path / "cut_tmat"
    cut_tmat.write_bytes((MODEL / "transition_matrices").read_bytes()[:100])
    with pytest.raises(DataError, match="truncated or damaged transition-matrix file"):
        read_transition_matrices(cut_tmat)
    truncated = tmp_path / "transition_matrices"
    truncated.write_bytes((MODEL / "transition_matrices").read_bytes()[:40].replace(b"s3\n", b"xx\n", 1))
    with pytest.raises(DataError, match="not an s3 transition-matrix file"):
        read_transition_matrices(truncated)
