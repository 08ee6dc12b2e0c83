"""A sweep's claims judged on its runs: reproduced, contradicted or inconclusive, with the evidence.

Each claim says its effect lies above (increase) or below (decrease) a threshold. The effect is a switch's
main effect in the factorial cell-means model, or mean(arm) − fold·mean(vs) by Welch's test, or (`since`) each
arm's mean change over its runs by a one-sample t-test, the claim resting on its weakest arm (an
intersection-union test: the largest p while every arm is on the claimed side; else the arm that is most clearly
on the other, its p multiplied by the number of arms, since any arm may be the one to fall); its p tests
effect = threshold (two-sided), and Holm adjusts the p-values across the sweep's claims.
Then:

- inconclusive, "small effect": the CI lies within threshold ± the claim's smallest effect of interest
  (`min_effect`), significant or not: an effect shown to be smaller than the claim cares about is not evidence
  for it, nor against it;
- reproduced: otherwise, Holm p < α and the effect is on the claimed side of the threshold;
- contradicted: Holm p < α on the other side, and the whole CI beyond threshold ∓ `min_effect` (a contradiction
  clears the threshold by the smallest effect of interest);
- inconclusive otherwise, because
  - "underpowered": not significant, or a contradiction short of `min_effect`; the minimum detectable effect
    at this many seeds and the seeds a decisive sweep needs (for the smallest effect of interest, else the
    observed one) are given, planned at α/m (m claims: the level Holm's first step asks for), or
  - "no test": too few runs, no variance, empty cells, or a `fold` against a reference that is not positive
    (the note says which).

Both kinds of contrast compare cell means (an arm, or a cell of the factorial grid, is a cell) with each cell's
own variance and Welch–Satterthwaite df (`stats.cell_contrast`): a pooled side is the unweighted mean of its arms.
Failed runs (a crash, a time-out, a divergence) of the arms a claim reads are counted per side; by the claim's
`failed` they take the worst value among its finished runs, or are left out, and the verdict says which.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace

import numpy as np
import pandas as pd
from pydantic import TypeAdapter, ValidationError

from harness.analysis import stats
from harness.analysis.evidence import ArmChange, Evidence, VerdictKind
from harness.analysis.values import run_values
from harness.config.claims import Claim, Difference, canonical, check_unique, picks
from harness.config.yaml_io import load_yaml_text
from harness.runs.reader import Sweep, sweep_file_text
from harness.runs.sweep_data import SweepData


@dataclass
class Verdict:
    """A claim's verdict and the evidence behind it."""

    claim: Claim
    verdict: VerdictKind
    reason: str = ""
    """For inconclusive: underpowered, small effect or no test."""
    effect: float = np.nan
    low: float = np.nan
    high: float = np.nan
    p: float = np.nan
    p_holm: float = np.nan
    se: float = np.nan
    """The effect's standard error, with its Welch–Satterthwaite `df`."""
    df: float = np.nan
    n1: int = 0
    """Runs on the claimed side (arm, or the switch's `to` level)."""
    n2: int = 0
    mean1: float = np.nan
    mean2: float = np.nan
    seeds: int = 0
    """Seeds per arm (per cell of a factorial effect): the smallest count among the runs used."""
    mde: float = np.nan
    """Minimum detectable distance from the threshold at these seeds (80% power, α/m)."""
    seeds_needed: int | None = None
    target: float = np.nan
    """The effect `seeds_needed` is planned for (the smallest effect of interest, else the observed one)."""
    note: str = ""
    runs: list[str] = field(default_factory=list)
    """The runs used, as 'run name (run id)'."""
    failed1: int = 0
    """Failed runs on the claimed side (of jobs with no finished run)."""
    failed2: int = 0
    diverged1: int = 0
    """Of `failed1`, those that diverged (non-finite loss, gradient or parameters)."""
    diverged2: int = 0
    failed_value: float = np.nan
    """The worst value the failed runs were counted at (NaN: they were left out)."""
    per_arm: list[ArmChange] = field(default_factory=list)
    """A `since` claim: each arm's change and test; the effect, CI and p above are its deciding arm's."""
    mixed: str = ""
    """Said beside the verdict when its runs come from more than one CPU capability or base model: 'runs from 2
    CPU capabilities (AVX2, AVX512)', 'runs from 5 base models'; '' otherwise."""

    def verdict_text(self) -> str:
        """The verdict, and beside it what its runs mix: 'reproduced [runs from 5 base models]'."""
        return self.verdict + (f" [{self.mixed}]" if self.mixed else "")

    def n_text(self) -> str:
        """The runs the test rests on: 'n1 vs n2', or for a `since` claim the runs of each arm."""
        if self.claim.contrast.since is None:
            return f"{self.n1} vs {self.n2}"
        return f"{'/'.join(str(a.n) for a in self.per_arm) or 0} runs in {len(self.per_arm)} arms"

    def arms_text(self) -> str:
        """A `since` claim's arms, the deciding one first: 'label +0.1 (p 0.003)', ...; '' for other claims."""
        return "; ".join(a.text() for a in self.per_arm)

    def failed_text(self) -> str:
        """E.g. 'failed runs 1 vs 0 (1 diverged), counted at the worst value 0.12'; '' when none failed."""
        if not self.failed1 + self.failed2:
            return ""
        diverged = self.diverged1 + self.diverged2
        how = (
            f"counted at the worst value {self.failed_value:.4g}"
            if not np.isnan(self.failed_value)
            else "excluded"
            + ("" if self.claim.failed_as == "exclude" else " (no finished run to take a worst value from)")
        )
        return (
            f"failed runs {self.failed1} vs {self.failed2}"
            + (f" ({diverged} diverged)" if diverged else "")
            + f", {how}"
        )

    def summary(self) -> str:
        """One line: the verdict, the effect with CI and p-values, n, and for inconclusive ones why."""
        c = self.claim
        head = f"{c.id}: {self.verdict.upper()}" + (f" [{self.mixed}]" if self.mixed else "")
        if np.isnan(self.effect):
            failed = self.failed_text()
            return f"{head} (no test: {self.note or 'no runs'})" + (f"; {failed}" if failed else "")
        fold = "" if c.contrast.fold == 1 or not self.mean2 > 0 else f"; ratio {self.mean1 / self.mean2:.3g}×"
        ci = f", 95% CI {self.low:+.4g} to {self.high:+.4g}" if not np.isnan(self.low) else ""
        p = f"; p = {self.p:.3g}, Holm p = {self.p_holm:.3g}" if not np.isnan(self.p) else ""
        out = (
            f"{head}: {c.metric_text()} {c.contrast.describe()} = {self.effect:+.4g}{ci}{fold} (claimed "
            f"{c.expectation()}){p}; n = {self.n_text()}"
        )
        if self.per_arm:
            out += f"; by arm: {self.arms_text()}"
        if self.reason == "small effect":
            out += f"; the CI lies within {c.threshold:g} ± {c.min_effect:g}: a small effect"
        elif self.reason == "underpowered":
            need = f"{self.seeds_needed}" if self.seeds_needed else "more than 1000"
            out += (
                f"; underpowered: detectable at {self.seeds} seeds: ±{self.mde:.3g}; seeds for "
                f"{abs(self.target):.3g}: {need}"
            )
        elif self.reason == "no test":
            out += f" (no test: {self.note})"
        failed = self.failed_text()
        return out + (f"; {failed}" if failed else "")


