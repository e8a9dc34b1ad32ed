"""Read and write OpenFst binary files of `StdArc` FSTs as numpy arrays.

`StdArc` is the tropical-semiring arc: int32 labels (0 = epsilon), a float32 weight (a cost: negated
natural-log probability, +inf = no path) and an int32 destination state. All little-endian. The layouts
below were checked byte by byte against files written by kaldifst 1.8.3 (OpenFst 1.8). Header::

    int32 magic = 2125659606
    string fst_type            # "vector" or "const"   (string = int32 length + bytes, no NUL)
    string arc_type            # "standard" for StdArc
    int32 version              # vector: 2; const: 2, or 1 = aligned
    int32 flags                # 1 = input symbol table follows, 2 = output symbol table, 4 = aligned
    uint64 properties          # OpenFst property bits (see `compute_properties`)
    int64 start, num_states    # start -1: no start state; vector num_states -1: read to the end
    int64 num_arcs             # const only; OpenFst writes 0 for vector files
    [symbol table: int32 magic 2125658996, string name, int64 available_key, int64 size,
     size x (string symbol, int64 key)] for each flagged table; skipped, names and sizes kept.

`vector` body, per state: float32 final, int64 num_arcs, then num_arcs arcs of (int32 ilabel, int32 olabel,
float32 weight, int32 nextstate). Records have variable length, so finding them is a sequential scan; one
Python step per state (~25 ms for 250k states) measured faster than the vectorized alternative tried
(pointer doubling over all words, ~190 ms). The arcs are then cut out with one boolean mask.

`const` body (`ConstFst<StdArc, uint32>`): `num_states` records of (float32 final, uint32 pos, uint32
narcs, uint32 niepsilons, uint32 noepsilons), then `num_arcs` 16-byte arcs as above, those of state s at
[pos, pos + narcs). In aligned files (flag 4 or version 1) both arrays start at a multiple of 16 bytes
from the start of the file.
"""

from __future__ import annotations

import os
import struct
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from specbench.errors import DataError, FstFormatError

FST_MAGIC = 2125659606
SYMBOL_TABLE_MAGIC = 2125658996
ARC_TYPE = "standard"
VECTOR_VERSION = 2
CONST_VERSIONS = (1, 2)  # 1 = aligned (OpenFst's kAlignedFileVersion), 2 = plain
FLAG_HAS_ISYMBOLS, FLAG_HAS_OSYMBOLS, FLAG_IS_ALIGNED = 1, 2, 4
ALIGNMENT = 16  # bytes; OpenFst's MappedFile::kArchAlignment

# OpenFst property bits (fst/properties.h).
K_EXPANDED, K_MUTABLE = 0x1, 0x2  # always set for a VectorFst
K_ACCEPTOR, K_NOT_ACCEPTOR = 0x10000, 0x20000
K_EPSILONS, K_NO_EPSILONS = 0x400000, 0x800000
K_I_EPSILONS, K_NO_I_EPSILONS = 0x1000000, 0x2000000
K_O_EPSILONS, K_NO_O_EPSILONS = 0x4000000, 0x8000000
K_I_LABEL_SORTED, K_NOT_I_LABEL_SORTED = 0x10000000, 0x20000000
K_O_LABEL_SORTED, K_NOT_O_LABEL_SORTED = 0x40000000, 0x80000000
K_WEIGHTED, K_UNWEIGHTED = 0x100000000, 0x200000000
# Every bit `compute_properties` decides (both the property and its negation).
COMPUTED_PROPERTIES = (
    K_ACCEPTOR | K_NOT_ACCEPTOR | K_EPSILONS | K_NO_EPSILONS | K_I_EPSILONS | K_NO_I_EPSILONS
    | K_O_EPSILONS | K_NO_O_EPSILONS | K_I_LABEL_SORTED | K_NOT_I_LABEL_SORTED | K_O_LABEL_SORTED
    | K_NOT_O_LABEL_SORTED | K_WEIGHTED | K_UNWEIGHTED
)

ARC_DTYPE = np.dtype([("ilabel", "<i4"), ("olabel", "<i4"), ("weight", "<f4"), ("nextstate", "<i4")])
CONST_STATE_DTYPE = np.dtype(
    [("final", "<f4"), ("pos", "<u4"), ("narcs", "<u4"), ("niepsilons", "<u4"), ("noepsilons", "<u4")]
)
_VECTOR_STATE_BYTES = 12  # float32 final + int64 num_arcs
_MAX_LABEL_STRING = 1 << 20  # longest fst/arc type or symbol we accept, bytes

