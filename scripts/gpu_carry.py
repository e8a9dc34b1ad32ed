"""Gather what the GPU machine needs beside the source tree into `.specbench/gpu-carry/` (ignored by git).

That machine has Python 3.12 with numpy, pyarrow, cupy, torch and pytest, no network, and takes the working tree plus
carried folders up to 64 MiB. The folder holds:

- `TLG.fst`, `words.txt`, `tokens.txt`: the decoding graph of jobs/graph_slurp.toml (the OpenFst const file is
  what kaldi-decoder reads, and `read_graph` loads it in tens of milliseconds; a CSR `.npz` is no smaller);
- `scores_test.npz`: the acoustic scores of the first 1,000 held-out-voice test utterances (by id), one
  compressed float32 (T, P) array per utterance, keyed by utterance id;
- `wheels/`: the cp312 manylinux x86_64 wheels of kaldifst, kaldi-decoder, kaldiio and kaldi-native-fbank
  (`make gpu-check` installs them into `site/` there);
- `audio/`: the WAV files of the first 100 held-out-voice test utterances (by id), on which
  `specbench bench acoustic --audio` times features plus model inference there (no synthesizers there);
- `data/slurp/test.jsonl.gz`: the SLURP test texts, whose prefixes the completion benchmark completes;
- `data/multi30k/{train,val}.{de,en}.gz`: what `scripts/gpu_train_mt.py` trains the translation models on;
- `manifest.json`: sources, sha256, sizes and counts, the frame shift of the scores.

It checks that the tracked and untracked-but-not-ignored files plus this folder stay under 60 MB, and prints
the total. Usage: `python scripts/gpu_carry.py [--scores FILE] [--graph-job JOB.toml] [--utterances N]`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "platform") not in sys.path:
    sys.path.insert(0, str(ROOT / "platform"))

CARRY = ROOT / ".specbench" / "gpu-carry"
DEFAULT_SCORES = ROOT / ".specbench" / "scores" / "am_slurp" / "test.parquet"
DEFAULT_GRAPH_JOB = ROOT / "jobs" / "graph_slurp.toml"
AUDIO_UTTERANCES = 100
SCORES_NAME = "scores_test.npz"
WHEELS = {"kaldifst": "1.8.3", "kaldi_decoder": "0.3.2", "kaldiio": "2.18.1", "kaldi_native_fbank": "1.22.0"}  # distribution (normalized) -> version
PYTHON_VERSION = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
LIMIT_BYTES = 60_000_000
CARRIED_DATA = ("slurp/test.jsonl.gz", *(f"multi30k/{split}.{lang}.gz" for split in ("train", "val")
                                         for lang in ("de", "en")))


# ---- pure helpers ------------------------------------------------------------------------------------

def wheel_tags(filename: str) -> tuple[str, str, set[str], set[str], set[str]]:
    """(distribution, version, python tags, abi tags, platform tags) of a wheel file name (PEP 427)."""
    if not filename.endswith(".whl"):
        raise ValueError(f"{filename}: not a wheel")
    parts = filename[:-4].split("-")
    if len(parts) not in (5, 6):
        raise ValueError(f"{filename}: not a wheel file name")
    dist, version, py, abi, plat = parts[0], parts[1], parts[-3], parts[-2], parts[-1]
    return dist.lower(), version, set(py.split(".")), set(abi.split(".")), set(plat.split("."))


def wheel_fits(filename: str, python: str = "cp312") -> bool:
    """Whether a wheel installs on CPython `python` on x86_64 Linux with glibc >= 2.28."""
    _, _, py, abi, plat = wheel_tags(filename)
    pure = "any" in plat
    py_ok = python in py or "py3" in py
    abi_ok = bool(abi & {python, "none", "abi3"})
    plat_ok = pure or any(p.endswith("x86_64") and (p.startswith("manylinux") or p == "linux_x86_64") and
                          _glibc(p) <= (2, 28) for p in plat)
    return py_ok and abi_ok and plat_ok


def _glibc(tag: str) -> tuple[int, int]:
    """The glibc a manylinux tag needs (manylinux2014 = 2.17, manylinux_2_28 = 2.28)."""
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    head = tag.rsplit("_x86_64", 1)[0]
    if head in legacy:
        return legacy[head]
    if head.startswith("manylinux_"):
        major, minor = head.split("_")[1:3]
        return int(major), int(minor)
    return (0, 0)  # linux_x86_64: no claim


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_bytes(path: Path) -> int:
    """Bytes of the regular files under `path` (0 when it does not exist)."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file() and not p.is_symlink())


