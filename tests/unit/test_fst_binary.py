"""specbench.wfst.fst_binary and specbench.wfst.graph against kaldifst (OpenFst) on small graphs."""

from __future__ import annotations

import math
import struct
import tempfile
from pathlib import Path

import kaldifst
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specbench.errors import DataError, FstFormatError
from specbench.wfst.fst_binary import (
    K_EXPANDED,
    K_MUTABLE,
    FstArrays,
    compute_properties,
    parse_header,
    read_fst,
    read_fst_header,
    vector_fst_bytes,
    write_vector_fst,
)
from specbench.wfst.graph import (
    ArcSet,
    CsrGraph,
    from_arrays,
    load_npz,
    read_graph,
    replace_ilabels,
    save_npz,
)

pytestmark = pytest.mark.unit

FIX = "specbench graph build"

# Epsilon arcs (ilabel 0, some with olabel 0 too), self-loops, finals with weights, a dead-end state (4) with
# no arcs that is not final, a final state with arcs, unsorted input labels.
MIXED = """0 1 3 7 0.5
0 0 2 2 1.25
0 2 0 5 0
0 3 0 0 -0.75
1 1 1 1 0.125
1 4 6 0 2
1 3 0 3 0.5
2 3 4 4 3.5
3 0 1 0 0
3 2.5
2 0
1 0.25
"""
SINGLE_FINAL = "0 1.5\n"
ILABEL_SORTED = "0 1 0 9 0.5\n0 2 1 8 1\n0 2 3 7 0\n1 2 2 2 0.5\n2\n"
KEPT_NUMBERING = "2 1 3 3 1\n1 0 0 0 2\n1 0.5\n"
SMALL_TEXTS = {"mixed": MIXED, "single_final": SINGLE_FINAL, "ilabel_sorted": ILABEL_SORTED}


# ---------------------------------------------------------------------------------------------- helpers


def compile_fst(text: str, keep_state_numbering: bool = False) -> kaldifst.StdVectorFst:
    """kaldifst's FST for OpenFst text (an empty string gives the empty FST, start -1)."""
    if not text.strip():
        return kaldifst.StdVectorFst()
    return kaldifst.compile(text, keep_state_numbering=keep_state_numbering)


def write_both(fst: kaldifst.StdVectorFst, directory: Path, stem: str = "g") -> tuple[Path, Path]:
    """Write `fst` as vector and const files; return their paths."""
    vector, const = directory / f"{stem}.fst", directory / f"{stem}.cfst"
    assert fst.write(str(vector))
    assert kaldifst.StdConstFst(fst).write(str(const))
    return vector, const


def kaldi_walk(fst: kaldifst.StdFst) -> tuple[int, list[float], list[list[tuple]]]:
    """(start, finals, arcs per state) as OpenFst's own iterators give them; finals +inf when not final."""
    states = list(kaldifst.StateIterator(fst))
    assert states == list(range(len(states)))
    finals = [fst.final(s).value for s in states]
    arcs = [[(a.ilabel, a.olabel, a.weight.value, a.nextstate) for a in kaldifst.ArcIterator(fst, s)]
            for s in states]
    return fst.start, finals, arcs


def arrays_walk(fst: FstArrays) -> tuple[int, list[float], list[list[tuple]]]:
    """The same view of FstArrays."""
    arcs = [
        [
            (int(fst.ilabel[i]), int(fst.olabel[i]), float(fst.weight[i]), int(fst.nextstate[i]))
            for i in range(fst.offsets[s], fst.offsets[s + 1])
        ]
        for s in range(fst.num_states)
    ]
    return fst.start, [float(x) for x in fst.final], arcs


def set_arcs(arcs: ArcSet, state: int) -> list[tuple]:
    """The arcs of `state` in one CSR set, as (ilabel, olabel, weight, dest)."""
    idx = range(*arcs.state_arcs(state).indices(arcs.num_arcs))
    return [(int(arcs.ilabel[i]), int(arcs.olabel[i]), float(arcs.weight[i]), int(arcs.dest[i])) for i in idx]


