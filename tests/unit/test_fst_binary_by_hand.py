"""`wfst.fst_binary` and `wfst.graph` by hand: the OpenFst property bits the writer stores equal those OpenFst
computes itself for the same FST (epsilons, label sortedness per state, weightedness of finals), weights and
padding a reader must refuse, the arc named in a bad-destination error, the checks on `FstArrays`, and the
argument checks of `graph.from_arrays`, `replace_ilabels` and the .npz cache."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import kaldifst
import numpy as np
import pytest

from specbench.errors import DataError, FstFormatError
from specbench.wfst.fst_binary import (
    COMPUTED_PROPERTIES,
    FstArrays,
    compute_properties,
    parse_header,
    read_fst,
)
from specbench.wfst.graph import from_arrays, load_npz, replace_ilabels, save_npz

pytestmark = pytest.mark.unit

# Each text isolates one property that OpenFst decides.
PROPERTY_TEXTS = {
    # an input epsilon whose output is not epsilon: kIEpsilons, kNoOEpsilons and kNoEpsilons
    "input_epsilon_only": "0 1 0 5 0.5\n1\n",
    # an output epsilon only: kOEpsilons, kNoIEpsilons
    "output_epsilon_only": "0 1 5 0 0.5\n1\n",
    # equal input labels leaving one state are still sorted (OpenFst: ilabel[i] <= ilabel[i + 1])
    "equal_labels": "0 1 2 3\n0 1 2 4\n1\n",
    # labels fall from state 0 (5) to state 1 (1), but each state's own arcs are sorted: sorted
    "sorted_per_state": "0 1 5 5\n1 2 1 1\n2\n",
    # labels fall inside state 0: not sorted
    "unsorted_in_state": "0 1 5 5\n0 1 1 1\n1\n",
    # all arc weights 0, but a final weight 1.5: weighted
    "weighted_final_only": "0 1 1 1\n1 1.5\n",
    # nothing weighted at all: unweighted
    "unweighted": "0 1 1 1\n1\n",
    # both epsilons on one arc: kEpsilons
    "both_epsilons": "0 1 0 0 0.25\n1\n",
}


def kaldi_props(text: str) -> int:
    """OpenFst's own property bits for `text`, computed by OpenFst for a freshly compiled FST."""
    return kaldifst.compile(text).properties(COMPUTED_PROPERTIES, True)


@pytest.mark.parametrize("name", sorted(PROPERTY_TEXTS))
def test_computed_properties_equal_openfst_on_a_freshly_compiled_fst(name: str, tmp_path: Path) -> None:
    text = PROPERTY_TEXTS[name]
    path = tmp_path / "g.fst"
    assert kaldifst.compile(text).write(str(path))
    assert compute_properties(read_fst(path)) & COMPUTED_PROPERTIES == kaldi_props(text)


def vector_file(tmp_path: Path, text: str) -> tuple[Path, bytes, int]:
    """kaldifst's vector file of `text`: its path, bytes and header size."""
    path = tmp_path / "g.fst"
    assert kaldifst.compile(text, keep_state_numbering=True).write(str(path))
    buf = path.read_bytes()
    return path, buf, parse_header(buf, path).size


# state 0 --3:3/0.5--> 1 --4:4/0.5--> 2 (final). Vector body: per state final (4 bytes), arc count (8 bytes),
# then 16-byte arcs (ilabel, olabel, weight, nextstate).
CHAIN = "0 1 3 3 0.5\n1 2 4 4 0.5\n2\n"


def test_a_minus_infinity_arc_weight_is_refused(tmp_path: Path) -> None:
    path, buf, size = vector_file(tmp_path, CHAIN)
    bad = bytearray(buf)
    struct.pack_into("<f", bad, size + 12 + 8, -math.inf)  # weight of state 0's only arc
    path.write_bytes(bytes(bad))
    with pytest.raises(FstFormatError, match="arc weight 0 is -inf, not a tropical weight"):
        read_fst(path)


def test_a_bad_destination_names_the_arc_and_its_state(tmp_path: Path) -> None:
    path, buf, size = vector_file(tmp_path, CHAIN)
    bad = bytearray(buf)
    # state 1 starts after state 0's record (12 + 16 bytes); its first arc's nextstate is 12 bytes into the arc
    struct.pack_into("<i", bad, size + 28 + 12 + 12, 99)
    path.write_bytes(bytes(bad))
    with pytest.raises(FstFormatError, match=r"arc 0 of state 1 has nextstate 99, outside \[0, 3\)"):
        read_fst(path)


def aligned_const_bytes(tmp_path: Path) -> bytes:
    """An aligned (flag 4) const file of CHAIN: header, states and arcs each padded to 16 bytes."""
    path = tmp_path / "g.cfst"
    assert kaldifst.StdConstFst(kaldifst.compile(CHAIN)).write(str(path))
    buf = path.read_bytes()
    header = parse_header(buf, path)
    flags_at = header.size - 8 * 4 - 4  # flags, then properties, start, num_states, num_arcs (8 bytes each)
    head = bytearray(buf[: header.size])
    struct.pack_into("<i", head, flags_at, header.flags | 4)
    states = buf[header.size : header.size + 20 * header.num_states]
    arcs = buf[header.size + 20 * header.num_states :]
    out = bytes(head) + b"\0" * (-len(head) % 16) + states
    return out + b"\0" * (-len(out) % 16) + arcs


