"""What benchmark results and run tags record of where they were measured: a one-line description of the
machine ("2 x AMD EPYC ..., no GPU") and the checkout's commit."""

from __future__ import annotations

import os
import platform as _stdlib_platform
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from specbench.paths import project_root


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _stdlib_platform.processor() or _stdlib_platform.machine()


def gpu_names() -> list[str]:
    """GPU names from nvidia-smi, or [] when there is none."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, encoding="utf-8", timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


@lru_cache(maxsize=1)
def describe() -> str:
    """`"{cores} x {cpu model}, {gpu or 'no GPU'}"`; cores are the ones this process may use."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpus = gpu_names()
    return f"{cores} x {cpu_model()}, " + (", ".join(gpus) if gpus else "no GPU")


def git_commit(root: Path | None = None) -> str:
    """The checkout's commit (with `-dirty` when it has uncommitted changes), or `unknown`."""
    root = root or project_root()
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             encoding="utf-8", timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, encoding="utf-8", timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                   "VECLIB_MAXIMUM_THREADS")
_THREAD_LIMIT: dict[str, object] | None = None


def limit_threads() -> dict[str, object]:
    """Set the BLAS/OpenMP thread variables to 1 for this process and the processes it starts, so that a
    CPU measurement uses one core. They only take effect in libraries loaded afterwards: the first call
    records whether numpy was already imported (then its BLAS pool may keep more threads; element-wise
    numpy is single-threaded either way). Returns what was set, the same dict on every call."""
    global _THREAD_LIMIT
    if _THREAD_LIMIT is None:
        import sys

        numpy_loaded = "numpy" in sys.modules
        for name in THREAD_ENV_VARS:
            os.environ[name] = "1"
        _THREAD_LIMIT = {"env": {name: "1" for name in THREAD_ENV_VARS}, "numpy_loaded_before": numpy_loaded}
    return _THREAD_LIMIT