def claim_values(data: SweepData, claim: Claim) -> pd.DataFrame:
    """One value per finished run (run_id, arm, seed, the varying settings, value); a ratio (difference) claim's
    value is the first metric's over (minus) the second's, each read at the claim's `at` (runs where either is
    undefined left out)."""
    at = claim.at
    first, *rest = claim.metrics
    values = run_values(data, first, at)
    if claim.contrast.since is not None:  # each run's change from its start (the metric at `since`)
        start = values["run_id"].map(run_values(data, first, claim.contrast.since).set_index("run_id")["value"])
        values = values.assign(value=values["value"].to_numpy(float) - start.to_numpy(float))
        return values[np.isfinite(values["value"].to_numpy(float))].reset_index(drop=True)
    if rest:
        other = values["run_id"].map(run_values(data, rest[0], at).set_index("run_id")["value"])
        combine = np.subtract if isinstance(claim.metric, Difference) else np.divide
        with np.errstate(divide="ignore", invalid="ignore"):
            values = values.assign(value=combine(values["value"].to_numpy(float), other.to_numpy(float)))
        values = values[np.isfinite(values["value"].to_numpy(float))]
    return values.reset_index(drop=True)


def evidence(
    claim: Claim,
    values: pd.DataFrame,
    varying: list[str],
    arm_settings: dict[str, dict],
    alpha: float = 0.05,
    failed: pd.DataFrame | None = None,
) -> Evidence:
    """The claim's effect, CI, p (against its threshold), sizes, runs and failed runs per side, from one value per
    finished run (run_id, arm, seed, the varying settings, value).

    `arm_settings`: each arm's label → its dotted settings (as text), for arm/vs references; `failed`: the sweep's
    failed runs (run_id, arm, seed, the varying settings, diverged), counted by the claim's `failed`."""
    c = claim.contrast
    sides = _sides(claim, values, varying, arm_settings)
    if isinstance(sides, str):
        return Evidence(values.iloc[:0], note=sides)
    out = _failed(claim, values, failed, sides)
    imputed = out.pop("imputed")
    if len(imputed):
        values = pd.concat([values, imputed], ignore_index=True)
    if c.since is not None:
        arms, _ = sides
        res = _weakest_arm(claim, values, arms, alpha)
        rows = values[values["arm"].isin(arms)]
        cells = rows.groupby("arm").size()
    elif c.effect is not None:
        level, base = sides
        factors = stats.distinct_factors(values, varying, first=c.effect)
        res = stats.main_effect(values, factors, c.effect, level, base, null=claim.threshold, alpha=alpha)
        at, ref = values[c.effect].astype(str) == level, values[c.effect].astype(str) == base
        res.update(n1=res.pop("n"), n2=res.pop("n_base"))
        rows = values.loc[at | ref]
        cells = rows.groupby(factors, observed=True).size()
        res["mean1"], res["mean2"] = values.loc[at, "value"].mean(), values.loc[ref, "value"].mean()
    else:
        arm, vs = sides
        groups = [values.loc[values["arm"] == lab, "value"] for lab in arm + vs]
        weights = [1 / len(arm)] * len(arm) + [-c.fold / len(vs)] * len(vs)
        res = stats.cell_contrast(groups, weights, null=claim.threshold, alpha=alpha)
        res["mean1"], res["mean2"] = (_mean_of_means(values, side) for side in (arm, vs))
        res["n1"], res["n2"] = (int(values["arm"].isin(side).sum()) for side in (arm, vs))
        rows = values[values["arm"].isin(arm + vs)]
        cells = rows.groupby("arm").size()
        if c.fold != 1 and not res["mean2"] > 0:
            res.update(p=np.nan, low=np.nan, high=np.nan, se=np.nan, df=np.nan)
            res["note"] = (
                f"fold {c.fold:g} needs a positive reference, and mean(vs) = {res['mean2']:.4g}: "
                "'at least fold times as large' reads the other way below zero"
            )
    res["seeds"] = int(cells.min()) if len(cells) else 0
    known = {f.name for f in fields(Evidence)}
    return Evidence(rows, **{k: v for k, v in {**res, **out}.items() if k in known})


