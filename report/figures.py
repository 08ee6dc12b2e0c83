"""Learning curves per arm with a bootstrap band over seeds: PNG/SVG (matplotlib) for papers, Plotly for HTML."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt
import pandas as pd

from harness.analysis.figures import PALETTE, curves_by_arm
from harness.analysis.stats import bootstrap_band


def save_static(
    metric: str, by_arm: dict[str, pd.DataFrame], arms: list[str], out: Path, *, seed: int = 0
) -> list[Path]:
    """`<out>/<metric>.png` and `.svg`: each arm's mean over seeds with its 95% bootstrap band."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=150)
    for i, arm in enumerate(a for a in arms if a in by_arm):
        band = bootstrap_band(by_arm[arm], seed=seed)
        colour = PALETTE[i % len(PALETTE)]
        ax.plot(band.index, band["mean"], color=colour, lw=1.6, label=f"{arm} (n={by_arm[arm].shape[1]})")
        ax.fill_between(band.index, band["low"], band["high"], color=colour, alpha=0.2, lw=0)
    ax.set_xlabel("RL step")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, frameon=False, loc="best")
    fig.tight_layout()
    stem = metric.replace("/", "_")
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    for p in paths:
        fig.savefig(p)
    plt.close(fig)
    return paths


def interactive(metric: str, by_arm: dict[str, pd.DataFrame], arms: list[str], *, first: bool) -> str:
    """An HTML fragment; the first one embeds plotly.js (the report opens offline)."""
    fig = curves_by_arm([(metric, by_arm)], arms, x_title="RL step", height=380)
    return fig.to_html(full_html=False, include_plotlyjs=True if first else False)
