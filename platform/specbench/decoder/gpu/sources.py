"""The CUDA sources of the GPU code, each with the shared header `kernels/float_keys.cuh` put before it (the
integer types, the exact float/double conversions and the order-preserving key bits), then a `#line`
directive, so that compiler messages give the kernel file's own line numbers. The header goes in as text, not
as an `#include`: cupy's compile cache is keyed by the source it is given, so a changed header changes the
key. Nothing here imports cupy; NVRTC (`nvrtc.py`, CI) and cupy (the backend) compile the same text."""

from __future__ import annotations

from pathlib import Path

KERNEL_DIR = Path(__file__).with_name("kernels")
HEADER = KERNEL_DIR / "float_keys.cuh"
LANES = KERNEL_DIR / "lanes.cu"
CEILING = KERNEL_DIR / "ceiling.cu"


def kernel_source(path: Path) -> str:
    """The source of the CUDA file `path` as compiled: the shared header, then the file from its line 1."""
    return (f"{HEADER.read_text(encoding='utf-8')}#line 1 \"{path.name}\"\n"
            f"{path.read_text(encoding='utf-8')}")
