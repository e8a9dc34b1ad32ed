"""`SphinxMdef.nearest_phone` against pocketsphinx's own `bin_mdef_phone_id_nearest` (called from the library
that the pocketsphinx package ships): by hand, step by step, on a six-triphone model written as a text mdef
and compiled to a binary one by pocketsphinx (the exact triphone; the same contexts in another word position,
in Sphinx's order i, b, e, s; `SIL` for the left context of a word-initial or one-phone centre and for the
right context of a word-final or one-phone one; the base phone), then on every window of that model and on
random windows of the shipped en-us model."""

from __future__ import annotations

import ctypes
import random
from pathlib import Path

import pocketsphinx
import pytest

from specbench.wfst.sphinx_mdef import WORD_POSITIONS, read_mdef

pytestmark = pytest.mark.unit

EN_US = Path(pocketsphinx.get_model_path()) / "en-us" / "en-us" / "mdef"
CI = ("A", "B", "C", "SIL")  # phone ids 0-3; SIL is the filler and the silence phone
TRIPHONES = (  # phone ids 4-9, in this order
    ("A", "B", "C", "i"),  # 4
    ("A", "B", "C", "e"),  # 5
    ("A", "SIL", "C", "b"),  # 6
    ("A", "SIL", "C", "i"),  # 7
    ("A", "B", "SIL", "e"),  # 8
    ("B", "SIL", "SIL", "s"),  # 9
)


@pytest.fixture(scope="module")
def library():
    """pocketsphinx's C library, with the signatures of the mdef functions used here."""
    lib = ctypes.CDLL(str(next(Path(pocketsphinx.__file__).parent.glob("_pocketsphinx*.so"))))
    for name in ("bin_mdef_read", "bin_mdef_read_text"):
        getattr(lib, name).restype = ctypes.c_void_p
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.bin_mdef_write.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.bin_mdef_phone_id_nearest.argtypes = [ctypes.c_void_p] + [ctypes.c_int32] * 4
    lib.bin_mdef_ciphone_id.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.bin_mdef_free.argtypes = [ctypes.c_void_p]
    return lib


def _text_mdef() -> str:
    """The small model as a Sphinx text mdef (format 0.3): 3 emitting states, senones numbered in order."""
    lines = ["0.3", f"{len(CI)} n_base", f"{len(TRIPHONES)} n_tri", f"{(len(CI) + len(TRIPHONES)) * 4} n_state_map",
             f"{3 * (len(CI) + len(TRIPHONES))} n_tied_state", f"{3 * len(CI)} n_tied_ci_state",
             f"{len(CI)} n_tied_tmat", "#", "#base lft rt p attrib tmat ... state id's ..."]
    for i, phone in enumerate(CI):
        lines.append(f"{phone} - - - {'filler' if phone == 'SIL' else 'n/a'} {i} {3 * i} {3 * i + 1} {3 * i + 2} N")
    for k, (base, left, right, position) in enumerate(TRIPHONES):
        s = 3 * (len(CI) + k)
        lines.append(f"{base} {left} {right} {position} n/a {CI.index(base)} {s} {s + 1} {s + 2} N")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def small(library, tmp_path_factory):
    """(pocketsphinx's handle, our reading of the binary mdef pocketsphinx wrote) of the small model."""
    folder = tmp_path_factory.mktemp("mdef")
    (folder / "mdef.txt").write_text(_text_mdef(), encoding="ascii")
    handle = library.bin_mdef_read_text(None, str(folder / "mdef.txt").encode())
    assert handle
    assert library.bin_mdef_write(handle, str(folder / "mdef").encode()) == 0
    yield handle, read_mdef(folder / "mdef")
    library.bin_mdef_free(handle)


def test_the_small_model_reads_back_as_written(small) -> None:
    _, model = small
    assert model.ci_phones == CI and model.fillers == {3} and model.silence == 3
    assert {(t.base, t.left, t.right, t.position): i for t, i in model.triphones.items()} == {
        t: 4 + k for k, t in enumerate(TRIPHONES)}


def test_nearest_phone_backs_off_step_by_step(small) -> None:
    _, model = small
    near = model.nearest_phone
    assert near("A", "B", "C", "i") == (4, True)  # the exact triphone
    # A(B,C) at a word's start: not listed as b; the other positions in the order i, b, e, s: i first
    assert near("A", "B", "C", "b") == (4, False)
    assert near("A", "B", "C", "s") == (4, False)
    # A(C,C) is listed nowhere; word-initial: SIL on the left, A(SIL,C) as b itself before any other position
    assert near("A", "C", "C", "b") == (6, False)
    # ... word-internal and word-final centres keep their left context: nothing found, the base phone A
    assert near("A", "C", "C", "i") == (0, False)
    assert near("A", "C", "C", "e") == (0, False)
    # A(B,B) word-final: SIL on the right, A(B,SIL) e; word-initial keeps its right context: the base phone
    assert near("A", "B", "B", "e") == (8, False)
    assert near("A", "B", "B", "b") == (0, False)
    # B(A,A) alone in its word: SIL on both sides, B(SIL,SIL) s; word-internal: the base phone B
    assert near("B", "A", "A", "s") == (9, False)
    assert near("B", "A", "A", "i") == (1, False)
    assert near("C", "A", "B", "i") == (2, False)  # C has no triphone at all


def test_nearest_phone_equals_pocketsphinx_on_every_window_of_the_small_model(small, library) -> None:
    handle, model = small
    for base in ("A", "B", "C"):
        for left in CI:
            for right in CI:
                for k, position in enumerate(WORD_POSITIONS):
                    want = library.bin_mdef_phone_id_nearest(handle, CI.index(base), CI.index(left),
                                                             CI.index(right), k)
                    assert model.nearest_phone(base, left, right, position)[0] == want, (base, left, right, position)


def test_nearest_phone_equals_pocketsphinx_on_the_shipped_model(library) -> None:
    model = read_mdef(EN_US)
    handle = library.bin_mdef_read(None, str(EN_US).encode())
    assert handle
    try:
        assert [library.bin_mdef_ciphone_id(handle, p.encode()) for p in model.ci_phones] == list(
            range(len(model.ci_phones)))
        # contexts: base phones and SIL (H maps a filler neighbour to SIL before asking)
        contexts = [p for i, p in enumerate(model.ci_phones) if i not in model.fillers or i == model.silence]
        bases = [p for i, p in enumerate(model.ci_phones) if i not in model.fillers]
        rng = random.Random(7)
        exact = 0
        for _ in range(3000):
            base, left, right, k = rng.choice(bases), rng.choice(contexts), rng.choice(contexts), rng.randrange(4)
            want = library.bin_mdef_phone_id_nearest(handle, model.ci_phones.index(base),
                                                     model.ci_phones.index(left), model.ci_phones.index(right), k)
            got, found = model.nearest_phone(base, left, right, WORD_POSITIONS[k])
            assert got == want, (base, left, right, WORD_POSITIONS[k])
            exact += found
        assert 0 < exact < 3000  # both exact triphones and back-offs were drawn
    finally:
        library.bin_mdef_free(handle)
