"""Ray token authentication against real clusters started with `ray start`, each client a fresh process with
a home of its own (a fresh machine: no `~/.ray/auth_token` unless the test writes one):

- a machine without a token joins a cluster started without auth (specbench used to force token mode and
  fail with Ray's AuthenticationError), and still starts its own local Ray with token auth (Ray generates
  the token);
- a `RAY_AUTH_MODE=token` that the caller set is respected: without a token it is a specbench error naming
  RAY_AUTH_MODE, RAY_AUTH_TOKEN and `ray get-auth-token`, not a traceback;
- a cluster with token auth refuses a client with no token or another token, as a specbench error (also
  through `specbench --ray-address ... run`, whose run ends FAILED), and takes one with its token.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_processes import stop_cluster, unused_ports

pytestmark = [pytest.mark.integration, pytest.mark.isolated]
ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
HEAD_TOKEN = "specbench-test-" + "9" * 40

CLIENT = """
import os, sys
from specbench.errors import SpecbenchError
from specbench.runtime.cluster import connect, shutdown
try:
    info = connect(sys.argv[1], num_cpus=1)
except SpecbenchError as err:
    print("ERROR", err)
else:
    print("JOINED", info.num_cpus, os.environ.get("RAY_AUTH_MODE"))
    shutdown()
"""


def _client_env(home: Path, **extra: str) -> dict[str, str]:
    """A fresh machine's environment: its own empty home, no Ray auth settings but `extra`."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")}
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), PYTHONPATH=str(ROOT / "platform"), PYTHONUTF8="1",
               RAY_gcs_server_port_wait_time_s="3",  # a refused client gives up after 3 s, not 20
               **extra)
    return env


def _client(address: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", CLIENT, address], env=env, capture_output=True, text=True,
                          encoding="utf-8", timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout.strip().splitlines()[-1]


def _head(mode: str, tag: str) -> Iterator[str]:
    """A `ray start --head` cluster of its own with RAY_AUTH_MODE=`mode` (with token: HEAD_TOKEN), no
    dashboard; its GCS address. Stopped by its own processes only (`ray stop` would stop every test's Ray)."""
    temp = Path("/tmp") / f"sba{tag}{os.getpid()}"  # Ray's socket paths must stay short
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_AUTH_MODE=mode)
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    if mode == "token":
        env["RAY_AUTH_TOKEN"] = HEAD_TOKEN
    rng = random.Random(os.getpid() + len(tag))
    try:
        for _ in range(3):
            gcs, listen, grpc, metrics, runtime_env, client = unused_ports(6, rng)
            started = subprocess.run(
                [RAY, "start", "--head", "--port", str(gcs), "--include-dashboard", "false",
                 "--dashboard-agent-listen-port", str(listen), "--dashboard-agent-grpc-port", str(grpc),
                 "--metrics-export-port", str(metrics), "--runtime-env-agent-port", str(runtime_env),
                 "--ray-client-server-port", str(client), "--num-cpus", "1", "--num-gpus", "0",
                 "--temp-dir", str(temp), "--disable-usage-stats"],
                env=env, capture_output=True, text=True, encoding="utf-8", timeout=180, check=False)
            if started.returncode == 0:
                break
            stop_cluster(temp)
        else:
            raise RuntimeError(f"`ray start --head` failed: {started.stdout[-2000:]}{started.stderr[-2000:]}")
        yield f"127.0.0.1:{gcs}"
    finally:
        stop_cluster(temp)


@pytest.fixture(scope="module")
def open_head() -> Iterator[str]:
    yield from _head("disabled", "o")


@pytest.fixture(scope="module")
def token_head() -> Iterator[str]:
    yield from _head("token", "t")


def test_a_machine_without_a_token_joins_a_cluster_without_auth_and_starts_its_own(open_head: str,
                                                                                  tmp_path: Path) -> None:
    home = tmp_path / "fresh"
    assert _client(open_head, _client_env(home)) == "JOINED 1.0 None"
    assert not (home / ".ray" / "auth_token").exists()  # joining generates no token
    env = _client_env(home, SPECBENCH_RAY_TMPDIR=f"/tmp/sbl{os.getpid()}")
    try:
        assert _client("local", env) == "JOINED 1.0 token"  # a local start runs with token auth
    finally:
        shutil.rmtree(env["SPECBENCH_RAY_TMPDIR"], ignore_errors=True)
    assert (home / ".ray" / "auth_token").is_file()  # which Ray generated for it
    assert _client(open_head, _client_env(home)) == "JOINED 1.0 token"  # a token is sent, and ignored


def test_token_mode_set_by_the_caller_without_a_token_is_a_clear_error(open_head: str,
                                                                      tmp_path: Path) -> None:
    said = _client(open_head, _client_env(tmp_path / "fresh", RAY_AUTH_MODE="token"))
    assert said.startswith(f"ERROR --ray-address {open_head}: Ray refused"), said
    for name in ("RAY_AUTH_MODE=token", "no token", "RAY_AUTH_TOKEN", "ray get-auth-token"):
        assert name in said, said
    env = _client_env(tmp_path / "fresh", RAY_AUTH_MODE="disabled")
    assert _client(open_head, env) == "JOINED 1.0 disabled"


def test_a_token_cluster_refuses_a_missing_or_wrong_token_clearly_and_takes_its_own(token_head: str,
                                                                                    tmp_path: Path) -> None:
    said = _client(token_head, _client_env(tmp_path / "none"))
    assert said.startswith("ERROR ") and "RAY_AUTH_MODE=unset" in said and "ray get-auth-token" in said, said
    wrong = tmp_path / "wrong"
    (wrong / ".ray").mkdir(parents=True)
    (wrong / ".ray" / "auth_token").write_text("another-" + "1" * 40, encoding="utf-8")
    said = _client(token_head, _client_env(wrong))
    assert said.startswith("ERROR ") and "RAY_AUTH_MODE=token and a token" in said, said
    assert _client(token_head, _client_env(wrong, RAY_AUTH_TOKEN=HEAD_TOKEN)) == "JOINED 1.0 token"


def test_specbench_run_on_a_cluster_refusing_it_fails_its_run_with_the_fix(token_head: str,
                                                                          tmp_path: Path) -> None:
    import mlflow

    store = f"sqlite:///{tmp_path / 'm.db'}"
    env = _client_env(tmp_path / "none", SPECBENCH_HOME=str(tmp_path / "work"))
    done = subprocess.run([sys.executable, "-m", "specbench", "--tracking-uri", store, "--ray-address",
                           token_head, "run", str(ROOT / "jobs" / "speech_quick.toml")], env=env,
                          capture_output=True, text=True, encoding="utf-8", timeout=300, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"specbench: error: --ray-address {token_head}: Ray refused" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "ray get-auth-token" in done.stderr
    (run,) = mlflow.MlflowClient(tracking_uri=store).search_runs(
        [mlflow.MlflowClient(tracking_uri=store).get_experiment_by_name("speech").experiment_id])
    assert run.info.status == "FAILED" and "RAY_AUTH_MODE" in run.data.tags["error"]
