"""The report as Markdown, HTML (figures, interactive where plotly.js loads), JSON and LaTeX, plus PNG/SVG figures."""

from __future__ import annotations

import hashlib
import html
import json
import math
import re
import unicodedata
from dataclasses import asdict
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pandas as pd

from harness.analysis.verdict_table import (
    SEQUENTIAL_NOTE,
    ci,
    competing_rows,
    md,
    num,
    pval,
    sequential_rows,
    sequential_verdicts,
    verdict_rows,
)
from harness.runs.sweep_data import job_label
from report import figures
from report.build import Report

FORMATS = ("md", "html", "json", "latex")
OTHER_P = [("welch", "Welch", "welch_p"), ("mannwhitney", "MWU", "mwu_p"), ("permutation", "perm.", "perm_p")]


# ---- display tables (strings), shared by every format ---------------------------------------------------------
def arms_table(r: Report) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "arm": r.arms["arm"],
            "arm id": r.arms["arm_id"],
            "seeds finished": r.arms["seeds"].map(lambda s: ", ".join(map(str, s)) or "—"),
            "seeds failed": r.arms["failed"].map(lambda s: ", ".join(map(str, s)) or "—"),
            "config hashes": r.arms["config_hashes"].map(lambda h: ", ".join(h)),
        }
    )


def per_arm_table(r: Report, metric: str) -> pd.DataFrame:
    t = r.per_arm[r.per_arm["metric"] == metric]
    return pd.DataFrame(
        {
            "arm": t["arm"],
            "n": t["n"].astype(int),
            "failed": t["failed"].astype(int),
            "mean ± SD": [f"{num(m)} ± {num(s)}" for m, s in zip(t["mean"], t.get("sd", np.nan))],
            "median": t.get("median", pd.Series(np.nan, index=t.index)).map(num),
            "IQM": t.get("iqm", pd.Series(np.nan, index=t.index)).map(num),
            "95% CI (bootstrap)": [ci(lo, hi) for lo, hi in zip(t["ci_low"], t["ci_high"])],
            "seeds": t["values"].map(lambda v: ", ".join(num(x) for x in v)),
        }
    )


def comparison_table(r: Report, metric: str) -> pd.DataFrame:
    t = r.comparisons[r.comparisons["metric"] == metric] if not r.comparisons.empty else r.comparisons
    if t.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            "arm": t["arm"],
            "n vs n": [f"{int(a)} vs {int(b)}" for a, b in zip(t["n1"], t["n2"])],
            "Δ": t["diff"].map(lambda x: num(x, True)),
            "95% CI (Welch)": [ci(lo, hi, True) for lo, hi in zip(t["welch_low"], t["welch_high"])],
            "95% CI (bootstrap)": [ci(lo, hi, True) for lo, hi in zip(t["boot_low"], t["boot_high"])],
            f"p ({r.settings.test})": t["p"].map(pval),
            "p (Holm)": t["p_holm"].map(pval),
            **{f"p {name}": t[col].map(pval) for test, name, col in OTHER_P if test != r.settings.test},
            "P(improve) [CI]": [
                f"{num(p)} {ci(lo, hi)}" for p, lo, hi in zip(t["p_improve"], t["p_improve_low"], t["p_improve_high"])
            ],
            "Hedges' g [CI]": [
                f"{num(g, True)} {ci(lo, hi, True)}" for g, lo, hi in zip(t["hedges_g"], t["g_low"], t["g_high"])
            ],
            "MDE (80% power)": t["mde"].map(num),
        }
    )