def assert_graph_matches(graph: CsrGraph, fst: kaldifst.StdFst) -> None:
    """`graph` holds exactly `fst`: start, finals, and per state its epsilon and emitting arcs in order."""
    start, finals, arcs = kaldi_walk(fst)
    assert graph.start == start
    assert graph.num_states == len(finals)
    assert [float(x) for x in graph.final] == finals
    for s, state_arcs in enumerate(arcs):
        assert set_arcs(graph.epsilon, s) == [a for a in state_arcs if a[0] == 0]
        assert set_arcs(graph.emitting, s) == [a for a in state_arcs if a[0] != 0]
    assert graph.num_arcs == sum(len(a) for a in arcs)


def check_fst_file(fst: kaldifst.StdVectorFst, directory: Path) -> None:
    """Vector and const files of `fst`, read by us, equal what kaldifst reads from them."""
    for path in write_both(fst, directory):
        reference = (kaldifst.StdVectorFst if path.suffix == ".fst" else kaldifst.StdConstFst).read(str(path))
        assert arrays_walk(read_fst(path)) == kaldi_walk(reference)
        assert_graph_matches(read_graph(path), reference)


def header_field_offsets(buf: bytes) -> dict[str, int]:
    """Byte offsets of the fixed-size FstHeader fields."""
    type_len = struct.unpack_from("<i", buf, 4)[0]
    arc_len = struct.unpack_from("<i", buf, 8 + type_len)[0]
    version = 12 + type_len + arc_len
    fields = {"version": 0, "flags": 4, "properties": 8, "start": 16, "num_states": 24, "num_arcs": 32}
    return {"type_string": 4, "arc_string": 8 + type_len} | {k: version + v for k, v in fields.items()}


def patch(buf: bytes, offset: int, fmt: str, value: int | float) -> bytes:
    """`buf` with `value` packed at `offset`."""
    out = bytearray(buf)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def replace_string(buf: bytes, offset: int, new: str) -> bytes:
    """`buf` with the length-prefixed string at `offset` replaced by `new`."""
    old_len = struct.unpack_from("<i", buf, offset)[0]
    raw = new.encode()
    return buf[:offset] + struct.pack("<i", len(raw)) + raw + buf[offset + 4 + old_len :]


def aligned_const(buf: bytes, how: str) -> bytes:
    """An aligned copy of an unaligned const file (flag 4, or version 1), with 16-byte padding."""
    header = parse_header(buf, Path("in-memory.cfst"))
    offsets = header_field_offsets(buf)
    head = buf[: header.size]
    if how == "flag":
        head = patch(head, offsets["flags"], "<i", header.flags | 4)
    else:
        head = patch(head, offsets["version"], "<i", 1)
    states = buf[header.size : header.size + 20 * header.num_states]
    arcs = buf[header.size + 20 * header.num_states :]
    out = head + b"\0" * (-len(head) % 16) + states
    return out + b"\0" * (-len(out) % 16) + arcs


def assert_format_error(path: Path, *fragments: str) -> FstFormatError:
    """read_fst and read_graph both raise FstFormatError naming `path`, the fix and `fragments`."""
    with pytest.raises(FstFormatError) as info:
        read_fst(path)
    message = str(info.value)
    assert str(path) in message and FIX in message
    for fragment in fragments:
        assert fragment in message, message
    with pytest.raises(FstFormatError):
        read_graph(path)
    return info.value


# ---------------------------------------------------------------------------------------------- reading


@pytest.mark.parametrize("name", sorted(SMALL_TEXTS))
def test_small_graphs_match_kaldifst(name: str, tmp_path: Path) -> None:
    check_fst_file(compile_fst(SMALL_TEXTS[name]), tmp_path)


def test_empty_fst_has_no_states_and_start_minus_one(tmp_path: Path) -> None:
    for path in write_both(kaldifst.StdVectorFst(), tmp_path):
        graph = read_graph(path)
        assert graph.start == -1 and graph.num_states == 0 and graph.num_arcs == 0
        assert graph.emitting.offsets.tolist() == [0] and graph.epsilon.offsets.tolist() == [0]
        assert graph.max_ilabel == 0


