"""A sweep's claims judged on its runs: reproduced, contradicted or inconclusive, with the evidence.

Each claim says its effect lies above (increase) or below (decrease) a threshold. The effect is a switch's
main effect in the factorial cell-means model, or mean(arm) − fold·mean(vs) by Welch's test; its p tests
effect = threshold (two-sided), and Holm adjusts the p-values across the sweep's claims. Then:

- reproduced: Holm p < α and the effect is on the claimed side of the threshold;
- contradicted: Holm p < α on the other side;
- inconclusive: neither, because
  - "small effect": the CI lies within threshold ± the claim's smallest effect of interest, or
  - "underpowered": it does not; the minimum detectable effect at this many seeds and the seeds a
    decisive sweep needs (for the smallest effect of interest, else the observed one) are given, planned
    at α/m (m claims: the level Holm's first step asks for), or
  - "no test": too few runs, no variance, or empty cells (the note says which).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import yaml
from pydantic import TypeAdapter, ValidationError

from harness.analysis import stats
from harness.analysis.values import run_values
from harness.runs.reader import Sweep, sweep_spec_text
from harness.runs.sweep_data import SweepData
from harness.spec.at import At
from harness.spec.claims import Claim, canonical, check_unique, picks

POWER = 0.8
VERDICTS = ("reproduced", "contradicted", "inconclusive")


@dataclass
class Verdict:
    """A claim's verdict and the evidence behind it."""

    claim: Claim
    verdict: str
    """reproduced, contradicted or inconclusive."""
    reason: str = ""
    """For inconclusive: underpowered, small effect or no test."""
    effect: float = np.nan
    low: float = np.nan
    high: float = np.nan
    p: float = np.nan
    p_holm: float = np.nan
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

    def summary(self) -> str:
        """One line: the verdict, the effect with CI and p-values, n, and for inconclusive ones why."""
        c = self.claim
        head = f"{c.id}: {self.verdict.upper()}"
        if np.isnan(self.effect):
            return f"{head} (no test: {self.note or 'no runs'})"
        fold = (
            ""
            if c.contrast.fold == 1 or np.isnan(self.mean2) or self.mean2 == 0
            else f"; ratio {self.mean1 / self.mean2:.3g}×"
        )
        ci = f", 95% CI {self.low:+.4g} to {self.high:+.4g}" if not np.isnan(self.low) else ""
        p = f"; p = {self.p:.3g}, Holm p = {self.p_holm:.3g}" if not np.isnan(self.p) else ""
        out = (
            f"{head}: {c.metric_text()} {c.contrast.describe()} = {self.effect:+.4g}{ci}{fold} (claimed "
            f"{c.expectation()}){p}; n = {self.n1} vs {self.n2}"
        )
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
        return out


def claim_values(data: SweepData, claim: Claim) -> pd.DataFrame:
    """One value per finished run (run_id, arm, seed, the varying settings, value); a ratio claim's value is
    the numerator's over the denominator's, each read at the claim's `at` (runs where it is undefined left out)."""
    at = At.parse(claim.at, key=f"claims ({claim.id}).at")
    first, *rest = claim.metrics
    values = run_values(data, first, at)
    if rest:
        den = run_values(data, rest[0], at).set_index("run_id")["value"]
        values = values.assign(value=values["value"] / values["run_id"].map(den))
        values = values[np.isfinite(values["value"].to_numpy(float))]
    return values.reset_index(drop=True)


def evidence(
    claim: Claim, values: pd.DataFrame, varying: list[str], arm_settings: dict[str, dict], alpha: float = 0.05
) -> dict:
    """The claim's effect, CI, p (against its threshold), sizes and runs, from one value per run.

    `arm_settings`: each arm's label → its dotted settings (as text), for arm/vs references."""
    c = claim.contrast
    if c.effect is not None:
        if c.effect not in varying:
            return {"note": f"{c.effect} does not vary among the finished runs", "rows": values.iloc[:0]}
        level, base = (_level(values[c.effect], v) for v in (c.to, c.from_))
        if level is None or base is None:
            return {
                "note": f"no finished run has {c.effect} = {c.to if level is None else c.from_}",
                "rows": values.iloc[:0],
            }
        factors = stats.distinct_factors(values, varying, first=c.effect)
        res = stats.main_effect(values, factors, c.effect, level, base, null=claim.threshold, alpha=alpha)
        at, ref = values[c.effect].astype(str) == level, values[c.effect].astype(str) == base
        res.update(n1=res.pop("n"), n2=res.pop("n_base"))
        rows = values.loc[at | ref]
        cells = rows.groupby(factors, observed=True).size()
        res["seeds"] = int(cells.min()) if len(cells) else 0
        res["mean1"], res["mean2"] = values.loc[at, "value"].mean(), values.loc[ref, "value"].mean()
    else:
        arms = {
            name: {lab for lab, s in arm_settings.items() if picks(ref, lab, s)}
            for name, ref in (("arm", c.arm), ("vs", c.vs))
        }
        a, b = (values[values["arm"].isin(arms[n])] for n in ("arm", "vs"))
        res = stats.contrast(a["value"], b["value"], fold=c.fold, null=claim.threshold, alpha=alpha)
        counts = pd.concat([a, b]).groupby("arm").size()
        res["seeds"] = int(counts.min()) if len(counts) else 0
        res["mean1"], res["mean2"] = a["value"].mean(), b["value"].mean()
        rows = pd.concat([a, b])
    res["rows"] = rows
    return res


