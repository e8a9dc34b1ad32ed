"""Compile the decoder's CUDA kernels with NVRTC, without a GPU: a check that runs on every machine.

NVRTC (the CUDA runtime compiler, `libnvrtc`, from the `nvidia-cuda-nvrtc-cu12` wheel) compiles CUDA C++
to PTX without a device or a driver, so CI catches kernel compile errors even though it has no GPU. The GPU
backend itself compiles the same source through cupy at run time.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_LIBC = ctypes.CDLL(None)
_LIBC.uselocale.restype = ctypes.c_void_p
_LIBC.uselocale.argtypes = [ctypes.c_void_p]


@contextmanager
def thread_locale_kept() -> Iterator[None]:
    """Run the block and give the calling thread back the locale it had. NVRTC (also when cupy compiles)
    switches the thread to the "C" locale with `uselocale` and leaves it there, so afterwards Python reads
    every subprocess's output as ASCII (`locale.getpreferredencoding`) and fails on the first other byte."""
    previous = _LIBC.uselocale(None)  # NULL: only asks
    try:
        yield
    finally:
        _LIBC.uselocale(previous)


class NvrtcUnavailable(RuntimeError):
    """libnvrtc cannot be found or loaded."""


def _library() -> ctypes.CDLL:
    try:
        import nvidia.cuda_nvrtc as package
    except ImportError as err:
        raise NvrtcUnavailable(f"the nvidia-cuda-nvrtc-cu12 wheel is not installed ({err})") from err
    for folder in package.__path__:
        for lib in sorted((Path(folder) / "lib").glob("libnvrtc.so*")):
            try:
                return ctypes.CDLL(str(lib))
            except OSError:
                continue
    raise NvrtcUnavailable("no loadable libnvrtc.so in the nvidia-cuda-nvrtc-cu12 wheel")


def kernel_names(source: str) -> list[str]:
    """The names of the `extern "C" __global__` kernels in a CUDA source."""
    return re.findall(r'extern "C" __global__ void (\w+)\(', source)


def compile_ptx(source: str, arch: str = "compute_90", name: str = "lanes.cu") -> tuple[str, str]:
    """(PTX, compiler log) of `source` for `arch` with the flags cupy uses (`-ftz=true`, which flushes
    subnormals in plain float conversions: the kernels avoid them); RuntimeError with the log when
    compilation fails."""
    lib = _library()
    with thread_locale_kept():
        return _compile(lib, source, arch, name)


def _compile(lib: ctypes.CDLL, source: str, arch: str, name: str) -> tuple[str, str]:
    program = ctypes.c_void_p()
    status = lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), name.encode(), 0, None, None)
    if status:
        raise RuntimeError(f"nvrtcCreateProgram failed with status {status}")
    try:
        options = [f"--gpu-architecture={arch}".encode(), b"--std=c++14", b"-ftz=true"]  # as cupy compiles
        status = lib.nvrtcCompileProgram(program, len(options), (ctypes.c_char_p * len(options))(*options))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(program, log)
        text = log.value.decode(errors="replace")
        if status:
            raise RuntimeError(f"{name} does not compile for {arch}:\n{text}")
        lib.nvrtcGetPTXSize(program, ctypes.byref(size))
        ptx = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetPTX(program, ptx)
        return ptx.value.decode(errors="replace"), text
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))
