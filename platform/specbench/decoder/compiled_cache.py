"""Where the compiled CPU decoder's numba code is cached on disk, and the decorators its kernels use.

Two hazards of numba's on-disk cache (`cache=True`) are designed out:
- it keys a function by its own source file only, so after an edit (or an upgrade) a caller could load
  code built against an older callee: the cache lives in a folder named after a hash of every kernel
  module's source and numba's version, in the user's cache (`$XDG_CACHE_HOME`, else `~/.cache`:
  `specbench-numba/<hash>`, shared by every checkout and work directory of the same sources), unless
  NUMBA_CACHE_DIR names one;
- processes compiling at once (Ray workers, benchmark processes) each number the overloads they add to a
  function's index, so with several signatures one process's index can name another's machine code (a
  crash, not an error): only the entry points are cached (`entry`), each compiled for exactly one
  signature (a call with other types is a TypeError, never a second overload), on first call; the
  helpers they call (`kernel`) are compiled into them.
A second process then starts decoding without compiling (about a second instead of half a minute).
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

import numba
from numba import njit

from specbench.paths import work_dir

KERNEL_MODULES = ("compiled_kernels.py", "lattice_kernels.py")


def kernel_hash() -> str:
    """sha256 (16 hex digits) of the kernel modules' sources and the numba version."""
    digest = hashlib.sha256(numba.__version__.encode())
    for name in KERNEL_MODULES:
        digest.update((Path(__file__).with_name(name)).read_bytes())
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    """`$XDG_CACHE_HOME/specbench-numba`, else `~/.cache/specbench-numba`; the work directory's `numba/`
    where the home folder cannot be written."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specbench-numba"
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError:
        return work_dir() / "numba"
    return base


if not os.environ.get("NUMBA_CACHE_DIR"):
    numba.config.CACHE_DIR = str(cache_root() / kernel_hash())


def kernel(fn):  # noqa: ANN001, ANN201 - a numba dispatcher
    """A helper of the entry points: compiled into each caller, not cached on its own."""
    return njit(cache=False)(fn)


def entry(signature: str):  # noqa: ANN201 - a decorator
    """An entry point: compiled once for `signature` (numba's signature string, arguments only) and cached
    in the folder above. Compiled, or loaded from the cache (about 0.2 s each), on its first call, not on
    import: a process that decodes without lattices never loads the lattice pruning."""

    def wrap(fn):  # noqa: ANN001, ANN202
        dispatcher = None

        @functools.wraps(fn)
        def call(*args):  # noqa: ANN002, ANN202
            nonlocal dispatcher
            if dispatcher is None:
                dispatcher = njit(signature, cache=True)(fn)
            return dispatcher(*args)

        return call

    return wrap
