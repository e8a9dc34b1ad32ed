"""The tracking URI: `--tracking-uri`, else `MLFLOW_TRACKING_URI`, else the embedded local store.

The embedded store is `sqlite:///<repo>/.specbench/mlflow.db` with artifacts under
`<repo>/.specbench/mlartifacts/`: no server needed.

A URI given on the command line or in the environment is checked before MLflow sees it
(`check_tracking_uri`): a scheme MLflow cannot use, or a malformed one, is one clear error that names where it
came from, and a SQLite file that is there but is no database is refused (`check_sqlite_store`). The read
verbs check further (`check_readable_store`) that the store they read exists: an explicit SQLite file that is
not there or is empty, or a server that does not answer, is refused instead of being created or retried,
and the embedded store is not created by a verb that only reads it (`local_store_missing`). Writing verbs
(`run`, `server`) may create a store. Nothing here imports mlflow.
"""

from __future__ import annotations

import logging
import os
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from specbench.errors import SpecbenchError
from specbench.paths import resolve_path, work_dir

ENV_URI = "MLFLOW_TRACKING_URI"
OPTION = "--tracking-uri"
SUPPORTED = ("sqlite:////abs/path.db (a local store file), http://HOST:PORT or https://HOST[:PORT] (an MLflow "
             "server, e.g. `specbench server`), postgresql://, mysql://, mssql:// (a database, with its "
             "driver installed), or databricks")
_SQL_SCHEMES = ("postgresql", "mysql", "mssql")
_SQLITE_PREFIX = "sqlite:///"
_REACH_TIMEOUT_S = 5.0
_SQLITE_MAGIC = b"SQLite format 3\x00"


def local_store_uri() -> str:
    """`sqlite:////abs/path/.specbench/mlflow.db`."""
    return f"sqlite:///{work_dir() / 'mlflow.db'}"


def local_artifact_root() -> Path:
    path = work_dir() / "mlartifacts"
    path.mkdir(parents=True, exist_ok=True)
    return path


def uri_source(explicit: str | None = None) -> str | None:
    """Where the URI `resolve_tracking_uri(explicit)` returns comes from: `--tracking-uri`,
    `$MLFLOW_TRACKING_URI`, or None for the embedded default."""
    if explicit:
        return OPTION
    return f"${ENV_URI}" if os.environ.get(ENV_URI) else None


def resolve_tracking_uri(explicit: str | None = None) -> str:
    """The URI every verb uses: explicit, else the environment, else the embedded local store. An explicit or
    environment URI is checked with `check_tracking_uri`, any SQLite store with `check_sqlite_store`
    (SpecbenchError naming its source)."""
    uri = explicit or os.environ.get(ENV_URI)
    if not uri:
        return check_sqlite_store(local_store_uri(), "the local store")
    source = uri_source(explicit) or OPTION
    return check_sqlite_store(check_tracking_uri(uri, source), source)


def check_sqlite_store(uri: str, source: str = OPTION) -> str:
    """`uri` unchanged unless it is a SQLite store whose file exists, is not empty and is no SQLite database
    (MLflow would fail on it with a database traceback): then a SpecbenchError naming the file and the fix."""
    path = sqlite_path(uri)
    try:
        if path is None or not path.is_file() or path.stat().st_size == 0:
            return uri
        with path.open("rb") as fh:
            head = fh.read(len(_SQLITE_MAGIC))
    except OSError:
        return uri  # unreadable: MLflow says why
    if head == _SQLITE_MAGIC:
        return uri
    raise SpecbenchError(
        f"{source} {uri!r}: {path.resolve()} is not an MLflow store (the file is not a SQLite database). "
        f"Fix: check the path (the local store is {local_store_uri()}): a store is the .db file that "
        "`specbench run` or `specbench server` creates (at a path where no file is yet).")


def _file_store_allowed() -> bool:
    return os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").strip().lower() in ("1", "true", "yes")


def check_tracking_uri(uri: str, source: str = OPTION) -> str:
    """`uri` unchanged if MLflow can use it as a tracking store (see `SUPPORTED`), else a SpecbenchError
    "SOURCE 'URI': what is wrong. Fix: ...". Only the form is checked (and that a database URI's driver
    loads): nothing is opened."""
    problem = _uri_problem(uri)
    if problem:
        fix = "" if "Fix:" in problem else f". Fix: use {SUPPORTED}."
        raise SpecbenchError(f"{source} {uri!r}: {problem}{fix}")
    return uri