def test_start_state_other_than_zero(tmp_path: Path) -> None:
    fst = compile_fst(KEPT_NUMBERING, keep_state_numbering=True)
    assert fst.start == 2
    check_fst_file(fst, tmp_path)
    assert read_graph(tmp_path / "g.cfst").start == 2


def test_mixed_graph_details(tmp_path: Path) -> None:
    vector, _ = write_both(compile_fst(MIXED), tmp_path)
    graph = read_graph(vector)
    assert graph.num_states == 5
    assert graph.num_arcs == 9
    assert (graph.num_emitting_arcs, graph.num_epsilon_arcs) == (6, 3)
    assert graph.max_ilabel == 6
    assert graph.out_degree.tolist() == [4, 3, 1, 1, 0]
    assert graph.final.tolist() == [math.inf, 0.25, 0.0, 2.5, math.inf]
    assert graph.final.dtype == np.float32 and graph.emitting.offsets.dtype == np.int64
    assert graph.emitting.dest.dtype == np.int32 and graph.epsilon.weight.dtype == np.float32
    assert set_arcs(graph.emitting, 0) == [(3, 7, 0.5, 1), (2, 2, 1.25, 0)]  # file order, self-loop kept
    assert set_arcs(graph.epsilon, 0) == [(0, 5, 0.0, 2), (0, 0, -0.75, 3)]


def test_symbol_tables_are_skipped(tmp_path: Path) -> None:
    symbols = kaldifst.SymbolTable("words")
    for word in ["<eps>", "a", "b", "c"]:
        symbols.add_symbol(word)
    fst = kaldifst.compile(
        "0 1 a b 0.5\n1 2 <eps> c 1\n2\n", isymbols=symbols, osymbols=symbols,
        keep_isymbols=True, keep_osymbols=True,
    )
    check_fst_file(fst, tmp_path)
    header = read_fst_header(tmp_path / "g.cfst")
    assert header.flags == 3
    assert header.input_symbols is not None and header.input_symbols.name == "words"
    assert header.input_symbols.num_symbols == 4 and header.output_symbols is not None


@pytest.mark.parametrize("how", ["flag", "version1"])
def test_aligned_const_files(how: str, tmp_path: Path) -> None:
    _, const = write_both(compile_fst(MIXED), tmp_path)
    aligned = tmp_path / f"aligned_{how}.cfst"
    aligned.write_bytes(aligned_const(const.read_bytes(), how))
    assert read_fst_header(aligned).aligned
    reference = kaldifst.StdConstFst.read(str(aligned))
    assert reference is not None
    assert kaldi_walk(reference) == kaldi_walk(kaldifst.StdConstFst.read(str(const)))
    assert arrays_walk(read_fst(aligned)) == kaldi_walk(reference)


def test_vector_with_unknown_number_of_states_reads_to_the_end(tmp_path: Path) -> None:
    vector, _ = write_both(compile_fst(MIXED), tmp_path)
    buf = vector.read_bytes()
    unknown = tmp_path / "unknown.fst"
    unknown.write_bytes(patch(buf, header_field_offsets(buf)["num_states"], "<q", -1))
    assert arrays_walk(read_fst(unknown)) == arrays_walk(read_fst(vector))


# ---------------------------------------------------------------------------------------------- writing


def assert_written_file_ok(fst: FstArrays, path: Path) -> None:
    """Our vector file of `fst` reads back in kaldifst identically and with the property bits we wrote (OpenFst
    trusts stored bits it knows, so whether they are true is checked against OpenFst's own computation on a
    freshly compiled FST, in test_fst_binary_by_hand)."""
    write_vector_fst(path, fst)
    reference = kaldifst.StdVectorFst.read(str(path))
    assert reference is not None
    assert kaldi_walk(reference) == arrays_walk(fst)
    ours = compute_properties(fst)
    assert ours & (K_EXPANDED | K_MUTABLE) == K_EXPANDED | K_MUTABLE
    assert reference.properties(2**64 - 1, False) == ours  # stored as written
    assert arrays_walk(read_fst(path)) == arrays_walk(fst)


