"""What every page shares: the tracking store, the chosen sweep (cached), and the common controls."""

from __future__ import annotations

import os

import pandas as pd
import streamlit as st

from harness.store import Sweep, reader_for, rollout_table, sweeps
from harness.sweep_data import SweepData, load_sweep
from harness.tracking import default_tracking_uri
from trainer import metric_names as M

URI_ENV = "HARNESS_DASHBOARD_URI"  # set by `harness dashboard --tracking-uri`
TTL_S = 20  # a running sweep's data is at most this old


def tracking_uri() -> str:
    return st.session_state.get("uri") or default_tracking_uri("results", os.environ.get(URI_ENV))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def all_sweeps(uri: str) -> list[Sweep]:
    return sweeps(reader_for(uri).runs())


@st.cache_data(ttl=TTL_S, show_spinner="Loading the sweep…")
def sweep_data(uri: str, key: str) -> SweepData | None:
    found = [s for s in all_sweeps(uri) if s.key == key]
    return load_sweep(reader_for(uri), found[0]) if found else None


@st.cache_data(ttl=TTL_S, show_spinner="Reading rollout tables…")
def rollouts(artifact_uris: tuple[str, ...]) -> dict[str, pd.DataFrame]:
    return {u: rollout_table(u) for u in artifact_uris}


def sidebar() -> None:
    """Store, sweep picker and reload button; the choice lives in session_state for every page."""
    with st.sidebar:
        st.text_input("Tracking URI", value=tracking_uri(), key="uri",
                      help="Any MLflow store; SQLite and SQL databases are read with direct SQL.")
        found = all_sweeps(tracking_uri())
        if found:
            labels = {s.key: f"{s.name} · {s.experiment}" + (f" · {s.sweep_id}" if s.sweep_id else "") for s in found}
            st.selectbox("Sweep", list(labels), format_func=labels.get, key="sweep")
        if st.button("Reload", help=f"Data is cached for {TTL_S} s"):
            st.cache_data.clear()


def current() -> SweepData | None:
    """The chosen sweep's data, or None (with a message on the page) when the store has no runs."""
    key = st.session_state.get("sweep")
    data = sweep_data(tracking_uri(), key) if key else None
    if data is None or data.runs.empty:
        st.info(f"No runs in `{tracking_uri()}` yet. Start one with `harness sweep ablations/dr_grpo_bias.yaml`.")
        return None
    return data


def curve_controls(prefix: str, data: SweepData) -> dict:
    """Per-seed lines, EMA smoothing and x axis, shared by the curve pages."""
    c1, c2, c3 = st.columns(3)
    per_seed = c1.toggle("Per-seed lines", key=f"{prefix}_seeds")
    alpha = c2.select_slider("EMA smoothing α (1 = off)", options=[1.0, 0.5, 0.3, 0.2, 0.1, 0.05], value=0.3,
                             key=f"{prefix}_ema", help="Applied to each seed before the mean and band")
    x = c3.radio("x axis", ["step", "tokens"], horizontal=True, key=f"{prefix}_x",
                 format_func={"step": "RL step", "tokens": "tokens generated"}.get)
    if x == "tokens" and M.TOKENS_GENERATED not in data.keys:
        st.warning(f"These runs do not log `{M.TOKENS_GENERATED}`: drawn against RL steps.")
        x = "step"
    return {"per_seed": per_seed, "smoothing": alpha, "x": x,
            "x_title": "tokens generated" if x == "tokens" else "RL step"}


def curve_page(title: str, prefix: str) -> tuple[SweepData, dict, str]:
    """A curve page's head: its title, the chosen sweep (the page stops when there is none), the controls;
    returns the data, the figure keywords and the x axis."""
    st.title(title)
    data = current()
    if data is None:
        st.stop()
    opts = curve_controls(prefix, data)
    return data, {k: opts[k] for k in ("per_seed", "smoothing", "x_title")}, opts["x"]