def effects_table(r: Report) -> pd.DataFrame:
    e = r.effects[r.effects["test_p"].notna()] if not r.effects.empty else r.effects
    if e.empty:
        return pd.DataFrame()
    first = {
        (m, f): lv
        for m, f, lv in r.effects[["metric", "factor", "level"]]
        .drop_duplicates(["metric", "factor"])
        .itertuples(index=False)
    }
    return pd.DataFrame(
        {
            "metric": e["metric"],
            "switch": e["factor"],
            "change": [f"{first[(m, f)]} → {lv}" for m, f, lv in zip(e["metric"], e["factor"], e["level"])],
            "runs": e["n"].astype(int),
            "Δ": e["effect"].map(lambda x: num(x, True)),
            "95% CI": [ci(lo, hi, True) for lo, hi in zip(e["test_low"], e["test_high"])],
            "p": e["test_p"].map(pval),
            "p (Holm)": e["p_holm"].map(pval),
            "95% CI (bootstrap)": [ci(lo, hi, True) for lo, hi in zip(e["low"], e["high"])],
            "p (Welch, two groups)": e["p"].map(pval),
        }
    )


def interactions_table(r: Report) -> pd.DataFrame:
    i = r.interactions
    if i.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            "metric": i["metric"],
            "interaction": [
                f"{a}={la} × {b}={lb}" for a, la, b, lb in zip(i["factor_a"], i["level_a"], i["factor_b"], i["level_b"])
            ],
            "estimate": i["estimate"].map(lambda x: num(x, True)),
            "95% CI": [ci(lo, hi, True) for lo, hi in zip(i["low"], i["high"])],
            "p": i["p"].map(pval),
        }
    )


def verdicts_table(r: Report) -> pd.DataFrame:
    """One row per claim: the verdict first, then what it rests on (harness.analysis.verdict_table, as the
    dashboard)."""
    return pd.DataFrame(verdict_rows(r.verdicts))


def verdict_runs(r: Report) -> list[str]:
    """The runs each claim read, once per distinct set of runs: claims that read the same runs share a line, and
    runs are named without their ids (report.json has both, under each verdict's `runs`)."""
    sets: dict[tuple[str, ...], list[str]] = {}
    for v in r.verdicts:
        sets.setdefault(tuple(v.runs), []).append(v.claim.id)
    lines = []
    for runs, ids in sets.items():
        names = ", ".join(run.rsplit(" (", 1)[0] for run in runs) or "none"
        lines.append(f"{', '.join(ids)}: {len(runs)} runs: {names}")
    return lines


CLAIMS_NOTE = (
    "Each claim's effect is tested against its claimed threshold (two-sided), as a contrast of cell means (an arm, "
    "or a cell of the factorial grid for a switch's main effect; a pooled side is the unweighted mean of its arms) "
    "with each cell's own variance and Welch–Satterthwaite df, Holm-adjusted across the sweep's claims. "
    "Reproduced: Holm p < α on the claimed side; contradicted: on the other side; inconclusive: neither "
    "(underpowered, with the minimum detectable effect and the seeds per arm a decisive sweep needs at "
    "80% power and α/m; or a small effect, the CI within the threshold ± the smallest effect of interest). "
    'Failed and diverged runs are counted per side: at the worst value seen for a "not worse" claim (or when '
    "the claim says so), else left out. A claim with no quote is harness's own."
)
COMPETING_NOTE = (
    "Claims of different papers that answer the same question (the claims' `question`), side by side: which paper "
    "holds on these runs. Each verdict is the one above (Holm across all the sweep's claims)."
)


# ---- formats --------------------------------------------------------------------------------------------------
def takeoff_table(r: Report) -> pd.DataFrame:
    """Per arm: runs, how many took off and when (each run's step, seed order; the quartiles count a run that never
    took off as later than any step)."""

    def step(x: float) -> str:
        return "never" if math.isinf(x) else f"{x:.0f}"

    rows = []
    for a in r.takeoff:
        q = a.quartiles
        rows.append(
            {
                "arm": a.arm,
                "runs": a.runs,
                "took off": f"{len(a.steps)} of {a.runs - a.unrecorded}",
                "median [Q1, Q3]": f"{step(q[1])} [{step(q[0])}, {step(q[2])}]" if q else "",
                "steps": "; ".join(
                    x for x in (", ".join(map(str, a.steps)), f"never in {a.never}" if a.never else "") if x
                ),
                "horizon": a.horizon or "",
            }
        )
    return pd.DataFrame(rows)