@pytest.mark.parametrize("name", sorted(SMALL_TEXTS))
def test_writer_round_trips_through_kaldifst(name: str, tmp_path: Path) -> None:
    vector, _ = write_both(compile_fst(SMALL_TEXTS[name]), tmp_path)
    assert_written_file_ok(read_fst(vector), tmp_path / "ours.fst")


def test_writer_matches_openfst_bytes_except_properties(tmp_path: Path) -> None:
    vector, _ = write_both(compile_fst(MIXED), tmp_path)
    theirs = vector.read_bytes()
    ours = vector_fst_bytes(read_fst(vector))
    at = header_field_offsets(theirs)["properties"]
    assert len(ours) == len(theirs)
    assert ours[:at] == theirs[:at] and ours[at + 8 :] == theirs[at + 8 :]


def test_writer_empty_fst(tmp_path: Path) -> None:
    vector, _ = write_both(kaldifst.StdVectorFst(), tmp_path)
    assert_written_file_ok(read_fst(vector), tmp_path / "ours.fst")
    assert kaldifst.StdVectorFst.read(str(tmp_path / "ours.fst")).start == -1


def test_csr_graph_written_and_read_back(tmp_path: Path) -> None:
    _, const = write_both(compile_fst(MIXED), tmp_path)
    graph = read_graph(const)
    write_vector_fst(tmp_path / "ours.fst", graph)
    again = read_graph(tmp_path / "ours.fst")
    assert_same_graph(graph, again)
    assert_graph_matches(again, kaldifst.StdConstFst.read(str(const)))


# ---------------------------------------------------------------------------------------------- errors


def valid_files(tmp_path: Path) -> dict[str, bytes]:
    """Vector, const and symbol-table files of MIXED by name."""
    symbols = kaldifst.SymbolTable("s")
    for word in ["<eps>", "x", "y"]:
        symbols.add_symbol(word)
    with_symbols = kaldifst.compile("0 1 x y 0.5\n1\n", isymbols=symbols, osymbols=symbols,
                                    keep_isymbols=True, keep_osymbols=True)
    vector, const = write_both(compile_fst(MIXED), tmp_path, "mixed")
    sym_vector, sym_const = write_both(with_symbols, tmp_path, "symbols")
    return {p.name: p.read_bytes() for p in (vector, const, sym_vector, sym_const)}


def test_every_truncation_is_a_format_error(tmp_path: Path) -> None:
    for name, buf in valid_files(tmp_path).items():
        path = tmp_path / f"cut_{name}"
        for cut in range(len(buf)):
            path.write_bytes(buf[:cut])
            with pytest.raises(FstFormatError) as info:
                read_fst(path)
            assert str(path) in str(info.value) and FIX in str(info.value), (name, cut)


def test_truncation_message_names_the_byte(tmp_path: Path) -> None:
    buf = valid_files(tmp_path)["mixed.cfst"]
    path = tmp_path / "cut.cfst"
    path.write_bytes(buf[:-5])
    assert_format_error(path, "truncated at byte", str(len(buf) - 5), str(len(buf)))


