"""The `mlflow server` command line `specbench server` builds (`tracking.ui.server_command`): `--artifacts DIR`
reaches the server as `--artifacts-destination` whatever the backend store (MLflow takes it with any), and is
checked first; without it a SQLite store's artifacts go to the work directory. No server is started. The
parser's `--port` and the bind check share one port range."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from specbench.cli import main
from specbench.errors import SpecbenchError
from specbench.tracking.ui import PORTS, check_bind_address, is_port, server_command

STORES = ["sqlite:////tmp/x/mlflow.db", "postgresql://mlflow@127.0.0.1:5432/mlflow",
          "mysql+pymysql://mlflow@127.0.0.1/mlflow", "mssql://mlflow@127.0.0.1/mlflow"]


def _flag(cmd: list[str], name: str) -> str | None:
    return cmd[cmd.index(name) + 1] if name in cmd else None


@pytest.mark.parametrize("uri", STORES)
def test_the_artifact_folder_is_passed_for_every_store(uri: str, tmp_path: Path) -> None:
    cmd = server_command(uri, "127.0.0.1", 5000, tmp_path / "art")
    assert _flag(cmd, "--artifacts-destination") == str((tmp_path / "art").resolve())
    assert (tmp_path / "art").is_dir()  # created, as the option's help says
    assert _flag(cmd, "--backend-store-uri") == uri and _flag(cmd, "--port") == "5000"


def test_defaults_a_sqlite_store_to_the_work_directory_and_leaves_others_to_mlflow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBENCH_HOME", str(tmp_path / "home"))
    assert _flag(server_command(STORES[0], "127.0.0.1", 5000), "--artifacts-destination") == \
        str(tmp_path / "home" / "mlartifacts")
    assert "--artifacts-destination" not in server_command(STORES[1], "127.0.0.1", 5000)


def test_an_artifact_folder_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    taken = tmp_path / "file"
    taken.write_text("")
    with pytest.raises(SpecbenchError, match=r"--artifacts .*file: the artifact folder cannot be created .*Fix:"):
        server_command(STORES[1], "127.0.0.1", 5000, taken)


def test_the_parser_and_the_bind_check_share_one_port_range(capsys: pytest.CaptureFixture[str]) -> None:
    """`--port` (the parser) and `start_ui`'s own check (`check_bind_address`, where 0 means any free port)
    refuse the same values, with the same words."""
    assert [is_port(p) for p in (0, 1, 5000, 65535, 65536, -1)] == [False, True, True, True, False, False]
    for port in (65536, -1):
        with pytest.raises(SpecbenchError) as caught:
            check_bind_address("127.0.0.1", port)
        assert str(caught.value) == f"--port {port}: not a port. Fix: give {PORTS} (default 5000)."
    check_bind_address("127.0.0.1", 0)  # any free port: fine
    assert main(["ui", "--port", "65536"]) == 2
    assert f"'65536' is not a port. Fix: give {PORTS} (e.g. 5000)" in capsys.readouterr().err


def test_off_loopback_the_server_keeps_mlflows_default_hosts_and_adds_its_own(tmp_path: Path) -> None:
    from mlflow.server.security_utils import get_default_allowed_hosts, is_allowed_host_header

    cmd = server_command(f"sqlite:///{tmp_path / 'm.db'}", "0.0.0.0", 5000, tmp_path / "art", "mlflow.example.com")
    allowed = cmd[cmd.index("--allowed-hosts") + 1].split(",")
    for host in ("[::1]", "fd00::1", "10.1.2.3:5000", "mlflow.example.com:5000", f"{socket.gethostname()}:5000"):
        assert is_allowed_host_header(allowed, host), host  # MLflow's defaults stay (IPv6 private ones too)
    assert set(get_default_allowed_hosts()) <= set(allowed) and not is_allowed_host_header(allowed, "example.org")