def _sides(claim: Claim, values: pd.DataFrame, varying: list[str], arm_settings: dict[str, dict]):
    """(level, base) of a main effect as logged, or ([arms], [vs arms]); a note (str) when they cannot be had."""
    c = claim.contrast
    if c.since is not None:
        arms = sorted(set(arm_settings) | set(values["arm"]))  # an arm whose every run failed is still one
        if c.arm is not None:
            arms = [a for a in arms if picks(c.arm, a, arm_settings.get(a, {})) or a == c.arm]
        return (arms, []) if arms else "no run of the sweep has a value at both ends"
    if c.effect is None:
        sides = tuple(
            [lab for lab, s in arm_settings.items() if picks(ref, lab, s)] or ([ref] if isinstance(ref, str) else [])
            for ref in (c.arm, c.vs)
        )
        if not all(sides):
            return "no arm of the sweep matches " + ("arm" if not sides[0] else "vs")
        several = [name for name, side in zip(("arm", "vs"), sides) if len(side) > 1]
        if several and not c.pool:  # a claim logged before `pool` existed: never pool it silently
            return f"{several[0]} picks {len(sides[0 if several[0] == 'arm' else 1])} arms; say pool: true to pool them"
        return sides
    if c.effect not in varying:
        return f"{c.effect} does not vary among the finished runs"
    level, base = (_level(values[c.effect], v) for v in (c.to, c.from_))
    if level is None or base is None:
        return f"no finished run has {c.effect} = {c.to if level is None else c.from_}"
    return level, base


