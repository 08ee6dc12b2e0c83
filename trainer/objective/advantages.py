"""Advantage estimators (the std-normalisation switch) and their statistics.

Each takes rewards shaped [groups, G] and returns advantages of the same shape.
A group whose rewards are all equal gets exactly 0 under every estimator (never
NaN, also for G = 1), since it carries no learning signal.
"""

from __future__ import annotations

import torch

from trainer import metric_names as M
from trainer.objective.registry import ADVANTAGES


def _zero_flat_groups(adv: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    flat = (rewards == rewards[:, :1]).all(dim=1, keepdim=True)
    return torch.where(flat, torch.zeros_like(adv), adv)


def _centred(rewards: torch.Tensor) -> torch.Tensor:
    return rewards - rewards.mean(dim=1, keepdim=True)


@ADVANTAGES.register("group_std")
def group_std(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """A_i = (R_i − mean_g R) / (std_g R + ε), std with Bessel's correction.

    GRPO: Shao et al. 2024, DeepSeekMath (arXiv 2402.03300), §4.1.2. Dividing by the
    group std up-weights questions that are nearly always or nearly never solved
    (Liu et al. 2025, Dr. GRPO, arXiv 2503.20783, §3.1).
    """
    std = rewards.std(dim=1, keepdim=True, unbiased=True) if rewards.shape[1] > 1 else torch.zeros_like(rewards[:, :1])
    return _zero_flat_groups(_centred(rewards) / (std + eps), rewards)


@ADVANTAGES.register("group_mean")
def group_mean(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """A_i = R_i − mean_g R: no std normalisation.

    Dr. GRPO: Liu et al. 2025, Understanding R1-Zero-Like Training (arXiv 2503.20783), §3.2.
    `eps` is unused.
    """
    return _zero_flat_groups(_centred(rewards), rewards)


@ADVANTAGES.register("batch_std")
def batch_std(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """A_i = (R_i − mean_g R) / (std over all rewards of the batch + ε), Bessel-corrected.

    TRL's `scale_rewards="batch"`, after Hu et al. 2025, REINFORCE++ (arXiv 2501.03262):
    one scale for the whole batch keeps the group baseline without re-weighting questions.
    """
    flat = rewards.flatten()
    std = flat.std(unbiased=True) if flat.numel() > 1 else flat.new_zeros(())
    return _zero_flat_groups(_centred(rewards) / (std + eps), rewards)


@ADVANTAGES.register("group_median")
def group_median(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    """A_i = R_i − median_g R (for even G the median is the midpoint of the two middle rewards).

    MC-GRPO: Kim 2026, Median-Centered GRPO for Small-Rollout RL (arXiv 2601.22582): the
    median baseline flips fewer advantage signs than the mean when G is small. `eps` is unused.
    """
    median = torch.quantile(rewards, 0.5, dim=1, keepdim=True)
    return _zero_flat_groups(rewards - median, rewards)


def advantage_metrics(advantages: torch.Tensor) -> dict[str, float]:
    """adv/mean = mean_i A_i, adv/abs_mean = mean_i |A_i|, adv/zero_frac = share of A_i = 0, over all responses."""
    a = advantages.detach().flatten().double()
    return {
        M.ADV_MEAN: a.mean().item(),
        M.ADV_ABS_MEAN: a.abs().mean().item(),
        M.ADV_ZERO_FRAC: (a == 0).double().mean().item(),
    }
