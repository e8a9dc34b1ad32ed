"""Ray address forms checked by hand without starting anything: the port range ends, an empty bracketed
host, spaces and empty addresses, the host and port taken apart (IPv6 brackets and the ray:// scheme
removed), and Ray's on/off environment settings read as Ray reads them."""

from __future__ import annotations

import pytest

from specbench.runtime.address import _ray_flag, address_problem, host_port

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("address", "problem"), [
    ("127.0.0.1:1", None), ("127.0.0.1:65535", None),
    ("127.0.0.1:0", "the port '0' is not a whole number from 1 to 65535"),
    ("127.0.0.1:65536", "the port '65536' is not a whole number from 1 to 65535"),
    ("[]:6379", "no HOST:PORT in it"), (":6379", "no HOST:PORT in it"),
    ("", "a Ray address holds no spaces"), ("127.0.0.1: 6379", "a Ray address holds no spaces"),
    ("ray://head:10001", None), ("ray://:10001", "no HOST:PORT in it"),
])
def test_address_forms(address: str, problem: str | None) -> None:
    assert address_problem(address) == problem


@pytest.mark.parametrize(("address", "expected"), [
    ("127.0.0.1:6379", ("127.0.0.1", 6379)), ("ray://head.example.org:10001", ("head.example.org", 10001)),
    ("[::1]:6379", ("::1", 6379)), ("ray://[fe80::1]:10001", ("fe80::1", 10001)),
])
def test_host_port(address: str, expected: tuple[str, int]) -> None:
    assert host_port(address) == expected


@pytest.mark.parametrize(("value", "on"), [("1", True), ("true", True), (" TRUE ", True), ("0", False),
                                           ("yes", False), ("", False), (None, False)])
def test_ray_flags_are_on_only_for_1_or_true(value: str | None, on: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if value is None:
        monkeypatch.delenv("RAY_USE_TLS", raising=False)
    else:
        monkeypatch.setenv("RAY_USE_TLS", value)
    assert _ray_flag("RAY_USE_TLS") is on