def _weakest_arm(claim: Claim, values: pd.DataFrame, arms: list[str], alpha: float) -> dict:
    """A `since` claim's evidence: each arm's one-sample test against the threshold; the claim's effect, CI and p
    are those of its deciding arm (the largest p while every arm is on the claimed side, else the arm most clearly on
    the other side), and `per_arm` lists every arm, the deciding one first."""
    sign = 1 if claim.direction == "increase" else -1
    tests = {
        arm: stats.cell_contrast([values.loc[values["arm"] == arm, "value"]], [1.0], null=claim.threshold, alpha=alpha)
        for arm in arms
    }
    untested = [arm for arm, t in tests.items() if np.isnan(t["p"])]
    wrong = [arm for arm, t in tests.items() if arm not in untested and sign * (t["effect"] - claim.threshold) <= 0]
    if wrong:
        deciding = min(wrong, key=lambda arm: tests[arm]["p"])
    elif untested:
        deciding = untested[0]
    else:
        deciding = max(arms, key=lambda arm: tests[arm]["p"])
    res = dict(tests[deciding])
    if wrong:  # "some arm falls" is a union of k tests: Bonferroni keeps its error at α/2 a side however many arms
        k = len(arms) - len(untested)
        res["p"] = min(1.0, k * res["p"])
        res["note"] = f"arm {deciding}'s p × {k} arms (Bonferroni: any arm on the other side)"
    if untested and not wrong:
        res["note"] = f"arm {deciding}: {tests[deciding]['note'] or 'no test'}; every arm needs a test"
    counts = values["arm"].value_counts()
    changes = [
        ArmChange(
            arm,
            tests[arm]["effect"],
            tests[arm]["low"],
            tests[arm]["high"],
            tests[arm]["p"],
            int(counts.get(arm, 0)),
            tests[arm]["se"],
            tests[arm]["df"],
        )  # fmt: skip
        for arm in [deciding, *(a for a in arms if a != deciding)]
    ]
    res.update(per_arm=changes, mean1=res["effect"], mean2=np.nan, n1=int(counts.get(deciding, 0)), n2=0)
    return res


def _mean_of_means(values: pd.DataFrame, arms: list[str]) -> float:
    means = values[values["arm"].isin(arms)].groupby("arm")["value"].mean()
    return float(means.mean()) if len(means) else np.nan


def _failed(claim: Claim, values: pd.DataFrame, failed: pd.DataFrame | None, sides) -> dict:
    """The failed runs on each side and, where the claim counts them at the worst value, their rows to add."""
    out = {"failed1": 0, "failed2": 0, "diverged1": 0, "diverged2": 0, "failed_value": np.nan, "imputed": []}
    if failed is None or failed.empty:
        return out
    c, parts = claim.contrast, []
    for i, side in enumerate(sides, 1):
        if c.effect is not None:
            mine = (
                failed[failed[c.effect].astype(str).map(canonical) == canonical(side)]
                if c.effect in failed
                else failed.iloc[:0]
            )
        else:
            mine = failed[failed["arm"].isin(side)]
        out[f"failed{i}"], out[f"diverged{i}"] = len(mine), int(mine["diverged"].sum())
        parts.append(mine)
    mine = pd.concat(parts)
    if mine.empty or claim.failed_as == "exclude" or values.empty:
        return out
    worst = float(values["value"].min() if claim.direction == "increase" else values["value"].max())
    out["failed_value"] = worst
    out["imputed"] = mine.drop(columns="diverged").assign(value=worst)
    return out


def _level(column: pd.Series, wanted) -> str | None:
    """The level of a settings column (text, as logged) that a claim's value means."""
    for level in dict.fromkeys(column.astype(str)):
        if canonical(level) == canonical(wanted):
            return level
    return None


_CARRIED = (
    "effect", "low", "high", "p", "se", "df", "n1", "n2", "mean1", "mean2", "seeds",
    "failed1", "failed2", "diverged1", "diverged2", "failed_value", "per_arm", "mixed",
)  # fmt: skip
"""What a verdict takes over from its evidence as it is."""


