"""The compiled decoder's cache by hand (`decoder/compiled_cache.py`): the cache folder's hash covers every
kernel module's source and numba's version; the module name follows the kernel hash and numpy's version; the
cache root follows XDG_CACHE_HOME and falls back to the work directory; SPECBENCH_DECODER_AOT's off words; a
module already in the folder (built by another process, or damaged) is loaded, never compiled over; the
ahead-of-time checks refuse an array of the wrong dimensions; a damaged module is reported as a failed load
(naming the files to delete) and the JIT takes over; the JIT fallback is cached on disk and compiled for
exactly one signature."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sysconfig
from pathlib import Path

import numba
import numpy as np
import pytest
from test_compiled_cache import RETURNS, SIGNATURE, running_min

from specbench.decoder import compiled_cache
from specbench.decoder.compiled_cache import (
    _array_checks,
    _checked,
    aot_enabled,
    aot_name,
    build_aot,
    cache_root,
    entry,
    kernel_hash,
)

pytestmark = pytest.mark.unit
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")

EXT = sysconfig.get_config_var("EXT_SUFFIX")


def test_the_kernel_hash_covers_numba_and_every_kernel_module() -> None:
    # by hand: sha256 of numba's version followed by the five sources, in this order, first 16 hex digits
    here = Path(compiled_cache.__file__).parent
    names = ("compiled_kernels.py", "lattice_kernels.py", "relax_kernels.py", "path_kernels.py", "compiled_cache.py")
    expected = hashlib.sha256(numba.__version__.encode() + b"".join((here / n).read_bytes() for n in names))
    assert kernel_hash() == expected.hexdigest()[:16]


def test_another_numba_or_numpy_gives_another_module_name(monkeypatch: pytest.MonkeyPatch) -> None:
    name = aot_name("decode_frames")
    assert name.startswith("aot_decode_frames_") and len(name) == len("aot_decode_frames_") + 12
    assert aot_name("decode_frames") == name  # the same sources and versions: the same module
    with monkeypatch.context() as m:
        m.setattr(np, "__version__", np.__version__ + ".post1")
        assert aot_name("decode_frames") != name
    with monkeypatch.context() as m:
        m.setattr(numba, "__version__", numba.__version__ + ".post1")  # through the kernel hash
        assert aot_name("decode_frames") != name
    assert aot_name("decode_frames") == name


def test_the_cache_root_is_under_xdg_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "specbench-numba" and cache_root().is_dir()


def test_an_unwritable_cache_home_falls_back_to_the_work_directory(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a-file").write_text("")  # a folder cannot be made under a file
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    assert cache_root() == (tmp_path / "home").resolve() / "numba"


@pytest.mark.parametrize(("value", "enabled"), [
    (None, True), ("1", True), ("yes", True), ("0", False), ("false", False), ("No", False), (" OFF ", False),
    ("off", False)])
def test_the_ahead_of_time_switch(value: str | None, enabled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if value is None:
        monkeypatch.delenv("SPECBENCH_DECODER_AOT", raising=False)
    else:
        monkeypatch.setenv("SPECBENCH_DECODER_AOT", value)
    assert aot_enabled() is enabled


def test_a_damaged_module_already_there_is_not_compiled_over(cache_dir: Path) -> None:
    # the module in the folder is the one a build under the lock loads; damaged, the load fails and the file
    # is left as it was (no compiler ran, no temporary folder left)
    name = aot_name("running_min")
    (cache_dir / f"{name}{EXT}").write_bytes(b"\x7fELF half a file")
    with pytest.raises(ImportError):
        build_aot(running_min, name, RETURNS + SIGNATURE, cache_dir)
    assert (cache_dir / f"{name}{EXT}").read_bytes() == b"\x7fELF half a file"
    assert not list(cache_dir.glob("*-build-*"))


@needs_cc
def test_a_module_another_process_built_is_loaded_not_rebuilt(cache_dir: Path) -> None:
    # a one-line C extension module stands for the module a concurrent process built (cc builds it in well
    # under a second; numba.pycc would take several): build_aot returns it as it is
    name = aot_name("running_min")
    source = cache_dir / "other.c"
    source.write_text("#include <Python.h>\n"
                      f"static struct PyModuleDef def = {{PyModuleDef_HEAD_INIT, \"{name}\", NULL, -1, NULL}};\n"
                      f"PyMODINIT_FUNC PyInit_{name}(void) {{\n"
                      "  PyObject *m = PyModule_Create(&def);\n"
                      "  PyModule_AddIntConstant(m, \"built_by\", 7);\n  return m;\n}\n")
    path = cache_dir / f"{name}{EXT}"
    subprocess.run(["cc", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}", str(source), "-o", str(path)],
                   check=True)
    before = (path.stat().st_ino, path.stat().st_mtime_ns)
    module = build_aot(running_min, name, RETURNS + SIGNATURE, cache_dir)
    assert module.built_by == 7 and (path.stat().st_ino, path.stat().st_mtime_ns) == before
    assert not list(cache_dir.glob("*-build-*"))


def test_the_ahead_of_time_checks_refuse_wrong_dimensions() -> None:
    checks = _array_checks("(float64[:, ::1], int64, int32[::1])")
    assert checks == [(0, np.dtype("float64"), 2), (2, np.dtype("int32"), 1)]  # (position, dtype, dimensions)
    total = _checked(numba.njit(lambda m, k, v: m.sum() + k + v.sum()), "total", checks)
    assert total(np.ones((2, 3)), 1, np.arange(3, dtype=np.int32)) == 6.0 + 1 + 3
    with pytest.raises(TypeError, match="argument 0 must be a C-contiguous 2-D float64 array, got 1-D float64"):
        total(np.ones(6), 1, np.arange(3, dtype=np.int32))  # the right dtype and layout, one dimension short
    with pytest.raises(TypeError, match="argument 2 must be a C-contiguous 1-D int32 array, got 2-D int32"):
        total(np.ones((2, 3)), 1, np.zeros((1, 3), dtype=np.int32))
    with pytest.raises(TypeError, match="argument 2 must be a C-contiguous 1-D int32 array, got list"):
        total(np.ones((2, 3)), 1, [1, 2, 3])


def test_a_damaged_module_is_a_failed_load_and_the_jit_takes_over(cache_dir: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    name = aot_name("running_min")
    (cache_dir / f"{name}{EXT}").write_bytes(b"\x7fELF half a file")
    fn = entry(SIGNATURE, returns=RETURNS)(running_min)
    assert fn(np.array([2.0, 0.5]), 1)[0] == 0.5 and fn.ahead_of_time is False
    err = capsys.readouterr().err
    assert "ahead-of-time load of running_min failed" in err
    assert f"delete {cache_dir / name}* to rebuild the module" in err
    assert (cache_dir / f"{name}.failed").read_text().startswith("load failed: ")
    assert (cache_dir / f"{name}{EXT}").read_bytes() == b"\x7fELF half a file"  # nothing built over it


def test_the_jit_fallback_is_cached_on_disk_for_one_signature(cache_dir: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBENCH_DECODER_AOT", "0")
    fn = entry(SIGNATURE, returns=RETURNS)(running_min)
    assert fn(np.array([2.0, 0.5, 4.0]), 2)[1].tolist() == [0, 2] and fn.ahead_of_time is False
    assert list(cache_dir.rglob("*running_min*.nbi")) and list(cache_dir.rglob("*running_min*.nbc"))
    with pytest.raises(TypeError):  # int64 costs: no second overload is compiled
        fn(np.array([2, 1]), 1)