FIX_HINT = "Fix: rebuild the graph with `specbench graph build JOB.toml --force` (JOB.toml: the graph job that wrote it)."


def _format_error(path: Path | str, problem: str) -> FstFormatError:
    """The FstFormatError for `problem` in `path`, with the fix."""
    return FstFormatError(f"{path}: {problem}. {FIX_HINT}")


@dataclass(frozen=True)
class SymbolTableInfo:
    """Name and size of a symbol table stored in an FST header (the symbols themselves are skipped)."""

    name: str
    available_key: int
    num_symbols: int


@dataclass(frozen=True)
class FstHeader:
    """The parsed FstHeader; `size` is its length in bytes including the symbol tables."""

    fst_type: str
    arc_type: str
    version: int
    flags: int
    properties: int
    start: int
    num_states: int
    num_arcs: int
    input_symbols: SymbolTableInfo | None
    output_symbols: SymbolTableInfo | None
    size: int

    @property
    def aligned(self) -> bool:
        """Whether a const FST's arrays start at 16-byte boundaries (flag 4, or const version 1)."""
        return bool(self.flags & FLAG_IS_ALIGNED) or (self.fst_type == "const" and self.version == 1)


@dataclass(frozen=True)
class FstArrays:
    """All states and arcs of an FST, arcs grouped by source state in file order.

    start: start state, -1 when there is none.
    final: (num_states,) float32 final cost per state; +inf for non-final states.
    offsets: (num_states + 1,) int64; the arcs of state s are [offsets[s], offsets[s + 1]).
    ilabel, olabel: (num_arcs,) int32 labels, 0 = epsilon.
    weight: (num_arcs,) float32 tropical cost.
    nextstate: (num_arcs,) int32 destination state.
    """

    start: int
    final: np.ndarray
    offsets: np.ndarray
    ilabel: np.ndarray
    olabel: np.ndarray
    weight: np.ndarray
    nextstate: np.ndarray

    def __post_init__(self) -> None:
        _check_fst_arrays(self)

    @property
    def num_states(self) -> int:
        """Number of states."""
        return int(self.final.shape[0])

    @property
    def num_arcs(self) -> int:
        """Number of arcs."""
        return int(self.ilabel.shape[0])


class SupportsToArrays(Protocol):
    """Anything that can list its arcs in state order (e.g. `specbench.wfst.graph.CsrGraph`)."""

    def to_arrays(self) -> FstArrays: ...


def _check_fst_arrays(fst: FstArrays) -> None:
    """Raise ValueError naming the field when `fst` is inconsistent (dtypes, shapes, ranges)."""
    expected = {
        "final": np.float32, "offsets": np.int64, "ilabel": np.int32, "olabel": np.int32,
        "weight": np.float32, "nextstate": np.int32,
    }
    for name, dtype in expected.items():
        value = getattr(fst, name)
        if not isinstance(value, np.ndarray) or value.ndim != 1 or value.dtype != dtype:
            got = f"{value.dtype} {value.shape}" if isinstance(value, np.ndarray) else type(value)
            raise ValueError(f"FstArrays.{name} must be a 1-D {np.dtype(dtype)} array, got {got}")
    num_states, num_arcs = fst.final.shape[0], fst.ilabel.shape[0]
    for name in ("olabel", "weight", "nextstate"):
        if getattr(fst, name).shape[0] != num_arcs:
            raise ValueError(f"FstArrays.{name} must have as many entries as ilabel ({num_arcs})")
    offsets = fst.offsets
    if offsets.shape[0] != num_states + 1 or offsets[0] != 0 or offsets[-1] != num_arcs:
        raise ValueError(f"FstArrays.offsets must have {num_states + 1} entries from 0 to {num_arcs}")
    if num_states and np.any(offsets[1:] < offsets[:-1]):
        raise ValueError("FstArrays.offsets must be non-decreasing")
    if num_arcs and (fst.nextstate.min() < 0 or fst.nextstate.max() >= num_states):
        raise ValueError(f"FstArrays.nextstate must lie in [0, {num_states})")
    if fst.start != -1 and not 0 <= fst.start < num_states:
        raise ValueError(f"FstArrays.start must be -1 or in [0, {num_states}), got {fst.start}")


