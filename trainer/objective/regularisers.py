"""Terms added to the policy loss that are not the surrogate: the entropy bonus and its adaptive coefficient.

(The KL to a reference policy is the other regulariser: trainer.objective.kl.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from trainer.objective.settings import ObjectiveSettings


def entropy_bonus(entropy: torch.Tensor, trained: torch.Tensor, num_trained: int, coef: float) -> torch.Tensor:
    """L_H = −c·(1/N) Σ_it 1[trained_it]·H_it, N the trained tokens of the whole optimisation batch: one micro-batch's
    contribution, added to the loss (so minimising it raises entropy).

    The entropy bonus of Skywork-OR1 (arXiv 2505.22312, §3.2) as TRL's `entropy_coef` defines it: a token mean of
    the trained tokens' entropy, whatever the loss's own aggregation, so c means the same under every one.
    """
    return -coef * torch.where(trained, entropy, torch.zeros_like(entropy)).sum() / max(num_trained, 1)


@dataclass
class EntropyCoefficient:
    """The entropy bonus's coefficient across optimiser steps: fixed, or Skywork-OR1's adaptive control
    (arXiv 2505.22312, §3.2): c ← min(c + Δ, c_max) while the trained tokens' entropy is at or below the target,
    else max(c − Δ, 0), and the bonus applies only at or below the target (from the step after the first)."""

    value: float
    target: float | None = None
    step: float | None = None
    maximum: float | None = None
    last_entropy: float = math.inf
    """The trained tokens' entropy at the last optimiser step (none yet: above any target)."""

    @classmethod
    def of(cls, s: ObjectiveSettings) -> EntropyCoefficient:
        return cls(s.entropy_coef, s.entropy_target, s.entropy_coef_step, s.entropy_coef_max)

    def applied(self) -> float:
        """The coefficient this optimiser step uses."""
        if self.target is None:
            return self.value
        return self.value if self.last_entropy <= self.target else 0.0

    def update(self, entropy: float) -> None:
        """After an optimiser step whose trained tokens had mean entropy `entropy`."""
        if self.target is None:
            return
        assert self.step is not None and self.maximum is not None
        if entropy <= self.target:
            self.value = min(self.value + self.step, self.maximum)
        else:
            self.value = max(self.value - self.step, 0.0)
        self.last_entropy = entropy