def decide(
    claims: list[Claim], found: list[Evidence], *, alpha: float = 0.05, power: float = stats.POWER
) -> list[Verdict]:
    """Verdicts from each claim's evidence, with Holm across the claims (see the module docstring)."""
    p_holm = stats.holm([e.p for e in found])
    m = max(1, int(np.sum(~np.isnan(p_holm))))
    out = []
    for claim, e, ph in zip(claims, found, p_holm):
        v = Verdict(
            claim,
            "inconclusive",
            **{k: getattr(e, k) for k in _CARRIED},
            p_holm=float(ph),
            note=e.note,
            runs=e.run_labels(),
        )
        sign = 1 if claim.direction == "increase" else -1
        side = np.sign(v.effect - claim.threshold) * sign
        band = claim.min_effect
        inside = band is not None and claim.threshold - band <= v.low and v.high <= claim.threshold + band
        clears = band is None or (v.high < claim.threshold - band if sign > 0 else v.low > claim.threshold + band)
        if np.isnan(v.p):
            v.reason = "no test"
        elif inside:  # significant or not, an effect shown to be smaller than min_effect is neither verdict
            v.reason = "small effect"
        elif ph < alpha and side > 0:
            v.verdict = "reproduced"
        elif ph < alpha and side < 0 and clears:
            v.verdict = "contradicted"
        else:
            v.reason = "underpowered"
            v.mde = stats.t_mde(e.se, e.df, alpha=alpha / m, power=power)
            v.target = claim.min_effect if claim.min_effect is not None else v.effect - claim.threshold
            v.seeds_needed = stats.seeds_needed(v.target, e.se, e.df, v.seeds, alpha=alpha / m, power=power)
        out.append(v)
    return out


def judge(data: SweepData, claims: list[Claim], *, alpha: float = 0.05, power: float = stats.POWER) -> list[Verdict]:
    """Every claim of the sweep judged on its finished runs."""
    return decide(claims, gather(data, claims, alpha=alpha), alpha=alpha, power=power)


def gather(
    data: SweepData,
    claims: list[Claim],
    *,
    alpha: float = 0.05,
    keep: Callable[[pd.DataFrame], pd.Series] | None = None,
) -> list[Evidence]:
    """Each claim's `evidence` on the sweep's finished runs; `keep` (a row mask of a claim's values: run_id, arm,
    seed, ...) restricts the runs, e.g. to the seeds of one look of a sequential sweep."""
    settings = logged_arm_settings(data)
    names = data.runs.set_index("run_id")["run_name"] if "run_name" in data.runs else None
    failed = failed_runs(data, settings)
    if keep is not None and not failed.empty:
        failed = failed[keep(failed)]
    if names is not None:
        failed = failed.assign(run_name=failed["run_id"].map(names))
    found = []
    for claim in claims:
        values = claim_values(data, claim)
        if keep is not None and not values.empty:
            values = values[keep(values)].reset_index(drop=True)
        if names is not None:
            values = values.assign(run_name=values["run_id"].map(names))
        found_one = evidence(claim, values, data.varying, settings, alpha, failed)
        found.append(replace(found_one, mixed=data.mixed(found_one.rows.get("run_id", ()))))
    return found


def failed_runs(data: SweepData, settings: dict[str, dict]) -> pd.DataFrame:
    """One row per job that never finished and has failed (`SweepData.jobs`), its latest failed run: run_id, arm,
    seed, the varying settings (as logged, else the arm's in `settings`), diverged. A job retried and failed again
    is one job: counted once."""
    runs = data.runs.set_index("run_id")
    latest = {(f.arm, f.seed): f for f in data.jobs.failed_runs}  # listed oldest first
    rows = []
    for f in latest.values():
        logged = runs.loc[f.run_id] if f.run_id in runs.index else pd.Series(dtype=object)
        setting = {
            k: logged.get(k) if pd.notna(logged.get(k)) else settings.get(f.arm, {}).get(k) for k in data.varying
        }
        rows.append({"run_id": f.run_id, "arm": f.arm, "seed": f.seed, **setting, "diverged": f.diverged})
    return pd.DataFrame(rows, columns=["run_id", "arm", "seed", *data.varying, "diverged"])


def logged_arm_settings(data: SweepData) -> dict[str, dict]:
    """Each arm's label → the dotted settings of its first run (params as logged)."""
    first = data.runs.drop_duplicates("arm").set_index("arm")["run_id"]
    return {
        arm: (data.params.loc[rid].dropna().to_dict() if rid in data.params.index else {}) for arm, rid in first.items()
    }


def stored_claims(sweep: Sweep) -> tuple[list[Claim], str]:
    """The claims of the sweep file the sweep last ran with (as logged on its parent run), and a warning
    ('' if none) when they cannot be read."""
    text = sweep_file_text(sweep)
    if not text:
        return [], ""
    try:
        raw = load_yaml_text(text, f"sweep {sweep.name}'s sweep.yaml").get("claims") or []
        return check_unique(TypeAdapter(list[Claim]).validate_python(raw)), ""
    except (ValidationError, ValueError, AttributeError) as exc:  # ConfigError is a ValueError
        return [], f"the claims logged with sweep {sweep.name} could not be read: {' '.join(str(exc).split())[:300]}"
