"""Where specbench finds its data and writes what it generates.

- the project root: the checkout holding `pyproject.toml` (found from this file), else the working directory;
- the work directory `.specbench/` under the root (`SPECBENCH_HOME` overrides): graphs, audio, scores,
  caches, built tools and the embedded MLflow store, all ignored by git. A config path that begins with
  `.specbench/` (a job file's `scores = ".specbench/scores/..."`) means the work directory, wherever
  `SPECBENCH_HOME` puts it (`from_root`), so that a job reads what the jobs before it wrote;
- the data directory: `SPECBENCH_DATA`, else `<root>/../shared/data`.
"""

from __future__ import annotations

import os
from pathlib import Path

from specbench.errors import ConfigError


def project_root() -> Path:
    """The checkout this package was installed from (editable install), else the working directory."""
    here = Path(__file__).resolve().parents[2]
    if (here / "pyproject.toml").is_file() and (here / "platform" / "specbench").is_dir():
        return here
    return Path.cwd()


WORK_DIR_NAME = ".specbench"


def work_dir_location() -> Path:
    """Where the work directory is (`SPECBENCH_HOME`, else `<root>/.specbench`), without creating it."""
    env = os.environ.get("SPECBENCH_HOME")
    return Path(env).expanduser() if env else project_root() / WORK_DIR_NAME


def work_dir() -> Path:
    """`SPECBENCH_HOME`, else `<root>/.specbench`; created on first use."""
    path = work_dir_location()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"the work directory {path} (SPECBENCH_HOME, else .specbench/ in the checkout) cannot "
                          f"be made ({err.strerror}: {err.filename}). Fix: point SPECBENCH_HOME at a folder you "
                          "can write, or unset it") from err
    return path.resolve()


def data_dir_candidate() -> tuple[Path, str]:
    """The data directory to use and how it was chosen (for messages). Not checked for existence."""
    env = os.environ.get("SPECBENCH_DATA")
    if env:
        return Path(env).expanduser().resolve(), "the environment variable SPECBENCH_DATA"
    return (project_root().parent / "shared" / "data").resolve(), "the default ../shared/data beside the checkout"


def from_root(path: Path) -> Path:
    """`path` as the config means it: an absolute path as it is; a relative one beginning with `.specbench/`
    in the work directory (`SPECBENCH_HOME` when set: `.specbench/scores/x` is `$SPECBENCH_HOME/scores/x`,
    where the jobs write); any other relative one against the project root. Creates nothing."""
    path = Path(path)
    if path.is_absolute():
        return path
    if path.parts and path.parts[0] == WORK_DIR_NAME:
        return work_dir_location().resolve().joinpath(*path.parts[1:])
    return project_root() / path


def resolve_path(path: Path, where: str) -> Path:
    """`path` resolved; a link loop is a ConfigError naming `where`, the key or option that gave it."""
    try:
        return path.resolve()
    except (RuntimeError, OSError) as err:  # RuntimeError: a loop (Python 3.11)
        raise ConfigError(f"{where}: {path}: a symbolic link loop. Fix: point it at a real file.") from err
