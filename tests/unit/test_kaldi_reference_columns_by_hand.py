"""Scores narrower than the graph's largest input label are refused by the Kaldi backend
(`decoder.kaldi_reference`) as by the others: Kaldi's DecodableCtc would read column label - 1 past the row."""

from __future__ import annotations

from pathlib import Path

import kaldifst
import numpy as np
import pytest

from specbench.decoder.kaldi_reference import KaldiFasterDecoder
from specbench.decoder.options import SearchOptions
from specbench.decoder.pruning import INT32_MAX
from specbench.decoder.result import STATUS_BAD_SCORES, STATUS_OK

pytestmark = pytest.mark.unit

INFINITE_BEAM = SearchOptions(beam=1e9, max_active=INT32_MAX, min_active=0)


def test_scores_narrower_than_the_largest_input_label_are_bad_scores(tmp_path: Path) -> None:
    path = tmp_path / "g.fst"  # input label 4 needs column 3: at least 4 columns
    assert kaldifst.StdConstFst(kaldifst.compile("0 1 4 1 0.5\n1 1 4 0 0.5\n1 0\n",
                                                 keep_state_numbering=True)).write(str(path))
    decoder = KaldiFasterDecoder(path, INFINITE_BEAM)
    narrow = np.full((3, 3), -1.0, dtype=np.float32)
    with pytest.raises(ValueError, match=r"utterance 'narrow'.*3 columns.*up to 4"):
        decoder.decode(narrow, "narrow")
    with pytest.raises(ValueError, match=r"utterance 'narrow'.*3 columns"):
        decoder.linear_path(narrow, "narrow")
    wide = np.full((3, 4), -1.0, dtype=np.float32)
    results = decoder.decode_batch([("narrow", narrow), ("wide", wide)])
    assert results[0].status.startswith(f"{STATUS_BAD_SCORES}: utterance 'narrow'")
    # three frames of label 4 (column 3, -1 each): graph 0.5 + 0.5 + 0.5, acoustic 3
    assert (results[1].status, results[1].graph_cost, results[1].acoustic_cost) == (STATUS_OK, 1.5, 3.0)
