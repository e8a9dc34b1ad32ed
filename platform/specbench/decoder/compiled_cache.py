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
numba's cache as above and says so once on stderr.
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


def entry(signature: str, returns: str | None = None):
    """An entry point: compiled once for `signature` (numba's signature string, arguments only) and cached
    in the folder above. Compiled, or loaded from the cache (about 0.2 s each), on its first call, not on
    import: a process that decodes without lattices never loads the lattice pruning. With `returns` (numba's
    type string of the result), compiled ahead of time instead where a C compiler allows (module docstring)."""

    def wrap(fn):
        compiled = None

        def load():
            if returns is not None and aot_enabled():
                folder, name = Path(numba.config.CACHE_DIR), f"aot_{fn.__name__}"
                try:
                    module = _aot_module(name, folder) or build_aot(fn, name, returns + signature, folder)
                    return getattr(module, name)
                except Exception as error:  # noqa: BLE001 - any build failure falls back to the JIT
                    print(f"specbench: the ahead-of-time build of {fn.__name__} failed ({type(error).__name__}: "
                          f"{error}); using numba's cache instead (install a C compiler, e.g. Debian's gcc, "
                          "to start decoders faster)", file=sys.stderr)
            return njit(signature, cache=True)(fn)

        @functools.wraps(fn)
        def call(*args):
            nonlocal compiled
            if compiled is None:
                compiled = load()
            return compiled(*args)

        return call

    return wrap
