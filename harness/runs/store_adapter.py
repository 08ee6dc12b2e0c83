"""The one module that reads MLflow's private surface: the tables of its SQL store, and its UI's bulk history route.

MLflow's public API reads metric histories one (run, key) at a time: 20-50x slower than direct SQL for a 48-run sweep
on a local SQLite file (benchmarks/dashboard_load.py), far worse over a network. `SqlStore` reads a database store's
tables directly, a query or two each for runs, tags, params and every metric point of a sweep, once `usable()` has
found there the tables and columns of `SCHEMA`; where it does not, it warns once (one line, `StoreAdapterWarning`)
and the reader goes through MLflow's public API instead. `bulk_history` reads one metric of up to 100 runs from an
MLflow server through the route MLflow's UI uses, `/ajax-api/2.0/mlflow/metrics/get-history-bulk`: MLflow documents
no REST route that returns several runs' histories (`/api/2.0/mlflow/metrics/get-history-bulk-interval` is marked
PUBLIC_UNDOCUMENTED in its protos, and samples at most 2,500 points a run). tests/test_store_adapter.py holds both to
MLflow's public API on the installed MLflow; pyproject.toml pins the versions that passed.
"""

from __future__ import annotations

import os
import sqlite3
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from harness.runs.layout import store_exists

SCHEMA = {  # the tables of MLflow's SqlAlchemyStore read here, and the columns read of each
    "experiments": "experiment_id name",
    "runs": "run_uuid name experiment_id status start_time end_time artifact_uri lifecycle_stage",
    "tags": "run_uuid key value",
    "params": "run_uuid key value",
    "metrics": "run_uuid key step value is_nan",
    "latest_metrics": "run_uuid timestamp",
}
CHUNK = 500  # run ids per query (SQLite allows 32,766 parameters, older builds 999)
BULK_ROUTE = "/ajax-api/2.0/mlflow/metrics/get-history-bulk"
BULK_RUNS, BULK_POINTS = 100, 25000  # the route's caps: run ids per request, points per response (all runs together)


class StoreAdapterWarning(UserWarning):
    """MLflow's private surface is not what this adapter knows: the reader uses MLflow's public API (slower)."""


def schema_gaps(tables: dict[str, set[str]]) -> list[str]:
    """What `tables` (table name → its column names) lacks of SCHEMA: 'table t' or 't.column' each."""
    gaps = []
    for table, columns in SCHEMA.items():
        if table not in tables:
            gaps.append(f"table {table}")
        else:
            gaps += [f"{table}.{c}" for c in columns.split() if c not in tables[table]]
    return gaps


