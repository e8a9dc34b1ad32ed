"""The compiled decoder's entry points (`decoder/compiled_cache.py`): built ahead of time into an extension
module that later processes import, the same results as numba's JIT, and a clear fallback to the JIT where
the build fails or is turned off. A small kernel stands in for the frame loop (compiling the frame loop takes
half a minute; the decoder tests use it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numba
import numpy as np
import pytest

from specbench.decoder.compiled_cache import aot_name, entry

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler for numba.pycc")
SIGNATURE = "(float64[::1], int64)"
RETURNS = "Tuple((float64, int64[::1]))"


def running_min(costs, stride):
    """The lowest cost and the positions stride apart."""
    low = np.inf
    for c in costs:
        low = min(low, c)
    return low, np.arange(0, costs.shape[0], stride)


@needs_cc
def test_ahead_of_time_module_is_built_once_and_equals_the_jit(cache_dir: Path) -> None:
    costs = np.array([3.5, 1.25, 2.0, 7.0])
    fn = entry(SIGNATURE, returns=RETURNS)(running_min)
    assert fn.ahead_of_time is None
    low, picks = fn(costs, 2)
    assert fn.ahead_of_time is True
    name = aot_name("running_min")
    module = cache_dir / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}"  # named after the sources
    assert module.is_file()  # built and renamed into place
    assert not list(cache_dir.glob("*-build-*")) and not list(cache_dir.glob("*.failed"))
    jit_low, jit_picks = numba.njit(running_min)(costs, 2)
    assert low == jit_low == 1.25 and picks.tolist() == jit_picks.tolist() == [0, 2]
    # the module reads memory as the signature says, so the entry point refuses what it would misread
    with pytest.raises(TypeError, match="argument 0 must be a C-contiguous 1-D float64 array, got 1-D int64"):
        fn(np.array([1, 2]), 1)
    with pytest.raises(TypeError, match="non-contiguous"):
        fn(costs[::2], 1)
    # another process imports the module without compiling anything
    code = (f"import sys; sys.path[:0] = {sys.path!r}\n"
            "import numpy as np\n"
            "from specbench.decoder import compiled_cache\n"
            f"module = compiled_cache._aot_module({name!r}, compiled_cache.Path({str(cache_dir)!r}))\n"
            f"print(module.{name}(np.array([4.0, 2.0]), 1))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "(2.0, array([0, 1]))" and module.is_file()


def test_turned_off_it_is_numbas_jit(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBENCH_DECODER_AOT", "0")
    fn = entry(SIGNATURE, returns=RETURNS)(running_min)
    assert fn(np.array([2.0, 0.5]), 1)[0] == 0.5
    assert not list(cache_dir.glob("aot_*"))


def test_a_failed_build_says_so_once_and_falls_back_to_the_jit(cache_dir: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    broken = "Tuple((no_such_type, int64[::1]))"
    fn = entry(SIGNATURE, returns=broken)(running_min)
    assert fn(np.array([2.0, 0.5]), 1)[0] == 0.5 and fn.ahead_of_time is False
    err = capsys.readouterr().err
    assert "ahead-of-time build of running_min failed" in err and "numba's cache instead" in err
    (marker,) = cache_dir.glob("*.failed")
    assert str(marker) in err and "build failed" in marker.read_text()
    again = entry(SIGNATURE, returns=broken)(running_min)  # a later process: no second attempt, no message
    assert again(np.array([3.0]), 1)[0] == 3.0 and again.ahead_of_time is False
    assert capsys.readouterr().err == ""


@needs_cc
def test_the_decoder_runs_the_frame_loop_built_ahead_of_time() -> None:
    from test_decoder_bruteforce import CHAIN, INFINITE_BEAM, compile_graph

    from specbench.decoder import compiled_kernels
    from specbench.decoder.cpu_compiled import CompiledCpuDecoder

    decoder = CompiledCpuDecoder(compile_graph(CHAIN), INFINITE_BEAM)
    scores = np.log(np.random.default_rng(3).dirichlet(np.ones(3), size=6).astype(np.float32))
    result = decoder.decode(scores, "u")
    assert compiled_kernels.decode_frames.ahead_of_time is True
    # Fortran-ordered scores (a transposed matrix) decode as the same scores in C order
    fortran = decoder.decode(np.asfortranarray(scores), "u")
    assert (fortran.word_ids, fortran.graph_cost, fortran.acoustic_cost) == (
        result.word_ids, result.graph_cost, result.acoustic_cost)
