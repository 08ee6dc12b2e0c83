"""`harness sweep FILE --until-decided`: run the shipped seeds, judge the claims, add seeds where one is open.

Round 1 runs the file's seeds. After each round every open claim gets a look (harness.analysis.sequential:
group-sequential boundaries with O'Brien–Fleming-type α spending, sequential Holm across the claims); the
arms that a still-open claim reads get `batch` more seeds (the next integers after the file's largest seed),
up to `max_seeds` per arm. Nothing but the store is state: a rerun replays the earlier looks from the runs
they used (each look reads only its own seeds), so a sweep killed at any point continues the same design.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
from rich.console import Console
from rich.table import Table

from harness.analysis import sequential as seq
from harness.config.claims import Claim, canonical, claim_arms, picks
from harness.config.plan import SweepPlan, arm_settings

if TYPE_CHECKING:
    from harness.engine.executor import Executor


ALPHA = 0.05
"""Default familywise error rate across looks and claims (`--alpha`)."""


@dataclass
class Outcome:
    """What a sequential sweep did: every claim's path, the rounds, and the jobs that failed."""

    tracks: list[seq.Track]
    rounds: list[seq.Round] = field(default_factory=list)
    failed: list = field(default_factory=list)
    """JobOutcomes of jobs that failed (in any round)."""


@dataclass(frozen=True)
class Sequential:
    """A sweep file planned for `--until-decided`: every job it may run, its claims and the design."""

    plan: SweepPlan
    """All arms × (the file's seeds + the seeds that may be added)."""
    claims: list[Claim]
    design: seq.Design
    seeds: tuple[int, ...]
    """Seeds in the order they are added: the file's, then the extra ones."""
    needs: dict[str, set[str]]
    """Each claim's id → the arms it reads."""


def prepare(plan: SweepPlan, first: int, *, batch: int, alpha: float = 0.05) -> Sequential:
    """The design of a sweep planned by `harness.config.plan.plan_until_decided` (which checks it): `plan` holds
    every job, the first `first` of its seeds are the ones it starts with."""
    claims = list(plan.settings.claims)
    seeds = tuple(plan.settings.seeds)
    arms = arm_settings(plan.jobs)
    design = seq.Design(first=first, batch=batch, max_seeds=len(seeds), alpha=alpha)
    return Sequential(plan, claims, design, seeds, {c.id: claim_arms(c, arms) for c in claims})


def run(s: Sequential, *, executor: Executor, tracking_uri: str, console: bool = True) -> Outcome:
    """Run the rounds until every claim is decided or the seed budget is spent."""
    from harness.analysis.claims import gather  # MLflow: imported only once jobs are about to run
    from harness.analysis.replay import seeds_of
    from harness.engine.sweep import run_sweep
    from harness.runs.reader import find_sweep, reader_for
    from harness.runs.sweep_data import read_sweep
    from harness.runs.writer import log_sequential

    out = Console(stderr=True, markup=False, emoji=False)  # names and labels are text, never Rich markup
    plan = s.plan
    arms = list(dict.fromkeys(j.arm for j in plan.jobs))
    given = dict.fromkeys(arms, s.design.first)  # seeds per arm so far
    design = replace(s.design, fixed_first=fixed_look(s, given, tracking_uri))
    if design.fixed_first and console:
        out.print(
            f"sweep {plan.name}: the first look's seeds were run and judged at α {design.alpha:g} by a fixed-seed "
            "sweep already: that look counts as this design's first, with its α spent (no efficacy verdict is left "
            "to the later looks; fresh seeds, `--seeds`, start a design of their own)",
            soft_wrap=True,
        )
    outcome = Outcome([seq.Track(c.id) for c in s.claims])
    schedule = design.schedule()
    for look, target in enumerate(schedule, 1):
        if look > 1:
            given = more_seeds(given, target, [s.needs[t.claim_id] for t in outcome.tracks if t.open])
        allowed = {arm: set(s.seeds[:n]) for arm, n in given.items()}
        jobs = [j for j in plan.jobs if j.seed in allowed[j.arm]]
        if console:
            out.print(f"sweep {plan.name}: round {look}: {_seed_text(given)}", soft_wrap=True)
        result = run_sweep(plan, jobs, executor=executor, tracking_uri=tracking_uri, console=console)
        outcome.failed += result.failed
        found = find_sweep(tracking_uri, plan.sweep_id, plan.experiment)
        assert found is not None, "run_sweep logs the sweep's parent run before any job"
        data = read_sweep(reader_for(tracking_uri), found)
        open_ = [(c, t) for c, t in zip(s.claims, outcome.tracks) if t.open]
        keep = seeds_of(allowed)
        for (claim, track), ev in zip(open_, gather(data, [c for c, _ in open_], alpha=design.alpha, keep=keep)):
            seq.observe(track, look, ev, design, claim.threshold)
        final = target >= design.max_seeds or look == len(schedule)
        seq.decide(s.claims, outcome.tracks, design, final=final)
        still_open = [t.claim_id for t in outcome.tracks if t.open]
        outcome.rounds.append(seq.Round(look, dict(given), len(jobs), len(result.failed), still_open))
        record = seq.Record(design, outcome.rounds, outcome.tracks)
        log_sequential(tracking_uri, result.parent_run_id, record.to_json())
        if console:
            table = look_table(plan.name, s.claims, outcome.tracks, look, design)
            Console(width=200, markup=False, emoji=False).print(table)
        if not still_open:
            break
    return outcome