def _level(column: pd.Series, wanted) -> str | None:
    """The level of a settings column (text, as logged) that a claim's value means."""
    for level in dict.fromkeys(column.astype(str)):
        if canonical(level) == canonical(wanted):
            return level
    return None


def decide(claims: list[Claim], found: list[dict], *, alpha: float = 0.05, power: float = POWER) -> list[Verdict]:
    """Verdicts from each claim's evidence, with Holm across the claims (see the module docstring)."""
    p_holm = stats.holm([e.get("p", np.nan) for e in found])
    m = max(1, int(np.sum(~np.isnan(p_holm))))
    out = []
    for claim, e, ph in zip(claims, found, p_holm):
        v = Verdict(
            claim,
            "inconclusive",
            **{k: e[k] for k in ("effect", "low", "high", "p", "n1", "n2", "mean1", "mean2", "seeds") if k in e},
        )
        v.p_holm, v.note = float(ph), e.get("note", "")
        names = e["rows"]["run_name"] if "run_name" in e["rows"] else e["rows"]["run_id"]
        v.runs = [f"{n} ({r})" for n, r in zip(names, e["rows"]["run_id"])]
        side = np.sign(v.effect - claim.threshold) * (1 if claim.direction == "increase" else -1)
        if np.isnan(v.p):
            v.reason = "no test"
        elif ph < alpha and side > 0:
            v.verdict = "reproduced"
        elif ph < alpha and side < 0:
            v.verdict = "contradicted"
        elif (
            claim.min_effect is not None
            and claim.threshold - claim.min_effect <= v.low
            and v.high <= claim.threshold + claim.min_effect
        ):
            v.reason = "small effect"
        else:
            v.reason = "underpowered"
            v.mde = stats.t_mde(e["se"], e["df"], alpha=alpha / m, power=power)
            v.target = claim.min_effect if claim.min_effect is not None else v.effect - claim.threshold
            v.seeds_needed = stats.seeds_needed(v.target, e["se"], e["df"], v.seeds, alpha=alpha / m, power=power)
        out.append(v)
    return out


def judge(data: SweepData, claims: list[Claim], *, alpha: float = 0.05, power: float = POWER) -> list[Verdict]:
    """Every claim of the sweep judged on its finished runs."""
    return decide(claims, gather(data, claims, alpha=alpha), alpha=alpha, power=power)


def gather(
    data: SweepData,
    claims: list[Claim],
    *,
    alpha: float = 0.05,
    keep: Callable[[pd.DataFrame], pd.Series] | None = None,
) -> list[dict]:
    """Each claim's `evidence` on the sweep's finished runs; `keep` (a row mask of a claim's values: run_id, arm,
    seed, ...) restricts the runs, e.g. to the seeds of one look of a sequential sweep."""
    settings = _arm_settings(data)
    names = data.runs.set_index("run_id")["run_name"] if "run_name" in data.runs else None
    found = []
    for claim in claims:
        values = claim_values(data, claim)
        if keep is not None and not values.empty:
            values = values[keep(values)].reset_index(drop=True)
        if names is not None:
            values = values.assign(run_name=values["run_id"].map(names))
        found.append(evidence(claim, values, data.varying, settings, alpha))
    return found


def _arm_settings(data: SweepData) -> dict[str, dict]:
    """Each arm's label → the dotted settings of its first run (params as logged)."""
    first = data.runs.drop_duplicates("arm").set_index("arm")["run_id"]
    return {
        arm: (data.params.loc[rid].dropna().to_dict() if rid in data.params.index else {}) for arm, rid in first.items()
    }


def stored_claims(sweep: Sweep) -> tuple[list[Claim], str]:
    """The claims of the sweep file the sweep last ran with (as logged on its parent run), and a warning
    ('' if none) when they cannot be read."""
    text = sweep_spec_text(sweep)
    if not text:
        return [], ""
    try:
        raw = (yaml.safe_load(text) or {}).get("claims") or []
        return check_unique(TypeAdapter(list[Claim]).validate_python(raw)), ""
    except (yaml.YAMLError, ValidationError, ValueError, AttributeError) as exc:
        return [], f"the claims logged with sweep {sweep.name} could not be read: {' '.join(str(exc).split())[:300]}"
