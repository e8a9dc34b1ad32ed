"""CMU Sphinx acoustic-model definitions: the binary `mdef` (phones, triphones, their senone sequences and
transition matrices) and the `transition_matrices` file, read directly (no Sphinx library needed).

The binary mdef (`BMDF`, format version 1, little-endian) describes itself in a text block; after it come
ten int32 counts (CI phones, all phones, emitting states per phone, CI senones, senones, transition
matrices, senone sequences, context phones, context-tree nodes, the silence phone), the CI phone names
(NUL-terminated, padded to 4 bytes), the context tree (int16 ctx, int16 n_down, int32 phone id or first
child; -1 for an empty branch), the phones (int32 senone sequence, int32 transition matrix, 4 attribute
bytes: byte 0 is 1 for a filler phone), and the senone sequences (an int32 value count, then int16,
`n_emit_state` per sequence). The tree's levels are word
position, base phone, left and right context; a leaf at the fourth level is a triphone. Sphinx's word
positions are `i` (inside a word), `b` (its first phone), `e` (its last) and `s` (a one-phone word).

`transition_matrices` is an s3 file: a text header ending in `endhdr\\n`, the int32 byte-order word
0x11223344, int32 (matrices, source states, destination states, value count), the float32 values, and a
uint32 checksum when the header says `chksum0 yes`. The values are transition counts or probabilities;
each row is normalized here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specbench.errors import DataError

WORD_POSITIONS = ("i", "b", "e", "s")  # Sphinx's order: internal, begin, end, single
_MAGIC, _VERSION = b"BMDF", 1
_BYTE_ORDER = 0x11223344
_FIX = "Fix: point the job at a CMU Sphinx model folder (e.g. pocketsphinx's `get_model_path()/en-us/en-us`)."


@dataclass(frozen=True)
class Triphone:
    base: str
    left: str
    right: str
    position: str  # one of WORD_POSITIONS


@dataclass(frozen=True)
class SphinxMdef:
    """Phones of a Sphinx model: `ci_phones` (phone id = index), `fillers` (their ids), `silence` (its id),
    `triphones` (triphone -> phone id, ids from len(ci_phones) up), `senones` (phone id -> its emitting
    states' senone ids, shape (phones, n_emit_state)), `tmat` (phone id -> transition matrix id) and
    the senone counts."""

    ci_phones: tuple[str, ...]
    fillers: frozenset[int]
    silence: int
    triphones: dict[Triphone, int]
    senones: np.ndarray
    tmat: np.ndarray
    n_senones: int
    n_ci_senones: int

    def phone_id(self, base: str, left: str, right: str, position: str) -> int:
        """The exact triphone's id, else the base phone's context-independent id: a plain lookup with no
        intermediate back-off, not what pocketsphinx uses for a missing triphone (that is `nearest_phone`,
        which H follows)."""
        hit = self.triphones.get(Triphone(base, left, right, position))
        return hit if hit is not None else self.ci_phones.index(base)

    def nearest_phone(self, base: str, left: str, right: str, position: str) -> tuple[int, bool]:
        """The phone pocketsphinx uses for a triphone, and whether it is the exact one: the triphone; else
        the same contexts in another word position; else, with `SIL` as the left context of a word-initial
        (or one-phone) centre and as the right context of a word-final one, the same two steps; else the
        base phone (pocketsphinx's `bin_mdef_phone_id_nearest`). Filler contexts are `SIL` already."""
        others = [p for p in WORD_POSITIONS if p != position]
        hit = self.triphones.get(Triphone(base, left, right, position))
        if hit is not None:
            return hit, True
        silence = self.ci_phones[self.silence]
        new_left = silence if position in ("b", "s") else left
        new_right = silence if position in ("e", "s") else right
        contexts = [(left, right)] + ([(new_left, new_right)] if (new_left, new_right) != (left, right) else [])
        for k, (lc, rc) in enumerate(contexts):
            for pos in ([position] if k else []) + others:
                hit = self.triphones.get(Triphone(base, lc, rc, pos))
                if hit is not None:
                    return hit, False
        return self.ci_phones.index(base), False


def _fail(path: Path, what: str) -> DataError:
    return DataError(f"{path}: {what}. {_FIX}")


def read_mdef(path: Path) -> SphinxMdef:
    """Read a binary Sphinx mdef; a file that is not one raises `DataError` naming it and the fix."""
    path = Path(path)
    data = path.read_bytes()
    if data[:4] != _MAGIC or len(data) < 12:
        raise _fail(path, "not a binary Sphinx model definition (no BMDF magic)")
    try:
        return _parse_mdef(data, path)
    except (struct.error, ValueError, IndexError) as err:  # a section runs past the end of the file
        raise _fail(path, f"truncated or damaged binary mdef ({err})") from err


def _parse_mdef(data: bytes, path: Path) -> SphinxMdef:
    version, text_len = struct.unpack_from("<ii", data, 4)
    if version != _VERSION:
        raise _fail(path, f"binary mdef format version {version}, only {_VERSION} is read")
    offset = 12 + text_len
    (n_ci, n_phone, n_emit, n_ci_sen, n_sen, n_tmat, n_sseq, n_ctx, n_tree, sil) = struct.unpack_from(
        "<10i", data, offset)
    if n_emit <= 0 or n_ctx != 3:
        raise _fail(path, f"{n_emit} emitting states per phone and {n_ctx} context phones: only homogeneous "
                          "triphone models are read")
    offset += 40
    names = []
    for _ in range(n_ci):
        end = data.index(b"\0", offset)
        names.append(data[offset:end].decode("ascii"))
        offset = end + 1
    offset = (offset + 3) // 4 * 4
    tree = np.frombuffer(data, dtype=np.dtype([("ctx", "<i2"), ("n_down", "<i2"), ("index", "<i4")]),
                         count=n_tree, offset=offset)
    offset += tree.nbytes
    phones = np.frombuffer(data, dtype=np.dtype([("ssid", "<i4"), ("tmat", "<i4"), ("attr", "u1", 4)]),
                           count=n_phone, offset=offset)
    offset += phones.nbytes
    (n_values,) = struct.unpack_from("<i", data, offset)  # the sequences' value count comes first
    if n_values != n_sseq * n_emit:
        raise _fail(path, f"{n_values} senone-sequence values, the header implies {n_sseq * n_emit}")
    sseq = np.frombuffer(data, dtype="<i2", count=n_values, offset=offset + 4).reshape(n_sseq, n_emit)
    senones = sseq[phones["ssid"]].astype(np.int32)
    if senones.max() >= n_sen or senones.min() < 0 or phones["tmat"].max() >= n_tmat:
        raise _fail(path, "a senone or transition-matrix id is out of range (a damaged file?)")
    triphones = _walk_tree(tree, names, path)
    if len(triphones) != n_phone - n_ci:
        raise _fail(path, f"the context tree holds {len(triphones)} triphones, the header {n_phone - n_ci}")
    return SphinxMdef(ci_phones=tuple(names), fillers=frozenset(int(i) for i in np.flatnonzero(phones["attr"][:n_ci, 0])),
                      silence=int(sil), triphones=triphones, senones=senones, tmat=phones["tmat"].astype(np.int32),
                      n_senones=int(n_sen), n_ci_senones=int(n_ci_sen))


def _walk_tree(tree: np.ndarray, names: list[str], path: Path) -> dict[Triphone, int]:
    """Every leaf of the context tree at depth four: (word position, base, left, right) -> phone id."""
    out: dict[Triphone, int] = {}
    stack = [(i, ()) for i in range(len(WORD_POSITIONS))]  # the first level: one node per word position
    while stack:
        node, context = stack.pop()
        ctx, n_down, index = int(tree["ctx"][node]), int(tree["n_down"][node]), int(tree["index"][node])
        context = (*context, ctx)
        if n_down == 0 and index < 0:  # an empty branch (e.g. a filler has no triphones)
            continue
        if n_down == 0:
            if len(context) != 4:
                raise _fail(path, f"a context-tree leaf at depth {len(context)}")
            position, base, left, right = context
            out[Triphone(names[base], names[left], names[right], WORD_POSITIONS[position])] = index
        else:
            stack.extend((child, context) for child in range(index, index + n_down))
    return out


def read_transition_matrices(path: Path) -> np.ndarray:
    """(matrices, emitting states, emitting states + 1) row-normalized transition probabilities; the last
    column is the exit."""
    path = Path(path)
    data = path.read_bytes()
    end = data.find(b"endhdr\n")
    if not data.startswith(b"s3\n") or end < 0:
        raise _fail(path, "not an s3 transition-matrix file (no s3 header ending in endhdr)")
    try:
        return _parse_tmat(data, end + len(b"endhdr\n"), path)
    except (struct.error, ValueError) as err:
        raise _fail(path, f"truncated or damaged transition-matrix file ({err})") from err


def _parse_tmat(data: bytes, offset: int, path: Path) -> np.ndarray:
    (order,) = struct.unpack_from("<I", data, offset)
    if order != _BYTE_ORDER:
        raise _fail(path, f"byte-order word {order:#x}, expected {_BYTE_ORDER:#x} (a big-endian file?)")
    n_tmat, n_src, n_dst, count = struct.unpack_from("<4i", data, offset + 4)
    if count != n_tmat * n_src * n_dst or n_dst != n_src + 1:
        raise _fail(path, f"inconsistent sizes {n_tmat} x {n_src} x {n_dst} with {count} values")
    values = np.frombuffer(data, dtype="<f4", count=count, offset=offset + 20).reshape(n_tmat, n_src, n_dst)
    totals = values.sum(axis=2, keepdims=True)
    if np.any(values < 0) or np.any(totals <= 0):
        raise _fail(path, "a transition row is negative or empty")
    return (values / totals).astype(np.float64)