def fixed_look(s: Sequential, given: dict[str, int], tracking_uri: str) -> float:
    """The share of α already spent on the first look's seeds (`Design.fixed_first`): a design that logged its
    record keeps its own; else 1 when every job of the first look has finished before this design's first round
    (a fixed-seed `harness sweep`, which ends by judging the claims at α), 0 otherwise."""
    from harness.engine.resume import finished_job_ids
    from harness.runs.reader import find_sweep

    found = find_sweep(tracking_uri, s.plan.sweep_id, s.plan.experiment)
    record = seq.stored_record(found) if found is not None else None
    if record is not None:
        return record.design.fixed_first
    first = [j for j in s.plan.jobs if j.seed in set(s.seeds[: given[j.arm]])]
    done = finished_job_ids(tracking_uri, s.plan.experiment, s.plan.sweep_id) if found is not None else set()
    return 1.0 if first and all(j.job_id in done for j in first) else 0.0


def more_seeds(given: dict[str, int], target: int, open_needs: list[set[str]]) -> dict[str, int]:
    """Seeds per arm for the next round: `target` for every arm an open claim reads, the rest unchanged."""
    wanted = set().union(*open_needs) if open_needs else set()
    return {arm: max(n, target) if arm in wanted else n for arm, n in given.items()}


def _seed_text(given: dict[str, int]) -> str:
    counts: dict[int, list[str]] = {}
    for arm, n in given.items():
        counts.setdefault(n, []).append(arm)
    return "; ".join(f"{n} seeds for {', '.join(arms)}" for n, arms in sorted(counts.items(), reverse=True))


def look_table(name: str, claims: list[Claim], tracks: list[seq.Track], look: int, design: seq.Design) -> Table:
    """Each claim after a look: seeds, estimate with its repeated CI, z against the boundary, and its state."""
    table = Table(
        title=f"{name}: look {look} (α = {design.alpha}, O'Brien–Fleming spending, Holm across {len(claims)})",
        title_justify="left",
    )
    for col in ("claim", "claimed", "seeds", "effect [repeated CI] (level)", "|z|", "boundary", "state"):
        table.add_column(col, overflow="fold")
    for claim, track in zip(claims, tracks):
        lk = next((x for x in reversed(track.looks) if x.look == look), None)
        row = [claim.id, claim.expectation()]
        if lk is None:
            row += ["", "", "", "", state(track)]
        else:
            ci = f" [{lk.low:+.4g}, {lk.high:+.4g}] ({100 * (1 - lk.level):.3g} %)" if np.isfinite(lk.low) else ""
            row += [
                str(lk.seeds),
                f"{lk.effect:+.4g}{ci}",
                f"{abs(lk.z):.3g}" if np.isfinite(lk.z) else "—",
                f"{lk.boundary:.3g}" if np.isfinite(lk.boundary) else "—",
                state(track),
            ]
        table.add_row(*row)
    return table


def state(track: seq.Track) -> str:
    """'open', or the verdict and why the claim stopped, e.g. 'reproduced (efficacy, look 2)'."""
    if track.open:
        return "open"
    return f"{track.verdict} ({track.stop}, look {track.stopped_at})"


# ---------------------------------------------------------------------------------------------
# Planning: `harness sweep FILE --dry-run --until-decided`
# ---------------------------------------------------------------------------------------------


