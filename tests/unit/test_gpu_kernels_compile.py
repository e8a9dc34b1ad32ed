"""The GPU backend's CUDA kernels compile (NVRTC, no GPU needed) and every kernel the host code launches
exists in the source."""

from __future__ import annotations

import locale
import re
import subprocess
import sys

import pytest

from specbench.decoder.gpu import backend as gpu
from specbench.decoder.gpu.nvrtc import compile_ptx, kernel_names
from specbench.decoder.gpu.sources import CEILING, HEADER, LANES, kernel_source

pytestmark = pytest.mark.unit


def _no_flushing_conversion(ptx: str) -> None:
    """cupy compiles with -ftz=true: no conversion may flush subnormals (numpy and the twin do not)."""
    assert not re.search(r"cvt[.a-z0-9]*\.ftz", ptx), re.findall(r"cvt[.a-z0-9]*\.ftz[^;]*", ptx)[:3]


@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_kernels_compile_without_warnings(arch: str) -> None:
    ptx, log = compile_ptx(kernel_source(LANES), arch)
    assert "warning" not in log.lower(), log
    _no_flushing_conversion(ptx)
    for name in kernel_names(kernel_source(LANES)):
        assert f".entry {name}(" in ptx


@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_the_arc_ceiling_kernel_compiles_without_warnings(arch: str) -> None:
    source = kernel_source(CEILING)
    ptx, log = compile_ptx(source, arch, name="ceiling.cu")
    assert "warning" not in log.lower(), log
    assert kernel_names(source) == ["ceiling_expand"] and ".entry ceiling_expand(" in ptx
    _no_flushing_conversion(ptx)


def test_every_launched_kernel_is_defined() -> None:
    host = open(gpu.__file__, encoding="utf-8").read()
    launched = set(re.findall(r'_launch\("(\w+)"', host))
    defined = set(kernel_names(kernel_source(LANES)))
    assert launched and launched <= defined, launched - defined
    assert defined <= launched, f"kernels never launched: {defined - launched}"


def test_the_shared_header_is_compiled_with_each_source_and_errors_keep_the_files_lines() -> None:
    for path in (LANES, CEILING):
        source = kernel_source(path)
        assert source.startswith(HEADER.read_text(encoding="utf-8")) and "typedef" not in path.read_text("utf-8")
    broken = LANES.read_text(encoding="utf-8").splitlines()
    broken.insert(40, "__device__ int broken = undefined_name;")  # line 41 of lanes.cu, after the header's lines
    with pytest.raises(RuntimeError, match=r'lanes\.cu\(41\): error: identifier "undefined_name" is undefined'):
        compile_ptx(kernel_source(LANES).replace(LANES.read_text(encoding="utf-8"), "\n".join(broken) + "\n"))


def test_a_broken_kernel_fails_with_the_compiler_log() -> None:
    with pytest.raises(RuntimeError, match="does not compile"):
        compile_ptx('extern "C" __global__ void k(int* a) { a[0] = undefined_name; }')


def test_compiling_leaves_the_thread_locale_as_it_was() -> None:
    # NVRTC switches the calling thread to the "C" locale (uselocale) and leaves it there: outside Python's UTF-8
    # mode (`make` sets PYTHONUTF8=1; a plain `pytest` or `specbench` does not), Python then decodes subprocess
    # output as ASCII and fails on the first other byte. A fresh interpreter says what the codeset should be.
    codeset = "import locale; print(locale.nl_langinfo(locale.CODESET))"
    fresh = subprocess.run([sys.executable, "-c", codeset], capture_output=True, check=True).stdout.decode().strip()
    compile_ptx('extern "C" __global__ void k(int* a) { a[0] = 1; }')
    assert locale.nl_langinfo(locale.CODESET) == fresh
    if not sys.flags.utf8_mode and fresh.lower().replace("-", "") == "utf8":
        said = subprocess.run([sys.executable, "-c", "import sys; sys.stdout.buffer.write('\u0109'.encode())"],
                              capture_output=True, text=True, check=True).stdout
        assert said == "\u0109"