def corrupt(name: str, buf: bytes) -> bytes:
    """One kind of corruption, applied to the MIXED vector file (or const for const_* kinds)."""
    off = header_field_offsets(buf)
    size = parse_header(buf, Path("in-memory.fst")).size
    edits = {
        "bad_magic": lambda: patch(buf, 0, "<i", 12345),
        "fst_type": lambda: replace_string(buf, off["type_string"], "compact_acceptor"),
        "arc_type": lambda: replace_string(buf, off["arc_string"], "log"),
        "version": lambda: patch(buf, off["version"], "<i", 7),
        "flags": lambda: patch(buf, off["flags"], "<i", 64),
        "missing_symbols": lambda: patch(buf, off["flags"], "<i", 1),
        "start": lambda: patch(buf, off["start"], "<q", 5),
        "negative_states": lambda: patch(buf, off["num_states"], "<q", -7),
        "huge_states": lambda: patch(buf, off["num_states"], "<q", 2**62),
        "nextstate": lambda: patch(buf, size + 12 + 12, "<i", 99),  # first arc of state 0
        "nan_final": lambda: patch(buf, size, "<f", math.nan),
        "nan_weight": lambda: patch(buf, size + 12 + 8, "<f", math.nan),
        "high_count": lambda: patch(buf, size + 8, "<i", 1),
        "trailing": lambda: buf + b"\0" * 4,
        "const_trailing": lambda: buf + b"\1",
        "const_pos": lambda: patch(buf, size + 20 + 4, "<I", 3),
        "const_narcs": lambda: patch(buf, size + 20 + 8, "<I", 2),
        "const_num_arcs": lambda: patch(buf, off["num_arcs"], "<q", 10),
        "const_nextstate": lambda: patch(buf, len(buf) - 4, "<i", -3),
    }
    return edits[name]()


CORRUPTIONS = {
    "bad_magic": "bad magic number 12345",
    "fst_type": "unsupported fst type 'compact_acceptor'",
    "arc_type": "arc type is 'log'",
    "version": "version 7",
    "flags": "unknown header flags",
    "missing_symbols": "input symbol table magic",
    "start": "start state 5",
    "negative_states": "negative number of states",
    "huge_states": "truncated",
    "nextstate": "nextstate 99",
    "nan_final": "not a tropical weight",
    "nan_weight": "not a tropical weight",
    "high_count": "impossible arc count",
    "trailing": "unexpected bytes",
    "const_trailing": "unexpected bytes",
    "const_pos": "arcs of state 1 start at 3",
    "const_narcs": "the states have 8 arcs in all, the header says 9",
    "const_num_arcs": "truncated",
    "const_nextstate": "nextstate -3",
}


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_corrupt_files_name_the_problem(kind: str, tmp_path: Path) -> None:
    files = valid_files(tmp_path)
    buf = files["mixed.cfst" if kind.startswith("const_") else "mixed.fst"]
    path = tmp_path / f"{kind}.fst"
    path.write_bytes(corrupt(kind, buf))
    assert_format_error(path, CORRUPTIONS[kind])


def test_missing_file_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot read"):
        read_graph(tmp_path / "nope.fst")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_garbage_bytes_are_format_errors(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "garbage.fst"
        path.write_bytes(data)
        with pytest.raises(FstFormatError):
            read_graph(path)


# ---------------------------------------------------------------------------------------------- property


WEIGHTS = st.floats(min_value=-20, max_value=20, width=32, allow_nan=False).map(repr) | st.sampled_from(
    ["0", "inf", "1"]
)


@st.composite
def fst_texts(draw: st.DrawFn) -> str:
    """OpenFst text of a random small FST (may be empty)."""
    num_states = draw(st.integers(1, 6))
    state = st.integers(0, num_states - 1)
    label = st.integers(0, 4)
    arcs = draw(st.lists(st.tuples(state, state, label, label, WEIGHTS), max_size=16))
    finals = draw(st.dictionaries(state, WEIGHTS, max_size=num_states))
    lines = [f"{s} {d} {i} {o} {w}" for s, d, i, o, w in arcs] + [f"{s} {w}" for s, w in finals.items()]
    return "\n".join(lines) + "\n" if lines else ""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fst_texts())
def test_random_fsts_match_kaldifst(text: str) -> None:
    fst = compile_fst(text)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        check_fst_file(fst, directory)
        assert_written_file_ok(read_fst(directory / "g.fst"), directory / "ours.fst")
        graph = read_graph(directory / "g.cfst")
        assert_same_graph(load_roundtrip(graph, directory), graph)


@settings(max_examples=80, deadline=None)
@given(fst_texts(), st.data())
def test_random_truncations_are_format_errors(text: str, data: st.DataObject) -> None:
    fst = compile_fst(text)
    with tempfile.TemporaryDirectory() as tmp:
        for path in write_both(fst, Path(tmp)):
            buf = path.read_bytes()
            cut = data.draw(st.integers(0, len(buf) - 1))
            path.write_bytes(buf[:cut])
            with pytest.raises(FstFormatError, match="truncated"):
                read_graph(path)


