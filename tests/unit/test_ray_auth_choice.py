"""Which Ray auth mode a connection uses (`runtime.cluster.auth_mode_for`, `token_available`): the caller's
RAY_AUTH_MODE always; else token for a local Ray that specbench starts, and, when joining, token only where
this machine has a token (Ray's own places: RAY_AUTH_TOKEN, the file RAY_AUTH_TOKEN_PATH names,
~/.ray/auth_token). The real clusters are in tests/integration/test_ray_auth_modes.py."""

from __future__ import annotations

from pathlib import Path

from specbench.runtime.cluster import auth_mode_for, token_available


def test_the_callers_mode_is_kept_whatever_the_connection() -> None:
    for local in (True, False):
        for token in (True, False):
            assert auth_mode_for(local, "disabled", token) == "disabled"
            assert auth_mode_for(local, "token", token) == "token"


def test_a_local_start_uses_token_auth_and_a_join_only_with_a_token() -> None:
    assert auth_mode_for(True, None, False) == "token"  # Ray generates the token of a local start
    assert auth_mode_for(True, None, True) == "token"
    assert auth_mode_for(False, None, True) == "token"
    assert auth_mode_for(False, None, False) is None  # Ray's default: a fresh machine joins without auth
    assert auth_mode_for(False, "", False) is None  # an empty RAY_AUTH_MODE counts as unset


def test_a_token_is_found_where_ray_looks(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert not token_available({}, home)
    assert token_available({"RAY_AUTH_TOKEN": "abc"}, home)
    assert not token_available({"RAY_AUTH_TOKEN": "  "}, home)
    named = tmp_path / "token.txt"
    assert not token_available({"RAY_AUTH_TOKEN_PATH": str(named)}, home)
    named.write_text("abc", encoding="utf-8")
    assert token_available({"RAY_AUTH_TOKEN_PATH": str(named)}, home)
    (home / ".ray").mkdir()
    (home / ".ray" / "auth_token").write_text("abc", encoding="utf-8")
    assert token_available({}, home)
