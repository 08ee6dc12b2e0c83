"""What one claim's test found on one set of runs, before Holm: the record `claims.decide` turns into a verdict and
`sequential.observe` into a look."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np
import pandas as pd

NAN = float("nan")
VerdictKind = Literal["reproduced", "contradicted", "inconclusive"]
VERDICTS: tuple[VerdictKind, ...] = get_args(VerdictKind)


@dataclass(frozen=True)
class ArmChange:
    """One arm's change from a `since` claim's start to its `at`: the mean over its runs, 95% CI, p against the
    claim's threshold."""

    arm: str
    effect: float
    low: float
    high: float
    p: float
    n: int
    se: float = NAN
    df: float = NAN
    """Welch–Satterthwaite degrees of freedom of `se` (n − 1 for one arm)."""

    def as_evidence(self) -> Evidence:
        """This arm's change as a claim's `Evidence` (its effect, interval, se and df; no rows)."""
        return Evidence(
            pd.DataFrame(), effect=self.effect, low=self.low, high=self.high, p=self.p, se=self.se, df=self.df,
            n1=self.n, seeds=self.n,
        )  # fmt: skip

    def text(self) -> str:
        if np.isnan(self.effect):
            return f"{self.arm}: no value (n {self.n})"
        ci = f" [{self.low:+.3g}, {self.high:+.3g}]" if not np.isnan(self.low) else ""
        p = f"p {self.p:.3g}" if not np.isnan(self.p) else "no test"
        return f"{self.arm} {self.effect:+.3g}{ci} ({p}, n {self.n})"


@dataclass(frozen=True)
class Evidence:
    """A claim's contrast on its runs: estimate, t CI and two-sided p against the claim's threshold, the runs on each
    side, and the failed runs counted. NaN (with `note`) where no test could be had."""

    rows: pd.DataFrame
    """The values used, one row per run (run_id, arm, seed, the varying settings, value; run_name when known)."""
    effect: float = NAN
    low: float = NAN
    high: float = NAN
    p: float = NAN
    se: float = NAN
    df: float = NAN
    """Welch–Satterthwaite degrees of freedom of `se`."""
    n1: int = 0
    """Runs on the claimed side (arm, or the switch's `to` level)."""
    n2: int = 0
    mean1: float = NAN
    mean2: float = NAN
    seeds: int = 0
    """Seeds per arm (per cell of a factorial effect): the smallest count among the runs used."""
    failed1: int = 0
    """Failed runs on the claimed side (of jobs with no finished run)."""
    failed2: int = 0
    diverged1: int = 0
    """Of `failed1`, those that diverged (non-finite loss, gradient or parameters)."""
    diverged2: int = 0
    failed_value: float = NAN
    """The worst value the failed runs were counted at (NaN: they were left out)."""
    per_arm: list[ArmChange] = field(default_factory=list)
    """A `since` claim: each arm's change and test, the deciding arm first; the fields above are its."""
    note: str = ""
    """Why a field is NaN (no arm matches, one run, no variance, ...)."""
    mixed: str = ""
    """What the runs mix that can move their numbers: CPU capabilities, base models (`sweep_data.mixed_machines`)."""

    def run_labels(self) -> list[str]:
        """The runs used, as 'run name (run id)'."""
        names = self.rows["run_name"] if "run_name" in self.rows else self.rows["run_id"]
        return [f"{n} ({r})" for n, r in zip(names, self.rows["run_id"])]