@settings(max_examples=150, deadline=None)
@given(fst_texts(), st.data())
def test_random_byte_damage_never_escapes_as_another_error(text: str, data: st.DataObject) -> None:
    fst = compile_fst(text)
    with tempfile.TemporaryDirectory() as tmp:
        for path in write_both(fst, Path(tmp)):
            buf = bytearray(path.read_bytes())
            for _ in range(data.draw(st.integers(1, 4))):
                buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
            path.write_bytes(bytes(buf))
            try:
                graph = read_graph(path)
            except FstFormatError as err:
                assert str(path) in str(err)
            else:
                assert graph.num_arcs == graph.num_emitting_arcs + graph.num_epsilon_arcs


# ---------------------------------------------------------------------------------------------- CsrGraph


def assert_same_graph(a: CsrGraph, b: CsrGraph) -> None:
    """Equal start, finals and arc sets (arrays, dtypes and order)."""
    assert a.start == b.start
    np.testing.assert_array_equal(a.final, b.final)
    for name in ("emitting", "epsilon"):
        x, y = getattr(a, name), getattr(b, name)
        for field in ("offsets", "dest", "ilabel", "olabel", "weight"):
            assert getattr(x, field).dtype == getattr(y, field).dtype
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field))


def load_roundtrip(graph: CsrGraph, directory: Path) -> CsrGraph:
    """`graph` after save_npz + load_npz."""
    save_npz(directory / "cache.npz", graph)
    return load_npz(directory / "cache.npz")


def small_graph() -> CsrGraph:
    """Three states: 0 -a-> 1 (eps to 2), 1 -#5-> 2, 2 final."""
    return from_arrays(
        0, [np.inf, np.inf, 1.0], src=[0, 1, 1, 0, 2], dest=[1, 2, 2, 2, 0], ilabel=[3, 5, 0, 0, 4],
        olabel=[7, 0, 0, 9, 0], weight=[0.5, 0.0, 0.25, 1.0, 2.0],
    )


def test_from_arrays_groups_unsorted_sources_stably() -> None:
    graph = small_graph()
    assert set_arcs(graph.emitting, 0) == [(3, 7, 0.5, 1)]
    assert set_arcs(graph.epsilon, 0) == [(0, 9, 1.0, 2)]
    assert set_arcs(graph.emitting, 1) == [(5, 0, 0.0, 2)]
    assert set_arcs(graph.epsilon, 1) == [(0, 0, 0.25, 2)]
    by_offsets = from_arrays(
        0, [np.inf, np.inf, 1.0], offsets=[0, 2, 4, 5], dest=[1, 2, 2, 2, 0], ilabel=[3, 0, 5, 0, 4],
        olabel=[7, 9, 0, 0, 0], weight=[0.5, 1.0, 0.0, 0.25, 2.0],
    )
    assert_same_graph(graph, by_offsets)


def test_to_arrays_puts_epsilons_first_per_state() -> None:
    fst = small_graph().to_arrays()
    assert fst.offsets.tolist() == [0, 2, 4, 5]
    assert fst.ilabel.tolist() == [0, 3, 0, 5, 4]
    assert fst.nextstate.tolist() == [2, 1, 2, 2, 0]
    assert_same_graph(from_arrays(fst.start, fst.final, offsets=fst.offsets, dest=fst.nextstate,
                                  ilabel=fst.ilabel, olabel=fst.olabel, weight=fst.weight), small_graph())