class _Cursor:
    """Bounds-checked little-endian reads from a byte buffer; every failure is an FstFormatError."""

    def __init__(self, buf: bytes, path: Path) -> None:
        self.buf, self.path, self.pos = buf, path, 0

    def take(self, nbytes: int, what: str) -> int:
        """Reserve the next `nbytes` bytes for `what`; return their offset."""
        start, end = self.pos, self.pos + nbytes
        if end > len(self.buf):
            raise _truncated(self.path, len(self.buf), end, what)
        self.pos = end
        return start

    def unpack(self, fmt: str, what: str) -> int:
        """One integer of struct format `fmt` (e.g. '<i')."""
        return int(struct.unpack_from(fmt, self.buf, self.take(struct.calcsize(fmt), what))[0])

    def string(self, what: str) -> str:
        """An OpenFst string: int32 length, then that many bytes (decoded as UTF-8, lenient)."""
        length = self.unpack("<i", f"the length of {what}")
        if length < 0 or length > _MAX_LABEL_STRING:
            raise _format_error(self.path, f"{what} has impossible length {length} at byte {self.pos - 4}")
        start = self.take(length, what)
        return self.buf[start : start + length].decode("utf-8", errors="replace")


def _truncated(path: Path, size: int, needed: int, what: str) -> FstFormatError:
    """The error for a file that ends at byte `size` where at least `needed` bytes are required."""
    return _format_error(path, f"file is truncated at byte {size} of at least {needed} (reading {what})")


def _read_symbol_table(cur: _Cursor, which: str) -> SymbolTableInfo:
    """Parse (and drop the symbols of) one SymbolTable starting at the cursor."""
    at = cur.pos
    magic = cur.unpack("<i", f"the {which} symbol table magic number")
    if magic != SYMBOL_TABLE_MAGIC:
        raise _format_error(cur.path, f"bad {which} symbol table magic number {magic} at byte {at}")
    name = cur.string(f"the {which} symbol table name")
    available_key = cur.unpack("<q", f"the {which} symbol table available key")
    size = cur.unpack("<q", f"the {which} symbol table size")
    if size < 0:
        raise _format_error(cur.path, f"{which} symbol table has a negative size {size}")
    if size * 12 > len(cur.buf) - cur.pos:  # each entry is at least int32 length + int64 key
        raise _truncated(cur.path, len(cur.buf), cur.pos + size * 12, f"{size} {which} symbols")
    entry = f"the {which} symbols"
    for _ in range(size):
        cur.string(entry)
        cur.unpack("<q", entry)
    return SymbolTableInfo(name=name, available_key=available_key, num_symbols=size)


def parse_header(buf: bytes, path: Path) -> FstHeader:
    """Parse the FstHeader and symbol tables at the start of `buf` (the bytes of file `path`).

    Raises FstFormatError for a bad magic number, truncation, or an fst/arc type or version this module
    cannot read.
    """
    cur = _Cursor(buf, path)
    magic = cur.unpack("<i", "the magic number")
    if magic != FST_MAGIC:
        raise _format_error(path, f"bad magic number {magic} (expected {FST_MAGIC}); not an OpenFst file")
    fst_type = cur.string("the fst type")
    if fst_type not in ("vector", "const"):
        raise _format_error(path, f"unsupported fst type {fst_type!r} (supported: 'vector', 'const')")
    arc_type = cur.string("the arc type")
    if arc_type != ARC_TYPE:
        raise _format_error(path, f"arc type is {arc_type!r}, expected {ARC_TYPE!r} (tropical StdArc)")
    version, flags = cur.unpack("<i", "the version"), cur.unpack("<i", "the flags")
    known = (VECTOR_VERSION,) if fst_type == "vector" else CONST_VERSIONS
    if version not in known:
        raise _format_error(path, f"unsupported {fst_type} fst version {version} (supported: {known})")
    if flags & ~(FLAG_HAS_ISYMBOLS | FLAG_HAS_OSYMBOLS | FLAG_IS_ALIGNED):
        raise _format_error(path, f"unknown header flags {flags:#x}")
    properties = cur.unpack("<Q", "the properties")
    start, num_states = cur.unpack("<q", "the start state"), cur.unpack("<q", "the number of states")
    num_arcs = cur.unpack("<q", "the number of arcs")
    isyms = _read_symbol_table(cur, "input") if flags & FLAG_HAS_ISYMBOLS else None
    osyms = _read_symbol_table(cur, "output") if flags & FLAG_HAS_OSYMBOLS else None
    return FstHeader(
        fst_type=fst_type, arc_type=arc_type, version=version, flags=flags, properties=properties,
        start=start, num_states=num_states, num_arcs=num_arcs, input_symbols=isyms,
        output_symbols=osyms, size=cur.pos,
    )


