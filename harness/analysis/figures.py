"""Plotly figures of a sweep: curves per arm with a bootstrap band over seeds, distributions, bars.

Arms are keyed by their planned labels (colours, order); `labels` (dashboard.labels.ArmLabels) gives the name a
figure shows for each and the raw settings its hover text shows, the planned label when left out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from harness.analysis.stats import bootstrap_band, ema

PALETTE = px.colors.qualitative.Plotly


def colours(arms: list[str]) -> dict[str, str]:
    return {a: PALETTE[i % len(PALETTE)] for i, a in enumerate(arms)}


def _name(labels, arm: str) -> str:
    return labels(arm) if labels is not None else arm


def _hover(labels, arm: str) -> str:
    """The arm's raw settings as hover text."""
    return labels.hover(arm) if labels is not None else arm


def _rgba(hex_colour: str, alpha: float) -> str:
    h = hex_colour.lstrip("#")
    return f"rgba({int(h[0:2], 16)},{int(h[2:4], 16)},{int(h[4:6], 16)},{alpha})"


def add_band(
    fig: go.Figure,
    curves: pd.DataFrame,
    name: str,
    colour: str,
    *,
    per_seed: bool = False,
    smoothing: float = 1.0,
    dash: str = "solid",
    row: int | None = None,
    col: int | None = None,
    legend: bool = True,
    hover: str = "",
) -> None:
    """Mean over seeds with its 95% bootstrap band (and, on demand, each seed's own line); `hover`: more hover
    text for the mean (the arm's settings)."""
    curves = curves.apply(lambda c: ema(c, smoothing)) if smoothing < 1 else curves
    band = bootstrap_band(curves)
    where = {"row": row, "col": col} if row is not None else {}
    x = band.index.to_numpy()
    ok = band["low"].notna().to_numpy()
    if ok.any():
        fig.add_trace(
            go.Scatter(
                x=list(x[ok]) + list(x[ok][::-1]),
                y=list(band["high"][ok]) + list(band["low"][ok][::-1]),
                mode="lines",
                fill="toself",
                fillcolor=_rgba(colour, 0.18),
                line={"width": 0},
                hoverinfo="skip",
                showlegend=False,
                legendgroup=name,
                name=f"{name} 95% CI",
            ),
            **where,
        )
    if per_seed:
        for seed in curves.columns:
            c = curves[seed].dropna()
            fig.add_trace(
                go.Scatter(
                    x=c.index,
                    y=c.values,
                    mode="lines",
                    line={"color": colour, "width": 0.8, "dash": dash},
                    opacity=0.45,
                    name=f"{name} {seed}",
                    legendgroup=name,
                    showlegend=False,
                ),
                **where,
            )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=band["mean"],
            mode="lines",
            line={"color": colour, "width": 2.2, "dash": dash},
            name=name,
            legendgroup=name,
            showlegend=legend,
            customdata=band["n"],
            hovertemplate="%{y:.4g} (mean of %{customdata} seeds)" + (f"<br>{hover}" if hover else ""),
        ),
        **where,
    )


def curves_by_arm(
    panels: list[tuple[str, dict[str, pd.DataFrame]]],
    arms: list[str],
    *,
    x_title: str = "step",
    per_seed: bool = False,
    smoothing: float = 1.0,
    height: int = 380,
    shared_y: bool = False,
    fit_y: bool = False,
    labels=None,
) -> go.Figure:
    """Side-by-side panels (title, arm → (x × seeds)), one colour per arm shared by all panels. `fit_y`: each
    panel's y axis spans 0 and what is drawn in it (see `_fit_y`), for fractions far below 1."""
    fig = make_subplots(
        rows=1,
        cols=len(panels),
        subplot_titles=[t for t, _ in panels],
        shared_yaxes=shared_y,
        horizontal_spacing=0.04 if shared_y else 0.07,
    )
    col = colours(arms)
    for j, (_, by_arm) in enumerate(panels, start=1):
        for arm, curves in by_arm.items():
            add_band(
                fig,
                curves,
                _name(labels, arm),
                col[arm],
                per_seed=per_seed,
                smoothing=smoothing,
                row=1,
                col=j,
                legend=j == 1,
                hover=_hover(labels, arm),
            )
        fig.update_xaxes(title_text=x_title, row=1, col=j)
    fig.update_yaxes(rangemode="tozero")  # fractions and lengths: a flat 0 must not draw a -1..1 axis
    if fit_y:
        _fit_y(fig, len(panels))
    fig.update_layout(
        height=height, margin={"t": 40, "b": 40, "l": 40, "r": 10}, legend={"orientation": "h", "y": -0.2}
    )
    return fig


def _fit_y(fig: go.Figure, n_panels: int) -> None:
    """Each panel's y range from 0 to 5% above the largest value drawn in it (bands and per-seed lines
    included): clip fractions of 0.001–0.2 fill their panel, and an all-zero panel reads [0, 0.01], not
    Plotly's [0, 1] for a flat line."""
    for j in range(1, n_panels + 1):
        axis = "y" if j == 1 else f"y{j}"
        ys = [np.asarray(t.y, dtype=float) for t in fig.data if (t.yaxis or "y") == axis and t.y is not None]
        ys = np.concatenate(ys) if ys else np.array([])
        ys = ys[np.isfinite(ys)]
        low, high = min(0.0, ys.min(initial=0.0)), max(0.0, ys.max(initial=0.0))
        pad = 0.05 * (high - low) if high > low else 0.01
        fig.update_yaxes(range=[low - pad if low < 0 else 0.0, high + pad], row=1, col=j)