def _missing_driver(uri: str) -> str | None:
    """Why SQLAlchemy cannot load the database driver a postgresql/mysql/mssql URI names (None: it can)."""
    from sqlalchemy.engine import make_url  # only for these schemes

    try:
        make_url(uri).get_dialect().import_dbapi()
    except ImportError as err:
        package = {"postgresql": "'psycopg[binary]'", "mysql": "mysqlclient", "mssql": "pyodbc"}
        return (f"its database driver is not installed ({err}). Fix: install it into specbench's environment "
                f"(`.venv/bin/pip install {package[uri.split(':')[0].split('+')[0].lower()]}`, or the driver "
                "its +dialect names), or use sqlite:///PATH or http://HOST:PORT")
    except Exception as err:  # noqa: BLE001 - SQLAlchemy's own refusal (an unknown +driver), in its words
        return f"SQLAlchemy cannot use it ({err})"
    return None


def _uri_problem(uri: str) -> str | None:
    """What is wrong with the form of a tracking URI (None: nothing)."""
    if uri != uri.strip():
        return "it begins or ends with a space"
    scheme = uri.split(":", 1)[0].lower() if ":" in uri else ""
    if scheme != "sqlite" and any(c.isspace() for c in uri):  # a SQLite file's path may hold spaces
        return "a tracking URI other than a SQLite file's holds no spaces"
    if uri.lower() == "databricks" or scheme == "databricks" or scheme.startswith("databricks-"):
        return None  # Databricks' hosted MLflow (its own credentials)
    if scheme == "sqlite":
        if not uri.startswith(_SQLITE_PREFIX) or not uri[len(_SQLITE_PREFIX):]:
            return "a SQLite URI is sqlite:/// followed by the file's path (four slashes for an absolute one)"
        return None
    if scheme in ("http", "https"):
        parts = urlsplit(uri)
        if not parts.hostname:
            return f"no host in the {scheme} address"
        try:
            port = parts.port
        except ValueError:
            return f"the port {parts.netloc.rsplit(':', 1)[-1]!r} is not a whole number from 1 to 65535"
        if port == 0:
            return "the port 0 is not a whole number from 1 to 65535"
        return None
    if scheme.split("+")[0] in _SQL_SCHEMES:
        return _missing_driver(uri)
    if scheme in ("", "file") or (len(scheme) == 1 and uri[1:3] == ":\\"):  # a plain path (or C:\ path)
        if _file_store_allowed():
            return None
        return ("a plain path or file: URI selects MLflow's file store, which this MLflow refuses (unless "
                "MLFLOW_ALLOW_FILE_STORE=true)")
    return f"the scheme {scheme + ':'!r} is not a tracking store MLflow can use here"


def sqlite_path(uri: str) -> Path | None:
    """The file of a `sqlite:///PATH` URI (None for other URIs)."""
    if not uri.startswith(_SQLITE_PREFIX):
        return None
    return Path(uri[len(_SQLITE_PREFIX):].split("?", 1)[0])


def absolute_sqlite_uri(uri: str, base: Path | None = None) -> str:
    """`uri` with a relative SQLite file (`sqlite:///runs.db`) made absolute against `base` (default: the
    current directory), for a process that runs elsewhere: a submitted job runs in the working_dir Ray unpacks
    (and deletes with it), where a relative path would create a store that is lost with the job. Any other
    URI (an absolute SQLite file, a server, an in-memory store) is returned unchanged."""
    path = sqlite_path(uri)
    if path is None or path.is_absolute() or str(path) in (".", ":memory:"):
        return uri
    _, sep, query = uri[len(_SQLITE_PREFIX):].partition("?")
    return f"{_SQLITE_PREFIX}{((base or Path.cwd()) / path).resolve()}{sep}{query}"


