"""The tracked tree stays under 20 MB (DESIGN.md: the GPU machine takes the checkout and what a run carries,
64 MiB in all; generated data lives under `.specbench/`, ignored by git). A results file can leave the tree to
make room and be cited at the commit that holds it (test_results_citations)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LIMIT_BYTES = 20_000_000


def test_the_tracked_files_hold_under_20_mb() -> None:
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    files = [ROOT / name for name in listed.stdout.decode().split("\0") if name]
    sizes = {str(f.relative_to(ROOT)): f.stat().st_size for f in files if f.is_file()}
    total = sum(sizes.values())
    largest = sorted(sizes.items(), key=lambda item: -item[1])[:5]
    assert total < LIMIT_BYTES, (f"the tracked files hold {total:,} bytes, over {LIMIT_BYTES:,}; the largest: "
                                 f"{largest}. Fix: move generated data under .specbench/, or cite an old results "
                                 "file '`file.json` at commit <sha>' and remove it")