def planning(s: Sequential, tracking_uri: str) -> tuple[list[dict], dict[str, tuple[float, int]]]:
    """Per claim: the smallest effect of interest, where the spread comes from, expected and maximum seeds per
    arm and the power under that effect, and the fixed design's seeds for the same power; per arm: expected
    (≈ the largest among the claims that read it) and maximum seeds. Planned at α/m (Holm's first step)."""
    sd_seen = _spread_seen(s, tracking_uri)
    level = s.design.alpha / len(s.claims)
    rows, expected = [], {}
    settings = arm_settings(s.plan.jobs)
    for claim in s.claims:
        row = {"claim": claim.id, "sesoi": claim.min_effect, "source": "", "plan": None}
        if claim.id in sd_seen:
            sd1, row["source"] = sd_seen[claim.id]
        elif claim.planning_sd is not None:
            sd1 = claim.planning_sd * _per_seed_factor(claim, settings)
            row["source"] = f"planning_sd {claim.planning_sd:g} (no runs yet)"
        else:
            sd1, row["source"] = math.nan, "no runs yet and no planning_sd"
        if claim.min_effect is None:
            row["source"] += "; no min_effect to plan for"
        elif np.isfinite(sd1):
            delta = claim.min_effect if claim.direction == "increase" else -claim.min_effect
            row["plan"] = seq.operating(s.design, delta, sd1, level, sesoi=claim.min_effect)
        rows.append(row)
        for arm in s.needs[claim.id]:
            e = row["plan"].expected_seeds if row["plan"] else math.nan
            expected[arm] = (
                float(np.nanmax([expected.get(arm, math.nan), e])) if not math.isnan(e) else expected.get(arm, math.nan)
            )
    d = s.design
    arms = {arm: (expected[arm], d.max_seeds) if arm in expected else (float(d.first), d.first) for arm in settings}
    return rows, arms


def _per_seed_factor(claim: Claim, settings: dict[str, dict]) -> float:
    """SE at one seed per arm over one run's SD: √(1/k₁ + fold²/k₂), k the arms (cells) on each side (1 for a
    `since` claim, tested in each arm on its own)."""
    c = claim.contrast
    if c.since is not None:
        return 1.0  # each arm on its own: one run's SD
    if c.effect is not None:
        cells = claim_arms(claim, settings)
        one = {label for label in cells if canonical(settings[label][c.effect]) == canonical(c.to)}
        other = cells - one
        return math.sqrt(1 / max(1, len(one)) + 1 / max(1, len(other)))
    k1 = sum(picks(c.arm, label, st) for label, st in settings.items())
    k2 = sum(picks(c.vs, label, st) for label, st in settings.items())
    return math.sqrt(1 / max(1, k1) + c.fold**2 / max(1, k2))


def _spread_seen(s: Sequential, tracking_uri: str) -> dict[str, tuple[float, str]]:
    """Each claim's SE at one seed per arm from the runs of the file's seeds already in the store, if any."""
    from harness.runs.layout import store_exists

    if not store_exists(tracking_uri):
        return {}
    from harness.analysis.claims import gather
    from harness.analysis.replay import seeds_of
    from harness.runs.reader import find_sweep, reader_for
    from harness.runs.sweep_data import read_sweep

    found = find_sweep(tracking_uri, s.plan.sweep_id, s.plan.experiment)
    if found is None:
        return {}
    data = read_sweep(reader_for(tracking_uri), found)
    first = set(s.seeds[: s.design.first])
    keep = seeds_of({arm: first for arm in data.runs["arm"].unique()})
    out = {}
    for claim, ev in zip(s.claims, gather(data, s.claims, alpha=s.design.alpha, keep=keep)):
        se, n = ev.se, ev.seeds
        if np.isfinite(se) and se > 0 and n:
            out[claim.id] = (se * math.sqrt(n), f"runs: SE {se:.3g} at {n} seeds")
    return out


def planning_table(s: Sequential, tracking_uri: str) -> list[Table]:
    rows, arms = planning(s, tracking_uri)
    d = s.design
    t1 = Table(
        title=(
            f"{s.plan.name}: --until-decided plan (looks at {', '.join(map(str, d.schedule()))} seeds per arm; "
            f"α = {d.alpha}, O'Brien–Fleming spending, planned at α/{len(s.claims)}; under each claim's min_effect)"
        ),
        title_justify="left",
    )
    for col in (
        "claim",
        "min_effect",
        "spread from",
        "expected seeds/arm",
        "max",
        "power",
        "fixed design, same power",
        "fixed design, 80% power",
    ):
        t1.add_column(col, overflow="fold")
    for r in rows:
        p = r["plan"]
        t1.add_row(
            r["claim"],
            "—" if r["sesoi"] is None else f"{r['sesoi']:g}",
            r["source"],
            f"{p.expected_seeds:.1f}" if p else "—",
            str(d.max_seeds),
            f"{p.power:.2f}" if p else "—",
            (str(p.fixed_seeds) if p.fixed_seeds else ">1000") if p else "—",
            (str(p.fixed_80) if p.fixed_80 else ">1000") if p else "—",
        )
    t2 = Table(title="seeds per arm", title_justify="left")
    for col in ("arm", "expected (≈ the most its claims need)", "max"):
        t2.add_column(col)
    for arm, (e, mx) in arms.items():
        t2.add_row(arm, f"{e:.1f}" if np.isfinite(e) else "—", str(mx))
    return [t1, t2]
