"""The Claims panel: the verdicts of the sweep's claims (harness.analysis.claims) on the pages whose metrics they read.

Every claim is judged once, all together (`context.verdicts`), so the Holm-adjusted p of a claim is the same on
every page and in `harness claims` / `harness report`; a page shows the claims that read one of its metrics. A sweep
run with `--until-decided` shows its sequential verdicts (`context.sequential`), the fixed design for reference.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

import pandas as pd
import streamlit as st

from dashboard import context
from harness.analysis.claims import Verdict
from harness.analysis.sequential import Track
from harness.analysis.verdict_table import competing_rows, md, verdict_rows, why
from harness.config.claims import Claim

PAGE_METRICS: dict[str, tuple[str, ...]] = {
    "length_bias": ("train/length_*", "eval/*/length_*", "task/accuracy_*"),
    "entropy_clipping": ("policy/entropy", "policy/clip_frac*"),
    "dynamic_sampling": (
        "adv/*",
        "train/groups_*",
        "train/gen_rounds",
        "train/groups_dropped",
        "train/truncated_frac",
    ),
    "ablation": ("*",),
}
"""Each page (its file under views/) → the metrics (glob patterns) whose claims it shows."""

STYLE = {
    "reproduced": (st.success, ":material/check_circle:"),
    "contradicted": (st.error, ":material/cancel:"),
    "inconclusive": (st.warning, ":material/help:"),
}


def on_page(claim: Claim, page: str) -> bool:
    """Whether the claim reads one of the page's metrics."""
    return any(fnmatchcase(m, pattern) for m in claim.metrics for pattern in PAGE_METRICS[page])


def code(text: str) -> str:
    """Text as a Markdown code span, fenced by more backticks than any run of them in it (and a space inside the
    fence where the text starts or ends with one)."""
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _p(name: str, text: str) -> str:
    """'p = 0.03', or 'p < 0.001' where the table writes the bound ('< 0.001')."""
    return f"{name} {md(text)}" if text.startswith(("<", ">")) else f"{name} = {md(text)}"


def body(v: Verdict, row: dict[str, str], track: Track | None = None) -> str:
    """One verdict as Markdown: verdict (with what its runs mix), claim, paper; the statement; the evidence; for an
    inconclusive one, why. With `track` (a sequential sweep's path for the claim) the verdict is the sequential one,
    and the evidence line is the fixed-design analysis of all the runs, for reference."""
    c = v.claim
    verdict = track.verdict if track else v.verdict
    paper = f"[arXiv {c.paper}](https://arxiv.org/abs/{c.paper})" if c.paper else ""
    lines = [
        f"**{verdict.upper()}**{' · ' + md(v.mixed) if v.mixed else ''} · {code(c.id)} · "
        + (f"{paper}, {md(c.where)}" if not c.own else f"harness's own claim{' on ' + paper if paper else ''}"),
        md(c.statement),
    ]
    if c.quote:
        lines.append(f"The paper: *“{md(c.quote)}”*")
    if track:
        looks = track.looks
        where = f"look {track.stopped_at}" if track.stop else "still open"
        lines.append(
            f"Decided sequentially (`--until-decided`): {md(track.stop or 'open')}, {where}, "
            f"{looks[-1].seeds if looks else 0} seeds per arm (O'Brien–Fleming spending, Holm across claims). "
            "Fixed-design analysis of all the runs, for reference:"
        )
    lines += [
        (
            f"{code(row['metric @ at'])}, {md(row['contrast'])} (claimed {md(row['claimed'])}): "
            f"effect **{md(row['effect'])}**, 95% CI {md(row['95% CI'])} · {_p('p', row['p'])} · "
            f"{_p('Holm p', row['p (Holm)'])} · n = {md(row['n'])}"
        ),
    ]
    if v.per_arm:
        lines.append(f"By arm (the deciding one first): {md(v.arms_text())}")
    reason = why(v)
    if reason and not track:
        lines.append(f"*{md(reason)}*")
    if v.failed_text():
        lines.append(md(v.failed_text().capitalize()))
    return "  \n".join(lines)


def panel(page: str) -> None:
    """The Claims panel of `page` for the chosen sweep: nothing when no claim of the sweep reads the page's
    metrics; a warning when the claims logged with the sweep cannot be read."""
    key = st.session_state.get("sweep")
    if not key:
        return
    found, warning, bug = context.verdicts(context.tracking_uri(), key)
    if warning:
        st.warning(md(warning))
    if bug:
        st.error("Judging this sweep's claims hit a bug in harness; the page goes on without them.")
        with st.expander("Traceback"):
            st.code(bug, language=None)
    shown = [v for v in found if on_page(v.claim, page)]
    if not shown:
        return
    st.subheader("Claims")
    st.caption(
        f"{len(shown)} of the sweep's {len(found)} claim{'s' if len(found) != 1 else ''}, each tested "
        f"against its threshold, Holm-adjusted across all {len(found)} (as `harness claims`). Reproduced: "
        "Holm p < 0.05 on the claimed side; contradicted: on the other; inconclusive: neither."
    )
    competing = [row for row in competing_rows(found) if row["claim"] in {v.claim.id for v in shown}]
    if competing:
        st.markdown("**Competing claims: which paper holds on these runs**")
        for question in dict.fromkeys(row["question"] for row in competing):
            st.caption(md(question))
            rows = [
                {k: x for k, x in row.items() if k != "question"} for row in competing if row["question"] == question
            ]
            st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    record = context.sequential(context.tracking_uri(), key)
    for v, row in zip(shown, verdict_rows(shown)):
        track = record.track(v.claim.id) if record else None
        box, icon = STYLE.get(track.verdict if track else v.verdict, STYLE["inconclusive"])
        box(body(v, row, track), icon=icon)
        with st.expander(f"Runs used for {md(v.claim.id)} ({len(v.runs)})"):
            st.markdown("\n".join(f"- {md(r)}" for r in v.runs) if v.runs else "None.")
