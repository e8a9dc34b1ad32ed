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

An entry point that names its result type (`entry(signature, returns=...)`: the frame loop) goes one step
further: the first process that needs it compiles it ahead of time with `numba.pycc` into an extension module
in the same folder (under a file lock, written to a temporary name and renamed, so that concurrent processes
neither race nor load half a file), and every later process imports that module. Loading numba's cached code
costs about 0.6 s per process however small the function (numba sets up its compiler target on first use; of
that, its BLAS probe imports scipy.linalg, 0.4 s); importing the extension module costs milliseconds. Where
the module cannot be built (no C compiler; SPECBENCH_DECODER_AOT=0 turns it off), the entry point falls back to
numba's cache as above, says so once on stderr and leaves a marker beside the module so that later processes
do not try again. The module's wrapper does not check its arguments as numba's dispatcher does, so the entry
point checks every array's dtype, dimensions and C layout itself (a TypeError, never a misread array).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
import tempfile
import warnings
from pathlib import Path
from types import ModuleType

import numba
import numpy as np
from numba import njit, types

from specbench.paths import work_dir

# the kernels, and this module (how they are compiled)
KERNEL_MODULES = ("compiled_kernels.py", "lattice_kernels.py", "relax_kernels.py", "path_kernels.py",
                  "compiled_cache.py")


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


def kernel(fn):
    """A helper of the entry points: compiled into each caller, not cached on its own."""
    return njit(cache=False)(fn)


def aot_enabled() -> bool:
    """False when SPECBENCH_DECODER_AOT is 0 / false / no / off."""
    return os.environ.get("SPECBENCH_DECODER_AOT", "1").strip().lower() not in {"0", "false", "no", "off"}


def _aot_module(name: str, folder: Path) -> ModuleType | None:
    """The extension module `name` in `folder`, imported; None when it is not there."""
    path = folder / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}"
    if not path.is_file():
        return None
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def build_aot(fn, name: str, signature: str, folder: Path) -> ModuleType:
    """`fn` compiled ahead of time for `signature` (numba's full signature string, result included) into the
    extension module `name` in `folder`, or the module a concurrent process built meanwhile; imported."""
    with warnings.catch_warnings():  # numba.pycc is "pending deprecation" with no replacement yet; the JIT
        warnings.simplefilter("ignore")  # fallback stays for the day it goes
        from numba.pycc import CC

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        module = _aot_module(name, folder)
        if module is not None:
            return module
        with tempfile.TemporaryDirectory(dir=folder, prefix=f"{name}-build-") as build:
            compiler = CC(name)
            compiler.output_dir = build
            compiler.verbose = False
            compiler.export(name, signature)(fn)
            compiler.compile()
            built = Path(build) / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}"
            os.replace(built, folder / built.name)
    return _aot_module(name, folder)


def aot_name(fn_name: str) -> str:
    """The extension module's name: the function's, with a hash of the kernel sources, numba's and numpy's
    versions (the module is built against numpy's C interface), so that an edit or an upgrade builds a new one
    even where NUMBA_CACHE_DIR names a folder without the hash."""
    digest = hashlib.sha256(f"{kernel_hash()} {np.__version__}".encode()).hexdigest()[:12]
    return f"aot_{fn_name}_{digest}"


def _array_checks(signature: str) -> list[tuple[int, object, int]]:
    """(argument position, numpy dtype, dimensions) of every array argument of a numba signature string."""
    from numba.core.sigutils import normalize_signature
    from numba.np.numpy_support import as_dtype

    args, _ = normalize_signature(signature)
    return [(i, as_dtype(t.dtype), t.ndim) for i, t in enumerate(args) if isinstance(t, types.Array)]


def _checked(compiled, name: str, checks: list[tuple[int, object, int]]):
    """`compiled` (an ahead-of-time function) behind the checks numba's dispatcher makes: the module's wrapper
    reads an array's memory as the signature's type without checking dtype or layout, so a Fortran-ordered
    or int64-for-float64 argument would be misread, not refused."""

    def call(*args):
        for i, dtype, ndim in checks:
            a = args[i]
            if not (isinstance(a, np.ndarray) and a.dtype == dtype and a.ndim == ndim and a.flags.c_contiguous):
                got = (f"{a.ndim}-D {a.dtype} {'C-contiguous' if a.flags.c_contiguous else 'non-contiguous'}"
                       if isinstance(a, np.ndarray) else type(a).__name__)
                raise TypeError(f"{name}: argument {i} must be a C-contiguous {ndim}-D {dtype} array, got {got}")
        return compiled(*args)

    return call


def _load_aot(fn, signature: str, returns: str):
    """The ahead-of-time function behind its checks, building the module first where needed; None (after one
    line on stderr, and a marker so that later processes do not try again) where it cannot be had."""
    folder, name = Path(numba.config.CACHE_DIR), aot_name(fn.__name__)
    marker = folder / f"{name}.failed"
    if marker.is_file():
        return None
    cause = "load"
    try:
        module = _aot_module(name, folder)
        if module is None:
            cause = "build"
            module = build_aot(fn, name, returns + signature, folder)
            cause = "load"
        compiled = getattr(module, name)
    except Exception as error:  # noqa: BLE001 - any failure falls back to the JIT
        fix = (f"install a C compiler (e.g. Debian's gcc), then delete {marker}" if cause == "build"
               else f"delete {folder / name}* to rebuild the module")
        reason = f"{type(error).__name__}: {error}"
        folder.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"{cause} failed: {reason}\n")
        print(f"specbench: the ahead-of-time {cause} of {fn.__name__} failed ({reason}); using numba's cache "
              f"instead, slower to start. Fix: {fix}", file=sys.stderr)
        return None
    return _checked(compiled, fn.__name__, _array_checks(signature))


def entry(signature: str, returns: str | None = None):
    """An entry point: compiled once for `signature` (numba's signature string, arguments only) and cached
    in the folder above. Compiled, or loaded from the cache (about 0.2 s each), on its first call, not on
    import: a process that decodes without lattices never loads the lattice pruning. With `returns` (numba's
    type string of the result), compiled ahead of time instead where a C compiler allows (module docstring);
    `ahead_of_time` on the returned function says which it loaded (None before the first call)."""

    def wrap(fn):
        compiled = None

        @functools.wraps(fn)
        def call(*args):
            nonlocal compiled
            if compiled is None:
                if returns is not None and aot_enabled():
                    compiled = _load_aot(fn, signature, returns)
                call.ahead_of_time = compiled is not None
                if compiled is None:
                    compiled = njit(signature, cache=True, nogil=True)(fn)  # lattices pruned on host threads
            return compiled(*args)

        call.ahead_of_time = None
        return call

    return wrap
