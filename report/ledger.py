"""The ledger as documents: docs/ledger.md and docs/ledger.json, and the verdict tables the README and
docs/findings.md publish, each between `<!-- ledger: KEY -->` and `<!-- /ledger -->`, generated from the evidence
files so that no published figure is typed by hand (`harness ledger --check` fails when one differs)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from harness.analysis.ledger import Entry, Ledger
from harness.analysis.verdict_table import ci, num

NOT_KEPT = "evidence not kept"
"""What docs/findings.md says under a verdict table whose store is gone (counted apart by the ledger)."""
BLOCK = re.compile(r"(<!-- ledger: (?P<key>[^>]+?) -->\n)(?P<body>.*?)(<!-- /ledger -->)", re.S)


def cell(e: Entry) -> str:
    """'**reproduced**: +73.7 [+69.8, +77.6], Holm p 0.0011', the sequential verdict of record first where there
    is one."""
    v = e.verdict
    head = (
        f"**{e.sequential}** ({e.stop or 'open'}; all runs, fixed: {v.verdict})" if e.sequential else f"**{v.verdict}**"
    )
    why = f" ({v.reason})" if v.reason and not e.sequential else ""
    mixed = f" [{v.mixed}]" if v.mixed else ""
    return f"{head}{why}{mixed}: {num(v.effect, True)} {ci(v.low, v.high, True)}, Holm p {_p(v.p_holm)}"


def sweep_table(ledger: Ledger, sweep: str, design: str = "") -> str:
    """A sweep's claims (rows) on each of its evidence files (columns), as docs/findings.md prints them; with
    `design` (fixed or sequential), only the files of that design."""
    mine = [e for e in ledger.entries if e.sweep == sweep and design in ("", e.design)]
    if not mine:
        raise ValueError(f"the evidence holds no {design or 'verdict'} table of {sweep!r}")
    files = list(dict.fromkeys(e.file for e in mine))
    first = {f: next(e for e in mine if e.file == f) for f in files}
    heads = [f"{f} (seeds {_seeds(first[f].seeds)}, {first[f].machine})" for f in files]
    rows = ["| claim | " + " | ".join(heads) + " |", "|---|" + "---|" * len(files)]
    for claim in dict.fromkeys(e.claim for e in mine):
        cells = {e.file: cell(e) for e in mine if e.claim == claim}
        rows.append(f"| {claim} | " + " | ".join(cells.get(f, "—") for f in files) + " |")
    return "\n".join(rows) + "\n"


def lines_table(ledger: Ledger, sweep: str | None = None, claim: str | None = None) -> str:
    """Each claim across its seed sets: replicated on both / one / neither, the pooled estimate (only `sweep`'s
    claims, or only `claim` across sweeps, where given)."""
    rows = ["| sweep | claim | seed sets | replicated | pooled [95 % CI] | q (BH) |", "|---|---|---|---|---|---|"]
    for line in ledger.lines:
        if sweep in (None, line.sweep) and claim in (None, line.claim):
            sets = "; ".join(f"{_seeds(e.seeds)} ({e.machine}): {e.of_record}" for e in line.entries)
            qs = ", ".join(_p(e.q) for e in line.entries)
            rows.append(
                f"| {line.sweep} | {line.claim} | {sets} | {line.replicated} | "
                f"{_interval(line.effect, line.low, line.high)} | {qs} |"
            )
    return "\n".join(rows) + "\n"


def across_table(ledger: Ledger, sweeps: list[str]) -> str:
    """Each claim (rows) in each of `sweeps` (columns: the same question on another task, say): its verdict of
    record and effect on each seed set, in the order the sets ran, and whether it replicated. A claim a sweep
    does not hold is '—'."""
    lines = {(ln.sweep, ln.claim): ln for ln in ledger.lines}
    missing = [s for s in sweeps if not any(key[0] == s for key in lines)]
    if missing:
        raise ValueError(f"the evidence holds no verdict of {', '.join(map(repr, missing))}")
    claims = dict.fromkeys(c for s in sweeps for (sw, c) in lines if sw == s)
    rows = ["| claim | " + " | ".join(sweeps) + " |", "|---|" + "---|" * len(sweeps)]
    for claim in claims:
        cells = []
        for s in sweeps:
            ln = lines.get((s, claim))
            sets = [f"{e.of_record} {num(e.verdict.effect, True)}" for e in ln.entries] if ln else []
            cells.append(f"{'; '.join(sets)} ({ln.replicated})" if ln else "—")
        rows.append(f"| {claim} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def headlines_table(ledger: Ledger, picks: list[str]) -> str:
    """The README's compact table: each `SWEEP` (all its claims) or `SWEEP:CLAIM,CLAIM` pick, one row per claim:
    the claim (with its paper's arXiv id, or harness's own), its verdict and effect on each seed set, replicated,
    and its BH q-values."""
    rows = ["| sweep | claim | each seed set: verdict, effect | replicated | q (BH) |", "|---|---|---|---|---|"]
    for pick in picks:
        sweep, _, wanted = pick.partition(":")
        mine = [ln for ln in ledger.lines if ln.sweep == sweep]
        ids = wanted.split(",") if wanted else [ln.claim for ln in mine]
        unknown = sorted(set(ids) - {ln.claim for ln in mine})
        if not mine or unknown:
            raise ValueError(f"the evidence holds no verdict of {sweep!r}{': ' + ', '.join(unknown) if mine else ''}")
        for ln in sorted((ln for ln in mine if ln.claim in ids), key=lambda ln: ids.index(ln.claim)):
            paper = ln.entries[0].verdict.claim.paper
            sets = "; ".join(f"{_seeds(e.seeds)}: {e.of_record} {num(e.verdict.effect, True)}" for e in ln.entries)
            qs = ", ".join(_p(e.q) for e in ln.entries)
            rows.append(f"| {sweep} | {ln.claim} ({paper or 'harness'}) | {sets} | {ln.replicated} | {qs} |")
    return "\n".join(rows) + "\n"


def replication_text(ledger: Ledger, claim: str) -> str:
    """One sentence: in how many sweeps' evidence `claim` replicated on every seed set, on some, on none."""
    mine = [ln for ln in ledger.lines if ln.claim == claim and len(ln.entries) > 1]
    if not mine:
        raise ValueError(f"the evidence holds no claim {claim!r} on two seed sets")
    groups: dict[str, list[str]] = {"both": [], "one": [], "neither": []}
    for ln in mine:
        k = sum(e.of_record == "reproduced" for e in ln.entries)
        groups["both" if k == len(ln.entries) else "one" if k else "neither"].append(ln.sweep)
    parts = [
        f"{how} in {len(s)} ({', '.join(s)})"
        for how, s in zip(("on every seed set", "on some", "on none"), groups.values())
        if s
    ]
    head = f"`{claim}`, in the {len(mine)} sweeps whose evidence holds two seed sets or more"
    return f"{head}: reproduced {'; '.join(parts)}.\n"