class SqlStore:
    """Direct SQL on MLflow's tables: SQLite through sqlite3 (read-only, ~3x faster than SQLAlchemy), its metric
    points through ADBC's SQLite driver as Arrow columns; any other database MLflow supports through SQLAlchemy.
    Each method returns plain frames; the reader finishes them."""

    def __init__(self, uri: str):
        self.uri = uri
        self.path = Path(uri[len("sqlite:///") :]) if uri.startswith("sqlite:///") else None
        self.gaps: list[str] | None = None
        """What the store lacks of SCHEMA, once checked (on the first use of an existing store)."""

    def usable(self) -> bool:
        """Whether the store has SCHEMA's tables and columns (a SQLite file not created yet reads as empty, and is
        checked once it exists); warns once, in one line, where it has not."""
        if self.gaps is None:
            if self.missing():
                return True
            self.gaps = schema_gaps(self.tables())
            if self.gaps:
                warnings.warn(
                    f"MLflow store {self.uri} has not the schema harness reads directly (no {', '.join(self.gaps)}):"
                    " reading it through MLflow's public API, slower",
                    StoreAdapterWarning,
                    stacklevel=3,
                )
        return not self.gaps

    def missing(self) -> bool:
        return self.path is not None and not store_exists(self.uri)

    def tables(self) -> dict[str, set[str]]:
        """The store's tables among SCHEMA's (views left out) → their columns."""
        if self.path is not None:
            con = self._sqlite()
            try:
                names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                return {t: {r[1] for r in con.execute(f'PRAGMA table_info("{t}")')} for t in SCHEMA if t in names}
            finally:
                con.close()
        import sqlalchemy

        engine = sqlalchemy.create_engine(self.uri)
        try:
            inspector = sqlalchemy.inspect(engine)
            names = set(inspector.get_table_names())
            return {t: {c["name"] for c in inspector.get_columns(t)} for t in SCHEMA if t in names}
        finally:
            engine.dispose()

    def runs(self) -> pd.DataFrame:
        """Every active run: run_id, run_name, experiment, status, start_time, end_time, artifact_uri."""
        return self._query(
            "SELECT r.run_uuid AS run_id, r.name AS run_name, e.name AS experiment, r.status, r.start_time,"
            " r.end_time, r.artifact_uri FROM runs r JOIN experiments e ON e.experiment_id = r.experiment_id"
            " WHERE r.lifecycle_stage = 'active'"
        )

    def tags(self) -> pd.DataFrame:
        """run_id, key, value of every active run's tags."""
        return self._query(
            "SELECT t.run_uuid AS run_id, t.key, t.value FROM tags t JOIN runs r"
            " ON r.run_uuid = t.run_uuid WHERE r.lifecycle_stage = 'active'"
        )

    def params(self, run_ids: list[str]) -> pd.DataFrame:
        return self._in(
            "SELECT run_uuid AS run_id, key, value FROM params WHERE run_uuid IN ({})",
            run_ids,
            ["run_id", "key", "value"],
        )

    def metrics(self, run_ids: list[str]) -> pd.DataFrame:
        """run_id, key, step, value of every point (NaN where MLflow stored is_nan)."""
        if self.path is None:
            rows = self._in(
                "SELECT run_uuid AS run_id, key, step, value, is_nan FROM metrics WHERE run_uuid IN ({})",
                run_ids,
                ["run_id", "key", "step", "value", "is_nan"],
            )
            nan = rows.pop("is_nan").astype(bool).to_numpy()
            return rows.assign(value=np.where(nan, np.nan, rows["value"].to_numpy(float)))
        # a thread per chunk of runs: the Arrow driver fills its columns with the GIL released
        parts = [p for p in self._map(self._points, run_ids) if len(p[0])]
        if not parts:
            return pd.DataFrame(columns=["run_id", "key", "step", "value"])
        groups = pd.concat([g for g, _ in parts], ignore_index=True)
        n = groups["n"].to_numpy(np.int64)
        runs, keys = pd.Categorical(groups["run_id"]), pd.Categorical(groups["key"])
        column = {c: np.concatenate([p[c] for _, p in parts]) for c in ("step", "value", "is_nan")}
        return pd.DataFrame(
            {
                "run_id": pd.Categorical.from_codes(np.repeat(runs.codes, n), runs.categories),
                "key": pd.Categorical.from_codes(np.repeat(keys.codes, n), keys.categories),
                "step": column["step"],
                "value": np.where(column["is_nan"] != 0, np.nan, column["value"]),
            }
        )

    def last_logged(self, run_ids: list[str]) -> pd.Series:
        """Time (ms) of each run's latest metric point, indexed by run id."""
        df = self._in(
            "SELECT run_uuid AS run_id, max(timestamp) AS t FROM latest_metrics WHERE run_uuid IN ({})"
            " GROUP BY run_uuid",
            run_ids,
            ["run_id", "t"],
        )
        return df.set_index("run_id")["t"] if not df.empty else pd.Series(dtype=float)

    def _sqlite(self) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30)

    def _query(self, sql: str, args: list | tuple = ()) -> pd.DataFrame:
        if self.path is not None:
            if self.missing():
                return pd.DataFrame()
            con = self._sqlite()
            try:
                cur = con.execute(sql, args)
                return pd.DataFrame.from_records(cur.fetchall(), columns=[d[0] for d in cur.description])
            finally:
                con.close()
        import sqlalchemy

        for i in range(len(args)):  # SQLAlchemy's named parameters for sqlite3's '?'
            sql = sql.replace("?", f":p{i}", 1)
        engine = sqlalchemy.create_engine(self.uri)
        try:
            with engine.connect() as con:
                return pd.read_sql_query(sqlalchemy.text(sql), con, params={f"p{i}": a for i, a in enumerate(args)})
        finally:
            engine.dispose()

    def _points(self, run_ids: list[str]) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
        """SQLite: the size of each (run, key) group, and the columns step, value, is_nan of every point in the same
        (run, key, step) order, read in one transaction (both queries see the same points while a sweep is logging
        more) through ADBC's SQLite driver, which fills Arrow columns in C: no Python object per point, ~3x faster
        than the sqlite3 module's row tuples (benchmarks/dashboard_load.py)."""
        empty = {"step": np.empty(0, np.int64), "value": np.empty(0), "is_nan": np.empty(0, np.int64)}
        if self.missing():
            return pd.DataFrame(columns=["run_id", "key", "n"]), empty
        from adbc_driver_sqlite import dbapi

        marks = ",".join("?" * len(run_ids))
        with dbapi.connect(f"file:{self.path}?mode=ro") as con, con.cursor() as cur:  # autocommit off: one snapshot
            cur.execute(
                f"SELECT run_uuid AS run_id, key, count(*) AS n FROM metrics WHERE run_uuid IN ({marks})"
                " GROUP BY run_uuid, key ORDER BY run_uuid, key",
                run_ids,
            )
            groups = cur.fetch_df()
            if groups.empty:
                return pd.DataFrame(columns=["run_id", "key", "n"]), empty
            cur.execute(  # the casts pin the column types the driver would otherwise guess from the first rows
                f"SELECT CAST(step AS INTEGER), CAST(value AS REAL), CAST(is_nan AS INTEGER) FROM metrics"
                f" WHERE run_uuid IN ({marks}) ORDER BY run_uuid, key, step",
                run_ids,
            )
            points = cur.fetch_arrow_table()
        return groups, {c: points.column(i).to_numpy() for i, c in enumerate(("step", "value", "is_nan"))}

    def _in(self, sql: str, run_ids: list[str], columns: list[str]) -> pd.DataFrame:
        frames = self._map(lambda chunk: self._query(sql.format(",".join("?" * len(chunk))), chunk), run_ids)
        frames = [f for f in frames if not f.empty]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)

    def _map(self, read, run_ids: list[str]) -> list:
        """`read` of each chunk of `run_ids`, a thread each: SQLite works with the GIL released, a core each (the
        sqlite3 module's rows are few here, a row per run, key or param; the points come as Arrow columns)."""
        size = max(1, min(CHUNK, -(-len(run_ids) // (os.cpu_count() or 1))))
        chunks = [run_ids[i : i + size] for i in range(0, len(run_ids), size)]
        with ThreadPoolExecutor(max_workers=min(len(chunks), os.cpu_count() or 1) or 1) as pool:
            return list(pool.map(read, chunks))


def bulk_history(uri: str, key: str, run_ids: list[str]) -> pd.DataFrame | None:
    """Every point (run_id, key, step, value) of metric `key` of `run_ids` (at most BULK_RUNS) from the MLflow server
    at `uri`, through its UI's bulk route; None where that cannot be had: the server has no such route (warns once,
    in one line) or one run alone has more than BULK_POINTS points of `key`. The caller then reads each run's history
    through MLflow's public API."""
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    resp = http_request(
        get_default_host_creds(uri),
        BULK_ROUTE,
        "GET",
        params={"run_id": run_ids, "metric_key": key, "max_results": BULK_POINTS},
    )
    if resp.status_code in (404, 405):
        warnings.warn(
            f"MLflow server {uri} has no {BULK_ROUTE} route: reading metric histories one run at a time"
            " through MLflow's public API, slower",
            StoreAdapterWarning,
            stacklevel=3,
        )
        return None
    resp.raise_for_status()
    points = resp.json().get("metrics", [])
    if len(points) >= BULK_POINTS:  # the route truncates at BULK_POINTS: ask for fewer runs at a time
        if len(run_ids) == 1:
            return None
        halves = [bulk_history(uri, key, part) for part in (run_ids[: len(run_ids) // 2], run_ids[len(run_ids) // 2 :])]
        return None if any(h is None for h in halves) else pd.concat(halves, ignore_index=True)
    return pd.DataFrame(
        {
            "run_id": [p["run_id"] for p in points],
            "key": [p["key"] for p in points],
            "step": np.array([int(p.get("step", 0)) for p in points], dtype=np.int64),
            "value": np.array([float(p["value"]) for p in points], dtype=float),
        }
    )
