"""`make run` and `make test` set everything up: scripts/ensure_system_packages.sh (run for real, in a
subprocess) installs nothing when nothing is missing, and without root or a password-less sudo prints the one
command to run; the Makefile calls it and the KenLM build first; CI runs `make test` alone."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ensure_system_packages.sh"
INSTALLER = ROOT / "cluster" / "install-speech-packages.sh"
NOBODY = 65534

needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="checks packages with dpkg-query")


def _demote() -> None:
    """Run the child as `nobody` (the script must not find itself root)."""
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _run(*args: str, as_user: bool = False, **env: str) -> subprocess.CompletedProcess[str]:
    ours = ("SPECBENCH_ASSUME_MISSING", "SPECBENCH_SUDO", "SPECBENCH_SKIP_SYSTEM_PACKAGES")
    environment = {k: v for k, v in os.environ.items() if k not in ours}
    environment.update(env)
    demote = _demote if as_user and os.geteuid() == 0 else None
    return subprocess.run(["bash", str(SCRIPT), *args], env=environment, capture_output=True, text=True,
                          timeout=60, preexec_fn=demote, check=False)


@needs_dpkg
def test_without_root_or_sudo_it_prints_the_command_to_run() -> None:
    proc = _run(as_user=True, SPECBENCH_ASSUME_MISSING="sox git chromium", SPECBENCH_SUDO="/nonexistent/sudo")
    assert proc.returncode == 1, proc.stderr
    assert "installing" not in proc.stderr  # nothing was attempted
    assert "these Debian packages are missing: sox git chromium" in proc.stderr
    assert "Fix: run" in proc.stderr and "there is no sudo" in proc.stderr
    # the speech packages (sox) come with the installer anyway; the others are passed to it
    assert f"  su root -c 'bash {INSTALLER} git chromium'\n" in proc.stderr, proc.stderr


@needs_dpkg
def test_a_sudo_that_asks_for_a_password_is_not_used_but_named() -> None:
    # `false` refuses `-n true` as a sudo that needs a password does
    proc = _run(as_user=True, SPECBENCH_ASSUME_MISSING="cmake", SPECBENCH_SUDO="false")
    assert proc.returncode == 1, proc.stderr
    assert "sudo asks for a password" in proc.stderr
    assert f"  sudo bash {INSTALLER} cmake\n" in proc.stderr, proc.stderr


@needs_dpkg
def test_check_only_reports_and_installs_nothing() -> None:
    proc = _run("--check", SPECBENCH_ASSUME_MISSING="flite liblzma-dev")
    assert proc.returncode == 1
    assert proc.stdout.strip() == "specbench: missing Debian packages: flite liblzma-dev"


@needs_dpkg
def test_a_package_dpkg_has_never_heard_of_counts_as_missing(tmp_path: Path) -> None:
    """A package that was never installed (or was purged) is unknown to dpkg-query, which then exits 1: it
    is reported missing like the others, not taken for "nothing missing"."""
    copy = tmp_path / "scripts" / SCRIPT.name
    copy.parent.mkdir()
    copy.write_text(SCRIPT.read_text().replace("OTHER_PACKAGES=(cmake", "OTHER_PACKAGES=(specbench-no-such-package cmake"))
    proc = subprocess.run(["bash", str(copy), "--check"], capture_output=True, text=True, timeout=60, check=False,
                          env={k: v for k, v in os.environ.items() if not k.startswith("SPECBENCH_")})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "specbench-no-such-package" in proc.stdout


@needs_dpkg
def test_nothing_missing_is_a_fast_silent_no_op() -> None:
    check = _run("--check")
    if check.returncode != 0:
        pytest.skip(f"this machine lacks packages: {check.stdout.strip()}")
    start = time.monotonic()
    proc = _run()
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert time.monotonic() - start < 5


def test_the_skip_switch_skips_the_check() -> None:
    proc = _run(SPECBENCH_SKIP_SYSTEM_PACKAGES="1", SPECBENCH_ASSUME_MISSING="sox", SPECBENCH_SUDO="false")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_an_unknown_option_is_refused() -> None:
    proc = _run("--install-everything")
    assert proc.returncode == 2 and "usage:" in proc.stderr


def _shell_array(text: str, name: str) -> set[str]:
    match = re.search(rf"^{name}=\(([^)]*)\)", text, re.MULTILINE)
    assert match, name
    return set(match.group(1).split())


def test_it_checks_what_the_installer_installs() -> None:
    """The speech packages it checks are those of the installer's `apt-get install` command."""
    lines = [line.split("#")[0] for line in INSTALLER.read_text().splitlines()]
    command = " ".join(" ".join(lines).replace("\\", " ").split())
    match = re.search(r"apt-get install ((?:\S+ )+)", command)
    assert match
    installed = {w for w in match.group(1).split() if not w.startswith(("-", '"'))}
    assert _shell_array(SCRIPT.read_text(), "SPEECH_PACKAGES") == installed
    others = _shell_array(SCRIPT.read_text(), "OTHER_PACKAGES")
    assert {"cmake", "g++", "libboost-program-options-dev", "zlib1g-dev", "iproute2", "chromium-driver"} <= others


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize(("target", "then"), [("run", "specbench run jobs/quick.toml"),
                                              ("test", "scripts/test_all.sh")])
def test_make_sets_up_before_it_runs(target: str, then: str) -> None:
    plan = subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=True).stdout.splitlines()

    def first(text: str) -> int:
        return next(i for i, line in enumerate(plan) if text in line)

    assert first("bash scripts/ensure_system_packages.sh") < first("pip install") < first(
        "scripts/build_kenlm.py") < first(then)


def test_make_test_runs_every_test_directory_once() -> None:
    """scripts/test_all.sh: two pytest runs with complementary marker expressions over every test folder."""
    script = (ROOT / "scripts" / "test_all.sh").read_text()
    assert 'pytest tests/unit tests/property tests/integration -m "not gpu and (not integration or isolated)"' in script
    assert 'pytest tests/integration -m "not gpu and not isolated"' in script
    assert {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and list(p.glob("test_*.py"))} == {
        "unit", "property", "integration", "gpu"}


def test_ci_runs_make_test_and_nothing_else() -> None:
    commands = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert [c for c in commands if not c.startswith(("set ", "cd "))] == ["make test"]