def _read_bytes(path: Path) -> bytes:
    """The whole file; a missing or unreadable file is a DataError naming it."""
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise DataError(f"{path}: cannot read the graph file ({err.strerror}). {FIX_HINT}") from err


def read_fst_header(path: Path | str) -> FstHeader:
    """The header of the OpenFst binary file at `path`."""
    path = Path(path)
    return parse_header(_read_bytes(path), path)


def read_fst(path: Path | str) -> FstArrays:
    """Read a `vector` or `const` StdArc OpenFst binary file into arrays (see `FstArrays`).

    Raises FstFormatError naming the file, the problem and the fix for any malformed input, and DataError
    when the file cannot be read at all.
    """
    path = Path(path)
    buf = _read_bytes(path)
    header = parse_header(buf, path)
    read_body = _read_vector_body if header.fst_type == "vector" else _read_const_body
    return read_body(buf, header, path)


def _scan_vector_states(words: memoryview, num_states: int) -> tuple[np.ndarray, int]:
    """Find the state records of a vector body viewed as uint32 words (one Python step per state).

    Returns (starts, end): starts (n,) int64 word index of each record found, end the word index just past
    the last one. When the body is cut short, end > len(words) and the cut record is starts[-1].
    `num_states` -1 scans to the end of the body.
    """
    total, pos = len(words), 0
    if num_states >= 0:
        starts = array("q", bytes(8 * num_states))
        state = 0
        try:
            for state in range(num_states):
                starts[state] = pos
                pos += 3 + 4 * words[pos + 1]  # low word of the int64 arc count; high word checked later
        except IndexError:  # the arc count of `state` lies past the end
            return np.frombuffer(starts, np.int64, count=state + 1), pos + 3
    else:
        starts = array("q")
        while pos < total:
            starts.append(pos)
            if pos + 1 >= total:
                break
            pos += 3 + 4 * words[pos + 1]
        pos = max(pos, starts[-1] + 3) if starts else 0
    return np.frombuffer(starts, np.int64) if len(starts) else np.zeros(0, np.int64), pos


def _read_vector_body(buf: bytes, header: FstHeader, path: Path) -> FstArrays:
    """Decode the state records of a `vector` FST that follow `header` in `buf`."""
    body_bytes = len(buf) - header.size
    if header.num_states < -1:
        raise _format_error(path, f"negative number of states {header.num_states}")
    if header.num_states * _VECTOR_STATE_BYTES > body_bytes:
        need = header.size + header.num_states * _VECTOR_STATE_BYTES
        raise _truncated(path, len(buf), need, f"{header.num_states} states")
    total = body_bytes // 4
    words = memoryview(buf)[header.size : header.size + 4 * total].cast("I")
    starts, end = _scan_vector_states(words, header.num_states)
    high_pos = starts[starts + 2 < total] + 2
    high = np.frombuffer(buf, "<u4", count=total, offset=header.size)[high_pos]
    if np.any(high != 0):
        bad = int(np.flatnonzero(high != 0)[0])
        raise _format_error(path, f"state {bad} has an impossible arc count (high word {int(high[bad])})")
    if end > total:
        of = f" of {header.num_states}" if header.num_states >= 0 else ""
        raise _truncated(path, len(buf), header.size + 4 * end, f"state {starts.shape[0] - 1}{of}")
    if header.size + 4 * end != len(buf):
        at = header.size + 4 * end
        raise _format_error(path, f"{len(buf) - at} unexpected bytes after the last state (byte {at})")
    return _vector_arrays(buf, header, path, starts, end)


