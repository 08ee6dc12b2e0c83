"""Learning curves per arm with a bootstrap band over seeds: PNG/SVG (matplotlib) for papers, Plotly for HTML."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt
import pandas as pd

from harness.analysis.figures import PALETTE, curves_by_arm
from harness.analysis.stats import bootstrap_band


def _draw(metric: str, by_arm: dict[str, pd.DataFrame], arms: list[str], seed: int) -> plt.Figure:
    """Each arm's mean over seeds with its 95% bootstrap band."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=150)
    for i, arm in enumerate(a for a in arms if a in by_arm):
        band = bootstrap_band(by_arm[arm], seed=seed)
        colour = PALETTE[i % len(PALETTE)]
        ax.plot(band.index, band["mean"], color=colour, lw=1.6, label=_plain(f"{arm} (n={by_arm[arm].shape[1]})"))
        ax.fill_between(band.index, band["low"], band["high"], color=colour, alpha=0.2, lw=0)
    ax.set_xlabel("RL step")
    ax.set_ylabel(_plain(metric))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, frameon=False, loc="best")
    fig.tight_layout()
    return fig


def _plain(text: str) -> str:
    """Text matplotlib draws as written: a pair of $ would start mathtext (and `$^$` stop the drawing)."""
    return text.replace("$", r"\$")


def save_static(
    metric: str, by_arm: dict[str, pd.DataFrame], arms: list[str], out: Path, *, seed: int = 0
) -> list[Path]:
    """`<out>/<metric>.png` and `.svg`."""
    fig = _draw(metric, by_arm, arms, seed)
    stem = metric.replace("/", "_")
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    for p in paths:
        fig.savefig(p)
    plt.close(fig)
    return paths


def interactive(metric: str, by_arm: dict[str, pd.DataFrame], arms: list[str], *, first: bool, seed: int = 0) -> str:
    """An HTML fragment: the static figure (an SVG image, so the report shows it offline) and the same curves as a
    Plotly chart, which replaces it where plotly.js loads from its CDN (the first fragment names the script; the
    page's `SWAP_SCRIPT` makes the swap). Embedding plotly.js instead would add 4.8 MB to every report."""
    fig = _draw(metric, by_arm, arms, seed)
    buf = io.BytesIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    svg = base64.b64encode(buf.getvalue()).decode()
    chart = curves_by_arm([(metric, by_arm)], arms, x_title="RL step", height=380)
    live = chart.to_html(full_html=False, include_plotlyjs="cdn" if first else False)
    return (
        f"<div class='curve'><img class='static' alt='{html.escape(metric)}' style='max-width:100%' "
        f"src='data:image/svg+xml;base64,{svg}'><div class='live'>{live}</div></div>"
    )


SWAP_SCRIPT = (
    "<script>document.querySelectorAll('.curve').forEach(function (c) {"
    "c.querySelector(window.Plotly ? '.static' : '.live').remove();});</script>"
)
"""Ends a page of `interactive` fragments: each keeps its Plotly chart when plotly.js loaded, else its image."""
