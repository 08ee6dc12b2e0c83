"""What every page shares: the tracking store, the chosen sweep (cached), and the common controls."""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from dashboard.labels import ArmLabels, arm_labels, arm_names
from dashboard.launch import OPTUNA_ENV, URI_ENV
from harness.analysis.claims import Verdict, judge, stored_claims
from harness.analysis.sequential import Record, stored_record
from harness.config.errors import ConfigError
from harness.config.yaml_io import load_yaml_text
from harness.runs.layout import default_tracking_uri
from harness.runs.reader import (
    Sweep,
    match_sweep,
    reader_for,
    rollout_table,
    sweep_file_text,
    sweeps,
)
from harness.runs.sweep_data import SweepData, read_sweep

TTL_S = 20  # a running sweep's data is at most this old


def tracking_uri() -> str:
    return st.session_state.get("uri") or default_tracking_uri("results", os.environ.get(URI_ENV))


def optuna_storage() -> str:
    """The Optuna storage URL: the page's override, else $HARNESS_DASHBOARD_OPTUNA, else `harness tune`'s default
    (results/optuna.db under the working directory); a bare path is read as a SQLite file."""
    url = (st.session_state.get("optuna_storage") or os.environ.get(OPTUNA_ENV) or "").strip()
    if not url or "://" not in url:  # a bare path is a SQLite file
        url = f"sqlite:///{Path(url or 'results/optuna.db').expanduser().resolve()}"
    return url


@st.cache_data(ttl=TTL_S, show_spinner=False)
def all_sweeps(uri: str) -> list[Sweep]:
    return sweeps(reader_for(uri).runs())


@st.cache_data(ttl=TTL_S, show_spinner="Loading the sweep…")
def sweep_data(uri: str, key: str) -> SweepData | None:
    found = match_sweep(all_sweeps(uri), key)
    return read_sweep(reader_for(uri), found) if found else None


@st.cache_data(ttl=TTL_S, show_spinner=False)
def sweep_file(uri: str, key: str) -> dict | None:
    """The sweep file the sweep last ran with (its parent's sweep.yaml), parsed; None when there is none."""
    found = match_sweep(all_sweeps(uri), key)
    text = sweep_file_text(found) if found else ""
    try:
        return load_yaml_text(text, "sweep.yaml") if text else None
    except ConfigError:  # a store harness did not write: bounded like any config file, and no file is better
        return None


@st.cache_data(ttl=TTL_S, show_spinner="Judging the claims…")
def verdicts(uri: str, key: str) -> tuple[list[Verdict], str, str]:
    """Every claim logged with the sweep judged on its finished runs, in one call (Holm across all of them, whichever
    page shows which); a warning ('' if none) when the claims cannot be read; and the traceback ('' if none) of a bug
    met while judging them, which the pages show as a bug and go on without verdicts. No verdicts while no run of the
    sweep has finished (`current` says so on every page)."""
    found = match_sweep(all_sweeps(uri), key)
    if found is None:
        return [], "", ""
    claims, warning = stored_claims(found)
    data = sweep_data(uri, key)
    if not claims or data is None or not data.jobs.finished:
        return [], warning, ""
    try:
        return judge(data, claims), warning, ""
    except Exception:  # noqa: BLE001 (a bug in harness: shown with its traceback, the rest of the page still drawn)
        return [], warning, traceback.format_exc()


@st.cache_data(ttl=TTL_S, show_spinner=False)
def sequential(uri: str, key: str) -> Record | None:
    """The sweep's `--until-decided` record (its verdicts of record), None for a fixed-seed sweep."""
    found = match_sweep(all_sweeps(uri), key)
    return stored_record(found) if found else None


def labels(data: SweepData) -> ArmLabels:
    """The chosen sweep's arms as the pages show them (dashboard.labels)."""
    key = st.session_state.get("sweep")
    return arm_labels(data, arm_names(sweep_file(tracking_uri(), key)) if key else None)


@st.cache_data(ttl=TTL_S, show_spinner="Reading rollout tables…")
def rollouts(artifact_uris: tuple[str, ...]) -> dict[str, pd.DataFrame]:
    return {u: rollout_table(u) for u in artifact_uris}