def _vector_arrays(buf: bytes, header: FstHeader, path: Path, starts: np.ndarray, end: int) -> FstArrays:
    """Cut the finals, arc counts and arcs out of a fully scanned vector body."""
    words = np.frombuffer(buf, "<u4", count=end, offset=header.size)
    num_states = starts.shape[0]
    is_arc = np.ones(end, dtype=bool)
    for k in range(3):
        is_arc[starts + k] = False
    arcs = words[is_arc].reshape(-1, 4).T.copy()  # (4, num_arcs): ilabel, olabel, weight, nextstate
    offsets = np.zeros(num_states + 1, dtype=np.int64)
    np.cumsum(words[starts + 1], dtype=np.int64, out=offsets[1:])
    final = words[starts].view("<f4").astype(np.float32)
    return _checked_arrays(
        path, header, final, offsets, arcs[0].view(np.int32), arcs[1].view(np.int32),
        arcs[2].view(np.float32), arcs[3].view(np.int32),
    )


def _read_const_body(buf: bytes, header: FstHeader, path: Path) -> FstArrays:
    """Decode the states and arcs arrays of a `const` FST that follow `header` in `buf`."""
    num_states, num_arcs = header.num_states, header.num_arcs
    if num_states < 0 or num_arcs < 0:
        raise _format_error(path, f"const fst with {num_states} states and {num_arcs} arcs")
    pos = _align(header.size) if header.aligned else header.size
    end = pos + num_states * CONST_STATE_DTYPE.itemsize
    if end > len(buf):
        raise _truncated(path, len(buf), end, f"{num_states} states")
    states = np.frombuffer(buf, CONST_STATE_DTYPE, count=num_states, offset=pos)
    pos = _align(end) if header.aligned else end
    end = pos + num_arcs * ARC_DTYPE.itemsize
    if end > len(buf):
        raise _truncated(path, len(buf), end, f"{num_arcs} arcs")
    arcs = np.frombuffer(buf, ARC_DTYPE, count=num_arcs, offset=pos)
    pos = end
    tail = buf[pos:]
    if tail and not (header.aligned and len(tail) < ALIGNMENT and not tail.strip(b"\0")):
        raise _format_error(path, f"{len(tail)} unexpected bytes after the last arc (at byte {pos})")
    offsets = np.zeros(num_states + 1, dtype=np.int64)
    np.cumsum(states["narcs"], dtype=np.int64, out=offsets[1:])
    if offsets[-1] != num_arcs:
        raise _format_error(path, f"the states have {offsets[-1]} arcs in all, the header says {num_arcs}")
    misplaced = np.flatnonzero(states["pos"] != offsets[:-1])
    if misplaced.size:
        s = int(misplaced[0])
        raise _format_error(path, f"the arcs of state {s} start at {states['pos'][s]}, expected {offsets[s]}")
    columns = [arcs[name].astype(ARC_DTYPE[name].type) for name in ARC_DTYPE.names]
    return _checked_arrays(path, header, states["final"].astype(np.float32), offsets, *columns)


