"""Probe a store before a command opens it: harness writes only into a store of its kind or a new one.

MLflow and Optuna create their tables in any SQLite file they are pointed at, another application's database
included, and retry a folder or a server that does not answer for minutes. `probe_store` looks first, read-only,
and imports no MLflow (seconds of its own): a SQLite file must be a database that is empty or has the kind's tables;
a tracking server must answer one request within `TIMEOUT_S`, once, without retries. MLflow's own retries stay on for
the work that follows, for a server that answered and then went away.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from harness.config.errors import DataError
from harness.runs.layout import sqlite_path

TIMEOUT_S = 3.0
"""Seconds a tracking server has to answer the probe."""


@dataclass(frozen=True)
class StoreKind:
    """What a store must hold to be written to."""

    name: str
    """The kind in messages, e.g. `an MLflow store`."""
    tables: frozenset[str]
    """Tables every SQLite store of this kind has: a database with some tables but not these is another
    application's."""


MLFLOW = StoreKind("an MLflow store", frozenset({"alembic_version", "experiments", "runs"}))
OPTUNA = StoreKind("an Optuna storage", frozenset({"alembic_version", "studies", "trials"}))


def probe_store(uri: str, key: str, where: str | None = None, kind: StoreKind = MLFLOW) -> None:
    """Raise a one-line `DataError` (prefixed with `where`, naming `key`, the setting that chose `uri`) if the store
    at `uri` is there but is not one harness may open: a folder, a file that is not a SQLite database, another
    application's database, a tracking server that does not answer. A store not there yet passes: it is created."""
    problem = store_problem(uri, kind)
    if problem:
        raise DataError(f"{where + ': ' if where else ''}{key}: {uri} {problem}")


def store_problem(uri: str, kind: StoreKind = MLFLOW) -> str | None:
    """Why the store at `uri` cannot be opened as `kind` (words that follow the URI), None if it can."""
    db = sqlite_path(uri)
    if db is not None:
        return _sqlite_problem(db, kind)
    if uri.startswith(("http://", "https://")):
        return _server_problem(uri)
    return None  # other databases and MLflow's file store: their first use reports them


def _sqlite_problem(db: Path, kind: StoreKind) -> str | None:
    if not db.exists():
        return None
    if db.is_dir():
        return "is a folder, not a SQLite database file"
    if not db.is_file():
        return "is not a regular file"
    try:
        tables = _tables(db)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or type(exc).__name__})"
    except sqlite3.DatabaseError as exc:
        return f"is not a SQLite database ({' '.join(str(exc).split())})"
    tables = {t for t in tables if not t.startswith("sqlite_")}
    if not tables or kind.tables <= tables:  # empty: created here, as a new path is
        return None
    shown = sorted(tables)
    names = ", ".join(shown[:5]) + (f" and {len(shown) - 5} more" if len(shown) > 5 else "")
    return f"is another application's SQLite database (tables {names}), not {kind.name}: harness leaves it as it is"


def _tables(db: Path) -> set[str]:
    """The names of the tables of SQLite file `db`, read without writing anything: a reader of a database in WAL
    mode makes its `-wal` and `-shm` files, so one whose `-wal` is not there (all of it is in the file) is read as
    immutable."""
    with open(db, "rb") as file:
        head = file.read(20)
    url = db.resolve().as_uri() + "?mode=ro"
    if len(head) == 20 and head[18] == 2 and not db.with_name(db.name + "-wal").exists():  # 2: WAL (file format)
        url += "&immutable=1"
    con = sqlite3.connect(url, uri=True, timeout=30)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        con.close()


def _server_problem(uri: str) -> str | None:
    """One GET of the server's health route, with MLflow's TLS settings: any HTTP answer will do."""
    import requests

    verify: bool | str = os.environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH") or True
    if os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").strip().lower() == "true":
        verify = False
    try:
        requests.get(
            uri.rstrip("/") + "/health",
            timeout=TIMEOUT_S,
            verify=verify,
            cert=os.environ.get("MLFLOW_TRACKING_CLIENT_CERT_PATH") or None,
            allow_redirects=False,
        ).close()
    except requests.Timeout:
        return f"does not answer (no response in {TIMEOUT_S:g} s)"
    except requests.RequestException as exc:
        reason = re.search(r"\[Errno -?\d+\] ([^'\")]+)", str(exc))
        return f"cannot be reached ({reason.group(1).strip() if reason else type(exc).__name__})"
    return None