TAKEOFF_NOTE = (
    "The first step at which the incorrect responses' mean length exceeds the correct ones' by 32 tokens, averaged "
    "over 5 steps (trainer/takeoff.py); a run that never did is counted after every step."
)


def markdown_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "_none_\n"
    lines = ["| " + " | ".join(map(md, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(map(md, row)) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


LISTED = 50
"""Failed runs and never-started jobs listed by name in Markdown, HTML and LaTeX (report.json has every one)."""


def _capped(items: list) -> tuple[list, str]:
    """The first `LISTED` items, and a line saying how many more there are ('' when none)."""
    more = len(items) - LISTED
    return items[:LISTED], (f"… and {more} more (report.json lists every one)" if more > 0 else "")


def has_statistics(r: Report) -> bool:
    """False for a sweep with no finished run: its report is the header, and the jobs that did not finish."""
    return bool(r.header.finished)


def _header_lines(r: Report) -> list[str]:
    """The report's head as lines of plain text, each format escaping them as it writes them."""
    h, s = r.header, r.settings
    if not h.planned:  # a sweep run before harness recorded its plan
        jobs = f"{h.jobs} (no plan recorded)"
    elif h.planned == h.jobs:
        jobs = f"{h.jobs} planned"
    else:  # runs of jobs outside the current plan (an earlier profile, say)
        jobs = f"{h.jobs} ({h.planned} planned)"
    lines = [
        f"sweep: {h.sweep} (id {h.sweep_id}, experiment {h.experiment}), started {h.started}",
        f"code version (git): {', '.join(h.code_version)}",
        f"seeds: {', '.join(map(str, h.seeds)) or '—'}",
        f"jobs: {jobs}: {h.finished} finished, {h.failed} failed"
        + (f" ({h.failed_runs} failed runs)" if h.failed_runs != h.failed else "")
        + (f", {h.running} still running (left out)" if h.running else "")
        + f", {h.never_started} never started"
        + (
            f"; {h.retried} failed attempt{'s' if h.retried != 1 else ''} of a job that later finished "
            f"(history, not counted)"
            if h.retried
            else ""
        ),
        f"compute: {h.compute_hours:.2f} h of training over finished runs; wall clock {h.wall_clock_hours:.2f} h",
        *machine_lines(r),
    ]
    if has_statistics(r):
        lines += [
            f"value of a run: {s.at}",
            f"baseline: {s.baseline or '—'}; test: {s.test_name}; α = {s.alpha}; Holm–Bonferroni over "
            f"the family of arm-vs-baseline comparisons (arms × metrics), and separately over the main effects "
            f"(switches × metrics)",
            f"bootstrap: {s.resamples} percentile resamples, seed {s.seed}; minimum detectable effect "
            f"at {int(s.power * 100)}% power",
        ]
    for kind, listed in (
        ("failed", [f.line() for f in h.failures]),
        ("never started", [job_label(arm, seed) for arm, seed in h.never_started_jobs]),
    ):
        shown, more = _capped(listed)
        lines += [f"{kind}: {line}" for line in shown] + ([more] if more else [])
    return lines


def machine_lines(r: Report) -> list[str]:
    """One line per distinct machine behind the sweep's runs, with how many runs each."""
    return [f"machine ({m.runs} run{'s' if m.runs != 1 else ''}): {m.machine.text()}" for m in r.header.machines]


def unfinished_table(r: Report) -> pd.DataFrame:
    """The jobs that did not finish, for the LaTeX report of a sweep with none finished: each failed run with its
    reason, then each job that never started."""
    h = r.header
    rows = [
        {
            "job": job_label(f.arm, f.seed),
            "run": f.run_id,
            "state": "failed",
            "reason": f.reason or "no reason recorded",
        }
        for f in h.failures
    ]
    rows += [
        {"job": job_label(arm, seed), "run": "—", "state": "never started", "reason": "—"}
        for arm, seed in h.never_started_jobs
    ]
    shown, more = _capped(rows)
    return pd.DataFrame(shown + ([{"job": more}] if more else []), columns=["job", "run", "state", "reason"]).fillna("")


def power_lines(r: Report) -> list[str]:
    """What the seed counts allow: each test's smallest possible p, and the minimum detectable effect."""
    if r.comparisons.empty:
        return []
    from harness.analysis.stats import min_p_value

    lines = []
    for (n1, n2), _ in r.comparisons.groupby(["n1", "n2"]):
        floors = {name: min_p_value(test, int(n1), int(n2)) for test, name, _ in OTHER_P}
        lines.append(
            f"{int(n1)} vs {int(n2)} seeds: smallest possible two-sided p — "
            + ", ".join(f"{name} {pval(p) if p > 0 else 'any'}" for name, p in floors.items())
            + f" (α = {r.settings.alpha})."
        )
    for metric, t in r.comparisons.groupby("metric", sort=False):
        lines.append(
            f"{metric}: smallest difference detectable with 80% power by the {r.settings.test_name} "
            f"at these seed counts ≈ {num(float(t['mde'].median()))} (median over arms; pooled SD, "
            f"the same SD assumed in both arms)."
        )
    return lines


def sequential_design(r: Report) -> str:
    d = r.sequential.design
    return f"Looks at {d.first} seeds per arm, then every {d.batch} more, up to {d.max_seeds}; α = {d.alpha}."


def _items(lines: list[str]) -> list[str]:
    """Lines of plain text as a Markdown list."""
    return [f"- {md(line)}" for line in lines]


def to_markdown(r: Report, figure_dir: str | None = None) -> str:
    out = [f"# Report: {md(r.header.sweep)}", "", *_items(_header_lines(r)), ""]
    if r.sequential:
        out += [
            "## Claims, decided sequentially",
            "",
            SEQUENTIAL_NOTE,
            sequential_design(r),
            "",
            markdown_table(pd.DataFrame(sequential_verdicts(r.sequential))),
            "Each claim's path (estimate and repeated CI after each round, the boundary it was tested against):",
            "",
            markdown_table(pd.DataFrame(sequential_rows(r.sequential))),
        ]
    if r.verdicts:
        out += [
            "## Claims",
            "",
            CLAIMS_NOTE,
            "",
            markdown_table(verdicts_table(r)),
            "Runs used:",
            "",
            *_items(verdict_runs(r)),
            "",
        ]
        if competing_rows(r.verdicts):
            out += [
                "## Competing claims",
                "",
                COMPETING_NOTE,
                "",
                markdown_table(pd.DataFrame(competing_rows(r.verdicts))),
                "",
            ]
    if r.findings:
        out += ["## Findings", "", *_items(r.findings), ""]
    if r.warnings:
        out += ["## Warnings", "", *[f"- ⚠ {md(w)}" for w in r.warnings], ""]
    takeoff = ["## Length take-off", "", TAKEOFF_NOTE, "", markdown_table(takeoff_table(r))] if r.takeoff else []
    if not has_statistics(r):
        return "\n".join([*out, "## Arms", "", markdown_table(arms_table(r)), *takeoff])
    if power_lines(r):
        out += ["## Power", "", *_items(power_lines(r)), ""]
    out += ["## Arms", "", markdown_table(arms_table(r)), *takeoff]
    for metric in r.settings.metrics + sorted(set(r.per_arm["metric"]) - set(r.settings.metrics)):
        out += [f"## {md(metric)}", "", markdown_table(per_arm_table(r, metric))]
        comp = comparison_table(r, metric)
        if not comp.empty:
            out += [f"vs baseline ({md(r.settings.baseline)}):", "", markdown_table(comp)]
        if figure_dir and r.curves.get(metric):
            out += [f"![{md(metric)}]({figure_dir}/{quote(metric.replace('/', '_'))}.png)", ""]
    if not r.effects.empty:
        out += [
            "## Main effects",
            "",
            "Each switch's effect: the mean over the grid's cells at a level minus at its "
            "first level (the other switches averaged out). CI and p from the full factorial cell-means model "
            "(OLS, pooled within-cell variance, df = runs − cells); Welch's two-group test where that model has "
            "no residual df. Bootstrap CI and the two-group Welch p beside them. A switch whose contrast needs a "
            "cell of the grid with no finished run has no estimate (the two levels would average over different "
            "cells, mixing in the other switches' effects): the findings and warnings name the cells.",
            "",
            markdown_table(effects_table(r)),
        ]
    if not r.interactions.empty:
        out += [
            "## Two-way interactions",
            "",
            "(a1,b1) − (a0,b1) − (a1,b0) + (a0,b0) over cell means; Welch–Satterthwaite t interval.",
            "",
            markdown_table(interactions_table(r)),
        ]
    return "\n".join(out)


def to_html(r: Report) -> str:
    def table(df: pd.DataFrame) -> str:
        return df.to_html(index=False, border=0, classes="t", escape=True) if not df.empty else "<p><em>none</em></p>"

    esc = html.escape
    body = [
        f"<h1>Report: {esc(r.header.sweep)}</h1>",
        "<ul>" + "".join(f"<li>{esc(line)}</li>" for line in _header_lines(r)) + "</ul>",
    ]
    if r.sequential:
        body += [
            "<h2>Claims, decided sequentially</h2>",
            f"<p>{esc(SEQUENTIAL_NOTE)} {esc(sequential_design(r))}</p>",
            table(pd.DataFrame(sequential_verdicts(r.sequential))),
            "<p>Each claim's path:</p>",
            table(pd.DataFrame(sequential_rows(r.sequential))),
        ]
    if r.verdicts:
        body += [
            "<h2>Claims</h2>",
            f"<p>{esc(CLAIMS_NOTE)}</p>",
            table(verdicts_table(r)),
            "<details><summary>Runs used</summary><ul>"
            + "".join(f"<li>{esc(x)}</li>" for x in verdict_runs(r))
            + "</ul></details>",
        ]
        if competing_rows(r.verdicts):
            body += [
                "<h2>Competing claims</h2>",
                f"<p>{esc(COMPETING_NOTE)}</p>",
                table(pd.DataFrame(competing_rows(r.verdicts))),
            ]
    if r.findings:
        body += ["<h2>Findings</h2><ul>" + "".join(f"<li>{esc(f)}</li>" for f in r.findings) + "</ul>"]
    if r.warnings:
        body += ["<h2>Warnings</h2><ul class='warn'>" + "".join(f"<li>{esc(w)}</li>" for w in r.warnings) + "</ul>"]
    takeoff = ["<h2>Length take-off</h2>", f"<p>{esc(TAKEOFF_NOTE)}</p>", table(takeoff_table(r))] if r.takeoff else []
    if not has_statistics(r):
        return _html_page(r, [*body, "<h2>Arms</h2>", table(arms_table(r)), *takeoff])
    if power_lines(r):
        body += ["<h2>Power</h2><ul>" + "".join(f"<li>{esc(x)}</li>" for x in power_lines(r)) + "</ul>"]
    body += ["<h2>Arms</h2>", table(arms_table(r)), *takeoff]
    first = True
    for metric in r.settings.metrics + sorted(set(r.per_arm["metric"]) - set(r.settings.metrics)):
        body += [f"<h2>{esc(metric)}</h2>", table(per_arm_table(r, metric))]
        comp = comparison_table(r, metric)
        if not comp.empty:
            body += [f"<p>vs baseline ({esc(r.settings.baseline)}):</p>", table(comp)]
        if r.curves.get(metric):
            arms = list(r.arms["arm"])
            body.append(figures.interactive(metric, r.curves[metric], arms, first=first, seed=r.settings.seed))
            first = False
    if not r.effects.empty:
        body += ["<h2>Main effects</h2>", table(effects_table(r))]
    if not r.interactions.empty:
        body += ["<h2>Two-way interactions</h2>", table(interactions_table(r))]
    return _html_page(r, body)


def _html_page(r: Report, body: list[str]) -> str:
    esc = html.escape
    curves = any("<div class='curve'>" in part for part in body)
    style = (
        "body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px} table.t{border-collapse:collapse;"
        "font-size:13px;margin:.5em 0 1.5em} table.t td,table.t th{border-bottom:1px solid #ddd;padding:3px 8px;"
        "text-align:left} ul.warn li{color:#a15c00}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Report: {esc(r.header.sweep)}</title>"
        f"<style>{style}</style></head><body>{''.join(body)}{figures.SWAP_SCRIPT if curves else ''}</body></html>"
    )


def to_json(r: Report) -> str:
    def records(df: pd.DataFrame) -> list[dict]:
        return json.loads(df.to_json(orient="records", double_precision=15)) if not df.empty else []

    verdicts = [
        {
            "claim": v.claim.model_dump(mode="json", by_alias=True),
            "verdict": v.verdict,
            "reason": v.reason,
            **{
                k: getattr(v, k)
                for k in (
                    "effect",
                    "low",
                    "high",
                    "p",
                    "p_holm",
                    "n1",
                    "n2",
                    "mean1",
                    "mean2",
                    "seeds",
                    "mde",
                    "seeds_needed",
                    "target",
                    "note",
                    "runs",
                    "failed1",
                    "failed2",
                    "diverged1",
                    "diverged2",
                    "failed_value",
                    "mixed",
                )
            },
            "per_arm": [asdict(a) for a in v.per_arm],
        }
        for v in r.verdicts
    ]
    return json.dumps(
        {
            "header": r.header.to_json(),
            "settings": r.settings.to_json(),
            "verdicts": verdicts,
            "sequential": r.sequential.to_json() if r.sequential else None,
            "findings": r.findings,
            "warnings": r.warnings,
            "arms": records(r.arms),
            "per_arm": records(r.per_arm),
            "comparisons": records(r.comparisons),
            "main_effects": records(r.effects),
            "interactions": records(r.interactions),
            "takeoff": [  # a quartile past every step (never) is null: strict JSON has no infinity
                {**asdict(a), "quartiles": [None if math.isinf(q) else q for q in a.quartiles or ()]} for a in r.takeoff
            ],
        },
        indent=1,
        default=str,
    )


_TEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\^{}",
    "[": "{[}",  # a row that starts with [ would be read as the optional argument of the \\ before it
    "]": "{]}",
    "±": r"$\pm$",
    "Δ": r"$\Delta$",
    "→": r"$\to$",
    "×": r"$\times$",
    "—": "--",
    "∞": r"$\infty$",
    "<": r"$<$",
    "α": r"$\alpha$",
    "–": "--",
    "−": r"$-$",
    ">": r"$>$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "·": r"$\cdot$",
    "…": r"\ldots{}",
    "“": "``",
    "”": "''",
    "‘": "`",
    "’": "'",
}


def tex(text: object) -> str:
    """Text for a LaTeX table (T1 fonts): specials escaped, the symbols harness writes as math, any other character
    beyond Latin-1 written as its Unicode name rather than left to stop the compile."""
    return "".join(
        _TEX.get(ch, ch if ord(ch) < 256 else f"{{[}}{unicodedata.name(ch, hex(ord(ch)))}{{]}}") for ch in str(text)
    )


def latex_table(df: pd.DataFrame, caption: str, label: str) -> str:
    if df.empty:
        return ""
    head = " & ".join(tex(c) for c in df.columns) + r" \\"
    rows = "\n".join(" & ".join(tex(v) for v in row) + r" \\" for row in df.itertuples(index=False))
    return (
        f"\\begin{{table}}[t]\n\\centering\\small\n\\caption{{{tex(caption)}}}\\label{{{label}}}\n"
        f"\\resizebox{{\\linewidth}}{{!}}{{%\n\\begin{{tabular}}{{{'l' * len(df.columns)}}}\n\\toprule\n{head}\n"
        f"\\midrule\n{rows}\n\\bottomrule\n\\end{{tabular}}}}\n\\end{{table}}\n"
    )


def to_latex(r: Report) -> str:
    """Booktabs tables to \\input into a paper (needs \\usepackage{booktabs,graphicx})."""
    name, s = r.header.sweep, r.settings
    machines = "".join(f"% {line}\n" for line in machine_lines(r))
    if not has_statistics(r):
        return (
            f"% harness report: {name} (sweep {r.header.sweep_id})\n"
            + machines
            + latex_table(
                unfinished_table(r),
                f"{name}: no run finished ({r.header.finished} of {r.header.jobs} jobs), so no statistics: the jobs "
                "that did not finish.",
                f"tab:{r.header.sweep_id}-unfinished",
            )
        )
    parts = [f"% harness report: {name} (sweep {r.header.sweep_id}); value of a run: {s.at}\n" + machines]
    if r.sequential:
        parts.append(
            latex_table(
                pd.DataFrame(sequential_rows(r.sequential)),
                f"{name}: the claims decided sequentially (O'Brien-Fleming-type alpha spending, sequential Holm; "
                f"{sequential_design(r)})",
                f"tab:{r.header.sweep_id}-sequential",
            )
        )
    if r.verdicts:
        t = verdicts_table(r).drop(columns=["statement", "quote"])
        parts.append(
            latex_table(
                t,
                f"{name}: the papers' claims judged on this sweep (Holm across claims).",
                f"tab:{r.header.sweep_id}-claims",
            )
        )
    for i, metric in enumerate(s.metrics):
        t = per_arm_table(r, metric).drop(columns=["seeds"])
        comp = comparison_table(r, metric)
        if not comp.empty:
            t = t.merge(
                comp[["arm", "Δ", "95% CI (Welch)", f"p ({s.test})", "p (Holm)", "Hedges' g [CI]"]],
                on="arm",
                how="left",
            ).fillna("")
        parts.append(
            latex_table(
                t,
                f"{name}: {metric} across seeds (mean ± SD, 95% bootstrap CI; Δ vs "
                f"{s.baseline} with Welch CI, {s.test_name}, Holm-adjusted p).",
                f"tab:{r.header.sweep_id}-{i}",
            )
        )
    eff = effects_table(r)
    if not eff.empty:
        parts.append(
            latex_table(
                eff,
                f"{name}: main effect of each switch (CI and p from the factorial cell-means "
                f"model, Holm over switches × metrics).",
                f"tab:{r.header.sweep_id}-effects",
            )
        )
    return "\n".join(parts)


def write(r: Report, out: Path, formats: list[str]) -> list[Path]:
    """The chosen formats under `out` (report.md, .html, .json, .tex), and figures/ (PNG + SVG per metric).
    Every text is rendered before the folder is made: a failure leaves no empty or half-written folder."""
    render = {
        "md": ("report.md", lambda: to_markdown(r, "figures")),
        "html": ("report.html", lambda: to_html(r)),
        "json": ("report.json", lambda: to_json(r)),
        "latex": ("report.tex", lambda: to_latex(r)),
    }
    texts = {render[fmt][0]: render[fmt][1]() for fmt in formats}
    out.mkdir(parents=True, exist_ok=True)
    written = []
    curves = {metric: by_arm for metric, by_arm in r.curves.items() if by_arm}
    if curves:
        (out / "figures").mkdir(exist_ok=True)
    for metric, by_arm in curves.items():
        written += figures.save_static(metric, by_arm, list(r.arms["arm"]), out / "figures", seed=r.settings.seed)
    for name, text in texts.items():
        (out / name).write_text(text, encoding="utf-8")
        written.append(out / name)
    return written


def safe_name(name: str, limit: int = 100) -> str:
    """`name` as one file name that stays where it is put: letters, digits, '.', '_' and '-' kept, any other
    run of characters (path separators, NUL, newlines, spaces) made '_', no leading dot, at most `limit`
    characters; a name that had to change gets 8 hex digits of its SHA-256, so two names never share a folder."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:limit]
    if safe == name:
        return safe
    return f"{safe or 'sweep'}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"
