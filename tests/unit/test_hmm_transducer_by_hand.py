"""`wfst.hmm_transducer` by hand on pocketsphinx's en-us model: the Sphinx phone of a context window at an
utterance boundary or beside a filler (both count as `SIL`, so the exact triphone is found and nothing backs
off), the count of windows that back off, and the transition matrices H refuses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pocketsphinx
import pytest

from specbench.errors import DataError
from specbench.wfst.hmm_transducer import check_left_to_right, hmm_transducer, window_phone
from specbench.wfst.sphinx_lexicon import phone_table
from specbench.wfst.sphinx_mdef import Triphone, read_mdef

pytestmark = pytest.mark.unit

MODEL = Path(pocketsphinx.get_model_path()) / "en-us" / "en-us"


@pytest.fixture(scope="module")
def model():
    return read_mdef(MODEL / "mdef")


@pytest.fixture(scope="module")
def phones(model):
    base = [p for i, p in enumerate(model.ci_phones) if i not in model.fillers]
    return phone_table(base, ("SIL", "+NSN+", "+SPN+"), 0)


def test_a_boundary_or_filler_neighbour_is_silence_and_finds_the_exact_triphone(model, phones) -> None:
    ids = phones.ids
    g_sil_ow = model.triphones[Triphone("G", "SIL", "OW", "b")]  # "go" = G OW; the model lists this triphone
    ow_g_sil = model.triphones[Triphone("OW", "G", "SIL", "e")]
    assert window_phone((0, ids["G_B"], ids["OW_E"]), phones, model) == (g_sil_ow, False)  # utterance start
    assert window_phone((ids["+NSN+"], ids["G_B"], ids["OW_E"]), phones, model) == (g_sil_ow, False)
    assert window_phone((ids["G_B"], ids["OW_E"], 0), phones, model) == (ow_g_sil, False)  # utterance end
    assert window_phone((ids["G_B"], ids["OW_E"], ids["+SPN+"]), phones, model) == (ow_g_sil, False)
    # a filler centre is its context-independent phone
    assert window_phone((ids["G_B"], ids["+NSN+"], ids["G_B"]), phones, model) == (
        model.ci_phones.index("+NSN+"), False)


def test_h_counts_the_windows_whose_triphone_backs_off(model, phones) -> None:
    ids = phones.ids
    assert Triphone("AA", "AA", "AA", "i") not in model.triphones  # AA between two AAs: not in the model
    windows = [(), (0, ids["G_B"], ids["OW_E"]), (ids["G_B"], ids["OW_E"], 0), (ids["AA_I"], ids["AA_I"], ids["AA_I"]),
               (ids["+SPN+"], ids["G_B"], ids["OW_E"]), (-1,)]  # the last: a disambiguation window
    tmat = np.zeros((len(model.ci_phones), 3, 4))
    for s in range(3):
        tmat[:, s, s], tmat[:, s, s + 1] = 0.6, 0.4
    h = hmm_transducer(windows, phones, model, tmat)
    assert (h.windows, h.backed_off) == (4, 1)
    assert len(h.disambig_labels) == 1


def test_a_state_that_never_moves_on_is_refused() -> None:
    tmat = np.zeros((1, 3, 4))
    for s in range(3):
        tmat[0, s, s], tmat[0, s, s + 1] = 0.5, 0.5
    check_left_to_right(tmat)  # the standard topology passes
    tmat[0, 1] = [0.0, 1.0, 0.0, 0.0]  # state 1 only loops
    with pytest.raises(DataError, match="never moves on"):
        check_left_to_right(tmat)
