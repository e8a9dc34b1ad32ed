"""Where specbench finds its data and writes what it generates.

- the project root: the checkout holding `pyproject.toml` (found from this file), else the working directory;
- the work directory `.specbench/` under the root (`SPECBENCH_HOME` overrides): graphs, audio, scores,
  caches, built tools and the embedded MLflow store, all ignored by git;
- the data directory: `SPECBENCH_DATA`, else `<root>/../shared/data`.
"""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """The checkout this package was installed from (editable install), else the working directory."""
    here = Path(__file__).resolve().parents[2]
    if (here / "pyproject.toml").is_file() and (here / "platform" / "specbench").is_dir():
        return here
    return Path.cwd()


def work_dir() -> Path:
    """`SPECBENCH_HOME`, else `<root>/.specbench`; created on first use."""
    env = os.environ.get("SPECBENCH_HOME")
    path = Path(env).expanduser() if env else project_root() / ".specbench"
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def data_dir_candidate() -> tuple[Path, str]:
    """The data directory to use and how it was chosen (for messages). Not checked for existence."""
    env = os.environ.get("SPECBENCH_DATA")
    if env:
        return Path(env).expanduser().resolve(), "the environment variable SPECBENCH_DATA"
    return (project_root().parent / "shared" / "data").resolve(), "the default ../shared/data beside the checkout"


def from_root(path: Path) -> Path:
    """`path` as the config means it: an absolute path as it is, a relative one against the project root."""
    path = Path(path)
    return path if path.is_absolute() else project_root() / path
