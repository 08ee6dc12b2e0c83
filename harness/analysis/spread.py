"""How far an effect spreads across base models, against how far it spreads across RL seeds on one base model.

Each replicate (a seed) gives one paired effect: its value in one set of runs minus its value in another (GRPO
minus Dr. GRPO, say). Over builds, one RL seed each, that effect varies with the base model and with the RL seed;
over RL seeds on one build, with the RL seed alone. The ratio of the two variances, tested with an F test, says
whether the base model adds spread of its own, and the difference of the variances estimates how much.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from harness.analysis.stats import CONFIDENCE


@dataclass(frozen=True)
class Spread:
    """One set of paired effects (a replicate each)."""

    label: str
    effects: tuple[float, ...]
    """Per replicate (seed order): arm value − vs value."""

    @property
    def n(self) -> int:
        return len(self.effects)

    @property
    def mean(self) -> float:
        return float(np.mean(self.effects))

    @property
    def sd(self) -> float:
        return float(np.std(self.effects, ddof=1)) if self.n > 1 else math.nan


@dataclass(frozen=True)
class SpreadComparison:
    """Spread across base models against spread across RL seeds."""

    builds: Spread
    seeds: Spread
    ratio: float
    """Variance across builds / variance across RL seeds."""
    ci: tuple[float, float]
    """Its confidence interval (F distribution, `CONFIDENCE`)."""
    p: float
    """Two-sided F test of equal variances."""
    build_sd: float
    """The SD the base model adds, sqrt(max(0, var builds − var seeds)): the builds' effects carry one RL seed's
    noise each, so that share is taken out."""


def paired_effects(values: pd.DataFrame, arm: dict[str, str], vs: dict[str, str], label: str) -> Spread:
    """Per seed, the value of the run picked by `arm` minus that of the run picked by `vs` (settings as the
    `values` frame's columns, compared as text); seeds with only one side are left out."""

    def side(settings: dict[str, str]) -> pd.Series:
        mask = np.logical_and.reduce([values[k].astype(str) == str(v) for k, v in settings.items()])
        return values[mask].set_index("seed")["value"]

    diff = (side(arm) - side(vs)).dropna().sort_index()
    return Spread(label, tuple(float(x) for x in diff))


def compare_spread(builds: Spread, seeds: Spread, *, confidence: float = CONFIDENCE) -> SpreadComparison:
    """The variance ratio of `builds` over `seeds`, its F interval and two-sided p (each needs 2+ replicates)."""
    if builds.n < 2 or seeds.n < 2:
        raise ValueError(f"a spread needs two replicates on each side, not {builds.n} and {seeds.n}")
    var_b, var_s = builds.sd**2, seeds.sd**2
    df_b, df_s = builds.n - 1, seeds.n - 1
    ratio = var_b / var_s if var_s > 0 else math.inf
    tail = (1 - confidence) / 2
    ci = (ratio / stats.f.ppf(1 - tail, df_b, df_s), ratio / stats.f.ppf(tail, df_b, df_s))
    p = float(min(1.0, 2 * min(stats.f.cdf(ratio, df_b, df_s), stats.f.sf(ratio, df_b, df_s))))
    return SpreadComparison(builds, seeds, ratio, ci, p, math.sqrt(max(0.0, var_b - var_s)))
