"""KenLM's `lmplz` (modified Kneser-Ney estimation) and `query`, built from the kenlm source on PyPI.

Neither PyPI nor Debian ships the binaries, so the first graph build compiles them (a few minutes on two
cores) into `.specbench/bin/` from the pinned kenlm source distribution, fetched with pip. Needs cmake, a C++
compiler and Boost (Debian: cmake g++ libboost-program-options-dev libboost-system-dev
libboost-thread-dev libboost-test-dev zlib1g-dev libbz2-dev liblzma-dev). `SPECBENCH_LMPLZ` may point at an
existing `lmplz` (its `query` is looked up beside it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from specbench.errors import ToolError
from specbench.paths import work_dir

KENLM_VERSION = "0.3.0"
_TARGETS = ("lmplz", "query")
_DEBIAN = ("cmake g++ libboost-program-options-dev libboost-system-dev libboost-thread-dev "
           "libboost-test-dev zlib1g-dev libbz2-dev liblzma-dev")


def _bin_dir() -> Path:
    path = work_dir() / "bin"
    path.mkdir(parents=True, exist_ok=True)
    return path


def kenlm_binary(name: str, build: bool = True) -> Path:
    """Path of `lmplz` or `query`: SPECBENCH_LMPLZ's folder, `.specbench/bin`, else built there now."""
    if name not in _TARGETS:
        raise ValueError(f"unknown KenLM tool {name!r}; allowed: {_TARGETS}")
    env = os.environ.get("SPECBENCH_LMPLZ")
    if env:
        candidate = Path(env).with_name(name)
        if not candidate.is_file():
            raise ToolError(f"SPECBENCH_LMPLZ={env}: {candidate} does not exist. Fix: point it at a built lmplz "
                            "whose folder also holds query, or unset it to build KenLM under .specbench/bin.")
        return candidate
    target = _bin_dir() / name
    if target.is_file():
        return target
    if not build:
        raise ToolError(f"{target} is not built yet. Fix: run `specbench graph build jobs/graph_slurp.toml`.")
    build_kenlm()
    return target


def _run(cmd: list[str], cwd: Path, what: str, log: Path) -> None:
    with log.open("ab") as fh:
        proc = subprocess.run(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:]
        raise ToolError(f"building KenLM failed while {what} (exit {proc.returncode}); last output:\n{tail}\n"
                        f"Fix: install the build dependencies (Debian: apt-get install {_DEBIAN}) and retry.")


def build_kenlm() -> None:
    """Download the pinned kenlm source with pip and compile lmplz and query into `.specbench/bin`."""
    for tool in ("cmake", "make"):
        if shutil.which(tool) is None:
            raise ToolError(f"`{tool}` is not installed, and KenLM's lmplz must be built with it. "
                            f"Fix: apt-get install {_DEBIAN}")
    print(f"building KenLM {KENLM_VERSION} (lmplz, query) into {_bin_dir()}; this takes a few minutes",
          file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="kenlm-") as tmp_name:
        tmp = Path(tmp_name)
        log = tmp / "build.log"
        _run([sys.executable, "-m", "pip", "download", f"kenlm=={KENLM_VERSION}", "--no-deps",
              "--no-binary", ":all:", "--no-build-isolation", "-d", str(tmp), "-q"], tmp,
             "downloading the source with pip", log)
        archive = next(tmp.glob("kenlm-*.tar.gz"))
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        src = next(p for p in tmp.iterdir() if p.is_dir() and p.name.startswith("kenlm-"))
        build = tmp / "build"
        build.mkdir()
        _run(["cmake", str(src), "-DCMAKE_BUILD_TYPE=Release"], build, "configuring with cmake", log)
        jobs = str(max(1, os.cpu_count() or 1))
        _run(["make", f"-j{jobs}", *_TARGETS], build, "compiling", log)
        for name in _TARGETS:
            part = _bin_dir() / f"{name}.{os.getpid()}.tmp"  # this process's own: two builds never mix
            shutil.copy2(build / "bin" / name, part)
            os.replace(part, _bin_dir() / name)


def estimate_arpa(text: Path, arpa: Path, order: int, vocab_pad: int = 0, memory: str = "10%",
                  discount_fallback: bool = True, interpolate_unigrams: bool = False) -> str:
    """Run lmplz on `text` (one normalized sentence per line) and write `arpa`; returns lmplz's log.

    Without `interpolate_unigrams`, p(<unk>) is the whole discounted unigram mass (SRILM's behaviour), the
    mass of all the words the LM never saw together (later spread over the known unseen words of the graph's
    vocabulary); it fits SLURP's devel text a little better (`docs/graph.md`). With it (lmplz's default) the
    unigrams are interpolated with a uniform distribution over `vocab_pad` words (at least the model's own,
    `<s>` not counted), and p(<unk>) is *one* word's uniform share, gamma / vocab_pad: the probability of
    each padded word, not their total, so the listed unigrams and <unk> sum to less than one.
    """
    cmd = [str(kenlm_binary("lmplz")), "-o", str(order), "-S", memory, "-T", str(arpa.parent),
           "--text", str(text), "--arpa", str(arpa)]
    if not interpolate_unigrams:
        cmd += ["--interpolate_unigrams", "0"]
    elif vocab_pad:
        cmd += ["--vocab_pad", str(vocab_pad)]
    if discount_fallback:
        cmd.append("--discount_fallback")
    proc = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8")
    if proc.returncode != 0:
        raise ToolError(f"lmplz failed on {text} (exit {proc.returncode}):\n{proc.stderr[-2000:]}\n"
                        "Fix: check the text file (one sentence per line) and the LM options in the job file.")
    return proc.stderr


def query_perplexity(arpa: Path, sentences: list[str], oovs: bool = True) -> float:
    """Perplexity that KenLM's `query` reports for `sentences` under `arpa`, OOVs included (scored as `<unk>`)
    or, without `oovs`, excluded."""
    proc = subprocess.run([str(kenlm_binary("query")), "-v", "summary", str(arpa)],
                          input="\n".join(sentences) + "\n", capture_output=True, text=True, encoding="utf-8")
    if proc.returncode != 0:
        raise ToolError(f"KenLM query failed on {arpa}: {proc.stderr[-1000:]}")
    for line in proc.stdout.splitlines():
        if line.startswith(f"Perplexity {'including' if oovs else 'excluding'} OOVs:"):
            return float(line.split(":")[1])
    raise ToolError(f"KenLM query printed no perplexity for {arpa}:\n{proc.stdout[-1000:]}")