def sidebar() -> None:
    """Store, sweep picker and reload button; the choice lives in session_state for every page."""
    with st.sidebar:
        st.text_input(
            "Tracking URI",
            value=tracking_uri(),
            key="uri",
            help="Any MLflow store; SQLite and SQL databases are read with direct SQL.",
        )
        found = all_sweeps(tracking_uri())
        if found:
            labels = {s.key: f"{s.name} · {s.experiment}" + (f" · {s.sweep_id}" if s.sweep_id else "") for s in found}
            _sweep_from_url(found)
            st.selectbox("Sweep", list(labels), format_func=labels.get, key="sweep")
        if st.button("Reload", help=f"Data is cached for {TTL_S} s"):
            st.cache_data.clear()


def _sweep_from_url(found: list[Sweep]) -> None:
    """A first visit to `...?sweep=NAME` (a sweep's name, key or id; the newest of that name) starts on that sweep,
    so a link or a screenshot can name the sweep a page shows; afterwards the sidebar's choice rules."""
    wanted = st.query_params.get("sweep")
    if not wanted or "sweep" in st.session_state:
        return
    match = [s.key for s in found if wanted in (s.name, s.key, s.sweep_id)]
    if match:
        st.session_state["sweep"] = match[0]
    else:
        st.warning(f"No sweep {wanted!r} in this store: showing the newest.")


def current() -> SweepData | None:
    """The chosen sweep's data, or None (with a message on the page) when the store has no runs."""
    key = st.session_state.get("sweep")
    data = sweep_data(tracking_uri(), key) if key else None
    if data is None or data.runs.empty:
        st.info(f"No runs in `{tracking_uri()}` yet. Start one with `harness sweep ablations/dr_grpo_bias.yaml`.")
        return None
    jobs = data.jobs
    if not jobs.finished:
        st.warning(
            f"No run of this sweep has finished ({jobs.line()}): no statistics, and its claims cannot be judged. "
            + ("The Sweeps page lists each failed run with its reason." if jobs.failed_runs else ""),
            icon=":material/block:",
        )
    return data


def _open_optuna(url: str):
    """An RDB storage on `url` opened read-only in effect, or None when it holds no Optuna tables: a SQLite file that
    does not exist is never created, and tables are never added to a database that lacks them."""
    import sqlalchemy
    from optuna.storages import RDBStorage

    parsed = sqlalchemy.engine.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        db = parsed.database or ""
        if db in ("", ":memory:") or db.startswith("file:") or not Path(db).is_file():
            return None
    engine = sqlalchemy.create_engine(url)
    try:
        tables = sqlalchemy.inspect(engine)
        if not (tables.has_table("studies") and tables.has_table("version_info")):
            return None
    finally:
        engine.dispose()
    return RDBStorage(url, skip_table_creation=True)


def _close_optuna(storage) -> None:
    storage.remove_session()
    storage.engine.dispose()


@dataclass(frozen=True)
class StudyEntry:
    """One study of an Optuna storage, as the study list shows it."""

    name: str
    n_trials: int
    directions: list[str]
    """minimize / maximize, one per objective."""
    start: datetime | None
    user_attrs: dict[str, Any]


@dataclass(frozen=True)
class BestTrial:
    number: int
    value: float
    params: dict[str, Any]
    mlflow_run_id: str | None
    """The MLflow run a `harness tune` trial logged to."""


@dataclass(frozen=True)
class StudySummary:
    """One study as the Studies page draws it, built in one cached call (a Study holding a live storage is not
    cached, its figures are)."""

    directions: list[str]
    user_attrs: dict[str, Any]
    objective: str
    """The objective's label: the study's `objective_metric`, else 'objective value'."""
    trials: pd.DataFrame
    """One row per trial: number, state, value(s), params, started, duration, last reported step, MLflow run."""
    states: dict[str, int]
    """Trials by state: COMPLETE, PRUNED, FAIL, RUNNING."""
    best: BestTrial | None
    """Single-objective studies with a completed trial."""
    pareto: int | None
    """Multi-objective studies: trials on the Pareto front."""
    varying: list[str]
    """Parameters that differ between completed trials."""
    figures: dict[str, Any]
    """Optuna's Plotly figures: history, parallel, importances (when they can be had)."""
    notes: dict[str, str]
    """Why a figure is missing, by figure."""


