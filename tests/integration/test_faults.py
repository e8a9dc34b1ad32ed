"""Fault tolerance of a stateful stage on Ray: a decoder-like actor killed in the middle of a job is restarted,
its batches are retried, and every row comes back exactly once with the results of a run without the fault."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from stages_for_tests import LookupStage, word_table

pytestmark = pytest.mark.integration


def test_killing_an_actor_mid_job_loses_nothing(ray_cluster: object, tmp_path: Path) -> None:
    from specbench.runtime import run_ray

    table = word_table(400)
    clean = run_ray(LookupStage(jitter_s=0.05), table, batch_size=20, mode="actors", num_actors=2)
    log = tmp_path / "setups.txt"
    killed: list[int] = []

    def kill_one() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pids = [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []
            if len(pids) >= 2:
                time.sleep(1.0)  # let both actors work on some batches first
                os.kill(int(pids[0]), signal.SIGKILL)
                killed.append(int(pids[0]))
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_one)
    killer.start()
    faulty = run_ray(LookupStage(setup_log=str(log), jitter_s=0.3), table, batch_size=20, mode="actors",
                     num_actors=2)
    killer.join()
    assert killed, "no actor was killed: the job ended too early"
    assert len(log.read_text().splitlines()) >= 3  # the killed actor was replaced (a new setup)
    assert faulty.num_rows == clean.num_rows == 400  # every row exactly once (failed rows keep their place)
    assert faulty.equals(clean)  # in input order, the same values and statuses as without the fault
