"""Where the compiled CPU decoder's numba code is cached on disk, and the decorator its kernels use.

numba's own cache (`cache=True`) keys a function by its source file, but not by the jitted functions it
calls: after an edit (or an upgrade) a caller could load machine code compiled against an older callee. So
the kernels' cache lives in a folder named after a hash of every kernel module's source, under the work
directory (`.specbench/numba/<hash>`), unless NUMBA_CACHE_DIR names one. A second process then starts
decoding without compiling (about a second instead of half a minute).
"""

from __future__ import annotations

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


if not os.environ.get("NUMBA_CACHE_DIR"):
    numba.config.CACHE_DIR = str(work_dir() / "numba" / kernel_hash())


def kernel(fn):  # noqa: ANN001, ANN201 - a numba dispatcher
    """`numba.njit(cache=True)` with the cache folder above."""
    return njit(cache=True)(fn)
