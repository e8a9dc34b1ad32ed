"""The helpers of `runtime.cluster` that need no running Ray, by hand: how many workers of a size one node holds
(`_fit_count`), which `ray.init` errors are authentication refusals and the message that explains one, which
hosts count as loopback, where a local Ray keeps its temp files, and whether a token is found, compared with
Ray's own token loader (the real clusters are in tests/integration)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from ray.exceptions import AuthenticationError

from specbench.errors import SpecbenchError
from specbench.runtime.cluster import (
    _auth_message,
    _auth_refusal,
    _check_socket_room,
    _fit_count,
    _is_loopback,
    _resolve_temp_dir,
    token_available,
)

pytestmark = pytest.mark.unit


def test_a_node_holds_as_many_workers_as_its_scarcest_resource_allows() -> None:
    node = {"CPU": 8.0, "GPU": 2.0}
    assert _fit_count(node, 1, 0) == 8
    assert _fit_count(node, 3, 0) == 2  # 8 / 3 = 2.67: two whole workers
    assert _fit_count(node, 2, 0.25) == 4  # CPUs: 8 / 2 = 4; GPUs: 2 / 0.25 = 8
    assert _fit_count(node, 1, 1) == 2  # GPUs bind: 2
    assert _fit_count(node, 0, 1) == 2  # a GPU-only worker: the CPUs do not count
    assert _fit_count({"CPU": 8.0}, 1, 0.5) == 0  # no GPU on the node
    assert _fit_count({"CPU": 0.3}, 0.1, 0) == 3  # 0.3 / 0.1 is 2.9999999999999996 in floats
    assert _fit_count({"GPU": 1.0}, 1, 0) == 0
    assert _fit_count(node, 0, 0.4) == 4  # a fraction stays on one GPU: 2 a GPU (2.5 would not start)
    assert _fit_count({"CPU": 9.0, "GPU": 3.0}, 1, 1 / 3) == 9


def test_work_that_needs_nothing_is_bounded_by_the_nodes_cpus() -> None:
    assert _fit_count({"CPU": 6.0, "GPU": 1.0}, 0, 0) == 6
    assert _fit_count({"CPU": 0.0}, 0, 0) == 1  # at least one
    assert _fit_count({}, 0, 0) == 1


def test_authentication_refusals_are_recognised_through_the_cause_chain() -> None:
    assert _auth_refusal(AuthenticationError("no token found.")) == "no token found."
    gcs = "the cluster's GCS answered: Authentication token is missing or incorrect"
    for marker in ("InvalidAuthToken", "Unauthenticated"):
        quoted = RuntimeError(f"GCS returned status {marker}: bad token")
        assert _auth_refusal(quoted) == gcs
        wrapped = ConnectionError("could not connect to the GCS")
        wrapped.__cause__ = quoted
        assert _auth_refusal(wrapped) == gcs
        implicit = ConnectionError("could not connect to the GCS")
        implicit.__context__ = quoted  # raised while handling it, without `from`
        assert _auth_refusal(implicit) == gcs
    deep = ValueError("bad arguments")
    deep.__cause__ = AuthenticationError("token mode without a token")
    assert _auth_refusal(deep) == "token mode without a token"


def test_other_errors_are_not_authentication_refusals() -> None:
    assert _auth_refusal(ConnectionError("GCS at 10.0.0.5:6379 is not reachable")) is None
    assert _auth_refusal(ValueError("Unauthenticated is not a valid address")) is None  # neither kind of error
    first, second = RuntimeError("one"), RuntimeError("two")
    first.__context__, second.__context__ = second, first  # a cycle ends the walk instead of looping
    found: list[object] = []
    walker = threading.Thread(target=lambda: found.append(_auth_refusal(first)), daemon=True)
    walker.start()
    walker.join(10)
    assert found == [None]


def test_the_refusal_message_names_the_mode_the_token_and_the_fix(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ray/auth_token here
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", "")
    text = _auth_message("--ray-address 10.0.0.5:6379", "token is missing.")
    assert text.startswith("--ray-address 10.0.0.5:6379: Ray refused the connection for its token "
                           "authentication (token is missing). ")
    assert "RAY_AUTH_MODE=unset (no auth) and no token (" in text
    assert "ray get-auth-token" in text and "export RAY_AUTH_MODE=disabled" in text
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "abc")
    assert "RAY_AUTH_MODE=token and a token (" in _auth_message("a local Ray", "refused")


def test_loopback_hosts() -> None:
    for host in ("127.0.0.1", "127.3.2.1", "::1", "[::1]", "localhost"):
        assert _is_loopback(host), host
    for host in ("10.0.0.5", "192.168.1.2", "0.0.0.0", "::", "example.org", ""):
        assert not _is_loopback(host), host


def test_the_temp_dir_is_the_argument_else_the_environment_else_rays_own(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SPECBENCH_RAY_TMPDIR", raising=False)
    assert _resolve_temp_dir(None) is None
    monkeypatch.setenv("SPECBENCH_RAY_TMPDIR", str(tmp_path / "from_env"))
    assert _resolve_temp_dir(None) == str(tmp_path / "from_env")
    assert (tmp_path / "from_env").is_dir()  # created
    given = tmp_path / "given" / "nested"
    assert _resolve_temp_dir(given) == str(given) and given.is_dir()  # the argument wins
    monkeypatch.chdir(tmp_path)
    assert _resolve_temp_dir("relative") == str(tmp_path.resolve() / "relative")  # made absolute


def test_a_temp_dir_ray_cannot_use_is_refused_with_the_fix(monkeypatch, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("SPECBENCH_RAY_TMPDIR", str(tmp_path / "file"))
    with pytest.raises(SpecbenchError, match=f"{tmp_path / 'file'} cannot be made a folder .*Fix: set SPEC"):
        _resolve_temp_dir(None)
    # <temp>/session_YYYY-MM-DD_HH-MM-SS_ffffff_<pid>/sockets/plasma_store: 57 bytes and the pid's digits
    room = 107 - 57 - len(str(os.getpid()))
    _check_socket_room("/" + "t" * (room - 1))
    _check_socket_room(None)  # Ray's own /tmp/ray
    with pytest.raises(SpecbenchError, match="socket paths under /t+ would exceed 107 bytes. Fix: set SPEC"):
        _check_socket_room("/" + "t" * room)


_RAY_LOADER = """
import json, os, sys
import ray._raylet as raylet
answers = []
for env in json.loads(sys.argv[1]):
    for key in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        os.environ.pop(key, None)
    os.environ.update(env)
    loader = raylet.AuthenticationTokenLoader.instance()
    loader.reset_cache()
    try:
        answers.append(bool(loader.has_token()))
    except Exception:  # token mode with a token path Ray cannot read: a refusal, so no token
        answers.append(False)
