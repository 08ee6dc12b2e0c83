"""The length take-off per arm: when each run's incorrect responses took off (`trainer.takeoff`), or that they
never did, as the distribution the report and docs/findings.md show beside the claims read over a fixed window."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.runs.layout import LENGTH_TAKEOFF_TAG, parse_takeoff
from harness.runs.sweep_data import SweepData


@dataclass(frozen=True)
class ArmTakeoff:
    """One arm's take-off steps over its finished runs."""

    arm: str
    runs: int
    """Finished runs of the arm."""
    steps: tuple[int, ...]
    """The take-off step of each run that took off, in seed order."""
    never: int
    """Runs that finished without a take-off."""
    unrecorded: int
    """Runs logged before runs recorded their take-off."""
    horizon: int | None
    """The arm's training steps (a run that never took off did not by this step)."""

    @property
    def quartiles(self) -> tuple[float, float, float] | None:
        """25th, 50th and 75th percentiles of the take-off steps, counting a run that never took off as later than
        any step (so the median is None-free only while most runs took off); None when no run recorded one."""
        recorded = len(self.steps) + self.never
        if not recorded:
            return None
        values = np.array([*self.steps, *([np.inf] * self.never)], dtype=float)
        return tuple(float(np.quantile(values, q, method="lower")) for q in (0.25, 0.5, 0.75))  # type: ignore[return-value]


def takeoff_by_arm(data: SweepData) -> list[ArmTakeoff]:
    """Each arm's take-off steps over its finished runs, in the sweep's arm order."""
    runs = data.runs[data.runs["state"] == "done"]
    out = []
    for arm in data.arms:
        mine = runs[runs["arm"] == arm].sort_values("seed")
        if mine.empty:
            continue
        tags = mine[LENGTH_TAKEOFF_TAG] if LENGTH_TAKEOFF_TAG in mine else [None] * len(mine)
        parsed = [parse_takeoff(None if isinstance(t, float) else t) for t in tags]  # a missing tag reads as NaN
        steps = mine["steps"].dropna()
        out.append(
            ArmTakeoff(
                arm=arm,
                runs=len(mine),
                steps=tuple(int(p) for p in parsed if isinstance(p, int)),
                never=sum(p is None for p in parsed),
                unrecorded=sum(p == "" for p in parsed),
                horizon=int(steps.max()) if len(steps) else None,
            )
        )
    return out
