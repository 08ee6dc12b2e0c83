"""When incorrect responses take off: the first step at which they are clearly longer than correct ones.

Under GRPO's 1/T_i the toy's incorrect responses can hold their length for a hundred steps and then run toward
the budget within a few dozen; a claim read over a fixed window sees whatever part of that rise the window
catches. Each run therefore records the step of its take-off (or that it never took off), so the time of the rise
is a result of its own (docs/findings.md).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from trainer import metric_names as M

MARGIN = 32.0
"""Tokens by which the incorrect responses' mean length must exceed the correct ones': two of the toy's 16-token
filler blocks, twice the gap a GRPO run holds before its take-off, fixed before any run used it."""
WINDOW = 5
"""Steps the gap is averaged over (steps where either length is missing are skipped), so one noisy step with a
few incorrect responses does not count as a take-off."""


@dataclass
class TakeoffDetector:
    """Fed every step's metrics; `step` is the first step whose mean gap over the last `window` steps with both
    lengths exceeds `margin`, None while it has not happened."""

    margin: float = MARGIN
    window: int = WINDOW
    step: int | None = None
    _gaps: deque[float] = field(default_factory=deque)

    def update(self, step: int, metrics: dict[str, float]) -> None:
        if self.step is not None:
            return
        incorrect, correct = metrics.get(M.LENGTH_INCORRECT_MEAN), metrics.get(M.LENGTH_CORRECT_MEAN)
        if incorrect is None or correct is None or math.isnan(incorrect) or math.isnan(correct):
            return
        self._gaps.append(incorrect - correct)
        if len(self._gaps) > self.window:
            self._gaps.popleft()
        if len(self._gaps) == self.window and sum(self._gaps) / self.window > self.margin:
            self.step = step
