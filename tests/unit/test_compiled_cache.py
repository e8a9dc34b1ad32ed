"""The compiled decoder's entry points (`decoder/compiled_cache.py`): built ahead of time into an extension
module that later processes import, the same results as numba's JIT, and a clear fallback to the JIT where
the build fails or is turned off. A small kernel stands in for the frame loop (compiling the frame loop takes
half a minute; the decoder tests use it)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import numba
import numpy as np
import pytest

from specbench.decoder.compiled_cache import entry

SIGNATURE = "(float64[::1], int64)"
RETURNS = "Tuple((float64, int64[::1]))"


def running_min(costs, stride):
    """The lowest cost and the positions stride apart."""
    low = np.inf
    for c in costs:
        low = min(low, c)
    return low, np.arange(0, costs.shape[0], stride)


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SPECBENCH_DECODER_AOT", raising=False)
    return tmp_path


def test_ahead_of_time_module_is_built_once_and_equals_the_jit(cache_dir: Path) -> None:
    costs = np.array([3.5, 1.25, 2.0, 7.0])
    fn = entry(SIGNATURE, returns=RETURNS)(running_min)
    low, picks = fn(costs, 2)
    module = cache_dir / f"aot_running_min{sysconfig.get_config_var('EXT_SUFFIX')}"
    assert module.is_file() and not list(cache_dir.glob("*-build-*"))  # built, renamed into place
    jit_low, jit_picks = numba.njit(running_min)(costs, 2)
    assert low == jit_low == 1.25 and picks.tolist() == jit_picks.tolist() == [0, 2]
    # another process imports the module without compiling anything
    code = (f"import sys; sys.path[:0] = {sys.path!r}\n"
            "import numpy as np, numba\n"
            f"numba.config.CACHE_DIR = {str(cache_dir)!r}\n"
            "from specbench.decoder import compiled_cache\n"
            f"print(compiled_cache._aot_module('aot_running_min', compiled_cache.Path({str(cache_dir)!r}))"
            ".aot_running_min(np.array([4.0, 2.0]), 1))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "(2.0, array([0, 1]))"


def test_turned_off_it_is_numbas_jit(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBENCH_DECODER_AOT", "0")
    fn = entry(SIGNATURE, returns=RETURNS)(running_min)
    assert fn(np.array([2.0, 0.5]), 1)[0] == 0.5
    assert not list(cache_dir.glob("aot_*"))


def test_a_failed_build_says_so_and_falls_back_to_the_jit(cache_dir: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    fn = entry(SIGNATURE, returns="Tuple((no_such_type, int64[::1]))")(running_min)
    assert fn(np.array([2.0, 0.5]), 1)[0] == 0.5
    err = capsys.readouterr().err
    assert "ahead-of-time build of running_min failed" in err and "numba's cache instead" in err


def test_the_decoder_runs_the_frame_loop_built_ahead_of_time() -> None:
    from test_decoder_bruteforce import CHAIN, INFINITE_BEAM, compile_graph

    from specbench.decoder.cpu_compiled import CompiledCpuDecoder

    decoder = CompiledCpuDecoder(compile_graph(CHAIN), INFINITE_BEAM)
    decoder.decode(np.log(np.full((4, 3), 1 / 3, dtype=np.float32)), "u")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    assert (Path(numba.config.CACHE_DIR) / f"aot_decode_frames{suffix}").is_file()