def test_an_aligned_const_file_accepts_zero_padding_only(tmp_path: Path) -> None:
    buf = aligned_const_bytes(tmp_path)
    path = tmp_path / "aligned.cfst"
    path.write_bytes(buf + b"\0" * 4)  # zero padding after the arcs, shorter than 16 bytes: fine
    assert read_fst(path).num_arcs == 2
    path.write_bytes(buf + b"\0\1\0\0")  # the same length, but not padding
    with pytest.raises(FstFormatError, match="4 unexpected bytes after the last arc"):
        read_fst(path)


def arrays(start: int, final: list[float], offsets: list[int], nextstate: list[int]) -> FstArrays:
    n = len(nextstate)
    return FstArrays(start=start, final=np.array(final, np.float32), offsets=np.array(offsets, np.int64),
                     ilabel=np.ones(n, np.int32), olabel=np.ones(n, np.int32), weight=np.zeros(n, np.float32),
                     nextstate=np.array(nextstate, np.int32))


def test_fst_arrays_refuse_a_start_state_equal_to_the_state_count() -> None:
    assert arrays(1, [0.0, 0.0], [0, 0, 0], []).start == 1  # the last state is a valid start
    with pytest.raises(ValueError, match=r"start must be -1 or in \[0, 2\), got 2"):
        arrays(2, [0.0, 0.0], [0, 0, 0], [])


def test_fst_arrays_refuse_decreasing_offsets() -> None:
    # 3 states, 2 arcs: offsets run from 0 to 2 but fall from 2 to 1 in between
    with pytest.raises(ValueError, match="offsets must be non-decreasing"):
        arrays(0, [0.0, 0.0, 0.0], [0, 2, 1, 2], [1, 2])


def test_from_arrays_keeps_the_order_of_each_states_arcs_over_many_arcs() -> None:
    # 200 arcs from two states interleaved; a stable grouping keeps each state's arcs in their given order
    rng = np.random.default_rng(0)
    src = rng.integers(0, 2, 200)
    ilabel = np.arange(1, 201)
    graph = from_arrays(0, [0.0, 0.0], src=src, dest=np.zeros(200, np.int64), ilabel=ilabel,
                        olabel=ilabel, weight=np.zeros(200))
    for state in (0, 1):
        got = graph.emitting.ilabel[graph.emitting.state_arcs(state)]
        assert got.tolist() == ilabel[src == state].tolist()


def test_from_arrays_refuses_fractional_labels_and_destinations() -> None:
    with pytest.raises(ValueError, match="dest must hold integers, got float64"):
        from_arrays(0, [0.0, 0.0], src=[0], dest=np.array([1.5]), ilabel=[1], olabel=[1], weight=[0.0])
    with pytest.raises(ValueError, match="ilabel must hold integers"):
        from_arrays(0, [0.0, 0.0], src=[0], dest=[1], ilabel=np.array([1.0]), olabel=[1], weight=[0.0])


def test_from_arrays_wants_exactly_one_of_src_and_offsets() -> None:
    with pytest.raises(ValueError, match="exactly one of src= or offsets="):
        from_arrays(0, [0.0, 0.0], src=[0], offsets=[0, 1, 1], dest=[1], ilabel=[1], olabel=[1], weight=[0.0])
    with pytest.raises(ValueError, match="exactly one of src= or offsets="):
        from_arrays(0, [0.0, 0.0], dest=[1], ilabel=[1], olabel=[1], weight=[0.0])


def test_from_arrays_refuses_a_source_state_equal_to_the_state_count() -> None:
    with pytest.raises(ValueError, match=r"src must have 1 states in \[0, 2\)"):
        from_arrays(0, [0.0, 0.0], src=[2], dest=[1], ilabel=[1], olabel=[1], weight=[0.0])


def test_replace_ilabels_refuses_a_label_outside_int32() -> None:
    graph = from_arrays(0, [0.0, 0.0], src=[0], dest=[1], ilabel=[7], olabel=[7], weight=[0.0])
    with pytest.raises(ValueError, match="new_label 2147483648 does not fit in int32"):
        replace_ilabels(graph, [7], 2**31)
    assert replace_ilabels(graph, [7], 2**31 - 1).emitting.ilabel.tolist() == [2**31 - 1]


def test_a_cache_of_another_format_version_is_a_data_error(tmp_path: Path) -> None:
    graph = from_arrays(0, [0.0, 0.0], src=[0], dest=[1], ilabel=[7], olabel=[7], weight=[0.0])
    path = tmp_path / "g.npz"
    save_npz(path, graph)
    with np.load(path) as npz:
        arrays_ = dict(npz)
    arrays_["format_version"] = np.int64(2)
    with open(path, "wb") as fh:
        np.savez(fh, **arrays_)
    with pytest.raises(DataError, match="format version 2, expected 1"):
        load_npz(path)
