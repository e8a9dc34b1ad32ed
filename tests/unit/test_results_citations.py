"""Every results file that README.md or docs/*.md cites is in the tree (the rule that every figure comes from
a committed results file), and so is every script they cite, unless the citation names the commit that holds it ("`file.json` at commit abc1234":
a file removed from the tree to keep it small, kept in the history)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
RESULTS = "benchmarks/results"
CITED = re.compile(r"`((?:benchmarks/results/)?[\w.-]+\.json)`(?: at commit ([0-9a-f]{7,40})\b)?")
SCRIPT = re.compile(r"`(scripts/[\w.-]+\.(?:py|sh))`(?:,? \(?at commit ([0-9a-f]{7,40})\b)?")


def _citations() -> list[tuple[str, str, str | None]]:
    """(document, results file path, the commit named or None) of every citation of a results file."""
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = " ".join(doc.read_text(encoding="utf-8").split())  # a citation may break across lines
        for match in CITED.finditer(text):
            name = match.group(1)
            if name.startswith(f"{RESULTS}/") or re.search(r"_(cpu|h200)[\w-]*\.json$", name):
                found.append((doc.name, f"{RESULTS}/{Path(name).name}", match.group(2)))
        found += [(doc.name, m.group(1), m.group(2)) for m in SCRIPT.finditer(text)]  # the scripts that made them
    return found


def test_cited_results_files_are_in_the_tree() -> None:
    citations = _citations()
    assert len(citations) > 100  # the README's figures table alone cites dozens
    missing = [(doc, path) for doc, path, commit in citations if commit is None and not (ROOT / path).is_file()]
    assert not missing, f"cited but not in the tree (commit it, or cite it '`file` at commit <sha>'): {missing}"


def test_a_file_cited_at_a_commit_is_in_that_commit() -> None:
    def git(*args: str) -> int:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True).returncode

    for doc, path, commit in _citations():
        if commit is None:
            continue
        if git("cat-file", "-e", f"{commit}^{{commit}}") != 0:
            pytest.skip(f"commit {commit} is not in this clone (a shallow clone?)")
        assert git("cat-file", "-e", f"{commit}:{path}") == 0, f"{doc}: {path} is cited at commit {commit}, " \
                                                              "which does not hold it"
