"""Read a whole sweep out of the tracking store into DataFrames, in a handful of queries.

MLflow's public API reads metric histories one (run, key) at a time: ~20x slower than one query
for a 48-run sweep on a local SQLite file (benchmarks/dashboard_load.py), far worse over a network.
Where the store is a database (SQLite by default, or PostgreSQL/MySQL behind
MLflow), a `SqlReader` reads runs, tags, params and every metric point of a sweep with one SQL
query each. Against an MLflow server, `MlflowReader` uses `search_runs` and the server's bulk
history route (one request per metric key per 100 runs). Both return the same frames.
"""

from __future__ import annotations

import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import mlflow
import numpy as np
import pandas as pd
from mlflow.tracking import MlflowClient

from harness.runs.layout import JOBS_ARTIFACT, N_JOBS_TAG, PARENT_TAG, SWEEP_ID_TAG

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # not one bar per artifact read
METRIC_COLUMNS = ["run_id", "key", "step", "value"]
RUN_COLUMNS = ["run_id", "run_name", "experiment", "status", "start_time", "end_time", "artifact_uri"]
NO_SWEEP = ""  # sweep_id of runs started by `harness run` (grouped per experiment)


class Reader(Protocol):
    def runs(self) -> pd.DataFrame:
        """Every active run: RUN_COLUMNS plus one column per tag (tag names as columns)."""

    def params(self, run_ids: list[str]) -> pd.DataFrame:
        """Long frame run_id, key, value."""

    def metrics(self, run_ids: list[str]) -> pd.DataFrame:
        """Long frame run_id, key, step, value of every logged point."""

    def last_logged(self, run_ids: list[str]) -> pd.Series:
        """Time (ms) of each run's latest metric point, indexed by run id."""


def reader_for(uri: str) -> Reader:
    """SQL for database stores, the MLflow client (REST bulk routes) for anything else."""
    if uri.split(":", 1)[0].split("+", 1)[0] in ("sqlite", "postgresql", "mysql", "mssql"):
        return SqlReader(uri)
    return MlflowReader(uri)


