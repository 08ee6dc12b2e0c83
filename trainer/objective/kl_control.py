"""The KL coefficient across RL steps: fixed, or Ziegler et al.'s adaptive controller."""

from __future__ import annotations

from dataclasses import dataclass

from trainer import metric_names as M
from trainer.objective.settings import ObjectiveSettings

# The controller's bound on the proportional error (Ziegler et al. 2019; verl's and OpenRLHF's 0.2).
MAX_ERROR = 0.2


def adaptive_kl_coef(beta: float, kl: float, target: float, horizon: int, n: int) -> float:
    """β' = β·(1 + clip(KL/KL_target − 1, −0.2, 0.2)·n/H), after a step whose batch of n responses had KL `kl`.

    Ziegler et al. 2019, Fine-Tuning Language Models from Human Preferences (arXiv 1909.08593), §2.2: β rises while
    the measured KL is above the target and falls below it, at most 20 % per H samples. verl 0.9.1's
    `AdaptiveKLController.update` (verl/trainer/ppo/core_algos.py) and OpenRLHF 0.11.2's
    (openrlhf/trainer/ppo_utils/kl_controller.py), n the batch's responses in both.
    """
    error = min(max(kl / target - 1.0, -MAX_ERROR), MAX_ERROR)
    return beta * (1.0 + error * n / horizon)


@dataclass
class KLCoefficient:
    """The β of the KL in the loss and of the KL in the reward, carried across RL steps. With `target` set, the
    controller adapts one of them after each step (`adaptive_kl_coef`): the reward's when the reward has a KL (verl's
    `algorithm.kl_ctrl`, whose loss coefficient stays fixed), else the loss's (OpenRLHF's `algo.kl.target` with
    `algo.kl.use_loss`). The KL it measures is the controlled term's own: `reward/kl_mean` (π_old against π_ref,
    before the update) or `policy/kl` (π_θ against π_ref, the token mean over the update's optimiser steps)."""

    loss: float
    reward: float
    target: float | None = None
    horizon: int | None = None

    @classmethod
    def of(cls, s: ObjectiveSettings) -> KLCoefficient:
        return cls(s.kl_coef, s.kl_reward_coef, s.kl_target, s.kl_horizon)

    @property
    def controls_reward(self) -> bool:
        return self.reward > 0

    def metrics(self) -> dict[str, float]:
        """The controlled coefficient this step applies (before its update); none when β is fixed."""
        if self.target is None:
            return {}
        return {M.KL_REWARD_COEF: self.reward} if self.controls_reward else {M.KL_COEF: self.loss}

    def update(self, metrics: dict[str, float], n: int) -> None:
        """After an RL step whose `metrics` hold the controlled term's KL and whose batch had `n` responses (a step
        that trained nothing has no `policy/kl`: β stays)."""
        if self.target is None:
            return
        assert self.horizon is not None
        key = M.KL_REWARD_MEAN if self.controls_reward else M.KL
        if key not in metrics:
            return
        beta = self.reward if self.controls_reward else self.loss
        beta = adaptive_kl_coef(beta, metrics[key], self.target, self.horizon, n)
        if self.controls_reward:
            self.reward = beta
        else:
            self.loss = beta
