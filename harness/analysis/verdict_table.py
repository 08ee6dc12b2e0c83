"""A claim's verdict as display text: one row per claim, shared by the report's tables and the dashboard."""

from __future__ import annotations

import math

from harness.analysis.claims import Verdict


def num(x: float, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return f"{x:+.4g}" if signed else f"{x:.4g}"


def ci(low: float, high: float, signed: bool = False) -> str:
    return "—" if any(v is None or math.isnan(v) for v in (low, high)) else f"[{num(low, signed)}, {num(high, signed)}]"


def pval(p: float) -> str:
    return "—" if p is None or math.isnan(p) else ("< 0.001" if p < 0.001 else f"{p:.3g}")


def why(v: Verdict) -> str:
    """Why an inconclusive verdict is one ('' otherwise): underpowered (with the MDE and the seeds needed),
    a small effect, or no test (with its note)."""
    c = v.claim
    if v.reason == "underpowered":
        return (
            f"underpowered: MDE {num(v.mde)} at {v.seeds} seeds; {v.seeds_needed or '>1000'} seeds for "
            f"{num(abs(v.target))}"
        )
    if v.reason == "small effect":
        return f"small effect: CI within {c.threshold:g} ± {c.min_effect:g}"
    if v.reason == "no test":
        return f"no test: {v.note}"
    return ""


def verdict_rows(verdicts: list[Verdict]) -> list[dict[str, str]]:
    """One row per claim: the verdict first (with why, for an inconclusive one), then what it rests on."""
    rows = []
    for v in verdicts:
        c, reason = v.claim, why(v)
        rows.append(
            {
                "claim": c.id,
                "verdict": v.verdict + (f" ({reason})" if reason else ""),
                "paper": f"arXiv {c.paper}",
                "statement": c.statement,
                "metric @ at": f"{c.metric_text()} @ {c.at}",
                "contrast": c.contrast.describe(),
                "claimed": c.expectation(),
                "effect": num(v.effect, True),
                "95% CI": ci(v.low, v.high, True),
                "p": pval(v.p),
                "p (Holm)": pval(v.p_holm),
                "n": f"{v.n1} vs {v.n2}",
            }
        )
    return rows