class SqlReader:
    """Direct SQL on MLflow's own schema (tables runs, experiments, tags, params, metrics)."""

    def __init__(self, uri: str):
        self.uri = uri
        self.path = Path(uri[len("sqlite:///") :]) if uri.startswith("sqlite:///") else None

    def _query(self, sql: str, args: list | tuple = ()) -> pd.DataFrame:
        if self.path is not None:  # sqlite3 directly: a read-only connection, and ~3x faster than SQLAlchemy
            if not self.path.exists():
                return pd.DataFrame()
            con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30)
            try:
                cur = con.execute(sql, args)
                cols = [d[0] for d in cur.description]
                return pd.DataFrame.from_records(cur.fetchall(), columns=cols)
            finally:
                con.close()
        import sqlalchemy

        engine = sqlalchemy.create_engine(self.uri)
        try:
            with engine.connect() as con:
                marks = sql.count("?")
                names = {f"p{i}": a for i, a in enumerate(args)}
                text = sql
                for i in range(marks):
                    text = text.replace("?", f":p{i}", 1)
                return pd.read_sql_query(sqlalchemy.text(text), con, params=names)
        finally:
            engine.dispose()

    def runs(self) -> pd.DataFrame:
        runs = self._query(
            "SELECT r.run_uuid AS run_id, r.name AS run_name, e.name AS experiment, r.status, r.start_time,"
            " r.end_time, r.artifact_uri FROM runs r JOIN experiments e ON e.experiment_id = r.experiment_id"
            " WHERE r.lifecycle_stage = 'active'"
        )
        if runs.empty:
            return pd.DataFrame(columns=RUN_COLUMNS)
        tags = self._query(
            "SELECT t.run_uuid AS run_id, t.key, t.value FROM tags t JOIN runs r"
            " ON r.run_uuid = t.run_uuid WHERE r.lifecycle_stage = 'active'"
        )
        return _with_tags(runs, tags)

    def params(self, run_ids: list[str]) -> pd.DataFrame:
        return self._in(
            "SELECT run_uuid AS run_id, key, value FROM params WHERE run_uuid IN ({})",
            run_ids,
            ["run_id", "key", "value"],
        )

    def metrics(self, run_ids: list[str]) -> pd.DataFrame:
        if self.path is None:
            return _with_inf(
                self._in(
                    "SELECT run_uuid AS run_id, key, step, value FROM metrics WHERE run_uuid IN ({})",
                    run_ids,
                    METRIC_COLUMNS,
                )
            )
        # SQLite: one row per (run, key) with the points packed as text, parsed by numpy; ~5x faster than
        # a row per point. '%!.17g' round-trips every double exactly; NaNs are stored as is_nan=1.
        rows = self._in(
            "SELECT run_uuid, key, group_concat(step) AS steps, group_concat(CASE WHEN is_nan THEN 'nan'"
            " ELSE printf('%!.17g', value) END) AS vals, count(*) AS n FROM metrics WHERE run_uuid IN ({})"
            " GROUP BY run_uuid, key",
            run_ids,
            ["run_uuid", "key", "steps", "vals", "n"],
        )
        if rows.empty:
            return pd.DataFrame(columns=METRIC_COLUMNS)
        n = rows["n"].to_numpy()
        runs = pd.Categorical(rows["run_uuid"])
        keys = pd.Categorical(rows["key"])
        return _with_inf(
            pd.DataFrame(
                {
                    "run_id": pd.Categorical.from_codes(np.repeat(runs.codes, n), runs.categories),
                    "key": pd.Categorical.from_codes(np.repeat(keys.codes, n), keys.categories),
                    "step": np.fromstring(",".join(rows["steps"]), sep=",", dtype=np.int64),
                    "value": np.fromstring(",".join(rows["vals"]), sep=","),
                }
            )
        )

    def last_logged(self, run_ids: list[str]) -> pd.Series:
        """Time (ms) of each run's latest metric point."""
        df = self._in(
            "SELECT run_uuid AS run_id, max(timestamp) AS t FROM latest_metrics WHERE run_uuid IN ({})"
            " GROUP BY run_uuid",
            run_ids,
            ["run_id", "t"],
        )
        return df.set_index("run_id")["t"] if not df.empty else pd.Series(dtype=float)

    def _in(self, sql: str, run_ids: list[str], columns: list[str]) -> pd.DataFrame:
        # SQLite formats and packs the points with the GIL released: a connection per core halves the wait
        size = max(1, min(500, -(-len(run_ids) // (os.cpu_count() or 1))))
        chunks = [run_ids[i : i + size] for i in range(0, len(run_ids), size)]
        with ThreadPoolExecutor(max_workers=min(len(chunks), os.cpu_count() or 1) or 1) as pool:
            frames = list(pool.map(lambda chunk: self._query(sql.format(",".join("?" * len(chunk))), chunk), chunks))
        frames = [f for f in frames if not f.empty]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


class MlflowReader:
    """Any other store through MLflow: `search_runs`, and the bulk history route of a server."""

    def __init__(self, uri: str):
        self.uri, self.client = uri, MlflowClient(uri)

    def runs(self) -> pd.DataFrame:
        rows, tags = [], []
        for exp in self.client.search_experiments():
            token = None
            while True:
                page = self.client.search_runs([exp.experiment_id], max_results=1000, page_token=token)
                for r in page:
                    rows.append(
                        {
                            "run_id": r.info.run_id,
                            "run_name": r.info.run_name,
                            "experiment": exp.name,
                            "status": r.info.status,
                            "start_time": r.info.start_time,
                            "end_time": r.info.end_time,
                            "artifact_uri": r.info.artifact_uri,
                        }
                    )
                    tags.extend({"run_id": r.info.run_id, "key": k, "value": v} for k, v in r.data.tags.items())
                token = page.token
                if not token:
                    break
        if not rows:
            return pd.DataFrame(columns=RUN_COLUMNS)
        return _with_tags(pd.DataFrame(rows), pd.DataFrame(tags, columns=["run_id", "key", "value"]))

    def params(self, run_ids: list[str]) -> pd.DataFrame:
        rows = [
            {"run_id": r.info.run_id, "key": k, "value": v}
            for r in self._search(run_ids)
            for k, v in r.data.params.items()
        ]
        return pd.DataFrame(rows, columns=["run_id", "key", "value"])

    def metrics(self, run_ids: list[str]) -> pd.DataFrame:
        runs = self._search(run_ids)
        keys = sorted({k for r in runs for k in r.data.metrics})
        if self.uri.startswith(("http://", "https://")):
            frames = [self._bulk(key, run_ids[i : i + 100]) for key in keys for i in range(0, len(run_ids), 100)]
        else:  # a local file store has no bulk route: per (run, key) reads, slow but correct
            frames = [
                pd.DataFrame(
                    [
                        {
                            "run_id": r.info.run_id,
                            "key": m.key,
                            "step": m.step,
                            "value": m.value,
                        }
                        for m in self.client.get_metric_history(r.info.run_id, k)
                    ]
                )
                for r in runs
                for k in r.data.metrics
            ]
        frames = [f for f in frames if not f.empty]
        if not frames:
            return pd.DataFrame(columns=METRIC_COLUMNS)
        return _with_inf(pd.concat(frames, ignore_index=True))

    def last_logged(self, run_ids: list[str]) -> pd.Series:
        times = {
            r.info.run_id: max((m.timestamp for m in r.data._metric_objs), default=None) for r in self._search(run_ids)
        }
        return pd.Series(times, dtype=float)

    def _search(self, run_ids: list[str]):
        out = []
        for i in range(0, len(run_ids), 100):
            ids = ", ".join(f"'{r}'" for r in run_ids[i : i + 100])
            out.extend(
                self.client.search_runs(self._experiment_ids(), f"attributes.run_id IN ({ids})", max_results=1000)
            )
        return out

    def _experiment_ids(self) -> list[str]:
        return [e.experiment_id for e in self.client.search_experiments()]

    def _bulk(self, key: str, run_ids: list[str]) -> pd.DataFrame:
        from mlflow.utils.credentials import get_default_host_creds
        from mlflow.utils.rest_utils import http_request

        resp = http_request(
            get_default_host_creds(self.uri),
            "/ajax-api/2.0/mlflow/metrics/get-history-bulk",
            "GET",
            params={"run_id": run_ids, "metric_key": key, "max_results": 25000},
        )
        resp.raise_for_status()
        points = resp.json().get("metrics", [])
        return pd.DataFrame(
            [
                {"run_id": p["run_id"], "key": p["key"], "step": int(p.get("step", 0)), "value": float(p["value"])}
                for p in points
            ],
            columns=METRIC_COLUMNS,
        )


def _with_inf(metrics: pd.DataFrame) -> pd.DataFrame:
    """±inf back where MLflow's SQL store wrote ±1.7976931348623157e308 for it (SQL has no infinity:
    `SqlAlchemyStore.sanitize_metric_value`), so that a diverged run reads as diverged, not as a huge number.
    Anything beyond 1e308 is taken for it: SQLite's printf reads the largest double back a few ulps off."""
    v = metrics["value"].to_numpy(float)
    clamped = np.abs(v) > 1e308
    if clamped.any():
        metrics = metrics.assign(value=np.where(clamped, np.copysign(np.inf, v), v))
    return metrics


def _with_tags(runs: pd.DataFrame, tags: pd.DataFrame) -> pd.DataFrame:
    if not tags.empty:
        wide = tags.drop_duplicates(["run_id", "key"], keep="last").pivot(index="run_id", columns="key", values="value")
        runs = runs.merge(wide, left_on="run_id", right_index=True, how="left", suffixes=("", "_tag"))
    for col in (SWEEP_ID_TAG, PARENT_TAG, "status_tag"):
        if col not in runs:
            runs[col] = None
    runs[SWEEP_ID_TAG] = runs[SWEEP_ID_TAG].fillna(NO_SWEEP)
    return runs


@dataclass
class Sweep:
    """One sweep as the dashboard sees it. Runs outside any sweep form one pseudo-sweep per experiment."""

    key: str
    """`<experiment>/<sweep_id>` (unique across experiments)."""
    name: str
    experiment: str
    sweep_id: str
    parent: pd.Series | None
    """The parent run's row of `runs` (None for the pseudo-sweep of single runs)."""
    runs: pd.DataFrame
    """The job runs (parent excluded), with tags as columns."""


def sweeps(runs: pd.DataFrame) -> list[Sweep]:
    """Group runs into sweeps, newest first."""
    out = []
    if runs.empty:
        return out
    for (exp, sid), group in runs.groupby(["experiment", SWEEP_ID_TAG], sort=False):
        is_parent = group[PARENT_TAG].fillna("") == "1"
        parent = group[is_parent].sort_values("start_time").iloc[0] if is_parent.any() else None
        jobs = group[~is_parent]
        if sid == NO_SWEEP:
            name = f"single runs ({exp})"
        else:
            name = parent["run_name"] if parent is not None else f"sweep {sid}"
        out.append(Sweep(f"{exp}/{sid}", str(name), str(exp), str(sid), parent, jobs.reset_index(drop=True)))
    return sorted(out, key=lambda s: -_start(s))


def _start(s: Sweep) -> float:
    times = s.runs["start_time"] if not s.runs.empty else pd.Series(dtype=float)
    if s.parent is not None:
        times = pd.concat([times, pd.Series([s.parent["start_time"]])])
    return float(pd.to_numeric(times, errors="coerce").max()) if len(times) else 0.0


def planned_jobs(sweep: Sweep) -> dict | None:
    """The parent's jobs.json (None for sweeps run before it was recorded, or single runs)."""
    if sweep.parent is None or N_JOBS_TAG not in sweep.parent or pd.isna(sweep.parent.get(N_JOBS_TAG)):
        return None
    try:
        return mlflow.artifacts.load_dict(f"{sweep.parent['artifact_uri']}/{JOBS_ARTIFACT}")
    except Exception:  # noqa: BLE001 - an unreadable artifact only costs the planned-job view
        return None


def rollout_table(artifact_uri: str) -> pd.DataFrame:
    """A run's rollouts.parquet (every sampled response); empty when the run has none yet."""
    try:
        path = mlflow.artifacts.download_artifacts(f"{artifact_uri}/rollouts.parquet")
    except Exception:  # noqa: BLE001 - a run still training has no table yet
        return pd.DataFrame()
    return pd.read_parquet(path)


def sweep_spec_text(sweep: Sweep) -> str:
    """The sweep file its last invocation ran (the parent's sweep.yaml); '' when there is none."""
    if sweep.parent is None or not isinstance(sweep.parent.get("artifact_uri"), str):
        return ""
    try:
        return Path(mlflow.artifacts.download_artifacts(f"{sweep.parent['artifact_uri']}/sweep.yaml")).read_text()
    except Exception:  # noqa: BLE001 - a sweep without the artifact (a study, an old sweep) has no claims
        return ""