def travelling_bytes(root: Path) -> int:
    """Bytes of the files that travel with the working tree: tracked, and untracked but not ignored."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                         capture_output=True, check=True).stdout
    files = {root / name for name in out.decode().split("\0") if name}
    return sum(f.stat().st_size for f in files if f.is_file() and not f.is_symlink())


def check_budget(tree: int, carry: int, limit: int = LIMIT_BYTES) -> int:
    """tree + carry; ValueError when it reaches `limit`."""
    total = tree + carry
    if total >= limit:
        raise ValueError(f"the working tree ({tree / 1e6:.1f} MB) and the carry folder ({carry / 1e6:.1f} MB) "
                         f"come to {total / 1e6:.1f} MB, over the {limit / 1e6:.0f} MB allowed")
    return total


def write_scores_npz(items: list[tuple[str, object]], path: Path) -> None:
    """One compressed float32 array per utterance, keyed by its id; written atomically."""
    import numpy as np

    from specbench.text_files import replacing

    with replacing(path) as tmp, open(tmp, "wb") as fh:  # a file object keeps numpy from appending ".npz"
        np.savez_compressed(fh, **{u: np.asarray(m, dtype=np.float32) for u, m in items})


# ---- gathering ---------------------------------------------------------------------------------------

def download_wheels(dest: Path) -> list[Path]:
    """The wheels of WHEELS for CPython 3.12 on manylinux x86_64 (downloaded when missing), checked."""
    dest.mkdir(parents=True, exist_ok=True)

    def present() -> dict[str, Path]:
        found = {}
        for whl in dest.glob("*.whl"):
            dist, version, *_ = wheel_tags(whl.name)
            if WHEELS.get(dist) == version and wheel_fits(whl.name):
                found[dist] = whl
        return found

    have = present()
    missing = [d for d in WHEELS if d not in have]
    if missing:
        cmd = [sys.executable, "-m", "pip", "download", "--only-binary", ":all:", "--no-deps",
               "--python-version", PYTHON_VERSION, "--implementation", "cp", "-d", str(dest)]
        for plat in PLATFORMS:
            cmd += ["--platform", plat]
        cmd += [f"{d.replace('_', '-')}=={WHEELS[d]}" for d in missing]
        print("downloading wheels:", " ".join(missing), file=sys.stderr)
        subprocess.run(cmd, check=True)
        have = present()
    still = [d for d in WHEELS if d not in have]
    if still:
        raise SystemExit(f"no fitting cp312 manylinux x86_64 wheel for {', '.join(still)} in {dest}")
    for whl in dest.glob("*.whl"):
        if whl not in have.values():
            whl.unlink()  # another version or platform: it would only take room
    return sorted(have.values())


def gather(scores: Path, graph_job: Path, utterances: int, out: Path, wheels: bool = True) -> dict:
    from specbench.benchmarks.decoder.bench import load_scores
    from specbench.experiments.graph_recipe import build_graph
    from specbench.experiments.registry import load_config
    from specbench.text_files import replace_text, replacing
    from specbench.wfst.graph import read_graph

    if not scores.is_file():
        raise SystemExit(f"{scores} does not exist. Fix: write it with `specbench run jobs/am_eval.toml`")
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").unlink(missing_ok=True)  # written last: a carry cut short or too big has none
    art = build_graph(load_config(graph_job))
    files = {}
    for name in ("TLG.fst", "words.txt", "tokens.txt"):
        src = art.directory / name
        with replacing(out / name) as tmp:
            shutil.copyfile(src, tmp)
        files[name] = {"source": _rel(src), "sha256": sha256(out / name), "bytes": (out / name).stat().st_size}
    graph = read_graph(out / "TLG.fst")
    files["TLG.fst"].update(states=graph.num_states, arcs=graph.num_arcs)
    from specbench.data.resolver import data_file

    # SPECBENCH_DATA there: the completion benchmark's prefixes, and what `scripts/gpu_train_mt.py` trains on
    for rel in CARRIED_DATA:
        copy = out / "data" / rel
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(data_file(rel), copy)
        files[f"data/{rel}"] = {"source": rel, "sha256": sha256(copy), "bytes": copy.stat().st_size}
    from specbench.paths import work_dir

    manifest_audio = copy_test_audio(work_dir() / "speech" / "slurp" / "manifest.parquet", out / "audio",
                                     AUDIO_UTTERANCES)
    items, shift = load_scores(scores, utterances)
    write_scores_npz(items, out / SCORES_NAME)
    frames = sum(len(m) for _, m in items)
    manifest = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "graph_job": _rel(graph_job), "graph_dir": _rel(art.directory), "files": files,
        "scores": {"file": SCORES_NAME, "source": _rel(scores), "sha256": sha256(out / SCORES_NAME),
                   "bytes": (out / SCORES_NAME).stat().st_size, "utterances": len(items), "frames": frames,
                   "num_classes": int(items[0][1].shape[1]), "frame_shift_ms": shift, "dtype": "float32",
                   "selection": f"the first {utterances} held-out-voice utterances by id",
                   "first": items[0][0], "last": items[-1][0]},
        "wheels": [],
        "audio": manifest_audio,
    }
    if wheels:
        for whl in download_wheels(out / "wheels"):
            manifest["wheels"].append({"file": whl.name, "sha256": sha256(whl), "bytes": whl.stat().st_size})
    tree, carry = travelling_bytes(ROOT), folder_bytes(out)
    manifest["bytes"] = {"working_tree": tree, "carry": carry, "total": tree + carry, "limit": LIMIT_BYTES}
    check_budget(tree, carry)
    replace_text(out / "manifest.json", json.dumps(manifest, indent=2) + "\n")
    return manifest


def copy_test_audio(manifest: Path, dest: Path, count: int) -> dict:
    """The WAV files of the first `count` ok test utterances of a speech manifest (by id) as
    `dest/<utt_id>.wav` (the folder is replaced); what was copied."""
    from specbench.data.speech_corpus import read_manifest
    from specbench.errors import DataError

    try:
        table = read_manifest(manifest)
    except DataError as err:
        raise SystemExit(f"{err} (scripts/gpu_carry.py carries held-out test audio for `bench acoustic`)") from err
    rows = [r for r in table.to_pylist() if r["split"] == "test" and r["status"] == "ok"]
    rows = sorted(rows, key=lambda r: r["utt_id"])[:count]
    if not rows:
        raise SystemExit(f"{manifest} has no test utterances. Fix: run "
                         "`specbench data speech jobs/speech_slurp.toml`")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for r in rows:
        shutil.copyfile(manifest.parent / r["audio_path"], dest / f"{r['utt_id']}.wav")
    return {"folder": "audio", "source": _rel(manifest), "utterances": len(rows),
            "seconds": round(sum(r["duration_s"] for r in rows), 2), "bytes": folder_bytes(dest),
            "selection": f"the first {count} ok test utterances by id"}


def _rel(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scores", type=Path, default=DEFAULT_SCORES)
    p.add_argument("--graph-job", type=Path, default=DEFAULT_GRAPH_JOB)
    p.add_argument("--utterances", type=int, default=1000)
    p.add_argument("--out", type=Path, default=CARRY)
    p.add_argument("--no-wheels", action="store_true", help="skip the wheels (offline)")
    args = p.parse_args(argv)
    try:
        manifest = gather(args.scores, args.graph_job, args.utterances, args.out, wheels=not args.no_wheels)
    except ValueError as err:
        print(f"gpu_carry: {err}", file=sys.stderr)
        return 1
    b = manifest["bytes"]
    s = manifest["scores"]
    print(f"{_rel(args.out)}: {s['utterances']} utterances, {s['frames']} frames; carry {b['carry'] / 1e6:.1f} MB "
          f"+ working tree {b['working_tree'] / 1e6:.1f} MB = {b['total'] / 1e6:.1f} MB "
          f"(limit {b['limit'] / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