def _align(pos: int) -> int:
    """`pos` rounded up to a multiple of ALIGNMENT bytes."""
    return -(-pos // ALIGNMENT) * ALIGNMENT


def _checked_arrays(
    path: Path, header: FstHeader, final: np.ndarray, offsets: np.ndarray, ilabel: np.ndarray,
    olabel: np.ndarray, weight: np.ndarray, nextstate: np.ndarray,
) -> FstArrays:
    """Check start state, destinations and weights against the file, then build the FstArrays."""
    num_states = final.shape[0]
    if not (header.start == -1 or 0 <= header.start < num_states):
        raise _format_error(path, f"start state {header.start} is outside [0, {num_states})")
    bad = np.flatnonzero((nextstate < 0) | (nextstate >= num_states))
    if bad.size:
        arc = int(bad[0])
        state = int(np.searchsorted(offsets, arc, side="right") - 1)
        where = f"arc {arc - int(offsets[state])} of state {state}"
        raise _format_error(path, f"{where} has nextstate {int(nextstate[arc])}, outside [0, {num_states})")
    for name, values in (("final weight", final), ("arc weight", weight)):
        bad = np.flatnonzero(np.isnan(values) | (values == -np.inf))
        if bad.size:
            raise _format_error(path, f"{name} {int(bad[0])} is {values[bad[0]]}, not a tropical weight")
    return FstArrays(
        start=int(header.start), final=final, offsets=offsets, ilabel=ilabel, olabel=olabel,
        weight=weight, nextstate=nextstate,
    )


def compute_properties(fst: FstArrays) -> int:
    """OpenFst property bits of `fst` that are cheap to decide, plus kExpanded | kMutable (a VectorFst).

    Decides acceptor, (input/output) epsilons, input/output label sortedness and weightedness, with the
    same definitions as OpenFst's ComputeProperties; every other property is left unknown, which OpenFst
    computes on demand.
    """
    il, ol, w = fst.ilabel, fst.olabel, fst.weight
    same_state = np.ones(max(fst.num_arcs - 1, 0), dtype=bool)  # arc i and i + 1 share a source state
    inner = fst.offsets[1:-1]
    same_state[inner[(inner > 0) & (inner < fst.num_arcs)] - 1] = False
    trivial = np.all((w == 0) | (w == np.inf)) and np.all((fst.final == 0) | (fst.final == np.inf))
    decided = [
        (np.all(il == ol), K_ACCEPTOR, K_NOT_ACCEPTOR),
        (np.any((il == 0) & (ol == 0)), K_EPSILONS, K_NO_EPSILONS),
        (np.any(il == 0), K_I_EPSILONS, K_NO_I_EPSILONS),
        (np.any(ol == 0), K_O_EPSILONS, K_NO_O_EPSILONS),
        (not np.any((il[1:] < il[:-1]) & same_state), K_I_LABEL_SORTED, K_NOT_I_LABEL_SORTED),
        (not np.any((ol[1:] < ol[:-1]) & same_state), K_O_LABEL_SORTED, K_NOT_O_LABEL_SORTED),
        (not trivial, K_WEIGHTED, K_UNWEIGHTED),
    ]
    props = K_EXPANDED | K_MUTABLE
    for holds, yes, no in decided:
        props |= yes if holds else no
    return props


def _vector_header(fst: FstArrays) -> bytes:
    """FstHeader bytes of a version-2 `vector` StdArc file without symbol tables."""

    def string(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<i", len(raw)) + raw

    return (
        struct.pack("<i", FST_MAGIC) + string("vector") + string(ARC_TYPE)
        + struct.pack("<iiQqqq", VECTOR_VERSION, 0, compute_properties(fst), fst.start, fst.num_states, 0)
    )


def vector_fst_bytes(fst: FstArrays) -> bytes:
    """The complete `vector` file for `fst`, byte-identical to OpenFst's except the property bits.

    The header's num_arcs is 0, as OpenFst writes it for vector files.
    """
    num_states, num_arcs = fst.num_states, fst.num_arcs
    counts = np.diff(fst.offsets)
    starts = 3 * np.arange(num_states, dtype=np.int64) + 4 * fst.offsets[:-1]
    words = np.empty(3 * num_states + 4 * num_arcs, dtype="<u4")
    is_arc = np.ones(words.shape[0], dtype=bool)
    for k in range(3):
        is_arc[starts + k] = False
    words[starts] = fst.final.astype("<f4").view("<u4")
    words[starts + 1] = (counts & 0xFFFFFFFF).astype("<u4")
    words[starts + 2] = (counts >> 32).astype("<u4")
    arcs = np.empty((num_arcs, 4), dtype="<u4")
    arcs[:, 0] = fst.ilabel.astype("<i4").view("<u4")
    arcs[:, 1] = fst.olabel.astype("<i4").view("<u4")
    arcs[:, 2] = fst.weight.astype("<f4").view("<u4")
    arcs[:, 3] = fst.nextstate.astype("<i4").view("<u4")
    words[is_arc] = arcs.ravel()
    return _vector_header(fst) + words.tobytes()


def write_vector_fst(path: Path | str, graph: FstArrays | SupportsToArrays) -> None:
    """Write `graph` as a version-2 `vector` StdArc OpenFst binary file at `path`.

    `graph` is an FstArrays or anything with `to_arrays()` (e.g. a CsrGraph); arcs are written per state
    in the order it gives. The file is written to a temporary name and renamed, so readers never see a
    partial file. The properties word holds kExpanded | kMutable and the bits of `compute_properties`.
    """
    path = Path(path)
    fst = graph if isinstance(graph, FstArrays) else graph.to_arrays()
    data = vector_fst_bytes(fst)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
