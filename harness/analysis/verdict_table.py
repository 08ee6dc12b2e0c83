"""A claim's verdict as display text: one row per claim, shared by the report's tables and the dashboard."""

from __future__ import annotations

import math
import re

from harness.analysis.claims import Verdict
from harness.analysis.sequential import Record

_MD_INLINE = re.compile(r"[\\`*\[\]<>|~$&#]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
_MD_BLOCK = re.compile(r"^(\s*\d*)([+\-.)])(?=\s|$)")  # a list marker where a line starts


def md(text: object) -> str:
    """Plain text as Markdown that shows it as written: whatever could start a link, an image, HTML, code, emphasis,
    math, a heading or a list, or end a table cell, escaped with a backslash (an underscore inside a word cannot
    start emphasis, so `length_mean` stays as it is); a line break becomes a space."""
    escaped = _MD_INLINE.sub(lambda m: "\\" + m.group(), " ".join(str(text).splitlines()))
    return _MD_BLOCK.sub(r"\1\\\2", escaped)


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


def competing_rows(verdicts: list[Verdict]) -> list[dict[str, str]]:
    """The claims that share a `question` with another paper's claim, grouped by question in file order: one row
    per claim (question, paper, claim, verdict, effect with its CI, Holm p, statement). Empty when no question has
    claims from two sources."""
    by_question: dict[str, list[Verdict]] = {}
    for v in verdicts:
        if v.claim.question:
            by_question.setdefault(v.claim.question, []).append(v)
    rows = []
    for question, group in by_question.items():
        if len({v.claim.paper or "harness" for v in group}) < 2:
            continue
        for v in group:
            reason = why(v)
            rows.append(
                {
                    "question": question,
                    "paper": f"arXiv {v.claim.paper}" if v.claim.paper else "harness",
                    "claim": v.claim.id,
                    "verdict": v.verdict_text() + (f" ({reason.split(':')[0]})" if reason else ""),
                    "effect [95% CI]": f"{num(v.effect, True)} {ci(v.low, v.high, True)}",
                    "p (Holm)": pval(v.p_holm),
                    "statement": v.claim.statement,
                }
            )
    return rows


def verdict_rows(verdicts: list[Verdict]) -> list[dict[str, str]]:
    """One row per claim: the verdict first (with what its runs mix, and why, for an inconclusive one), then what it
    rests on: the paper (with where the quote is), the contrast and its result, the failed runs per side, the paper's
    words."""
    rows = []
    for v in verdicts:
        c, reason = v.claim, why(v)
        rows.append(
            {
                "claim": c.id,
                "verdict": v.verdict_text() + (f" ({reason})" if reason else ""),
                "paper": c.source(),
                "statement": c.statement,
                "metric @ at": f"{c.metric_text()} @ {c.at}",
                "contrast": c.contrast.describe(),
                "claimed": c.expectation(),
                "effect": num(v.effect, True),
                "95% CI": ci(v.low, v.high, True),
                "p": pval(v.p),
                "p (Holm)": pval(v.p_holm),
                "n": v.n_text(),
                "failed runs": v.failed_text() or "none",
                "by arm": v.arms_text() or "—",
                "quote": f"“{c.quote}”" if c.quote else "— (harness's own claim)",
            }
        )
    return rows


SEQUENTIAL_NOTE = (
    "This sweep ran with `--until-decided`: its verdicts of record are these. Group-sequential design: after "
    "the file's seeds and after every batch of seeds added, each open claim's t statistic (against its "
    "threshold, mapped to the normal scale by its p-value) was compared with two-sided boundaries from the "
    "Lan–DeMets O'Brien–Fleming-type α-spending function (Lan & DeMets 1983; Jennison & Turnbull 2000), at "
    "α / (claims not yet decided): sequential Holm (Maurer & Bretz 2013), so the familywise error stays at α "
    "across looks and claims. A claim stops for efficacy (reproduced or contradicted), for a small effect (its "
    "repeated CI, valid at every look at once and at the level of the claim's boundary, within threshold ± "
    "min_effect), or when the seed budget is "
    "spent. The fixed-design table below treats the final runs as one look and is for reference only."
)


def repeated_ci(low: float, high: float, level: float) -> str:
    """A repeated CI with its coverage: '[+0.01, +0.03] (98.3 %)'; no coverage for a record that predates it."""
    cover = "" if level is None or math.isnan(level) else f" ({100 * (1 - level):.3g} %)"
    return ci(low, high, True) + cover


def sequential_rows(record: Record) -> list[dict[str, str]]:
    """One row per claim and look of a sequential sweep's record: seeds, estimate with its repeated CI, |z|
    against the boundary, and where the claim stopped."""
    rows = []
    for track in record.tracks:
        for lk in track.looks:
            last = lk.look == track.stopped_at
            rows.append(
                {
                    "claim": track.claim_id,
                    "look": str(lk.look),
                    "seeds/arm": str(lk.seeds),
                    "effect": num(lk.effect, True),
                    "repeated CI (level)": repeated_ci(lk.low, lk.high, lk.level),
                    "|z|": num(abs(lk.z)),
                    "boundary": num(lk.boundary),
                    "state": f"{track.verdict} ({track.stop})" if last and track.stop else "open",
                }
            )
    return rows


def sequential_verdicts(record: Record) -> list[dict[str, str]]:
    """One row per claim: its sequential verdict, why it stopped, at which look and how many seeds."""
    out = []
    for track in record.tracks:
        looks = track.looks
        out.append(
            {
                "claim": track.claim_id,
                "verdict": track.verdict,
                "stopped": track.stop or "open",
                "look": str(track.stopped_at or (looks[-1].look if looks else "—")),
                "seeds/arm": str(looks[-1].seeds) if looks else "—",
            }
        )
    return out