def length_by_correctness(
    correct: dict[str, pd.DataFrame],
    incorrect: dict[str, pd.DataFrame],
    arms: list[str],
    *,
    per_seed: bool = False,
    smoothing: float = 1.0,
    x_title: str = "RL step",
    labels=None,
) -> go.Figure:
    """Dr. GRPO's figure: response length of correct and of incorrect responses over training, one colour
    per arm, the two panels on one y axis."""
    fig = curves_by_arm(
        [("correct responses", correct), ("incorrect responses", incorrect)],
        arms,
        per_seed=per_seed,
        smoothing=smoothing,
        x_title=x_title,
        height=440,
        shared_y=True,
        labels=labels,
    )
    fig.update_yaxes(title_text="tokens", row=1, col=1)
    return fig


def length_distribution(rows: pd.DataFrame, arms: list[str], labels=None) -> go.Figure:
    """Box plots of response length by arm and correctness (rows: arm, correct, length)."""
    names = {a: _name(labels, a) for a in arms}
    wrap = {a: n.replace(" ", "<br>") if "=" in n else n for a, n in names.items()}  # "key=value key=value"
    rows = rows.assign(
        outcome=rows["correct"].map({True: "correct", False: "incorrect"}),
        arm=rows["arm"].map(wrap),
        settings=rows["arm"].map(lambda a: _hover(labels, a)),
    )
    fig = px.box(
        rows,
        x="arm",
        y="length",
        color="outcome",
        points="outliers",
        hover_data={"settings": True},
        category_orders={"arm": [wrap[a] for a in arms], "outcome": ["correct", "incorrect"]},
        color_discrete_map={"correct": "#2ca02c", "incorrect": "#d62728"},
    )
    fig.update_layout(height=420, yaxis_title="tokens", xaxis_title="", margin={"t": 30, "b": 40, "l": 50, "r": 10})
    fig.update_xaxes(tickangle=0)
    return fig


def group_outcomes(
    shares: dict[str, dict[str, pd.Series]], arms: list[str], x_title: str = "RL step", labels=None
) -> go.Figure:
    """Stacked areas of all-correct / mixed / all-wrong groups over training, one panel per arm (its title's hover
    text: the arm's settings)."""
    present = [a for a in arms if a in shares]
    fig = make_subplots(
        rows=1,
        cols=max(1, len(present)),
        subplot_titles=[_name(labels, a) for a in present],
        shared_yaxes=True,
        horizontal_spacing=0.03,
    )
    for title, arm in zip(fig.layout.annotations, present):
        title.hovertext = _hover(labels, arm)
    style = {"all correct": "#2ca02c", "mixed": "#1f77b4", "all wrong": "#d62728"}
    for j, arm in enumerate(present, start=1):
        for label, colour in style.items():
            s = shares[arm].get(label)
            if s is None:
                continue
            fig.add_trace(
                go.Scatter(
                    x=s.index,
                    y=s.values,
                    stackgroup=f"g{j}",
                    name=label,
                    line={"color": colour},
                    legendgroup=label,
                    showlegend=j == 1,
                    hovertemplate=f"%{{y:.3g}} ({label})<extra>{_name(labels, arm)}</extra>",
                ),
                row=1,
                col=j,
            )
    fig.update_yaxes(range=[0, 1], row=1, col=1, title_text="share of groups (mean over seeds)")
    fig.update_xaxes(title_text=x_title)
    fig.update_layout(height=380, margin={"t": 40, "b": 40, "l": 50, "r": 10}, legend={"orientation": "h", "y": -0.2})
    return fig


def final_bars(table: pd.DataFrame, metric: str, labels=None) -> go.Figure:
    """Final value per arm with its 95% CI and every seed as a dot (table: arm, mean, low, high, seeds)."""
    names = [_name(labels, a) for a in table["arm"]]
    fig = go.Figure(
        go.Bar(
            x=names,
            y=table["mean"],
            marker_color="#8fb4d9",
            name="mean over seeds",
            customdata=[_hover(labels, a) for a in table["arm"]],
            hovertemplate="%{x}: %{y:.4g}<br>%{customdata}<extra></extra>",
            error_y={
                "type": "data",
                "symmetric": False,
                "array": (table["high"] - table["mean"]).fillna(0),
                "arrayminus": (table["mean"] - table["low"]).fillna(0),
            },
        )
    )
    xs, ys = [], []
    for arm, seeds in zip(names, table["seeds"]):
        xs.extend([arm] * len(seeds))
        ys.extend(seeds)
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", marker={"color": "#333", "size": 6}, name="seeds"))
    fig.update_layout(height=380, yaxis_title=metric, margin={"t": 30, "b": 40, "l": 50, "r": 10})
    return fig
