"""Whether one claim's effect agrees across two sets of runs: another machine, another CPU path, a user's runs
against the published ones.

Each side's effect comes with its standard error and Welch–Satterthwaite degrees of freedom (`Evidence`). The two
sets are independent, so their difference has standard error sqrt(se_a² + se_b²) and, by Welch–Satterthwaite
again, df = se⁴ / (se_a⁴/df_a + se_b⁴/df_b); a two-sided t test of a zero difference, Holm-adjusted across the
claims compared, says whether the sides differ by more than their seeds explain. That the sides' intervals
overlap, or contain each other's estimates, is reported too, but it is not the test.

A test that finds no difference does not show sameness (few seeds find nothing). Sameness is an equivalence test
(TOST, two one-sided t tests) against a margin m, the largest difference that counts as the same: equivalent when
both one-sided tests reject at α, i.e. the difference's 1 − 2α interval lies inside (−m, m); different when its
1 − α interval lies wholly outside [−m, m]; undetermined otherwise. "Every claim is equivalent" is an
intersection of per-claim tests, each at α: by the intersection–union principle it needs no multiplicity
correction (Berger 1982), so TOST p values are not Holm-adjusted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pandas as pd
from scipy import stats

from harness.analysis.evidence import Evidence
from harness.analysis.stats import CONFIDENCE, POWER, holm

ALPHA = 1 - CONFIDENCE
"""The level of the equivalence test: TOST reads the 1 − 2α interval."""


@dataclass(frozen=True)
class Agreement:
    """One claim's effect on two sets of runs, and their difference."""

    claim: str
    a: Evidence
    b: Evidence
    difference: float
    """Effect on a − effect on b."""
    low: float
    high: float
    """The difference's t interval (`CONFIDENCE`)."""
    p: float
    """Two-sided t test of a zero difference."""
    p_holm: float = math.nan
    """`p` Holm-adjusted across the claims compared together (`compare_all`)."""
    not_compared: str = ""
    """Why no test could be had (a side without an estimate, or without a spread); "" when it was."""
    margin: float = math.nan
    """The equivalence margin m: the largest difference that counts as the same (NaN: none stated)."""
    p_tost: float = math.nan
    """TOST's p: the larger of the one-sided tests of difference ≤ −m and difference ≥ m."""
    low90: float = math.nan
    high90: float = math.nan
    """The difference's 90 % t interval (1 − 2α at α 0.05: the interval TOST reads)."""
    mdd: float = math.nan
    """The smallest true difference the two-sided test at α 0.05 finds with 80 % power: (t₀.₉₇₅ + t₀.₈)·se."""

    @property
    def equivalence(self) -> str:
        """equivalent / different / undetermined against `margin` at α 0.05 (the module docstring); "" untested."""
        if not math.isfinite(self.p_tost):
            return ""
        if self.p_tost < ALPHA:
            return "equivalent"
        return "different" if self.low > self.margin or self.high < -self.margin else "undetermined"

    @property
    def each_inside(self) -> bool:
        """Whether each side's estimate lies in the other side's interval."""
        return self.b.low <= self.a.effect <= self.b.high and self.a.low <= self.b.effect <= self.a.high

    @property
    def overlap(self) -> bool:
        """Whether the two sides' intervals overlap."""
        return max(self.a.low, self.b.low) <= min(self.a.high, self.b.high)


def compare(
    claim: str, a: Evidence, b: Evidence, margin: float = math.nan, names: tuple[str, str] = ("yours", "theirs")
) -> Agreement:
    """The difference of `a`'s and `b`'s effects with its t intervals, its test and, given a `margin`, its
    equivalence test; NaN, with `not_compared` saying why, where either side has no estimate or no spread (`names`
    name the sides in that reason)."""
    difference = a.effect - b.effect
    se = math.hypot(a.se, b.se)
    if why := _untestable(a, names[0]) or _untestable(b, names[1]):
        return Agreement(claim, a, b, difference, math.nan, math.nan, math.nan, not_compared=why, margin=margin)
    df = se**4 / (a.se**4 / a.df + b.se**4 / b.df)
    half = stats.t.ppf(0.5 + CONFIDENCE / 2, df) * se
    half90 = stats.t.ppf(1 - ALPHA, df) * se
    p = 2 * stats.t.sf(abs(difference) / se, df)
    p_tost = max(stats.t.sf((difference + margin) / se, df), stats.t.sf((margin - difference) / se, df))
    return Agreement(
        claim, a, b, difference, difference - half, difference + half, float(p),
        margin=margin, p_tost=float(p_tost), low90=difference - half90, high90=difference + half90,
        mdd=float((stats.t.ppf(1 - ALPHA / 2, df) + stats.t.ppf(POWER, df)) * se),
    )  # fmt: skip


def compare_all(pairs: list[tuple[str, Evidence, Evidence, float]]) -> list[Agreement]:
    """`compare` for each (claim, a, b, margin), with Holm across those whose test could be had."""
    found = [compare(*pair) for pair in pairs]
    return [replace(g, p_holm=float(p)) for g, p in zip(found, holm([g.p for g in found]))]


def _untestable(e: Evidence, name: str) -> str:
    if not math.isfinite(e.effect):
        return f"no estimate on {name}" + (f" ({e.note})" if e.note else "")
    if not (math.isfinite(e.se) and e.se > 0 and math.isfinite(e.df) and e.df > 0):
        return f"no spread on {name} (one seed, or every run the same)"
    return ""


@dataclass(frozen=True)
class Identity:
    """Two sets of runs matched run by run (by job id and seed) on every value their claims read."""

    matched: int
    identical: int
    """Matched runs whose every value is equal to the last bit (a value neither side has counts as equal)."""
    only_a: int
    only_b: int
    differences: tuple[str, ...] = ()
    """For each matched run that differs, where first (in the claims' order of values): 'job … · seed 3: metric @
    at +1.2345678901 vs +1.2345678912'."""

    def line(self, names: tuple[str, str] = ("yours", "theirs")) -> str:
        """'bit-identical: 20 of 20 runs (matched by job id and seed)', with the runs only one side has."""
        only = [f"{n} on {name} only" for n, name in ((self.only_a, names[0]), (self.only_b, names[1])) if n]
        return f"bit-identical: {self.identical} of {self.matched} runs (matched by job id and seed)" + (
            f"; {', '.join(only)}" if only else ""
        )


def identity(a: pd.DataFrame, b: pd.DataFrame) -> Identity:
    """Runs of `a` and `b` (frames of job_id, seed and one column per value, `per_run_values`) matched by job id
    and seed, their values compared bit for bit (`float.hex`), over the value columns both have."""
    keys = ["job_id", "seed"]
    columns = [c for c in a.columns if c in b.columns and c not in (*keys, "run_id", "arm")]
    both = a.merge(b, on=keys, suffixes=("_a", "_b"))
    differences = []
    for row in both.to_dict("records"):
        for col in columns:
            x, y = row[f"{col}_a"], row[f"{col}_b"]
            if _bits(x) != _bits(y):
                differences.append(f"{row['arm_a']} · seed {row['seed']} (job {row['job_id']}): {col} {x!r} vs {y!r}")
                break
    return Identity(len(both), len(both) - len(differences), len(a) - len(both), len(b) - len(both), tuple(differences))


def _bits(x: float) -> str:
    return "none" if x is None or math.isnan(x) else float(x).hex()