def check_readable_store(explicit: str | None = None) -> str:
    """The tracking URI for a verb that reads the store (`runs`, `compare`, `baseline`, `ui`), checked to
    exist: an explicit (option or environment) SQLite file that is missing or empty (MLflow would make a new
    store of it), and an http(s) server that does not answer, raise a SpecbenchError with the fix instead of
    creating an empty store or retrying for long.
    The embedded default store may not exist yet (the verb then finds no runs)."""
    uri = resolve_tracking_uri(explicit)
    source = uri_source(explicit)
    if source is None:
        return uri
    path = sqlite_path(uri)
    if path is not None:
        where = path.resolve()
        if where.is_dir():
            raise SpecbenchError(f"{source} {uri!r}: {where} is a folder, not an MLflow store. Fix: give the "
                                 "path of the store's .db file, e.g. sqlite:///" + str(where / "mlflow.db"))
        if not where.is_file() or where.stat().st_size == 0:
            why = "the file is empty" if where.is_file() else "the file does not exist"
            raise SpecbenchError(
                f"{source} {uri!r}: no MLflow store at {where} ({why}; this verb reads runs and creates "
                f"no store). Fix: check the path (the local store is {local_store_uri()}), or run a job with "
                f"`specbench {OPTION} {uri} run JOB.toml` to create the store first.")
        return uri
    if uri.lower().startswith(("http://", "https://")):
        check_server_reachable(uri, source)
    return uri


def local_store_missing(explicit: str | None = None) -> bool:
    """True when the verb would read the embedded default store and no job has created it yet: a read verb
    then says so instead of letting MLflow create an empty store."""
    if uri_source(explicit) is not None:
        return False
    path = sqlite_path(local_store_uri())
    return path is not None and not path.is_file()


def check_server_reachable(uri: str, source: str = OPTION, timeout: float = _REACH_TIMEOUT_S) -> None:
    """Raise a SpecbenchError unless something answers HTTP at `uri` within `timeout` seconds (an HTTP error
    status counts as an answer: the server is there)."""
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout):
            return
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        if isinstance(reason, ssl.SSLError):
            return  # it answered; whether its certificate is trusted is MLflow's to say
        if isinstance(reason, OSError) and reason.strerror:
            reason = reason.strerror
        raise SpecbenchError(
            f"cannot reach the tracking server at {uri} ({source}): {reason}. Fix: start it with `specbench "
            f"server --port {urlsplit(uri).port or 5000}` (on that machine), or check the address given by "
            f"{source}.") from err


def check_store_file(path: Path, option: str) -> Path:
    """A SQLite store file the server may create: not a folder, not some other kind of file, in a folder that
    exists or can be made (made here) and can be written. Returns the absolute path."""
    path = resolve_path(path.expanduser(), option)
    form = "a .db file path (e.g. .specbench/mlflow.db) whose folder exists or can be created"
    if path.is_dir():
        raise SpecbenchError(f"{option} {path}: this is a folder, not a store file. Fix: give {form}, e.g. "
                             f"{path / 'mlflow.db'}.")
    if path.is_file() and path.stat().st_size > 0:
        with path.open("rb") as fh:
            if fh.read(len(_SQLITE_MAGIC)) != _SQLITE_MAGIC:
                raise SpecbenchError(f"{option} {path}: this file is not a SQLite database. Fix: give {form} "
                                     "(a new file is created).")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SpecbenchError(f"{option} {path}: its folder {path.parent} cannot be created ({err.strerror}). "
                             f"Fix: give {form}.") from err
    if not os.access(path.parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise SpecbenchError(f"{option} {path}: not writable. Fix: give {form}, in a folder you can write.")
    return path


def check_artifact_root(path: Path, option: str = "--artifacts") -> Path:
    """An artifact folder: made here (with its parents) and writable. Returns the absolute path."""
    path = path.expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (OSError, FileExistsError) as err:
        why = "a file of that name exists" if path.exists() and not path.is_dir() else err.strerror
        raise SpecbenchError(f"{option} {path}: the artifact folder cannot be created ({why}). Fix: give a "
                             "folder that exists or can be created, and that you can write.") from err
    if not os.access(path, os.W_OK | os.X_OK):
        raise SpecbenchError(f"{option} {path}: the artifact folder is not writable. Fix: give a folder you "
                             "can write.")
    return path


def quiet_mlflow() -> None:
    """Keep MLflow's and alembic's start-up chatter (schema migrations of a new store) off the terminal."""
    for name in ("mlflow", "alembic", "alembic.runtime.migration"):
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    # an unreachable server is noticed in seconds (the run then continues offline, see journal.py), not
    # after MLflow's default minutes of retries
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