print(json.dumps(answers))
"""


def test_a_token_is_found_exactly_where_rays_own_loader_finds_one(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    files = {"token": "abc\n", "empty": "", "blank": "  \t\n", "second_line": "\nabc\n", "padded": "  abc  \n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    (home / "tilde_token").write_text("abc", encoding="utf-8")
    cases: list[dict[str, str]] = [{"RAY_AUTH_TOKEN": "abc"}, {"RAY_AUTH_TOKEN": " \t"}]
    cases += [{"RAY_AUTH_TOKEN_PATH": str(tmp_path / name)} for name in (*files, "missing")]
    cases += [{"RAY_AUTH_TOKEN_PATH": str(tmp_path)}, {"RAY_AUTH_TOKEN_PATH": "~/tilde_token"}]
    layouts = {"no default file": None, "default token": "abc", "blank default": " \n", "default on line 2": "\nabc"}
    env = {**os.environ, "HOME": str(home), "RAY_AUTH_MODE": "token"}
    env.pop("RAY_AUTH_TOKEN", None)
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    for layout, default in layouts.items():
        default_file = home / ".ray" / "auth_token"
        default_file.unlink(missing_ok=True)
        if default is not None:
            default_file.write_text(default, encoding="utf-8")
        every = [{}, *cases]
        done = subprocess.run([sys.executable, "-c", _RAY_LOADER, json.dumps(every)], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, check=True)
        rays = json.loads(done.stdout.strip().splitlines()[-1])
        ours = [token_available(case, home) for case in every]
        assert ours == rays, (layout, list(zip(every, ours, rays)))
    # spot checks of what Ray said, so that a change in Ray's rules is seen here too
    assert rays[0] is False and rays[1] is True  # "default on line 2": none; RAY_AUTH_TOKEN: yes