def test_replace_ilabels_turns_disambiguation_symbols_into_epsilons() -> None:
    graph = replace_ilabels(small_graph(), [5, 4])
    assert graph.num_emitting_arcs == 1 and graph.num_epsilon_arcs == 4
    assert set_arcs(graph.epsilon, 1) == [(0, 0, 0.25, 2), (0, 0, 0.0, 2)]
    assert set_arcs(graph.epsilon, 2) == [(0, 0, 2.0, 0)]
    assert graph.max_ilabel == 3
    unchanged, original = replace_ilabels(small_graph(), []), small_graph()  # nothing to replace: the same graph
    for arcs in ("emitting", "epsilon"):
        assert [set_arcs(getattr(unchanged, arcs), s) for s in range(3)] == \
            [set_arcs(getattr(original, arcs), s) for s in range(3)]
    relabeled = replace_ilabels(small_graph(), [3], new_label=8)
    assert set_arcs(relabeled.emitting, 0) == [(8, 7, 0.5, 1)]


def test_replace_ilabels_on_a_kaldifst_graph_written_back(tmp_path: Path) -> None:
    vector, _ = write_both(compile_fst(MIXED), tmp_path)
    graph = replace_ilabels(read_graph(vector), range(4, 7))
    write_vector_fst(tmp_path / "relabeled.fst", graph)
    reference = kaldifst.StdVectorFst.read(str(tmp_path / "relabeled.fst"))
    _, _, arcs = kaldi_walk(reference)
    labels = sorted(a[0] for state in arcs for a in state)
    assert labels == [0, 0, 0, 0, 0, 1, 1, 2, 3]


def test_npz_cache_round_trip_and_errors(tmp_path: Path) -> None:
    graph = small_graph()
    assert_same_graph(load_roundtrip(graph, tmp_path), graph)
    np.load(tmp_path / "cache.npz", allow_pickle=False).close()
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="bad.npz"):
        load_npz(tmp_path / "bad.npz")
    np.savez(tmp_path / "partial.npz", start=np.int64(0))
    with pytest.raises(DataError, match="partial.npz"):
        load_npz(tmp_path / "partial.npz")
    with pytest.raises(DataError, match="not found"):
        load_npz(tmp_path / "missing.npz")


def arc_set(offsets: list[int], dest: list[int], weight_dtype: type = np.float32) -> ArcSet:
    """An ArcSet of emitting arcs (ilabel 1, olabel 0, weight 0) for validation tests."""
    n = len(dest)
    return ArcSet(offsets=np.array(offsets, np.int64), dest=np.array(dest, np.int32),
                  ilabel=np.ones(n, np.int32), olabel=np.zeros(n, np.int32), weight=np.zeros(n, weight_dtype))


def test_validation_names_the_field() -> None:
    g = small_graph()
    with pytest.raises(ValueError, match="CsrGraph.final"):
        CsrGraph(start=0, final=g.final.astype(np.float64), emitting=g.emitting, epsilon=g.epsilon)
    with pytest.raises(ValueError, match="CsrGraph.start"):
        CsrGraph(start=3, final=g.final, emitting=g.emitting, epsilon=g.epsilon)
    with pytest.raises(ValueError, match="ArcSet.offsets"):
        arc_set([0, 2, 1, 1], [0])
    with pytest.raises(ValueError, match="ArcSet.weight"):
        arc_set([0, 1], [0], np.float64)
    with pytest.raises(ValueError, match="CsrGraph.emitting.dest"):
        CsrGraph(start=0, final=g.final, emitting=arc_set([0, 1, 1, 1], [3]), epsilon=g.epsilon)
    with pytest.raises(ValueError, match="CsrGraph.epsilon.ilabel"):
        CsrGraph(start=0, final=g.final, emitting=g.emitting, epsilon=g.emitting)
    with pytest.raises(ValueError, match="src= or offsets="):
        from_arrays(0, [0.0], dest=[], ilabel=[], olabel=[], weight=[])
    with pytest.raises(ValueError, match="ilabel"):
        from_arrays(0, [0.0], src=[0], dest=[0], ilabel=[2**40], olabel=[0], weight=[0.0])
    one = np.zeros(1, np.int32)
    with pytest.raises(ValueError, match="FstArrays.nextstate"):
        FstArrays(start=0, final=np.zeros(1, np.float32), offsets=np.array([0, 1]), ilabel=one, olabel=one,
                  weight=np.zeros(1, np.float32), nextstate=one + 1)
