"""The `mlflow server` command line `specbench server` builds (`tracking.ui.server_command`): `--artifacts DIR`
reaches the server as `--artifacts-destination` whatever the backend store (MLflow takes it with any), and is
checked first; without it a SQLite store's artifacts go to the work directory. No server is started."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench.errors import SpecbenchError
from specbench.tracking.ui import server_command

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
