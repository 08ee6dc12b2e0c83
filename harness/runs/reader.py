"""Read a whole sweep out of the tracking store into DataFrames, in a handful of queries.

Where the store is a database (SQLite by default, or PostgreSQL/MySQL behind MLflow), a `SqlReader` reads runs,
tags, params and every metric point of a sweep with direct SQL: `harness.runs.store_adapter`, the one module that
knows MLflow's private tables, and checks them before it reads; where it finds a schema it does not know, it warns
once and the reader goes through MLflow's public API (`MlflowReader`), slower. Against an MLflow server,
`MlflowReader` uses `search_runs` and the adapter's bulk history route (one request per metric key per 100 runs),
or `get_metric_history` per run and key where the server has no such route. All return the same frames.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Protocol

import mlflow
import numpy as np
import pandas as pd
from mlflow.tracking import MlflowClient

from harness.runs.layout import (
    JOBS_ARTIFACT,
    N_JOBS_TAG,
    PARENT_TAG,
    SEQUENTIAL_ARTIFACT,
    SEQUENTIAL_TAG,
    SWEEP_ID_TAG,
)
from harness.runs.store_adapter import BULK_RUNS, SqlStore, bulk_history

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
    """A database store through the adapter's direct SQL (`SqlStore`), or through MLflow's public API where the
    adapter does not know the store's schema (it has warned)."""

    def __init__(self, uri: str):
        self.uri, self.sql = uri, SqlStore(uri)

    @cached_property
    def public(self) -> MlflowReader:
        return MlflowReader(self.uri)

    def runs(self) -> pd.DataFrame:
        if not self.sql.usable():
            return self.public.runs()
        runs = self.sql.runs()
        return _with_tags(runs, self.sql.tags()) if not runs.empty else pd.DataFrame(columns=RUN_COLUMNS)

    def params(self, run_ids: list[str]) -> pd.DataFrame:
        return self.sql.params(run_ids) if self.sql.usable() else self.public.params(run_ids)

    def metrics(self, run_ids: list[str]) -> pd.DataFrame:
        return _with_inf(self.sql.metrics(run_ids)) if self.sql.usable() else self.public.metrics(run_ids)

    def last_logged(self, run_ids: list[str]) -> pd.Series:
        return self.sql.last_logged(run_ids) if self.sql.usable() else self.public.last_logged(run_ids)


class MlflowReader:
    """Any store through MLflow's public API (`search_runs`, `get_metric_history`), and a server's bulk history
    route through the adapter."""

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
        keys = {r.info.run_id: list(r.data.metrics) for r in self._search(run_ids)}
        ids = [r for r in run_ids if r in keys]
        frames = []
        if self.uri.startswith(("http://", "https://")):
            for key in sorted({k for ks in keys.values() for k in ks}):
                for i in range(0, len(ids), BULK_RUNS):
                    chunk = [r for r in ids[i : i + BULK_RUNS] if key in keys[r]]
                    bulk = bulk_history(self.uri, key, chunk) if chunk else None
                    frames += [bulk] if bulk is not None else [self._history(r, key) for r in chunk]
        else:  # a local store has no bulk route: per (run, key) reads, slow but correct
            frames = [self._history(r, k) for r in ids for k in keys[r]]
        frames = [f for f in frames if not f.empty]
        if not frames:
            return pd.DataFrame(columns=METRIC_COLUMNS)
        return _with_inf(pd.concat(frames, ignore_index=True))

    def last_logged(self, run_ids: list[str]) -> pd.Series:
        protos = {r.info.run_id: r.data.to_proto().metrics for r in self._search(run_ids)}
        return pd.Series({run: max(m.timestamp for m in ms) for run, ms in protos.items() if ms}, dtype=float)

    def _history(self, run_id: str, key: str) -> pd.DataFrame:
        points = self.client.get_metric_history(run_id, key)
        return pd.DataFrame(
            {
                "run_id": [run_id] * len(points),
                "key": [key] * len(points),
                "step": np.array([m.step for m in points], dtype=np.int64),
                "value": np.array([m.value for m in points], dtype=float),
            }
        )

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


def _with_inf(metrics: pd.DataFrame) -> pd.DataFrame:
    """±inf back where MLflow's SQL store wrote ±1.7976931348623157e308 for it (SQL has no infinity:
    `SqlAlchemyStore.sanitize_metric_value`), so that a diverged run reads as diverged, not as a huge number.
    Anything beyond 1e308 is taken for it: a database that rounds the largest double reads it back a few ulps off."""
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


def match_sweep(found: Sequence[Sweep], ref: str, experiment: str | None = None) -> Sweep | None:
    """The newest of `found` (as `sweeps` orders them) whose key, id or name is `ref`, in `experiment` when one is
    given; None when none is. The one rule by which every command and page finds a sweep."""
    for s in found:
        if ref in (s.key, s.sweep_id, s.name) and (experiment is None or s.experiment == experiment):
            return s
    return None


def find_sweep(uri: str, ref: str, experiment: str | None = None) -> Sweep | None:
    """`match_sweep` over every sweep of the store at `uri`."""
    return match_sweep(sweeps(reader_for(uri).runs()), ref, experiment)


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


def sequential_record(sweep: Sweep) -> dict | None:
    """The parent's sequential.json of a `--until-decided` sweep (None for a fixed-seed sweep)."""
    if sweep.parent is None or str(sweep.parent.get(SEQUENTIAL_TAG)) != "1":
        return None
    try:
        return mlflow.artifacts.load_dict(f"{sweep.parent['artifact_uri']}/{SEQUENTIAL_ARTIFACT}")
    except Exception:  # noqa: BLE001 - unreadable: the report shows the fixed design only, with a warning
        return None


def rollout_table(artifact_uri: str) -> pd.DataFrame:
    """A run's rollouts.parquet (every sampled response); empty when the run has none yet."""
    try:
        path = mlflow.artifacts.download_artifacts(f"{artifact_uri}/rollouts.parquet")
    except Exception:  # noqa: BLE001 - a run still training has no table yet
        return pd.DataFrame()
    return pd.read_parquet(path)


def sweep_file_text(sweep: Sweep) -> str:
    """The sweep file its last invocation ran (the parent's sweep.yaml); '' when there is none."""
    if sweep.parent is None or not isinstance(sweep.parent.get("artifact_uri"), str):
        return ""
    try:
        return Path(mlflow.artifacts.download_artifacts(f"{sweep.parent['artifact_uri']}/sweep.yaml")).read_text()
    except Exception:  # noqa: BLE001 - a sweep without the artifact (a study, an old sweep) has no claims
        return ""
