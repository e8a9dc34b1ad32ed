"""SIGTERM after joining Ray goes to Python's handler, not to the failure-signal handler Ray's core worker
installs in C (which dumps a stack, and kills the process at once on a second SIGTERM while it runs, leaving
the job's MLflow runs RUNNING): the process sees SystemExit and no crash dump is printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import os, signal, time
from specbench.runtime import connect
connect()
try:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
except SystemExit as err:
    print("python handled it:", err.code, flush=True)
"""


def test_a_sigterm_after_ray_starts_is_python_s_to_handle(tmp_path: Path) -> None:
    env = {**os.environ, "SPECBENCH_HOME": str(tmp_path), "PYTHONPATH": str(ROOT / "platform")}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=180, env=env)
    assert "python handled it: 15" in proc.stdout, (proc.stdout, proc.stderr[-2000:])
    assert "SIGTERM received" not in proc.stderr, proc.stderr[-2000:]  # Abseil's dump: its handler ran