@st.cache_data(ttl=TTL_S, show_spinner=False)
def optuna_studies(url: str) -> list[StudyEntry]:
    """The studies of an Optuna storage, newest first (empty when it has none)."""
    import optuna

    storage = _open_optuna(url)
    if storage is None:
        return []
    try:
        found = optuna.get_all_study_summaries(storage, include_best_trial=False)
    finally:
        _close_optuna(storage)
    return [
        StudyEntry(
            s.study_name, s.n_trials, [d.name.lower() for d in s.directions], s.datetime_start, dict(s.user_attrs)
        )
        for s in sorted(found, key=lambda s: getattr(s, "_study_id", 0), reverse=True)
    ]


@st.cache_data(ttl=TTL_S, show_spinner="Loading the study…")
def optuna_study(url: str, name: str) -> StudySummary | None:
    """One study: directions, user attrs, a trials table, counts by state, the best trial, and Optuna's own Plotly
    figures (history, importances, parallel coordinates); None when it is gone."""
    import optuna
    from optuna.importance import FanovaImportanceEvaluator
    from optuna.trial import TrialState

    storage = _open_optuna(url)
    if storage is None:
        return None
    try:
        try:
            study = optuna.load_study(study_name=name, storage=storage)
        except KeyError:  # deleted since the study list was read
            return None
        trials = study.get_trials(deepcopy=False)
        directions = [d.name.lower() for d in study.directions]
        attrs = dict(study.user_attrs)
        label = str(attrs.get("objective_metric") or "objective value")
        if len(directions) > 1:  # Optuna's plots need one target: the first objective
            plot_kw = {"target": lambda t: t.values[0], "target_name": f"{label} [0]"}
        else:
            plot_kw = {"target_name": label}
        complete = [t for t in trials if t.state == TrialState.COMPLETE]
        varying = sorted({k for t in complete for k in t.params if len({repr(u.params.get(k)) for u in complete}) > 1})
        figures, notes = {}, {}
        if complete:
            figures["history"] = optuna.visualization.plot_optimization_history(study, **plot_kw)
            figures["parallel"] = optuna.visualization.plot_parallel_coordinate(study, **plot_kw)
            if len(complete) < 2 or not varying:
                notes["importances"] = (
                    f"Parameter importances need at least 2 completed trials and a parameter that "
                    f"varies between them ({len(complete)} completed, "
                    f"{len(varying)} varying)."
                )
            else:
                try:
                    figures["importances"] = optuna.visualization.plot_param_importances(
                        study, evaluator=FanovaImportanceEvaluator(seed=0), **plot_kw
                    )
                except Exception as e:  # noqa: BLE001 (the evaluator's failures are many and uninteresting here)
                    notes["importances"] = f"Parameter importances could not be evaluated: {type(e).__name__}: {e}"
        best, pareto = None, None
        if complete and len(directions) == 1:
            b = study.best_trial
            best = BestTrial(b.number, b.value, dict(b.params), b.user_attrs.get("mlflow_run_id"))
        elif complete:
            pareto = len(study.best_trials)
    finally:
        _close_optuna(storage)
    names = sorted({k for t in trials for k in t.params})
    fixed = {"number", "state", "value", "started", "duration (s)", "last reported step", "mlflow_run_id"}
    column = {k: f"param {k}" if k in fixed else k for k in names}
    rows = []
    for t in trials:
        done = t.datetime_start is not None and t.datetime_complete is not None
        values = list(t.values) if t.values else [None] * len(directions)
        value = {"value": values[0]} if len(directions) == 1 else {f"value {i}": v for i, v in enumerate(values)}
        rows.append(
            {
                "number": t.number,
                "state": t.state.name,
                **value,
                **{column[k]: t.params.get(k) for k in names},
                "started": t.datetime_start,
                "duration (s)": (t.datetime_complete - t.datetime_start).total_seconds() if done else None,
                "last reported step": max(t.intermediate_values) if t.intermediate_values else None,
                "mlflow_run_id": t.user_attrs.get("mlflow_run_id"),
            }
        )
    table = pd.DataFrame(rows)
    if not table.empty and table["last reported step"].isna().all():
        table = table.drop(columns="last reported step")
    states = {s: sum(t.state == TrialState[s] for t in trials) for s in ("COMPLETE", "PRUNED", "FAIL", "RUNNING")}
    return StudySummary(directions, attrs, label, table, states, best, pareto, varying, figures, notes)
