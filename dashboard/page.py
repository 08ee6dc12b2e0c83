"""The head of a curve page: its title, the chosen sweep, the Claims panel of the page's metrics, the controls."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from dashboard import context, verdicts
from harness.analysis import figures
from harness.runs.sweep_data import SweepData
from trainer import metric_names as M

ACCURACY_STRATA = (
    ("accuracy, clean prompts", M.task_metric("accuracy_clean")),
    ("accuracy, hidden digit", M.task_metric("accuracy_hidden")),
)
"""The toy task's accuracy on the prompts without and with a hidden digit (Stratified GRPO's strata there); other
tasks log neither."""


def curve_controls(prefix: str, data: SweepData) -> dict:
    """Per-seed lines, EMA smoothing and x axis, shared by the curve pages."""
    c1, c2, c3 = st.columns(3)
    per_seed = c1.toggle("Per-seed lines", key=f"{prefix}_seeds")
    alpha = c2.select_slider(
        "EMA smoothing α (1 = off)",
        options=[1.0, 0.5, 0.3, 0.2, 0.1, 0.05],
        value=0.3,
        key=f"{prefix}_ema",
        help="Applied to each seed before the mean and band",
    )
    x = c3.radio(
        "x axis",
        ["step", "tokens"],
        horizontal=True,
        key=f"{prefix}_x",
        format_func={"step": "RL step", "tokens": "tokens generated"}.get,
    )
    if x == "tokens" and M.TOKENS_GENERATED not in data.keys:
        st.warning(f"These runs do not log `{M.TOKENS_GENERATED}`: drawn against RL steps.")
        x = "step"
    return {
        "per_seed": per_seed,
        "smoothing": alpha,
        "x": x,
        "x_title": "tokens generated" if x == "tokens" else "RL step",
    }


def curve_page(title: str, prefix: str, page: str) -> tuple[SweepData, dict, str]:
    """A curve page's head: its title, the chosen sweep (the page stops when there is none), the verdicts of the
    claims on the page's metrics (`page`: a key of dashboard.verdicts.PAGE_METRICS), the controls; returns the data,
    the figure keywords (arm labels included) and the x axis."""
    st.title(title)
    data = context.current()
    if data is None:
        st.stop()
    verdicts.panel(page)
    opts = curve_controls(prefix, data)
    return (
        data,
        {**{k: opts[k] for k in ("per_seed", "smoothing", "x_title")}, "labels": context.labels(data)},
        opts["x"],
    )


def curves(panels: list[tuple[str, str]], data: SweepData, kw: dict, x: str, key: str, **fig_kw) -> None:
    """One figure of per-arm seed-band panels, one per (title, metric); a metric no run of the sweep logged gets no
    panel, and a caption under the figure names it (a page still draws on a sweep from before a metric existed)."""
    found = [(title, metric, data.by_arm(metric, x)) for title, metric in panels]
    drawn = [(title, curves) for title, _, curves in found if curves]
    if drawn:
        st.plotly_chart(figures.curves_by_arm(drawn, data.arms, **kw, **fig_kw), key=key)
    missing = [metric for _, metric, curves in found if not curves]
    if missing:
        st.caption("Not logged by this sweep's runs: " + ", ".join(f"`{m}`" for m in missing) + ".")


@dataclass(frozen=True)
class MethodPanel:
    """A method's own panels (ReMax's greedy baseline, POISE's probe, SPO's tracker, ...), drawn by `method_panels`
    only where a run of the sweep logged a metric of `when`, which only that method logs: other sweeps get no
    section, nor a "not logged" line."""

    title: str
    when: str | tuple[str, ...]
    panels: list[tuple[str, str]]
    key: str
    caption: str


def method_panels(specs: list[MethodPanel], data: SweepData, kw: dict, x: str) -> None:
    """Each of `specs` whose method a run of the sweep logged: its heading, its curves, its caption."""
    for spec in specs:
        if not any(data.by_arm(metric, x) for metric in ((spec.when,) if isinstance(spec.when, str) else spec.when)):
            continue
        st.subheader(spec.title)
        curves(spec.panels, data, kw, x, spec.key)
        st.caption(spec.caption)


DASH = "—"


def shown(df: pd.DataFrame) -> pd.DataFrame | pd.io.formats.style.Styler:
    """A table as the pages show it: a dash where a value is missing (Streamlit writes `None`). Text and time columns
    get the dash as text; a numeric column with a gap keeps its numbers (it still sorts) and shows the dash through a
    Styler."""
    out, gaps = df.copy(), []
    for col in out.columns:
        missing = out[col].isna()
        if not missing.any():
            continue
        if pd.api.types.is_numeric_dtype(out[col]):
            gaps.append(col)
        elif pd.api.types.is_datetime64_any_dtype(out[col]):
            out[col] = out[col].dt.strftime("%Y-%m-%d %H:%M:%S").where(~missing, DASH)
        else:
            out[col] = out[col].astype(object).where(~missing, DASH)
    return out.style.format("{:.4g}", subset=gaps, na_rep=DASH) if gaps else out


def table(df: pd.DataFrame, **kw) -> None:
    """`st.dataframe` of `shown(df)`, full width, without the index."""
    st.dataframe(shown(df), hide_index=True, width="stretch", **kw)