def totals_text(ledger: Ledger, not_kept: int) -> str:
    t = ledger.totals
    return (
        f"{t['tests']} primary tests in {len({e.file for e in ledger.entries})} evidence files "
        f"({t['re-analyses']} re-analyses of the same seeds listed, not counted): {t['reproduced']} reproduced, "
        f"{t['contradicted']} contradicted, {t['inconclusive']} inconclusive; {t['q < 0.05']} with a "
        f"Benjamini–Hochberg q below 0.05 across all of them. {not_kept} published verdict tables whose store is "
        f'gone are marked "{NOT_KEPT}" in README.md and docs/findings.md and counted apart.\n'
    )


def markdown(ledger: Ledger, not_kept: int) -> str:
    """docs/ledger.md."""
    out = [
        "# Ledger: every verdict judged from the evidence files",
        "",
        "Generated by `harness ledger` from docs/evidence/ (do not edit: `harness ledger --check` fails when this "
        "file differs from what the evidence gives). How it counts: `harness/analysis/ledger.py`.",
        "",
        totals_text(ledger, not_kept),
        "## Each claim across its seed sets",
        "",
        lines_table(ledger),
        "## Each test",
        "",
        "| sweep | evidence file | seeds | machine | design | claim | verdict | q (BH) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in ledger.entries:
        design = e.design + (", continued after a look" if e.continued else "")
        role = "" if e.primary else f" (first look of {e.first_look_of})" if e.first_look_of else " (re-analysis)"
        out.append(
            f"| {e.sweep} | {e.file}{role} | {_seeds(e.seeds)} | {e.machine} | {design} | {e.claim} | {cell(e)} | "
            f"{_p(e.q)} |"
        )
    return "\n".join(out) + "\n"


def to_json(ledger: Ledger, not_kept: int) -> str:
    def number(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None

    entries = [
        {
            "sweep": e.sweep,
            "file": e.file,
            "seeds": list(e.seeds),
            "machine": e.machine,
            "primary": e.primary,
            "first_look_of": e.first_look_of or None,
            "design": e.design,
            "continued": e.continued,
            "claim": e.claim,
            "verdict": e.of_record,
            "fixed_verdict": e.verdict.verdict,
            "reason": e.verdict.reason,
            "stop": e.stop,
            "effect": number(e.verdict.effect),
            "low": number(e.verdict.low),
            "high": number(e.verdict.high),
            "se": number(e.verdict.se),
            "p": number(e.verdict.p),
            "p_holm": number(e.verdict.p_holm),
            "q": number(e.q),
        }  # fmt: skip
        for e in ledger.entries
    ]
    lines = [
        {
            "sweep": ln.sweep,
            "claim": ln.claim,
            "replicated": ln.replicated,
            "pooled": number(ln.effect),
            "low": number(ln.low),
            "high": number(ln.high),
        }  # fmt: skip
        for ln in ledger.lines
    ]
    body = {"totals": {**ledger.totals, "evidence not kept": not_kept}, "lines": lines, "entries": entries}
    return json.dumps(body, indent=1, allow_nan=False) + "\n"


def fill(text: str, ledger: Ledger, not_kept: int) -> str:
    """`text` with every ledger block regenerated: `table SWEEP [fixed|sequential]` (its verdict table),
    `lines SWEEP` (its claims across seed sets), `claim ID` (one claim across every sweep that has it), `across
    SWEEP SWEEP …` (each claim in each sweep, on each seed set), `headlines SWEEP[:CLAIM,…] …` (the README's
    compact table), `replication CLAIM` (one sentence: in how many sweeps it replicated), `totals`.
    An unknown key is a ValueError."""

    def body(m: re.Match) -> str:
        kind, _, arg = m.group("key").partition(" ")
        if kind == "table" and arg:
            sweep, _, design = arg.partition(" ")
            if design not in ("", "fixed", "sequential"):
                raise ValueError(f"ledger block {m.group('key')!r}: the design is fixed or sequential")
            new = sweep_table(ledger, sweep, design)
        elif kind == "lines" and arg:
            new = lines_table(ledger, arg)
        elif kind == "claim" and arg:
            new = lines_table(ledger, claim=arg)
        elif kind == "across" and arg:
            new = across_table(ledger, arg.split())
        elif kind == "headlines" and arg:
            new = headlines_table(ledger, arg.split())
        elif kind == "replication" and arg:
            new = replication_text(ledger, arg)
        elif kind == "totals":
            new = totals_text(ledger, not_kept)
        else:
            raise ValueError(f"unknown ledger block {m.group('key')!r}")
        return m.group(1) + new + m.group(4)

    return BLOCK.sub(body, text)


def count_not_kept(*texts: str) -> int:
    """Verdict tables marked as having no evidence file: each says "*evidence not kept*:" once, under it."""
    return sum(t.count(f"*{NOT_KEPT}*:") for t in texts)


def _interval(effect: float, low: float, high: float) -> str:
    return "—" if math.isnan(effect) else f"{num(effect, True)} {ci(low, high, True)}"


def _seeds(seeds: tuple[int, ...]) -> str:
    if not seeds:
        return "none"
    if list(seeds) == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _p(p: float) -> str:
    if not math.isfinite(p):
        return "—"
    return "< 0.0001" if p < 1e-4 else f"{p:.2g}"


def documents(root: Path) -> list[Path]:
    """The documents with ledger blocks or written by the ledger."""
    return [root / "README.md", root / "docs" / "findings.md"]
